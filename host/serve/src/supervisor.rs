//! The pipelines a service runs: each on a thread of its own, on the one Wasm runtime, with its
//! own stop flag, checkpoint, sandboxes and limits, exactly as `weir run` runs them side by side.
//! A start returns once the run has recovered its checkpoint (or failed to: a plugin that does
//! not play its role, state a new build cannot read), so the API can answer with the outcome; a
//! stop returns once the current batch has committed.
//!
//! Invariant: at most one run per pipeline at a time; a slot's thread is joined before another
//! starts in its place.

use std::collections::{HashMap, VecDeque};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::time::Duration;

use serde::Serialize;

use super::limits;
use super::registry::now_ms;
use crate::driver::{self, Flush, Output, RunOptions, Stages};
use crate::pipeline::Pipeline;
use crate::plugin::Runtime;
use crate::progress::{Progress, Tap};

/// How long a start waits for the run to recover its checkpoint before answering that it is
/// still starting (a Kafka source waiting for its broker, say).
const START_WAIT: Duration = Duration::from_secs(30);

/// (tenant, pipeline).
pub type Key = (String, String);

/// What a pipeline's run is doing, as the API reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum RunState {
    /// Recovering its checkpoint.
    Starting,
    Running,
    /// Bounded input, all read and committed.
    Finished,
    Failed,
    /// Not running (never started, stopped, or paused).
    Idle,
}

#[derive(Debug, Clone, Serialize)]
pub struct Status {
    pub state: RunState,
    /// Why it failed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub started_ms: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ended_ms: Option<i64>,
}

impl Status {
    fn idle() -> Self {
        Self { state: RunState::Idle, error: None, started_ms: None, ended_ms: None }
    }
}

/// What is known of a pipeline's runs in this process: the current run's status, the recent
/// progress records, and a bell rung at each change of either for whoever follows them.
pub struct Recent {
    records: Mutex<VecDeque<(u64, String)>>,
    status: Mutex<Status>,
    /// Counts changes; its value means nothing else.
    bell: tokio::sync::watch::Sender<u64>,
    started: Mutex<Option<mpsc::Sender<Result<(), String>>>>,
}

impl Recent {
    fn new() -> Arc<Self> {
        Arc::new(Self {
            records: Mutex::default(),
            status: Mutex::new(Status::idle()),
            bell: tokio::sync::watch::channel(0).0,
            started: Mutex::default(),
        })
    }

    pub fn status(&self) -> Status {
        self.status.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Changes the status and rings the bell.
    fn set(&self, change: impl FnOnce(&mut Status)) {
        change(&mut self.status.lock().unwrap_or_else(|e| e.into_inner()));
        self.ring();
    }

    fn ring(&self) {
        self.bell.send_modify(|n| *n = n.wrapping_add(1));
    }

    /// Records after sequence number `after`, oldest first, at most `n`.
    pub fn since(&self, after: u64, n: usize) -> Vec<(u64, String)> {
        let records = self.records.lock().unwrap_or_else(|e| e.into_inner());
        let newer: Vec<_> = records.iter().filter(|(s, _)| *s > after).cloned().collect();
        newer[newer.len().saturating_sub(n)..].to_vec()
    }

    pub fn follow(&self) -> tokio::sync::watch::Receiver<u64> {
        self.bell.subscribe()
    }

    fn report_start(&self, outcome: Result<(), String>) {
        if let Some(tx) = self.started.lock().unwrap_or_else(|e| e.into_inner()).take() {
            let _ = tx.send(outcome);
        }
    }
}

impl Tap for Recent {
    fn record(&self, json: &str) {
        let mut records = self.records.lock().unwrap_or_else(|e| e.into_inner());
        let seq = records.back().map_or(1, |(s, _)| s + 1);
        if records.len() == limits::RECENT_PROGRESS {
            records.pop_front();
        }
        records.push_back((seq, json.to_string()));
        drop(records);
        self.ring();
    }

    fn started(&self) {
        self.report_start(Ok(()));
    }
}

struct Slot {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
    recent: Arc<Recent>,
}

pub struct Supervisor {
    runtime: Arc<Runtime>,
    slots: Mutex<HashMap<Key, Slot>>,
}

/// What a start came to.
pub enum Started {
    /// Recovered and running (or already finished).
    Running,
    /// Still recovering after [`START_WAIT`].
    Starting,
}

impl Supervisor {
    pub fn new(runtime: Arc<Runtime>) -> Self {
        Self { runtime, slots: Mutex::default() }
    }

