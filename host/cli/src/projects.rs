//! The commands on a pipeline project (docs/projects.md): `weir run PROJECT` (with
//! `--full-refresh`), `weir validate`, `weir graph` and `weir query`.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use anyhow::{Context, Result, bail};

use super::exit::{Exit, Usage};
use crate::checkpoint::{CheckpointDir, StateMeta};
use crate::dataset::DatasetKind;
use crate::dataset::log::Log;
use crate::driver::{Flush, Output, Stages};
use crate::pipeline::{ExpectCheck, SinkConfig};
use crate::plugin::Sink;
use crate::project::graph::{self, Counts, FlowCounts};
use crate::project::{Project, Storage, read, refresh, run};

/// The project at `path` (a directory with a `weir.toml`, or the file).
pub(super) fn load(path: &Path) -> Result<Project> {
    let file = Project::file_at(path).ok_or_else(|| {
        Usage(format!(
            "{}: not a project (a directory with {}, or the file)",
            path.display(),
            crate::project::PROJECT_FILE
        ))
    })?;
    Ok(Project::load(&file)?)
}

/// `weir run PROJECT`: finishes an interrupted refresh, carries out `--full-refresh`, then runs
/// every flow.
pub(super) fn run_project(path: &Path, full_refresh: &[String], progress_json: bool, flush: bool) -> Result<Exit> {
    let mut p = load(path)?;
    if let Some(reset) = refresh::resume(&p.state)? {
        eprintln!("[{}] finished an interrupted full refresh of {}", p.name, reset.join(", "));
    }
    for d in full_refresh {
        let reset = refresh::full_refresh(&p, d).map_err(|e| match e {
            refresh::RefreshError::Unknown(..) => anyhow::Error::from(Usage(e.to_string())),
            e => e.into(),
        })?;
        eprintln!("[{}] full refresh: reset {} and the checkpoints of the flows on them", p.name, reset.join(", "));
    }
    if !full_refresh.is_empty() {
        // Again, for where the Kafka-backed datasets reset now begin.
        p = load(path)?;
    }
    let runtime = super::run::runtime(p.flows.iter().map(|f| &f.pipeline))?;
    let stop = super::run::stop_on_signals()?;
    let opts = run::FlowOptions {
        progress_json,
        human_every: Some(Duration::from_secs(2)),
        stop,
        fsync: true,
        flush: if flush { Flush::Always } else { Flush::AsConfigured { default: false } },
    };
    let outcomes = run::run(&p, &runtime, opts)?;
    let mut exit = Exit::Done;
    for (name, outcome) in outcomes {
        let e = match outcome {
            Ok(summary) => {
                eprintln!("[{name}] {}", summary.render());
                if summary.interrupted { Exit::Interrupted } else { Exit::Done }
            }
            Err(e) => {
                let e = anyhow::Error::from(e).context(format!("flow {name}"));
                eprintln!("error: {e:#}");
                Exit::of(&e)
            }
        };
        let rank = |e: Exit| [Exit::Done, Exit::Interrupted, Exit::Usage, Exit::Failed].iter().position(|&x| x == e);
        if rank(e) > rank(exit) {
            exit = e;
        }
    }
    Ok(exit)
}

/// `weir validate PROJECT`: every file, the graph, every plugin loaded for the role its stage
/// plays (which checks its WIT version, configuration, grants and limits), and the schemas
/// against the schema registry (`docs/formats.md`), without reading data; prints the graph.
pub(super) fn validate(path: &Path) -> Result<Exit> {
    if Project::file_at(path).is_none() && path.is_file() {
        return validate_pipeline(path);
    }
    let p = load(path)?;
    let runtime = super::run::runtime(p.flows.iter().map(|f| &f.pipeline))?;
    let stop = Arc::new(AtomicBool::new(false));
    for fl in &p.flows {
        let checked = Stages::wasm(&fl.pipeline, &runtime, Output::Lines(Box::new(std::io::sink())), &stop)
            .map(drop)
            .and_then(|()| match &fl.pipeline.sink {
                Some(SinkConfig::Wasm(spec)) => Sink::new(&runtime, spec.clone()).map(drop).map_err(Into::into),
                _ => Ok(()),
            })
            .and_then(|()| weir_engine::schemas::check(&fl.pipeline).map_err(|e| Box::new(e).into()));
        checked.with_context(|| format!("flow {} ({})", fl.name(), fl.file.display()))?;
    }
    print!("{}", describe(&p));
    println!("ok: {} flows, {} datasets", p.flows.len(), p.datasets.len());
    Ok(Exit::Done)
}

/// `weir validate PIPELINE.toml`: one pipeline file, checked as a project's flow is.
fn validate_pipeline(path: &Path) -> Result<Exit> {
    let pipeline = crate::pipeline::Pipeline::load(path)?;
    let runtime = super::run::runtime([&pipeline])?;
    let stop = Arc::new(AtomicBool::new(false));
    Stages::wasm(&pipeline, &runtime, Output::Lines(Box::new(std::io::sink())), &stop)?;
    if let Some(SinkConfig::Wasm(spec)) = &pipeline.sink {
        Sink::new(&runtime, spec.clone())?;
    }
    weir_engine::schemas::check(&pipeline).with_context(|| path.display().to_string())?;
    println!("ok: pipeline {}", pipeline.name);
    Ok(Exit::Done)
}

