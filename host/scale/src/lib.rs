//! Scale-out: many `weir` processes share one pipeline through a Kafka consumer group.
//!
//! The work is cut into tasks, one per input partition, and the group decides which process
//! runs which: every process started with the same pipeline and `[scale] group` (or
//! `weir run --group`) joins the group, with the cooperative-sticky assignor (or, on the consumer
//! group protocol of KIP-848, the broker's, which is incremental too), so a rebalance moves
//! only the partitions that must move. The membership consumer reads nothing (its
//! partitions stay paused): it only learns what this process holds. Each task held runs on a
//! thread of its own (`task.rs`), its checkpoint recorded in the group's checkpoint topic
//! (`ledger/`), so it can continue on any process.
//!
//! A windowed aggregation runs in two stages around a shuffle (`host/engine/src/shuffle.rs`): a stage-1 task
//! per input partition folds its batches into partial accumulators and writes them to the
//! group's repartition topic, partitioned by group key; a stage-2 task per repartition
//! partition merges them into its windows, its state recorded in the group's changelog topic
//! (`changelog.rs`) besides the checkpoint topic. The group subscribes to both topics, so a
//! task of either stage is a partition the group assigns ([`Layout`]).
//!
//! A revoked task is stopped, and its thread joined, inside the rebalance callback
//! (`member.rs`), before the group hands the partition on: a clean handover never has two
//! owners. An unclean one (a process paused or cut off past its session timeout) may, for a
//! while; the ledger's epochs fence the old owner at its next plan.
//!
//! The group's names: the consumer group is `[scale] group`; its checkpoint topic is
//! `weir.GROUP.checkpoints` ([`ledger_topic`]), and a two-stage group's shuffle and state are
//! `weir.GROUP.repartition` and `weir.GROUP.changelog` (`host/engine/src/shuffle.rs`), all created on first use.

mod changelog;
mod inspect;
mod layout;
mod ledger;
mod member;
mod rollup;
mod stall;
mod task;
mod topics;

// The layers below, under the names this crate's modules use.
use weir_config as pipeline;
use weir_engine::{aggregate, checkpoint, driver, ingest, isolate, kafka, progress, shuffle, sink, source, state};
use weir_sandbox as plugin;
use weir_types::{own_files, watermark, window};

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer};

use crate::checkpoint::CheckpointError;
use crate::driver::RunError;
use crate::kafka::{KafkaError, client_config};
use crate::pipeline::{Pipeline, SourceKind};
use crate::plugin::Runtime;
use crate::progress::Summary;
use layout::{Layout, TaskId};
use member::{Held, Member, Totals, leave, stop_all, task_failed, totals};
use rollup::ROLLUP_EVERY;
use task::TaskContext;
use topics::{create_topics, input_partitions};

pub use inspect::group as inspect;
pub use layout::ledger_topic;
pub use rollup::Rollup;
pub use topics::group_topics;

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
    let topics = layout.topics();
    let consumer = join(&group, &owner, &source.options, member, &topics, &topic)?;
    let mut stall = stall::StallWatch::new(&source.options, SESSION_TIMEOUT_MS, consumer_protocol(&source.options));
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
    joined(&pipeline.name, &group, &layout);
    while !stop.load(Ordering::Relaxed) {
        // Paused: returns nothing but runs the rebalance callbacks.
        let _ = consumer.poll(POLL);
        let Ok(mut h) = held.lock() else { break };
        h.start_assigned(&cx, &layout)?;
        let fenced = h.reap_finished(&done, &layout);
        let idle = h.is_idle();
        drop(h);
        if stall.due(idle, Instant::now()) {
            stall.look(&consumer, &group, &layout);
        }
        if fenced {
            // Another process claimed a task the group still shows here: this member's view
            // is stale. Leaving and joining again gets it a fresh one (its other tasks are
            // revoked, stopped and handed on like any).
            tracing::info!("a task was fenced: this process's view of the group is stale; rejoining it");
            consumer.unsubscribe();
            consumer.subscribe(&topics).map_err(|e| kafka(e, &topic))?;
        }
        if task_failed(&done) {
            break;
        }
        if reported.elapsed() >= ROLLUP_EVERY {
            report(false);
            reported = Instant::now();
        }
    }
    // Stop the tasks here first, then leave: the group moves them once this member is gone.
    stop_all(&held, &done, &layout);
    leave(consumer);
    report(true);
    totals(&done, started)
}

/// Joins `group` as `owner` (cooperative-sticky, or the broker's assignor on the consumer
/// protocol), subscribed to `topics`;
/// `member` stops the tasks the group revokes. `input` names the group in errors.
fn join(
    group: &str,
    owner: &str,
    options: &[(String, String)],
    member: Member,
    topics: &[&str],
    input: &str,
) -> Result<BaseConsumer<Member>, RunError> {
    let mut defaults = vec![
        ("group.id", group),
        // The member's name in `weir inspect`: the owner its claims name.
        ("client.id", owner),
        ("enable.auto.commit", "false"),
        ("max.poll.interval.ms", REBALANCE_TIMEOUT_MS),
    ];
    if consumer_protocol(options) {
        // KIP-848: the broker assigns (incrementally, as cooperative-sticky does) and owns the
        // session timeout and heartbeat interval; the client refuses these three.
        tracing::info!("group {group}: the consumer group protocol; its session timeout is the broker's");
    } else {
        defaults.extend([
            ("partition.assignment.strategy", "cooperative-sticky"),
            ("session.timeout.ms", SESSION_TIMEOUT_MS),
            ("heartbeat.interval.ms", "1000"),
        ]);
    }
    let consumer: BaseConsumer<Member> =
        client_config(&defaults, options).create_with_context(member).map_err(|e| kafka(e, input))?;
    consumer.subscribe(topics).map_err(|e| kafka(e, input))?;
    Ok(consumer)
}

/// Whether the pipeline's `kafka.group.protocol` asks for the consumer group protocol (KIP-848)
/// rather than the classic one.
fn consumer_protocol(options: &[(String, String)]) -> bool {
    options.iter().any(|(k, v)| k == "group.protocol" && v.eq_ignore_ascii_case("consumer"))
}

/// Logs which tasks this process joined `group` to share.
fn joined(pipeline: &str, group: &str, layout: &Layout) {
    let (topic, partitions) = (&layout.input, layout.lanes);
    match &layout.shuffle {
        None => tracing::info!("{pipeline}: joined group {group} for the {partitions} tasks of topic {topic}"),
        Some((shuffle, q)) => tracing::info!(
            "{pipeline}: joined group {group} for the {partitions} stage-1 tasks of topic {topic} and the {q} \
             stage-2 tasks of {shuffle}"
        ),
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
