//! `weir test`: a pipeline over recorded events, deterministically, with a scratch checkpoint,
//! and the rows that reach its sink as JSON lines; with `--expect`, compared with the rows a
//! plugin author expects (in any order), exiting [`Exit::Mismatch`] with a diff when they differ.
//! A test is a one-off run, so it flushes every window at the end of the events unless the
//! pipeline file says otherwise.

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
}

pub(super) fn test(a: &TestArgs) -> Result<Exit> {
    let p = replay(super::run::load(&a.pipeline)?, &a.events);
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
    };
    let runtime = super::run::runtime([&p])?;
    let stages = Stages::wasm(&p, &runtime, Output::Lines(Box::new(writer)), &stop)?;
    let summary = driver::run(&p, stages, opts).with_context(|| format!("pipeline {}", p.name))?;
    let rows = std::fs::read_to_string(rows_file.path()).context("cannot read back the rows")?;
    match &a.out {
        Some(path) => std::fs::write(path, &rows).with_context(|| format!("cannot write {}", path.display()))?,
        None => std::io::stdout().write_all(rows.as_bytes()).context("cannot write to stdout")?,
    }
    eprintln!("{}", summary.render());
    if summary.interrupted {
        return Ok(Exit::Interrupted);
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
pub(super) fn replay(mut p: Pipeline, events: &Path) -> Pipeline {
    p.source.kind = SourceKind::Replay { path: events.to_path_buf(), format: ReplayFormat::Auto };
    p.trigger = Trigger::AvailableNow;
    p
}

/// Compares rows as multisets of JSON values; returns a readable diff, empty when equal.
fn diff_rows(got: &str, want: &str) -> Result<String> {
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
