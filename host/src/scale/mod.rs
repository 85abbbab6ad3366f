//! Scale-out: many `weir` processes share one pipeline through a Kafka consumer group.
//!
//! The work is cut into tasks, one per input partition, and the group decides which process
//! runs which: every process started with the same pipeline and `[scale] group` (or
//! `weir run --group`) joins the group, with the cooperative-sticky assignor, so a rebalance
//! moves only the partitions that must move. The membership consumer reads nothing (its
//! partitions stay paused): it only learns what this process holds. Each task held runs on a
//! thread of its own (`task.rs`), its checkpoint recorded in the group's checkpoint topic
//! (`ledger.rs`), so it can continue on any process.
//!
//! A revoked task is stopped, and its thread joined, inside the rebalance callback, before the
//! group hands the partition on: a clean handover never has two owners. An unclean one (a
//! process paused or cut off past its session timeout) may, for a while; the ledger's epochs
//! fence the old owner at its next plan.
//!
//! The group's names: the consumer group is `[scale] group`; its checkpoint topic is
//! `weir.GROUP.checkpoints` ([`ledger_topic`]), created on first use.

mod inspect;
mod ledger;
mod rollup;
mod task;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext, Rebalance};
use rdkafka::{ClientContext, TopicPartitionList};

use crate::checkpoint::CheckpointError;
use crate::driver::RunError;
use crate::kafka::{CALL_TIMEOUT, KafkaError, client_config, connection_options, with_retry};
use crate::pipeline::{Pipeline, SourceKind};
use crate::plugin::Runtime;
use crate::progress::Summary;
use rollup::ROLLUP_EVERY;
use task::TaskContext;

pub(crate) use inspect::group as inspect;
pub(crate) use rollup::Rollup;

/// How often the membership consumer is polled: its rebalance callbacks run in the poll.
const POLL: Duration = Duration::from_millis(100);

/// The group's session timeout unless `kafka.session.timeout.ms` says otherwise: how long a
/// process that stopped answering (killed, paused, cut off) keeps its tasks before the group
/// moves them. librdkafka's default is 45 s; a stream processor's tasks should move sooner.
const SESSION_TIMEOUT_MS: &str = "10000";

/// How long a rebalance waits for every member to rejoin (`max.poll.interval.ms`, which the
/// client sends as its rebalance timeout) unless the pipeline's `kafka.max.poll.interval.ms`
/// says otherwise. librdkafka's default, 5 minutes, lets a paused member stall the whole group
/// that long on brokers that wait for it (tansu does); the membership consumer polls every
/// [`POLL`], so only a revocation that waits for a batch in flight comes near this.
const REBALANCE_TIMEOUT_MS: &str = "20000";

/// The checkpoint topic's replication: the broker's default (`-1`).
const LEDGER_REPLICATION: i32 = -1;

/// The group's checkpoint topic.
pub(crate) fn ledger_topic(group: &str) -> String {
    format!("weir.{group}.checkpoints")
}

#[derive(Default)]
struct Held {
    /// Tasks running, by partition.
    running: BTreeMap<i32, Running>,
    /// Partitions assigned and not yet started.
    assigned: Vec<i32>,
}

struct Running {
    stop: Arc<AtomicBool>,
    thread: JoinHandle<Result<Summary, RunError>>,
}

/// The membership consumer's context: it stops revoked tasks before the group moves them.
struct Member {
    topic: String,
    held: Arc<Mutex<Held>>,
    /// Totals of the tasks that ended here.
    done: Arc<Mutex<Totals>>,
}

#[derive(Default)]
struct Totals {
    summary: Summary,
    /// The first failure of a task (not a stop, not a fence): it ends the process.
    failed: Option<RunError>,
}

impl ClientContext for Member {}

