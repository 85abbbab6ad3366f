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
//! A windowed aggregation runs in two stages around a shuffle (`host/engine/src/shuffle.rs`): a stage-1 task
//! per input partition folds its batches into partial accumulators and writes them to the
//! group's repartition topic, partitioned by group key; a stage-2 task per repartition
//! partition merges them into its windows, its state recorded in the group's changelog topic
//! (`changelog.rs`) besides the checkpoint topic. The group subscribes to both topics, so a
//! task of either stage is a partition the group assigns ([`Layout`]).
//!
//! A revoked task is stopped, and its thread joined, inside the rebalance callback, before the
//! group hands the partition on: a clean handover never has two owners. An unclean one (a
//! process paused or cut off past its session timeout) may, for a while; the ledger's epochs
//! fence the old owner at its next plan.
//!
//! The group's names: the consumer group is `[scale] group`; its checkpoint topic is
//! `weir.GROUP.checkpoints` ([`ledger_topic`]), and a two-stage group's shuffle and state are
//! `weir.GROUP.repartition` and `weir.GROUP.changelog` (`host/engine/src/shuffle.rs`), all created on first use.

mod changelog;
mod inspect;
mod ledger;
mod rollup;
mod task;

// The layers below, under the names this crate's modules use.
use weir_config as pipeline;
use weir_engine::{aggregate, checkpoint, driver, ingest, isolate, kafka, progress, shuffle, sink, source, state};
use weir_sandbox as plugin;
use weir_types::{own_files, watermark, window};

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
use crate::pipeline::{Keyed, Pipeline, SourceKind};
use crate::plugin::Runtime;
use crate::progress::Summary;
use rollup::ROLLUP_EVERY;
use task::TaskContext;

pub use inspect::group as inspect;
pub use rollup::Rollup;

/// How often the membership consumer is polled: its rebalance callbacks run in the poll.
const POLL: Duration = Duration::from_millis(100);

/// The group's session timeout unless `kafka.session.timeout.ms` says otherwise: how long a
/// process that stopped answering (killed, paused, cut off) keeps its tasks before the group
/// moves them. librdkafka's default is 45 s; a stream processor's tasks should move sooner.
const SESSION_TIMEOUT_MS: &str = "10000";

/// How long a stopping process waits to leave its group before it exits without having left
/// (see [`leave`]); the group then moves its tasks after the session timeout.
const LEAVE_TIMEOUT: Duration = Duration::from_secs(10);

/// How long a rebalance waits for every member to rejoin (`max.poll.interval.ms`, which the
/// client sends as its rebalance timeout) unless the pipeline's `kafka.max.poll.interval.ms`
/// says otherwise. librdkafka's default, 5 minutes, lets a paused member stall the whole group
/// that long on brokers that wait for it (tansu does); the membership consumer polls every
/// [`POLL`], so only a revocation that waits for a batch in flight comes near this.
const REBALANCE_TIMEOUT_MS: &str = "20000";

/// The replication of the topics a group creates: the broker's default (`-1`).
const REPLICATION: i32 = -1;

/// How long the repartition topic keeps what stage 1 wrote, unless `kafka.*` options on the
/// broker say otherwise: longer than any stage-2 task should lag behind. A stage-2 task that
/// falls further behind finds its next offset gone, and stops saying so (data loss).
const REPARTITION_RETENTION_MS: &str = "604800000";

/// The group's checkpoint topic.
pub fn ledger_topic(group: &str) -> String {
    format!("weir.{group}.checkpoints")
}

/// A task: an input partition (the only stage, or stage 1), or a repartition partition
/// (stage 2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum TaskId {
    Input(i32),
    Merge(i32),
}

/// The topics a group runs on, and where each task's checkpoint record is.
#[derive(Debug, Clone)]
pub(crate) struct Layout {
    pub input: String,
    /// The input's partitions: the tasks of the only stage, or of stage 1.
    pub lanes: i32,
    /// A two-stage group's repartition topic and its partitions (the stage-2 tasks).
    pub shuffle: Option<(String, i32)>,
    pub ledger: String,
}

