//! `weir test`: a pipeline over recorded events, deterministically, with a scratch checkpoint,
//! and the rows that reach its sink as JSON lines; with `--expect`, compared with the rows a
//! plugin author expects (in any order), exiting [`Exit::Mismatch`] with a diff when they differ.
//! A test is a one-off run, so it flushes every window at the end of the events unless the
//! pipeline file says otherwise.
//!
//! `--restarts N` checks replay safety, what exactly-once asks of a plugin: the events run
//! again with N crashes at random batch boundaries (a batch delivered, not committed), each
//! followed by a restart from the checkpoint with fresh plugin instances, which re-runs and
//! re-delivers the open batch. The rows, each batch as last delivered, must equal the straight
//! run's; the first that differs is shown. A plugin that reads a clock, keeps state of its own
//! between calls or migrates state wrongly fails it.

use std::io::{BufRead, BufReader, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result};

use super::exit::Exit;
use crate::driver::{self, Flush, Output, RunOptions, Stages};
use crate::pipeline::{Pipeline, ReplayFormat, SourceKind, Trigger};
use crate::progress::Progress;

pub(super) struct TestArgs {
    pub pipeline: PathBuf,
    pub events: PathBuf,
    pub expect: Option<PathBuf>,
    pub out: Option<PathBuf>,
    pub dead_letters: PathBuf,
    pub progress_json: bool,
    /// Run the pipeline's own Wasm sink, its writable grants moved here, and check it wrote
    /// each row once.
    pub sink_dir: Option<PathBuf>,
}

/// A sink that passes each delivery on to the real one and keeps its rows as JSON lines: what
/// `--sink` checks the sink's files against.
struct Tee {
    inner: Box<dyn crate::sink::RowSink>,
    rows: ByBatch,
}

impl crate::sink::RowSink for Tee {
    fn deliver(&mut self, d: &crate::sink::Delivery, rows: &crate::sink::Rows) -> Result<(), crate::sink::SinkError> {
        let mut lines = Vec::new();
        crate::sink::LineSink(&mut lines).deliver(d, rows)?;
        if let Ok(mut by) = self.rows.lock() {
            by.insert(d.batch_id, lines);
        }
        self.inner.deliver(d, rows)
    }

    fn barrier(&mut self) -> crate::sink::Barrier {
        self.inner.barrier()
    }
}

/// Points the Wasm sink's writable directory grants at fresh directories under `dir`
/// (`dir/1`, `dir/2`, ... in grant order), so a test never writes where the pipeline would.
/// Returns them.
fn scratch_sink(p: &mut Pipeline, dir: &Path) -> Result<Vec<PathBuf>> {
    let Some(crate::pipeline::SinkConfig::Wasm(spec)) = &mut p.sink else {
        return Err(super::exit::Usage(
            "--sink runs the pipeline's Wasm sink plugin, and this pipeline has none: add a [sink] with a plugin, or drop --sink"
                .into(),
        )
        .into());
    };
    let mut dirs = Vec::new();
    for g in spec.grants.dirs.iter_mut().filter(|g| g.writable) {
        let d = dir.join((dirs.len() + 1).to_string());
        if d.exists() {
            std::fs::remove_dir_all(&d).with_context(|| format!("cannot clear {}", d.display()))?;
        }
        std::fs::create_dir_all(&d).with_context(|| format!("cannot create {}", d.display()))?;
        g.host = d.clone();
        dirs.push(d);
    }
    if dirs.is_empty() {
        return Err(super::exit::Usage(format!(
            "--sink: {} has no writable directory grant to check; grant one (sink.grants.dirs = [{{ host = \"out\", guest = \"/out\", writable = true }}])",
            spec.name
        ))
        .into());
    }
    Ok(dirs)
}

