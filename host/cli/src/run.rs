//! `weir run`: pipelines on their checkpoints, side by side in one process, each on a thread of
//! its own with its own sandboxes, limits, checkpoint and progress; one failing does not stop the
//! others. Also what the other commands share: loading a pipeline, the Wasm runtime, signals.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use anyhow::{Context, Result};

use super::exit::{Exit, Usage};
use crate::driver::{self, Flush, Output, RunOptions, Stages};
use crate::pipeline::Pipeline;
use crate::plugin::Runtime;
use crate::progress::Progress;

/// Runs each pipeline on a thread of its own, sharing the Wasm engine and its compiled-component
/// cache. Every pipeline's failure is reported; the run fails if any did.
pub(super) fn run_all(
    paths: &[PathBuf],
    checkpoint: Option<PathBuf>,
    progress_json: bool,
    metrics: Option<&str>,
    flush: bool,
    group: Option<String>,
) -> Result<Exit> {
    let mut files = Vec::new();
    for p in paths {
        if p.is_dir() {
            let mut found: Vec<PathBuf> = std::fs::read_dir(p)
                .with_context(|| format!("cannot list {}", p.display()))?
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|f| f.extension().is_some_and(|x| x == "toml"))
                .collect();
            if found.is_empty() {
                return Err(Usage(format!("{}: no pipeline files (*.toml) in this directory", p.display())).into());
            }
            found.sort();
            files.extend(found);
        } else {
            files.push(p.clone());
        }
    }
    if files.len() != 1 && checkpoint.is_some() {
        return Err(Usage(
            "--checkpoint names one checkpoint: give it with a single pipeline (or set checkpoint.location in each)"
                .into(),
        )
        .into());
    }
    let mut pipelines = files.iter().map(|f| load(f).map(|p| (p, f.clone()))).collect::<Result<Vec<_>>>()?;
    if let Some(group) = group {
        let [(p, file)] = pipelines.as_mut_slice() else {
            return Err(Usage("--group shares one pipeline: give it a single pipeline file".into()).into());
        };
        *p = p.clone().in_group(group).map_err(|m| Usage(format!("{}: --group: {m}", file.display())))?;
    }
    let mut names = std::collections::HashSet::new();
    for (p, f) in &pipelines {
        if !names.insert(p.name.clone()) {
            return Err(Usage(format!(
                "{}: another pipeline is also named `{}`; names must differ",
                f.display(),
                p.name
            ))
            .into());
        }
    }
    let runtime = runtime(pipelines.iter().map(|(p, _)| p))?;
    let stop = stop_on_signals()?;
    let runs: Vec<(Pipeline, RunOptions)> = pipelines
        .into_iter()
        .map(|(p, file)| {
            let checkpoint = checkpoint.clone().unwrap_or_else(|| driver::default_checkpoint(&p, &file));
            let opts = RunOptions {
                checkpoint,
                dead_letters: None,
                progress: Progress::new(&p.name, progress_json, Some(Duration::from_secs(2))),
                stop: stop.clone(),
                fsync: true,
                flush: if flush { Flush::Always } else { Flush::AsConfigured { default: false } },
                own_share: true,
                ledger: None,
            };
            (p, opts)
        })
        .collect();
    driver::keep_neighbours_clear(&runs.iter().map(|(p, o)| (p, o)).collect::<Vec<_>>())
        .context("pipelines side by side")?;
    // A pipeline run in a group: its tasks' progress, rolled up and served as metrics.
    let rollups: Vec<Option<Arc<crate::scale::Rollup>>> =
        runs.iter().map(|(p, _)| p.group.as_ref().map(|_| Arc::new(crate::scale::Rollup::new(&p.name)))).collect();
    if let Some(addr) = metrics {
        let bound = super::metrics::serve(addr, runtime.clone(), rollups.iter().flatten().cloned().collect())?;
        eprintln!("metrics at http://{bound}/metrics");
    }
    let threads: Vec<_> = runs
        .into_iter()
        .zip(rollups)
        .map(|((p, opts), rollup)| {
            let (runtime, stop) = (runtime.clone(), stop.clone());
            let thread = std::thread::Builder::new().name(format!("pipeline {}", p.name)).spawn(move || {
                let ran = match rollup {
                    Some(rollup) => crate::scale::run(&p, runtime, opts.checkpoint, progress_json, stop, rollup),
                    None => Stages::wasm(&p, &runtime, Output::Pipeline, &stop).and_then(|s| driver::run(&p, s, opts)),
                };
                match ran {
                    Ok(summary) => {
                        eprintln!("[{}] {}", p.name, summary.render());
                        if summary.interrupted { Exit::Interrupted } else { Exit::Done }
                    }
                    Err(e) => {
                        let e = anyhow::Error::from(e).context(format!("pipeline {}", p.name));
                        eprintln!("error: {e:#}");
                        Exit::of(&e)
                    }
                }
            });
            thread.context("cannot start a pipeline thread")
        })
        .collect::<Result<_>>()?;
    // The most serious outcome decides the exit: a failure, then a usage error, then an
    // interruption.
    let mut exit = Exit::Done;
    for t in threads {
        let e = t.join().unwrap_or(Exit::Failed);
        let rank = |e: Exit| [Exit::Done, Exit::Interrupted, Exit::Usage, Exit::Failed].iter().position(|&x| x == e);
        if rank(e) > rank(exit) {
            exit = e;
        }
    }
    Ok(exit)
}

/// A flag raised by SIGTERM or Ctrl-C: the run finishes (or abandons) its batch and exits. A
/// second signal exits at once, with [`Exit::Interrupted`], for when the first seems not to work.
pub(super) fn stop_on_signals() -> Result<Arc<AtomicBool>> {
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGTERM, signal_hook::consts::SIGINT] {
        signal_hook::flag::register_conditional_shutdown(sig, i32::from(Exit::Interrupted.code()), stop.clone())
            .context("cannot handle signals")?;
        signal_hook::flag::register(sig, stop.clone()).context("cannot handle signals")?;
    }
    Ok(stop)
}

pub(super) fn load(path: &Path) -> Result<Pipeline> {
    Ok(Pipeline::load(path)?)
}

/// The Wasm runtime for these pipelines: fuel metering on if any stage of them sets a fuel limit.
pub(super) fn runtime<'a>(pipelines: impl IntoIterator<Item = &'a Pipeline>) -> Result<Arc<Runtime>> {
    let fuel = pipelines.into_iter().any(Pipeline::uses_fuel);
    Ok(Runtime::new(Runtime::default_cache_dir(), fuel)?)
}