/// The graph as text, a line per flow in dependency order.
fn describe(p: &Project) -> String {
    let mut s = format!("project {}\n", p.name);
    for fl in &p.flows {
        let from = match fl.reads.first() {
            Some(r) => format!("dataset {r}"),
            None => fl.pipeline.source.kind.name().to_string(),
        };
        let to = match (&fl.writes, &fl.pipeline.sink) {
            (Some(w), _) => format!("dataset {w}"),
            (None, Some(SinkConfig::Wasm(s))) => format!("sink {}", s.name),
            (None, Some(SinkConfig::Kafka(k))) => format!("kafka {}", k.topic),
            (None, _) => "console".into(),
        };
        s.push_str(&format!("  {}: {from} → [{}] → {to}\n", fl.name(), graph::plugins(fl).join(", ")));
        for e in &fl.pipeline.expect {
            let check = match &e.check {
                ExpectCheck::Rule(r) => r.to_string(),
                ExpectCheck::Plugin(s) => format!("plugin {}", s.name),
            };
            s.push_str(&format!("    expect {}: {check} (on violation: {})\n", e.name, e.on_violation.name()));
        }
    }
    for d in p.datasets.values() {
        let storage = match &d.storage {
            Storage::Embedded { .. } => "embedded".to_string(),
            Storage::Kafka { topic, .. } => format!("kafka topic {topic}"),
        };
        s.push_str(&format!("  dataset {} ({}, {storage})\n", d.name, d.kind.name()));
    }
    s
}

/// Each embedded dataset's row count (and a table's keys), for a project that has run.
fn counts(p: &Project) -> BTreeMap<String, Counts> {
    let mut out = BTreeMap::new();
    for d in p.datasets.values() {
        let Storage::Embedded { dir } = &d.storage else { continue };
        if !dir.exists() {
            continue;
        }
        if let Ok(log) = Log::open_read_only(dir) {
            let keys = (d.kind == DatasetKind::Table).then(|| log.rows().map_or(0, |r| r.len() as u64));
            out.insert(d.name.clone(), Counts { rows: log.end() - log.start(), keys });
        }
    }
    out
}

/// Each flow's records read and rows delivered, from its checkpoint's last batch record (read
/// beside a running project, as `weir inspect` reads it); none for a flow yet to commit one.
fn flow_counts(p: &Project) -> BTreeMap<String, FlowCounts> {
    let mut out = BTreeMap::new();
    for fl in &p.flows {
        if let Some(m) = last_record(&fl.checkpoint) {
            out.insert(fl.name().to_string(), FlowCounts { records_in: m.records_in, rows_out: m.rows_out });
        }
    }
    out
}

/// A checkpoint's last batch record, if it has committed one (what `weir inspect` reads).
fn last_record(checkpoint: &Path) -> Option<StateMeta> {
    let (cp, _) = CheckpointDir::existing(checkpoint).ok()?;
    super::inspect::read_state(&cp.state_dir()).ok()??.1
}

/// `weir graph PROJECT`: DOT on stdout, or in `out` (and beside it as SVG when Graphviz's
/// `dot` is on the PATH).
pub(super) fn graph(path: &Path, out: Option<&Path>) -> Result<Exit> {
    let p = load(path)?;
    let dot = graph::dot(&p, &counts(&p), &flow_counts(&p));
    let Some(out) = out else {
        print!("{dot}");
        return Ok(Exit::Done);
    };
    std::fs::write(out, &dot).with_context(|| format!("cannot write {}", out.display()))?;
    eprintln!("wrote {}", out.display());
    let svg = out.with_extension("svg");
    match std::process::Command::new("dot").arg("-Tsvg").arg("-o").arg(&svg).arg(out).status() {
        Ok(s) if s.success() => eprintln!("wrote {}", svg.display()),
        Ok(s) => bail!("Graphviz's dot failed ({s}) on {}", out.display()),
        Err(_) => eprintln!("no SVG: Graphviz's `dot` is not on the PATH (apt install graphviz)"),
    }
    Ok(Exit::Done)
}