/// The JSON-lines rows in the files under `dirs` (files whose names start with `.` are a sink's
/// staging and are left out), with the number of files.
fn written_rows(dirs: &[PathBuf]) -> Result<(String, usize)> {
    let (mut text, mut files) = (String::new(), 0);
    let mut stack = dirs.to_vec();
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).with_context(|| format!("cannot read {}", d.display()))? {
            let path = entry?.path();
            if path.file_name().is_some_and(|n| n.to_string_lossy().starts_with('.')) {
                continue;
            }
            if path.is_dir() {
                stack.push(path);
                continue;
            }
            let body = std::fs::read_to_string(&path).with_context(|| format!("{}: not text", path.display()))?;
            files += 1;
            text.push_str(&body);
            if !body.ends_with('\n') {
                text.push('\n');
            }
        }
    }
    Ok((text, files))
}

pub(super) fn test(a: &TestArgs) -> Result<Exit> {
    let mut p = replay(super::run::load(&a.pipeline)?, &a.events);
    let sink_dirs = match &a.sink_dir {
        Some(dir) => Some(scratch_sink(&mut p, dir)?),
        None => None,
    };
    let rows_file = tempfile::NamedTempFile::new().context("cannot create a temporary file")?;
    let writer = BufWriter::new(rows_file.reopen().context("cannot open the temporary file")?);
    let scratch = driver::scratch_checkpoint().context("cannot create a scratch checkpoint directory")?;
    let stop = super::run::stop_on_signals()?;
    let opts = RunOptions {
        checkpoint: scratch.path().to_path_buf(),
        dead_letters: Some(a.dead_letters.clone()),
        progress: Progress::new(&p.name, a.progress_json, Some(Duration::from_secs(2))),
        stop: stop.clone(),
        fsync: true,
        flush: Flush::AsConfigured { default: true },
        own_share: true,
        ledger: None,
    };
    let runtime = super::run::runtime([&p])?;
    let delivered = ByBatch::default();
    let output = match sink_dirs {
        Some(_) => {
            let inner = driver::sink(&p, Output::Pipeline, Some(&runtime), &stop)?;
            Output::Sink(Box::new(Tee { inner, rows: delivered.clone() }))
        }
        None => Output::Lines(Box::new(writer)),
    };
    let stages = Stages::wasm(&p, &runtime, output, &stop)?;
    let summary = driver::run(&p, stages, opts).with_context(|| format!("pipeline {}", p.name))?;
    let rows = match &sink_dirs {
        Some(_) => delivered
            .lock()
            .map(|b| b.values().map(|r| String::from_utf8_lossy(r).into_owned()).collect())
            .unwrap_or_default(),
        None => std::fs::read_to_string(rows_file.path()).context("cannot read back the rows")?,
    };
    match &a.out {
        Some(path) => std::fs::write(path, &rows).with_context(|| format!("cannot write {}", path.display()))?,
        None => std::io::stdout().write_all(rows.as_bytes()).context("cannot write to stdout")?,
    }
    eprintln!("{}", summary.render());
    if summary.interrupted {
        return Ok(Exit::Interrupted);
    }
    if let Some(dirs) = &sink_dirs {
        let (written, files) = written_rows(dirs)?;
        let diff = diff_rows(&written, &rows).context("reading what the sink wrote")?;
        if !diff.is_empty() {
            eprintln!("{diff}");
            eprintln!(
                "the sink's files under {} do not hold each delivered row once",
                a.sink_dir.as_deref().unwrap_or(Path::new("")).display()
            );
            return Ok(Exit::Mismatch);
        }
        eprintln!("the sink wrote each of the {} rows once, in {files} files", rows.lines().count());
    }
    if let Some(expect) = &a.expect {
        let want = std::fs::read_to_string(expect).with_context(|| format!("cannot read {}", expect.display()))?;
        let diff = diff_rows(&rows, &want).with_context(|| format!("comparing with {}", expect.display()))?;
        if !diff.is_empty() {
            eprintln!("{diff}");
            eprintln!("output differs from {}", expect.display());
            return Ok(Exit::Mismatch);
        }
        eprintln!("output matches {}", expect.display());
    }
    Ok(Exit::Done)
}

