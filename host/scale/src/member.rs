//! This process as a member of its group: the tasks it holds, the threads that run them, and
//! the totals of those that ended.
//!
//! A task's thread is stopped and joined before the group hands its partition on: inside the
//! rebalance callback for a revocation ([`Member`]), and before leaving when the process stops
//! ([`stop_all`], then [`leave`]). So a clean handover never has two owners.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext, Rebalance};
use rdkafka::{ClientContext, TopicPartitionList};

use super::task::{self, TaskContext};
use super::{Layout, TaskId, poisoned};
use crate::checkpoint::CheckpointError;
use crate::driver::RunError;
use crate::progress::Summary;

/// How long a stopping process waits to leave its group before it exits without having left
/// (see [`leave`]); the group then moves its tasks after the session timeout.
const LEAVE_TIMEOUT: Duration = Duration::from_secs(10);

#[derive(Default)]
pub(super) struct Held {
    /// Tasks running.
    running: BTreeMap<TaskId, Running>,
    /// Tasks assigned and not yet started.
    assigned: Vec<TaskId>,
}

struct Running {
    stop: Arc<AtomicBool>,
    thread: JoinHandle<Result<Summary, RunError>>,
}

/// The membership consumer's context: it stops revoked tasks before the group moves them.
pub(super) struct Member {
    pub(super) layout: Layout,
    pub(super) held: Arc<Mutex<Held>>,
    /// Totals of the tasks that ended here.
    pub(super) done: Arc<Mutex<Totals>>,
}

#[derive(Default)]
pub(super) struct Totals {
    summary: Summary,
    /// Raised when this process stops its tasks: from then on each ending task's watermark
    /// goes into `end_watermark`.
    stopping: bool,
    /// The lowest watermark of the tasks this process held when it stopped: its final
    /// watermark. Tasks it gave up earlier are left out, their watermarks having stopped moving
    /// here when they left.
    end_watermark: Option<i64>,
    /// The first failure of a task (not a stop, not a fence): it ends the process.
    failed: Option<RunError>,
}

impl ClientContext for Member {}

impl ConsumerContext for Member {
    fn pre_rebalance(&self, _: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        if let Rebalance::Revoke(tpl) = rebalance {
            let parts = tasks(tpl, &self.layout);
            tracing::info!(
                "rebalance: tasks {} revoked from this process; stopping them",
                self.layout.describe(&parts)
            );
            let stopping: Vec<_> = match self.held.lock() {
                Ok(mut held) => {
                    held.assigned.retain(|p| !parts.contains(p));
                    parts.iter().filter_map(|p| held.running.remove(p).map(|r| (*p, r))).collect()
                }
                Err(_) => Vec::new(),
            };
            for (_, r) in &stopping {
                r.stop.store(true, Ordering::Relaxed);
            }
            for (p, r) in stopping {
                ended(&self.done, &self.layout, p, r.thread.join());
            }
        }
    }

    fn post_rebalance(&self, consumer: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        match rebalance {
            Rebalance::Assign(tpl) => {
                let parts = tasks(tpl, &self.layout);
                if parts.is_empty() {
                    return;
                }
                tracing::info!("rebalance: tasks {} assigned to this process", self.layout.describe(&parts));
                // The member only holds the partitions; the tasks read them.
                if let Err(e) = consumer.pause(tpl) {
                    tracing::warn!("rebalance: cannot pause the membership consumer: {e}");
                }
                if let Ok(mut held) = self.held.lock() {
                    held.assigned.extend(parts);
                }
            }
            Rebalance::Revoke(_) => {}
            Rebalance::Error(e) => tracing::warn!("rebalance: {e}"),
        }
    }
}

impl Held {
    /// Starts a thread for each task assigned since the last look, each with a stop flag of
    /// its own (raised when the task is revoked).
    pub(super) fn start_assigned(&mut self, cx: &Arc<TaskContext>, layout: &Layout) -> Result<(), RunError> {
        for id in std::mem::take(&mut self.assigned) {
            let task_stop = Arc::new(AtomicBool::new(false));
            let (cx, s) = (cx.clone(), task_stop.clone());
            let (t, p) = layout.source_of(id);
            let thread = std::thread::Builder::new()
                .name(format!("task {t}-{p}"))
                .spawn(move || task::run(&cx, id, s))
                .map_err(|e| CheckpointError::file(format!("{t}-{p}"), format!("cannot start a task: {e}")))?;
            self.running.insert(id, Running { stop: task_stop, thread });
        }
        Ok(())
    }

    /// Whether this process holds no task, running or about to start.
    pub(super) fn is_idle(&self) -> bool {
        self.running.is_empty() && self.assigned.is_empty()
    }

    /// Joins the tasks whose threads ended on their own and folds their ends into `done`;
    /// returns whether one of them was fenced.
    pub(super) fn reap_finished(&mut self, done: &Mutex<Totals>, layout: &Layout) -> bool {
        let finished: Vec<TaskId> =
            self.running.iter().filter(|(_, r)| r.thread.is_finished()).map(|(id, _)| *id).collect();
        let mut fenced = false;
        for id in finished {
            if let Some(r) = self.running.remove(&id) {
                fenced |= ended(done, layout, id, r.thread.join());
            }
        }
        fenced
    }
}

fn tasks(tpl: &TopicPartitionList, layout: &Layout) -> Vec<TaskId> {
    let mut tasks: Vec<TaskId> = tpl.elements().iter().filter_map(|e| layout.task(e.topic(), e.partition())).collect();
    tasks.sort_unstable();
    tasks
}