    /// Starts `pipeline` on `checkpoint` unless it is running. `Err`: why it could not start
    /// (its plugins refused to load, its checkpoint refused it); the pipeline is then idle with
    /// that error.
    pub fn start(&self, key: &Key, pipeline: Pipeline, checkpoint: PathBuf) -> Result<Started, String> {
        self.stop(key);
        let stop = Arc::new(AtomicBool::new(false));
        let recent = self.recent(key);
        recent.set(|s| *s = Status { started_ms: Some(now_ms()), state: RunState::Starting, ..Status::idle() });
        let fail = |e: String| {
            recent.set(|s| {
                *s = Status {
                    state: RunState::Failed,
                    error: Some(e.clone()),
                    ended_ms: Some(now_ms()),
                    ..Status::idle()
                }
            });
            e
        };
        let stages = match Stages::wasm(&pipeline, &self.runtime, Output::Pipeline, &stop) {
            Ok(s) => s,
            Err(e) => {
                let e = fail(format!("{:#}", anyhow::Error::from(e)));
                self.put(key, Slot { stop, thread: None, recent });
                return Err(e);
            }
        };
        let (tx, rx) = mpsc::channel();
        *recent.started.lock().unwrap_or_else(|e| e.into_inner()) = Some(tx);
        let opts = RunOptions {
            checkpoint,
            dead_letters: None,
            progress: Progress::new(&pipeline.name, false, None).tap(recent.clone()),
            stop: stop.clone(),
            fsync: true,
            flush: Flush::AsConfigured { default: false },
            own_share: true,
            ledger: None,
        };
        let rc = recent.clone();
        let thread = std::thread::Builder::new().name(format!("pipeline {}", pipeline.name)).spawn(move || {
            let ran = driver::run(&pipeline, stages, opts).map_err(|e| format!("{:#}", anyhow::Error::from(e)));
            if let Err(e) = &ran {
                tracing::warn!("pipeline {}: {e}", pipeline.name);
            }
            rc.set(|s| {
                s.ended_ms = Some(now_ms());
                match &ran {
                    Ok(summary) if pipeline.bounded() && !summary.interrupted => s.state = RunState::Finished,
                    Ok(_) => s.state = RunState::Idle,
                    Err(e) => {
                        s.state = RunState::Failed;
                        s.error = Some(e.clone());
                    }
                }
            });
            rc.report_start(ran.map(drop));
        });
        let thread = match thread {
            Ok(t) => t,
            Err(e) => {
                let e = fail(format!("cannot start a pipeline thread: {e}"));
                self.put(key, Slot { stop, thread: None, recent });
                return Err(e);
            }
        };
        self.put(key, Slot { stop, thread: Some(thread), recent: recent.clone() });
        match rx.recv_timeout(START_WAIT) {
            Ok(Ok(())) => {
                recent.set(|s| {
                    if s.state == RunState::Starting {
                        s.state = RunState::Running;
                    }
                });
                Ok(Started::Running)
            }
            Ok(Err(e)) => Err(e),
            Err(_) => Ok(Started::Starting),
        }
    }

    /// Instantiates every plugin of `pipeline` in its role and drops them: the check a start
    /// makes first, for a pipeline created without starting.
    pub fn probe(&self, pipeline: &Pipeline) -> Result<(), String> {
        let stop = Arc::new(AtomicBool::new(false));
        Stages::wasm(pipeline, &self.runtime, Output::Pipeline, &stop)
            .map(drop)
            .map_err(|e| format!("{:#}", anyhow::Error::from(e)))
    }

    /// Stops the pipeline's run, if any, after its current batch commits; waits for it.
    pub fn stop(&self, key: &Key) {
        let thread = {
            let mut slots = self.slots.lock().unwrap_or_else(|e| e.into_inner());
            let Some(slot) = slots.get_mut(key) else { return };
            slot.stop.store(true, Ordering::Relaxed);
            slot.thread.take()
        };
        if let Some(t) = thread {
            let _ = t.join();
        }
    }

    /// Stops the pipeline's run, as [`Supervisor::stop`] does, and marks it failed for `why`.
    pub fn stop_failed(&self, key: &Key, why: String) {
        self.stop(key);
        let recent = self.recent(key);
        recent.set(|s| {
            s.state = RunState::Failed;
            s.error = Some(why);
            s.ended_ms = Some(now_ms());
        });
    }

    /// Stops the run and forgets the pipeline.
    pub fn remove(&self, key: &Key) {
        self.stop(key);
        self.slots.lock().unwrap_or_else(|e| e.into_inner()).remove(key);
    }

    pub fn status(&self, key: &Key) -> Status {
        let slots = self.slots.lock().unwrap_or_else(|e| e.into_inner());
        slots.get(key).map_or_else(Status::idle, |s| s.recent.status())
    }

    /// The pipeline's status and progress records (kept across its runs in this process), the
    /// same for whoever follows them now and for the runs to come.
    pub fn recent(&self, key: &Key) -> Arc<Recent> {
        let mut slots = self.slots.lock().unwrap_or_else(|e| e.into_inner());
        let slot = slots.entry(key.clone()).or_insert_with(|| Slot {
            stop: Arc::new(AtomicBool::new(false)),
            thread: None,
            recent: Recent::new(),
        });
        slot.recent.clone()
    }

    /// Stops every run (the service is shutting down), each after its current batch.
    pub fn stop_all(&self) {
        let keys: Vec<Key> = self.slots.lock().unwrap_or_else(|e| e.into_inner()).keys().cloned().collect();
        for k in keys {
            self.stop(&k);
        }
    }

    pub fn runtime(&self) -> &Arc<Runtime> {
        &self.runtime
    }

    fn put(&self, key: &Key, slot: Slot) {
        self.slots.lock().unwrap_or_else(|e| e.into_inner()).insert(key.clone(), slot);
    }
}