impl Layout {
    fn of(pipeline: &Pipeline, group: &str, input: &str, lanes: i32) -> Self {
        let two_stage = matches!(pipeline.stateful.as_ref().map(|s| &s.keyed), Some(Keyed::Window(_)));
        // As many stage-2 tasks as stage-1 ones: the parallelism the input already asks for.
        let shuffle = two_stage.then(|| (shuffle::repartition_topic(group), lanes));
        Self { input: input.to_string(), lanes, shuffle, ledger: ledger_topic(group) }
    }

    fn topics(&self) -> Vec<&str> {
        std::iter::once(self.input.as_str()).chain(self.shuffle.as_ref().map(|(t, _)| t.as_str())).collect()
    }

    fn task(&self, topic: &str, partition: i32) -> Option<TaskId> {
        if topic == self.input {
            return Some(TaskId::Input(partition));
        }
        self.shuffle.as_ref().filter(|(t, _)| t == topic).map(|_| TaskId::Merge(partition))
    }

    /// The task's partition of the checkpoint topic: stage-1 tasks first, then stage 2's.
    pub(crate) fn ledger_partition(&self, task: TaskId) -> i32 {
        match task {
            TaskId::Input(p) => p,
            TaskId::Merge(q) => self.lanes + q,
        }
    }

    fn ledger_partitions(&self) -> i32 {
        self.lanes + self.shuffle.as_ref().map_or(0, |(_, q)| *q)
    }

    /// The task's topic and partition, as its name shows them.
    pub(crate) fn source_of(&self, task: TaskId) -> (&str, i32) {
        match (task, &self.shuffle) {
            (TaskId::Merge(q), Some((topic, _))) => (topic, q),
            (TaskId::Input(p) | TaskId::Merge(p), _) => (&self.input, p),
        }
    }

    fn describe(&self, tasks: &[TaskId]) -> String {
        let names: Vec<String> = tasks
            .iter()
            .map(|&t| {
                let (topic, p) = self.source_of(t);
                format!("{topic}-{p}")
            })
            .collect();
        format!("[{}]", names.join(", "))
    }
}