/// The pipeline, reading `events` in bounded batches as fast as it can (the replay of a test).
/// With `EVENTS.schemas.json` beside the events (`weir record --registry` wrote it), the
/// pipeline's registry is that file: a test of recorded Avro needs no registry.
pub(super) fn replay(mut p: Pipeline, events: &Path) -> Pipeline {
    p.source.kind = SourceKind::Replay { path: events.to_path_buf(), format: ReplayFormat::Auto };
    p.trigger = Trigger::AvailableNow;
    let saved = weir_schema::saved::Saved::beside(events);
    if saved.exists() {
        let file = weir_schema::RegistryFile {
            url: None,
            schemas: Some(saved),
            credentials_file: None,
            ca_file: None,
            cert_file: None,
            key_file: None,
            retry_for: None,
            timeout: None,
        };
        // Relative to where `weir test` runs, as `--events` is.
        let here = std::env::current_dir().unwrap_or_default();
        if let Ok(offline) = file.validate(&here) {
            eprintln!("schemas from {}", offline.url.trim_start_matches("file:"));
            p = p.with_registry(offline);
        }
    }
    p
}

/// Compares rows as multisets of JSON values; returns a readable diff, empty when equal.
pub(super) fn diff_rows(got: &str, want: &str) -> Result<String> {
    fn canon(text: &str, what: &str) -> Result<Vec<String>> {
        let mut v = Vec::new();
        for (i, line) in BufReader::new(text.as_bytes()).lines().enumerate() {
            let line = line?;
            if line.trim().is_empty() {
                continue;
            }
            let value: serde_json::Value =
                serde_json::from_str(&line).with_context(|| format!("{what} line {} is not JSON", i + 1))?;
            v.push(value.to_string());
        }
        v.sort();
        Ok(v)
    }
    let (got, want) = (canon(got, "output")?, canon(want, "expected")?);
    // Both sorted: walk them together like a merge.
    let (mut missing, mut unexpected) = (Vec::new(), Vec::new());
    let (mut g, mut w) = (got.iter().peekable(), want.iter().peekable());
    loop {
        match (g.peek(), w.peek()) {
            (Some(a), Some(b)) if a == b => {
                g.next();
                w.next();
            }
            (Some(a), Some(b)) if a < b => unexpected.extend(g.next()),
            (Some(_), Some(_)) | (None, Some(_)) => missing.extend(w.next()),
            (Some(_), None) => unexpected.extend(g.next()),
            (None, None) => break,
        }
    }
    let mut out = String::new();
    for (label, rows) in [("- expected, not produced", &missing), ("+ produced, not expected", &unexpected)] {
        if !rows.is_empty() {
            out.push_str(&format!("{label} ({}):\n", rows.len()));
            for r in rows.iter().take(20) {
                out.push_str(&format!("  {r}\n"));
            }
            if rows.len() > 20 {
                out.push_str(&format!("  ... and {} more\n", rows.len() - 20));
            }
        }
    }
    Ok(out)
}

/// The rows each batch delivered, by batch id; a re-delivery replaces the first.
type ByBatch = std::sync::Arc<std::sync::Mutex<std::collections::BTreeMap<u64, Vec<u8>>>>;

/// A sink that keeps each delivery's rows as JSON lines, and crashes the run (an error after
/// the delivery, before the commit) when it delivers batch `crash_at`.
struct Capture {
    rows: ByBatch,
    crash_at: Option<u64>,
    /// The pipeline's own sink (`--sink`), delivered to first.
    inner: Option<Box<dyn crate::sink::RowSink>>,
}

impl crate::sink::RowSink for Capture {
    fn deliver(&mut self, d: &crate::sink::Delivery, rows: &crate::sink::Rows) -> Result<(), crate::sink::SinkError> {
        if let Some(inner) = &mut self.inner {
            inner.deliver(d, rows)?;
            // The crash comes once the delivery is durable, as a real one after the barrier.
            inner.barrier()()?;
        }
        let mut lines = Vec::new();
        crate::sink::LineSink(&mut lines).deliver(d, rows)?;
        if let Ok(mut by) = self.rows.lock() {
            by.insert(d.batch_id, lines);
        }
        if self.crash_at == Some(d.batch_id) {
            return Err(std::io::Error::other(format!("a crash after delivering batch {}", d.batch_id)).into());
        }
        Ok(())
    }
}