/// Folds a task's end into the totals; returns whether it was fenced.
fn ended(
    done: &Mutex<Totals>,
    layout: &Layout,
    task: TaskId,
    r: std::thread::Result<Result<Summary, RunError>>,
) -> bool {
    let Ok(mut totals) = done.lock() else { return false };
    let (topic, partition) = layout.source_of(task);
    match r {
        Ok(Ok(s)) => {
            tracing::info!("task {topic}-{partition}: stopped after {} batches", s.batches);
            if totals.stopping
                && let Some(w) = s.final_watermark
            {
                totals.end_watermark = lowest(totals.end_watermark, Some(w));
            }
            fold(&mut totals.summary, s);
        }
        // Stopped while claiming or waiting: its revocation (or this process stopping) came
        // first; whatever it planned re-runs wherever it goes next.
        Ok(Err(e)) if e.is_stop() => {
            tracing::info!("task {topic}-{partition}: stopped");
        }
        Ok(Err(RunError::Checkpoint(e @ CheckpointError::Fenced { .. }))) => {
            tracing::warn!("{e}: the task stopped here; its new owner continues it");
            return true;
        }
        Ok(Err(e)) => {
            tracing::error!("task {topic}-{partition} failed: {e}");
            totals.failed.get_or_insert(e);
        }
        Err(_) => {
            tracing::error!("task {topic}-{partition}: its thread panicked");
            totals.failed.get_or_insert(RunError::Checkpoint(CheckpointError::file(
                format!("{topic}-{partition}"),
                "the task's thread panicked",
            )));
        }
    }
    false
}

/// Adds a task's summary to the process's: every count (the windows and late events of stage 2
/// as much as stage 1's rows), and the lowest final watermark, the furthest event time that
/// every task here has passed (replaced at the end by that of the tasks held then, [`totals`]).
fn fold(t: &mut Summary, s: Summary) {
    t.batches += s.batches;
    t.input_rows += s.input_rows;
    t.events += s.events;
    t.dead_letters += s.dead_letters;
    t.late_events += s.late_events;
    t.duplicates += s.duplicates;
    t.unmatched += s.unmatched;
    t.windows_emitted += s.windows_emitted;
    t.rows_out += s.rows_out;
    for (name, n) in s.expectations {
        *t.expectations.entry(name).or_default() += n;
    }
    t.final_watermark = lowest(t.final_watermark, s.final_watermark);
}

/// The lower of two watermarks, either of which may be unknown.
pub(super) fn lowest(a: Option<i64>, b: Option<i64>) -> Option<i64> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// Whether a task failed (a poisoned lock counts as one): the process then stops.
pub(super) fn task_failed(done: &Mutex<Totals>) -> bool {
    done.lock().map(|d| d.failed.is_some()).unwrap_or(true)
}

/// Stops every task still running here and joins it, folding its end into `done`. Every flag
/// is raised before the first join, so the tasks stop side by side.
pub(super) fn stop_all(held: &Mutex<Held>, done: &Mutex<Totals>, layout: &Layout) {
    let running = held.lock().map(|mut h| std::mem::take(&mut h.running)).unwrap_or_default();
    if let Ok(mut d) = done.lock() {
        d.stopping = true;
    }
    for r in running.values() {
        r.stop.store(true, Ordering::Relaxed);
    }
    for (id, r) in running {
        ended(done, layout, id, r.thread.join());
    }
}

/// The totals of the tasks that ended here, timed from `started`; or the first failure of one.
pub(super) fn totals(done: &Mutex<Totals>, started: Instant) -> Result<Summary, RunError> {
    let mut totals = std::mem::take(&mut *done.lock().map_err(|_| poisoned())?);
    if let Some(e) = totals.failed.take() {
        return Err(e);
    }
    let mut summary = totals.summary;
    if totals.end_watermark.is_some() {
        summary.final_watermark = totals.end_watermark;
    }
    summary.elapsed_s = started.elapsed().as_secs_f64();
    summary.rows_per_s = summary.input_rows as f64 / summary.elapsed_s.max(1e-9);
    Ok(summary)
}

/// Leaves the group, waiting at most [`LEAVE_TIMEOUT`]. librdkafka's close can wait forever
/// inside the revocation it runs when the group's coordinator does not answer (its
/// `rd_kafka_assign` waits for the group thread without a timeout: a tansu busy elsewhere left a
/// process that was asked to stop running for good). This member's tasks are stopped and their
/// batches committed before it leaves, so one that cannot leave in time is left behind: the
/// group moves its partitions after the session timeout, as for a killed process.
pub(super) fn leave(consumer: BaseConsumer<Member>) {
    // Held where this thread can take it back: a thread that cannot start must not close the
    // consumer here, where the close could wait forever.
    let held = Arc::new(Mutex::new(Some(consumer)));
    let (left, wait) = std::sync::mpsc::channel();
    let theirs = Arc::clone(&held);
    let spawned = std::thread::Builder::new().name("weir-leave".into()).spawn(move || {
        let consumer = theirs.lock().ok().and_then(|mut c| c.take());
        if let Some(consumer) = consumer {
            consumer.unsubscribe();
            drop(consumer);
        }
        let _ = left.send(());
    });
    match spawned {
        Ok(_) => match wait.recv_timeout(LEAVE_TIMEOUT) {
            Ok(()) => {}
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => tracing::warn!(
                "the group's coordinator did not see this process leave within {LEAVE_TIMEOUT:?}; \
                 the group moves its tasks once the session times out"
            ),
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
                tracing::warn!("leaving the group failed; the group moves its tasks once the session times out")
            }
        },
        Err(e) => {
            // The process is stopping: its consumer is left as it is, not closed, and the group
            // times it out.
            if let Some(consumer) = held.lock().ok().and_then(|mut c| c.take()) {
                std::mem::forget(consumer);
            }
            tracing::warn!("cannot leave the group on a thread of its own ({e}); the group times this process out")
        }
    }
}