/// `weir query PROJECT TABLE [KEY]`: a table's current rows, one JSON line each, read from its
/// state beside a running project (a stream's rows, in order). Exit 1 when `KEY` has no row.
pub(super) fn query(path: &Path, table: &str, key: Option<&str>) -> Result<Exit> {
    let p = load(path)?;
    let d = p.datasets.get(table).ok_or_else(|| {
        let tables: Vec<&str> =
            p.datasets.values().filter(|d| d.kind == DatasetKind::Table).map(|d| d.name.as_str()).collect();
        Usage(format!("the project has no dataset `{table}` (its tables: {})", tables.join(", ")))
    })?;
    if d.kind != DatasetKind::Table && key.is_some() {
        return Err(Usage(format!(
            "dataset `{table}` is a stream, which has no rows by key: leave out the key to print \
                                  all its rows, in order"
        ))
        .into());
    }
    let mut w = std::io::BufWriter::new(std::io::stdout().lock());
    match key {
        Some(k) => match read::row(d, k.as_bytes())? {
            Some(row) => {
                w.write_all(&row)?;
                w.write_all(b"\n")?;
            }
            None => {
                eprintln!("table `{table}` has no row for key {k:?}");
                return Ok(Exit::Mismatch);
            }
        },
        None => read::scan(d, &mut |_, row| {
            w.write_all(row)?;
            w.write_all(b"\n")
        })?,
    }
    w.flush()?;
    Ok(Exit::Done)
}

/// `weir test PROJECT --events FLOW=FILE... [--expect DATASET=FILE...]`: the project in a scratch
/// state directory, each flow with a source of its own reading its recorded events, flushed at
/// the end; then each dataset's rows are printed (`{"dataset", "row"}` lines), or compared with
/// the expected ones (exit 1 with a diff per dataset that differs).
pub(super) fn test(path: &Path, events: &[String], expect: &[String], progress_json: bool) -> Result<Exit> {
    let pairs = |args: &[String], what: &str| -> Result<BTreeMap<String, PathBuf>> {
        args.iter()
            .map(|a| match a.split_once('=') {
                Some((name, file)) if !name.is_empty() && !file.is_empty() => {
                    Ok((name.to_string(), PathBuf::from(file)))
                }
                _ => Err(Usage(format!("--{what} {a}: a project's test takes NAME=FILE")).into()),
            })
            .collect()
    };
    let events = pairs(events, "events")?;
    let expect = pairs(expect, "expect")?;
    let file = Project::file_at(path).ok_or_else(|| Usage(format!("{}: not a project", path.display())))?;
    let scratch = crate::driver::scratch_checkpoint()?;
    let over = crate::project::Overrides { state: Some(scratch.path().to_path_buf()), events, embedded: true };
    let p = Project::load_with(&file, &over)?;
    // A flow reading Kafka of its own needs recorded events instead; a file is recorded already.
    let missing: Vec<&str> = p
        .flows
        .iter()
        .filter(|f| f.own_source && matches!(f.pipeline.source.kind, crate::pipeline::SourceKind::Kafka(_)))
        .map(|f| f.name())
        .collect();
    if !missing.is_empty() {
        return Err(Usage(format!(
            "give recorded events for every flow with a source of its own: --events FLOW=FILE for {}",
            missing.join(", ")
        ))
        .into());
    }
    for d in expect.keys() {
        if !p.datasets.contains_key(d) {
            return Err(Usage(format!("--expect {d}=...: the project has no dataset `{d}`")).into());
        }
    }
    let runtime = super::run::runtime(p.flows.iter().map(|f| &f.pipeline))?;
    let opts = run::FlowOptions {
        progress_json,
        human_every: None,
        stop: Arc::new(AtomicBool::new(false)),
        fsync: true,
        flush: Flush::AsConfigured { default: true },
    };
    for (name, outcome) in run::run(&p, &runtime, opts)? {
        outcome.map_err(anyhow::Error::from).with_context(|| format!("flow {name}"))?;
    }
    let mut exit = Exit::Done;
    let mut w = std::io::BufWriter::new(std::io::stdout().lock());
    for d in p.datasets.values() {
        let rows = dataset_rows(d)?;
        match expect.get(&d.name) {
            Some(file) => {
                let want = std::fs::read_to_string(file).with_context(|| format!("cannot read {}", file.display()))?;
                let got: String = rows.iter().map(|r| format!("{}\n", String::from_utf8_lossy(r))).collect();
                let diff = super::test::diff_rows(&got, &want)?;
                if !diff.is_empty() {
                    eprintln!("dataset {} differs from {}:\n{diff}", d.name, file.display());
                    exit = Exit::Mismatch;
                }
            }
            None if expect.is_empty() => {
                for r in rows {
                    writeln!(
                        w,
                        "{{\"dataset\":{},\"row\":{}}}",
                        serde_json::to_string(&d.name)?,
                        String::from_utf8_lossy(&r)
                    )?;
                }
            }
            None => {}
        }
    }
    w.flush()?;
    Ok(exit)
}

/// A dataset's rows: a stream's every row in order, a table's current rows by key; none for a
/// dataset no flow wrote.
fn dataset_rows(d: &crate::project::Dataset) -> Result<Vec<Vec<u8>>> {
    let mut out = Vec::new();
    match read::scan(d, &mut |_, row| {
        out.push(row.to_vec());
        Ok(())
    }) {
        Ok(()) | Err(read::ReadError::NotWritten { .. }) => Ok(out),
        Err(e) => Err(e.into()),
    }
}