#[derive(Default)]
struct Held {
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
struct Member {
    layout: Layout,
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
pub fn run(
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
    let layout = Layout::of(pipeline, &group, &topic, partitions);
    create_topics(&source.options, &layout, &group, &stop)?;
    let held = Arc::new(Mutex::new(Held::default()));
    let done = Arc::new(Mutex::new(Totals::default()));
    let member = Member { layout: layout.clone(), held: held.clone(), done: done.clone() };
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
    let topics = layout.topics();
    consumer.subscribe(&topics).map_err(|e| kafka(e, &topic))?;
    let cx = Arc::new(TaskContext {
        pipeline: pipeline.clone(),
        runtime,
        checkpoint,
        layout: layout.clone(),
        owner,
        progress_json,
        rollup,
    });
    let report = |always| cx.rollup.report(&pipeline.name, &group, &cx.owner, progress_json, always);
    let mut reported = Instant::now();
    match &layout.shuffle {
        None => tracing::info!("{}: joined group {group} for the {partitions} tasks of topic {topic}", pipeline.name),
        Some((shuffle, q)) => tracing::info!(
            "{}: joined group {group} for the {partitions} stage-1 tasks of topic {topic} and the {q} stage-2 tasks \
             of {shuffle}",
            pipeline.name
        ),
    }
    while !stop.load(Ordering::Relaxed) {
        // Paused: returns nothing but runs the rebalance callbacks.
        let _ = consumer.poll(POLL);
        let Ok(mut h) = held.lock() else { break };
        for id in std::mem::take(&mut h.assigned) {
            let task_stop = Arc::new(AtomicBool::new(false));
            let (cx, s) = (cx.clone(), task_stop.clone());
            let (t, p) = layout.source_of(id);
            let thread = std::thread::Builder::new()
                .name(format!("task {t}-{p}"))
                .spawn(move || task::run(&cx, id, s))
                .map_err(|e| CheckpointError::file(format!("{t}-{p}"), format!("cannot start a task: {e}")))?;
            h.running.insert(id, Running { stop: task_stop, thread });
        }
        let finished: Vec<TaskId> =
            h.running.iter().filter(|(_, r)| r.thread.is_finished()).map(|(id, _)| *id).collect();
        let mut fenced = false;
        for id in finished {
            if let Some(r) = h.running.remove(&id) {
                fenced |= ended(&done, &layout, id, r.thread.join());
            }
        }
        drop(h);
        if fenced {
            // Another process claimed a task the group still shows here: this member's view
            // is stale. Leaving and joining again gets it a fresh one (its other tasks are
            // revoked, stopped and handed on like any).
            tracing::info!("a task was fenced: this process's view of the group is stale; rejoining it");
            consumer.unsubscribe();
            consumer.subscribe(&topics).map_err(|e| kafka(e, &topic))?;
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
    for (id, r) in running {
        ended(&done, &layout, id, r.thread.join());
    }
    leave(consumer);
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

/// Leaves the group, waiting at most [`LEAVE_TIMEOUT`]. librdkafka's close can wait forever
/// inside the revocation it runs when the group's coordinator does not answer (its
/// `rd_kafka_assign` waits for the group thread without a timeout: a tansu busy elsewhere left a
/// process that was asked to stop running for good). This member's tasks are stopped and their
/// batches committed before it leaves, so one that cannot leave in time is left behind: the
/// group moves its partitions after the session timeout, as for a killed process.
fn leave(consumer: BaseConsumer<Member>) {
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

/// Creates the group's topics unless they exist: the checkpoint topic (compacted, a partition
/// per task of either stage) and, for two stages, the repartition topic (a partition per
/// stage-2 task) and the changelog (compacted, likewise). Refuses topics of another shape: a
/// group name used before for another pipeline, or topics made beforehand with other counts.
fn create_topics(
    options: &[(String, String)],
    layout: &Layout,
    group: &str,
    stop: &AtomicBool,
) -> Result<(), RunError> {
    let compacted = [("cleanup.policy", "compact")];
    let mut wanted = vec![(layout.ledger.clone(), layout.ledger_partitions(), &compacted[..])];
    let retention = [("cleanup.policy", "delete"), ("retention.ms", REPARTITION_RETENTION_MS)];
    if let Some((shuffle, q)) = &layout.shuffle {
        wanted.push((shuffle.clone(), *q, &retention[..]));
        wanted.push((shuffle::changelog_topic(group), *q, &compacted[..]));
    }
    for (topic, partitions, config) in &wanted {
        // Created only if missing: topics may also be made beforehand, by whoever may.
        let mut found = topic_partitions(options, topic, stop)?;
        if found == 0 {
            create_topic(options, topic, *partitions, config, stop)?;
            found = topic_partitions(options, topic, stop)?;
        }
        if found != *partitions {
            return Err(RunError::Source(
                KafkaError::Topic {
                    topic: topic.clone(),
                    message: format!(
                        "has {found} partitions, and group {group} needs {partitions} for this pipeline: the group \
                         name was used for another pipeline or input; use a new [scale] group"
                    ),
                }
                .into(),
            ));
        }
    }
    Ok(())
}

fn topic_partitions(options: &[(String, String)], topic: &str, stop: &AtomicBool) -> Result<i32, RunError> {
    let consumer: BaseConsumer =
        client_config(&[], &connection_options(options)).create().map_err(|e| kafka(e, topic))?;
    let md = with_retry(stop, "reading a topic's partitions", || consumer.fetch_metadata(Some(topic), CALL_TIMEOUT))
        .map_err(|e| RunError::Source(e.into()))?;
    Ok(md.topics().first().map_or(0, |t| t.partitions().len()) as i32)
}

/// Creates `topic` with `partitions` and `config`, unless it exists.
fn create_topic(
    options: &[(String, String)],
    topic: &str,
    partitions: i32,
    config: &[(&str, &str)],
    stop: &AtomicBool,
) -> Result<(), RunError> {
    let admin: AdminClient<DefaultClientContext> =
        client_config(&[], &connection_options(options)).create().map_err(|e| kafka(e, topic))?;
    let mut new = NewTopic::new(topic, partitions, TopicReplication::Fixed(REPLICATION));
    for (k, v) in config {
        new = new.set(k, v);
    }
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().map_err(|e| {
        RunError::Checkpoint(CheckpointError::file(topic, format!("cannot start the admin client: {e}")))
    })?;
    let opts = AdminOptions::new().operation_timeout(Some(CALL_TIMEOUT));
    let created = with_retry(stop, &format!("creating the group's topic {topic}"), || {
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
