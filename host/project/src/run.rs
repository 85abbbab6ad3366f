//! Runs a project: every flow a pipeline on a thread of its own, with its own checkpoint, as
//! `weir run` runs pipelines side by side. A downstream flow reads its input dataset's records
//! as the upstream flow appends them (the embedded log wakes it), so the flows work at once,
//! each a batch behind the one before.
//!
//! With bounded input the project runs to completion in dependency order: a flow reading an
//! embedded dataset ends once every flow writing it has ended and it has read all they wrote; a
//! flow reading a Kafka-backed dataset starts once that dataset's writers have ended, and reads
//! what is there then.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Condvar, Mutex};

use super::{Project, Storage};
use crate::dataset::DatasetKind;
use crate::dataset::log::{Log, LogError};
use crate::driver::{self, Output, RunError, RunOptions, Stages};
use crate::plugin::Runtime;
use crate::progress::{Progress, Summary};

/// How to run each flow, beside its checkpoint (which the project sets).
pub struct FlowOptions {
    pub progress_json: bool,
    pub human_every: Option<std::time::Duration>,
    pub stop: Arc<AtomicBool>,
    pub fsync: bool,
    pub flush: driver::Flush,
}

/// The flows that have ended, for flows that wait for them.
#[derive(Default)]
struct Ended {
    flows: Mutex<BTreeSet<String>>,
    changed: Condvar,
}

impl Ended {
    fn mark(&self, flow: &str) {
        self.flows.lock().unwrap_or_else(|p| p.into_inner()).insert(flow.to_string());
        self.changed.notify_all();
    }

    fn wait_for(&self, flows: &BTreeSet<String>) {
        let mut ended = self.flows.lock().unwrap_or_else(|p| p.into_inner());
        while !flows.is_subset(&ended) {
            ended = self.changed.wait(ended).unwrap_or_else(|p| p.into_inner());
        }
    }
}

/// A flow's name and how its run ended.
pub type Outcome = (String, Result<Summary, RunError>);

/// Runs every flow of `p` until its input ends (bounded) or `opts.stop` is raised; each flow's
/// outcome, in dependency order.
pub fn run(p: &Project, runtime: &Arc<Runtime>, opts: FlowOptions) -> Result<Vec<Outcome>, LogError> {
    // Every embedded dataset open before any flow starts, with its writers counted, so that no
    // reader takes an empty log without writers for a finished one.
    let mut logs: BTreeMap<String, Arc<Log>> = BTreeMap::new();
    for d in p.datasets.values() {
        if let Storage::Embedded { dir } = &d.storage {
            let log = Log::open(dir, d.kind == DatasetKind::Table)?;
            log.expect_writers(p.writers(&d.name).count());
            log.append_files_from(d.append_file_bytes);
            logs.insert(d.name.clone(), log);
        }
    }
    let ended = Arc::new(Ended::default());
    // The project's flows are one tenant of the runtime: they share the CPU with other
    // tenants, not with each other.
    let _running = runtime.enter_pipeline();
    let mut threads = Vec::new();
    for fl in &p.flows {
        // Kafka-backed inputs of a bounded project are read once their writers are done.
        let waits: BTreeSet<String> = match p.bounded {
            false => BTreeSet::new(),
            true => fl
                .reads
                .iter()
                .filter(|r| matches!(p.datasets.get(*r).map(|d| &d.storage), Some(Storage::Kafka { .. })))
                .flat_map(|r| p.writers(r).map(|w| w.name().to_string()))
                .collect(),
        };
        let run_opts = RunOptions {
            checkpoint: fl.checkpoint.clone(),
            dead_letters: None,
            progress: Progress::new(fl.name(), opts.progress_json, opts.human_every),
            stop: opts.stop.clone(),
            fsync: opts.fsync,
            flush: opts.flush,
            own_share: false,
            ledger: None,
        };
        let pipeline = fl.pipeline.clone();
        let writes = fl.writes.as_ref().and_then(|w| logs.get(w).cloned());
        let (runtime, stop, done) = (runtime.clone(), opts.stop.clone(), ended.clone());
        let thread = std::thread::Builder::new().name(format!("flow {}", fl.name())).spawn(move || {
            done.wait_for(&waits);
            let ran = Stages::wasm(&pipeline, &runtime, Output::Pipeline, &stop)
                .and_then(|s| driver::run(&pipeline, s, run_opts));
            // However it ended, it appends no more: its readers may finish.
            if let Some(log) = writes {
                log.writer_done();
            }
            done.mark(&pipeline.name);
            ran
        });
        if let Err(e) = &thread {
            // It never runs, so it appends nothing: its readers need not wait for it.
            if let Some(log) = fl.writes.as_ref().and_then(|w| logs.get(w)) {
                log.writer_done();
            }
            ended.mark(fl.name());
            tracing::error!("cannot start a thread for flow {}: {e}", fl.name());
        }
        threads.push((fl.name().to_string(), thread.ok()));
    }
    Ok(threads
        .into_iter()
        .map(|(name, t)| {
            let outcome = match t {
                Some(t) => t.join().unwrap_or_else(|_| {
                    Err(RunError::Plugin(crate::plugin::PluginError::Engine(format!("flow {name} panicked"))))
                }),
                None => Err(RunError::Plugin(crate::plugin::PluginError::Engine(format!(
                    "cannot start a thread for flow {name}"
                )))),
            };
            (name, outcome)
        })
        .collect())
}