/// Runs `a`'s events once straight and once with `restarts` crashes, and compares.
pub(super) fn replay_safety(a: &TestArgs, restarts: u32, seed: Option<u64>) -> Result<Exit> {
    let mut p = replay(super::run::load(&a.pipeline)?, &a.events);
    let seed = seed.unwrap_or_else(|| crate::checkpoint::now_ms().unsigned_abs() | 1);
    // With --sink, the crashed runs write through the real sink into fresh directories.
    let sink_dirs = match &a.sink_dir {
        Some(dir) => Some(scratch_sink(&mut p, &dir.join("restarted"))?),
        None => None,
    };
    let runtime = super::run::runtime([&p])?;
    let stop = super::run::stop_on_signals()?;
    let run = |checkpoint: &Path, rows: &ByBatch, crash_at: Option<u64>, real: bool| {
        let opts = RunOptions {
            checkpoint: checkpoint.to_path_buf(),
            dead_letters: Some(checkpoint.join("dead-letters.jsonl")),
            progress: Progress::new(&p.name, false, None),
            stop: stop.clone(),
            fsync: false,
            flush: Flush::AsConfigured { default: true },
            own_share: true,
            ledger: None,
        };
        let inner = match real {
            true => Some(driver::sink(&p, Output::Pipeline, Some(&runtime), &stop)?),
            false => None,
        };
        let sink = Box::new(Capture { rows: rows.clone(), crash_at, inner });
        let stages = Stages::wasm(&p, &runtime, Output::Sink(sink), &stop)?;
        driver::run(&p, stages, opts).map_err(anyhow::Error::from)
    };
    let straight = ByBatch::default();
    let dir = driver::scratch_checkpoint().context("cannot create a scratch checkpoint directory")?;
    let batches = run(&dir.path().join("straight"), &straight, None, false)?.batches;
    // Distinct batches to crash at, in order: a crash at the same batch twice would only crash
    // the re-run of the first.
    let mut rng = seed;
    let mut at: Vec<u64> = (0..restarts)
        .map(|_| {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng % batches.max(1)
        })
        .collect();
    at.sort_unstable();
    at.dedup();
    eprintln!("replay safety: {} crashes at batches {at:?} of {batches} (--restart-seed {seed})", at.len());
    let crashed = ByBatch::default();
    let checkpoint = dir.path().join("crashed");
    for &batch in &at {
        match run(&checkpoint, &crashed, Some(batch), sink_dirs.is_some()) {
            Err(e) if format!("{e:#}").contains("a crash after delivering") => {}
            Err(e) => return Err(e.context("a run before a crash")),
            Ok(_) => anyhow::bail!("the run ended before batch {batch}, where it was to crash"),
        }
    }
    run(&checkpoint, &crashed, None, sink_dirs.is_some()).context("the run after the last crash")?;
    let lines = |by: &ByBatch| -> Vec<String> {
        let by = by.lock().map(|b| b.clone()).unwrap_or_default();
        by.values()
            .flat_map(|rows| String::from_utf8_lossy(rows).lines().map(str::to_string).collect::<Vec<_>>())
            .collect()
    };
    let (want, got) = (lines(&straight), lines(&crashed));
    if let Some(i) = (0..want.len().max(got.len())).find(|&i| want.get(i) != got.get(i)) {
        eprintln!(
            "replay safety: row {} differs after {} crashes (--restart-seed {seed}):\n  straight: {}\n  restarted: {}",
            i + 1,
            at.len(),
            want.get(i).map_or("(none)", String::as_str),
            got.get(i).map_or("(none)", String::as_str),
        );
        return Ok(Exit::Mismatch);
    }
    if let Some(dirs) = &sink_dirs {
        let (written, files) = written_rows(dirs)?;
        let diff = diff_rows(&written, &(want.join("\n") + "\n")).context("reading what the sink wrote")?;
        if !diff.is_empty() {
            eprintln!("{diff}");
            eprintln!(
                "replay safety: after {} crashes the sink's files do not hold each row once (--restart-seed {seed})",
                at.len()
            );
            return Ok(Exit::Mismatch);
        }
        eprintln!(
            "replay safety: the sink wrote each of the {} rows once, in {files} files, across the crashes",
            want.len()
        );
    }
    eprintln!("replay safety: the same {} rows after {} crashes", want.len(), at.len());
    Ok(Exit::Done)
}