impl ConsumerContext for Member {
    fn pre_rebalance(&self, _: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        if let Rebalance::Revoke(tpl) = rebalance {
            let parts = partitions(tpl, &self.topic);
            tracing::info!("rebalance: tasks {parts:?} revoked from this process; stopping them");
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
                ended(&self.done, &self.topic, p, r.thread.join());
            }
        }
    }

    fn post_rebalance(&self, consumer: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        match rebalance {
            Rebalance::Assign(tpl) => {
                let parts = partitions(tpl, &self.topic);
                if parts.is_empty() {
                    return;
                }
                tracing::info!("rebalance: tasks {parts:?} assigned to this process");
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

fn partitions(tpl: &TopicPartitionList, topic: &str) -> Vec<i32> {
    tpl.elements().iter().filter(|e| e.topic() == topic).map(|e| e.partition()).collect()
}

/// Folds a task's end into the totals; returns whether it was fenced.
fn ended(done: &Mutex<Totals>, topic: &str, partition: i32, r: std::thread::Result<Result<Summary, RunError>>) -> bool {
    let Ok(mut totals) = done.lock() else { return false };
    match r {
        Ok(Ok(s)) => {
            tracing::info!("task {topic}-{partition}: stopped after {} batches", s.batches);
            let t = &mut totals.summary;
            t.batches += s.batches;
            t.input_rows += s.input_rows;
            t.events += s.events;
            t.dead_letters += s.dead_letters;
            t.rows_out += s.rows_out;
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

/// Runs this process's share of `pipeline`'s group until `stop` is raised or a task fails;
/// returns the totals of the tasks it ran. Their progress is folded into `rollup` (made with
/// the pipeline's name), which the caller may also serve as metrics.
pub(crate) fn run(
    pipeline: &Pipeline,
    runtime: Arc<Runtime>,
    checkpoint: PathBuf,
    progress_json: bool,
    stop: Arc<AtomicBool>,
    rollup: Arc<Rollup>,
) -> Result<Summary, RunError> {
    let started = Instant::now();
    let (Some(group), SourceKind::Kafka(source)) = (pipeline.group.clone(), &pipeline.source.kind) else {
        unreachable!("Pipeline::in_group admits Kafka sources only")
    };
    let topic = source.topics[0].clone();
    let partitions = input_partitions(source, &topic, &stop)?;
    let ledger = ledger_topic(&group);
    create_ledger_topic(&source.options, &ledger, partitions, &stop)?;
    let held = Arc::new(Mutex::new(Held::default()));
    let done = Arc::new(Mutex::new(Totals::default()));
    let member = Member { topic: topic.clone(), held: held.clone(), done: done.clone() };
    let owner = owner();
    let consumer: BaseConsumer<Member> = client_config(
        &[
            ("group.id", &group),
            // The member's name in `weir inspect`: the owner its claims name.
            ("client.id", &owner),
            ("partition.assignment.strategy", "cooperative-sticky"),
            ("enable.auto.commit", "false"),
            ("session.timeout.ms", SESSION_TIMEOUT_MS),
            ("max.poll.interval.ms", REBALANCE_TIMEOUT_MS),
            ("heartbeat.interval.ms", "1000"),
        ],
        &source.options,
    )
    .create_with_context(member)
    .map_err(|e| kafka(e, &topic))?;
    consumer.subscribe(&[&topic]).map_err(|e| kafka(e, &topic))?;
    let cx = Arc::new(TaskContext {
        pipeline: pipeline.clone(),
        runtime,
        checkpoint,
        ledger_topic: ledger,
        owner,
        progress_json,
        rollup,
    });
    let report = |always| cx.rollup.report(&pipeline.name, &group, &cx.owner, progress_json, always);
    let mut reported = Instant::now();
    tracing::info!("{}: joined group {group} for the {partitions} tasks of topic {topic}", pipeline.name);
    while !stop.load(Ordering::Relaxed) {
        // Paused: returns nothing but runs the rebalance callbacks.
        let _ = consumer.poll(POLL);
        let Ok(mut h) = held.lock() else { break };
        for p in std::mem::take(&mut h.assigned) {
            let task_stop = Arc::new(AtomicBool::new(false));
            let (cx, s, t) = (cx.clone(), task_stop.clone(), topic.clone());
            let thread = std::thread::Builder::new()
                .name(format!("task {topic}-{p}"))
                .spawn(move || task::run(&cx, &t, p, s))
                .map_err(|e| CheckpointError::file(format!("{topic}-{p}"), format!("cannot start a task: {e}")))?;
            h.running.insert(p, Running { stop: task_stop, thread });
        }
        let finished: Vec<i32> = h.running.iter().filter(|(_, r)| r.thread.is_finished()).map(|(p, _)| *p).collect();
        let mut fenced = false;
        for p in finished {
            if let Some(r) = h.running.remove(&p) {
                fenced |= ended(&done, &topic, p, r.thread.join());
            }
        }
        drop(h);
        if fenced {
            // Another process claimed a task the group still shows here: this member's view
            // is stale. Leaving and joining again gets it a fresh one (its other tasks are
            // revoked, stopped and handed on like any).
            tracing::info!("a task was fenced: this process's view of the group is stale; rejoining it");
            consumer.unsubscribe();
            consumer.subscribe(&[&topic]).map_err(|e| kafka(e, &topic))?;
        }
        if done.lock().map(|d| d.failed.is_some()).unwrap_or(true) {
            break;
        }
        if reported.elapsed() >= ROLLUP_EVERY {
            report(false);
            reported = Instant::now();
        }
    }
    // Stop the tasks here first, then leave: the group moves them once this member is gone.
    let running = held.lock().map(|mut h| std::mem::take(&mut h.running)).unwrap_or_default();
    for r in running.values() {
        r.stop.store(true, Ordering::Relaxed);
    }
    for (p, r) in running {
        ended(&done, &topic, p, r.thread.join());
    }
    consumer.unsubscribe();
    drop(consumer);
    report(true);
    let mut totals = std::mem::take(&mut *done.lock().map_err(|_| poisoned())?);
    if let Some(e) = totals.failed.take() {
        return Err(e);
    }
    let mut summary = totals.summary;
    summary.elapsed_s = started.elapsed().as_secs_f64();
    summary.rows_per_s = summary.input_rows as f64 / summary.elapsed_s.max(1e-9);
    Ok(summary)
}

fn poisoned() -> RunError {
    RunError::Checkpoint(CheckpointError::file("group", "a task thread panicked holding the group's totals"))
}

fn kafka(e: rdkafka::error::KafkaError, topic: &str) -> RunError {
    RunError::Source(crate::source::SourceError::Kafka(match e {
        rdkafka::error::KafkaError::ClientCreation(_) => KafkaError::Config(e),
        e => KafkaError::Call { what: format!("joining the group for {topic}"), source: e },
    }))
}

/// Who this process is: host and pid.
fn owner() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
    format!("{}:{}", host.trim(), std::process::id())
}

fn input_partitions(
    source: &crate::pipeline::KafkaSourceConfig,
    topic: &str,
    stop: &AtomicBool,
) -> Result<i32, RunError> {
    let consumer: BaseConsumer =
        client_config(&[], &connection_options(&source.options)).create().map_err(|e| kafka(e, topic))?;
    let md = with_retry(stop, "reading the topic's partitions", || consumer.fetch_metadata(Some(topic), CALL_TIMEOUT))
        .map_err(|e| RunError::Source(e.into()))?;
    let n = md.topics().first().map_or(0, |t| t.partitions().len()) as i32;
    if n == 0 {
        return Err(RunError::Source(
            KafkaError::Topic { topic: topic.to_string(), message: "has no partitions (does it exist?)".into() }.into(),
        ));
    }
    Ok(n)
}

/// Creates the group's checkpoint topic, compacted, one partition per task, unless it exists.
fn create_ledger_topic(
    options: &[(String, String)],
    topic: &str,
    partitions: i32,
    stop: &AtomicBool,
) -> Result<(), RunError> {
    let admin: AdminClient<DefaultClientContext> =
        client_config(&[], &connection_options(options)).create().map_err(|e| kafka(e, topic))?;
    let new =
        NewTopic::new(topic, partitions, TopicReplication::Fixed(LEDGER_REPLICATION)).set("cleanup.policy", "compact");
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().map_err(|e| {
        RunError::Checkpoint(CheckpointError::file(topic, format!("cannot start the admin client: {e}")))
    })?;
    let opts = AdminOptions::new().operation_timeout(Some(CALL_TIMEOUT));
    let created = with_retry(stop, "creating the group's checkpoint topic", || {
        match rt.block_on(admin.create_topics([&new], &opts)) {
            Err(e) => Err(e),
            Ok(results) => {
                for r in results {
                    match r {
                        Ok(_) | Err((_, rdkafka::types::RDKafkaErrorCode::TopicAlreadyExists)) => {}
                        Err((_, code)) => return Err(rdkafka::error::KafkaError::AdminOp(code)),
                    }
                }
                Ok(())
            }
        }
    });
    created.map_err(|e| RunError::Source(e.into()))?;
    Ok(())
}
