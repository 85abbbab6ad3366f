//! A pipeline: what the engine runs, validated. The file it comes from is described by
//! `file.rs` (the schema, as written) and checked by `validate/` (every key, value and
//! combination, with the key's path and the fix in each error). Validation reads only the file:
//! it does not look up names, read environment variables or touch the filesystem; what a
//! pipeline needs from the machine it runs on is resolved at start-up (the driver; the plugin
//! grants in `host/sandbox/src/grants.rs`).
//!
//! Names follow Spark Structured Streaming where Spark has one (`watermark.delay` is
//! `withWatermark`'s delay, `output.mode` is `outputMode`, `trigger.mode` is the trigger,
//! `checkpoint.location` is `checkpointLocation`, `source.max_offsets_per_trigger` is
//! `maxOffsetsPerTrigger`). Relative paths are relative to the pipeline file's directory.

mod file;
mod validate;

pub mod expect;

// The layers below, under the names this crate's modules use.
use weir_sandbox as plugin;
use weir_types::{columns, json, retry, window};

pub use file::Dur;
pub use validate::{dataset_name, deserialize, kafka_options};

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use crate::plugin::StageSpec;
use crate::window::WindowSpec;

/// A bad pipeline file: which key, where, and what is wrong with it.
#[derive(Debug, thiserror::Error)]
pub enum PipelineError {
    #[error("cannot read {}: {source}", path.display())]
    Read { path: PathBuf, source: std::io::Error },
    #[error("{}{}: {key}: {message}", path.display(), at.map_or(String::new(), |(l, c)| format!(":{l}:{c}")))]
    Invalid {
        path: PathBuf,
        /// Line and column (1-based) of the offending text, when the TOML parser knows it.
        at: Option<(usize, usize)>,
        key: String,
        message: String,
    },
}

/// What happens when a plugin traps, runs out of time or memory, or breaks a limit.
#[derive(Debug, Clone, Copy)]
pub struct FailurePolicy {
    /// Stop the pipeline at the first failure (after the retries) instead of isolating the
    /// records that cause it.
    pub fail_fast: bool,
    /// Attempts of the whole batch after the first, before isolating.
    pub retries: u32,
    /// Wait before the first retry; doubles with each.
    pub backoff: Duration,
}

impl Default for FailurePolicy {
    fn default() -> Self {
        Self { fail_fast: false, retries: 2, backoff: Duration::from_millis(100) }
    }
}

impl FailurePolicy {
    /// The policy's retries, as the retry mechanism takes them.
    pub fn retry(&self) -> crate::retry::Retry {
        crate::retry::Retry { retries: Some(self.retries), first_wait: self.backoff, max_wait: Duration::MAX }
    }
}

/// Where a Kafka source starts in a partition the checkpoint does not know yet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StartingOffsets {
    Earliest,
    Latest,
    /// The first offset whose record's timestamp is at or after this (epoch ms).
    Timestamp(i64),
    /// These offsets, by partition (a Kafka-backed dataset's beginning after a full refresh,
    /// `project/bases.rs`), never below the earliest the broker keeps; a partition not listed
    /// from its earliest.
    Offsets(Vec<(i32, i64)>),
}

/// How a recorded-events file is laid out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ReplayFormat {
    /// `envelope` if the first line is an object with `value` and only envelope keys, else `lines`.
    #[default]
    Auto,
    /// Each line is one record's value.
    Lines,
    /// Each line is `{"value": .., "key": .., "partition": .., "offset": .., "timestamp": ..}`.
    Envelope,
}

/// What happens to an event that is late for every window it belongs to.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum LatePolicy {
    /// Counted and dropped.
    #[default]
    Drop,
    /// Counted and written to the late-data file with its reason.
    SideOutput,
}

/// Which window results leave a batch.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum OutputMode {
    /// Each window once, when the watermark passes its end: the final result.
    #[default]
    Append,
    /// Each window changed in this batch.
    Update,
    /// Every window kept in state.
    Complete,
}

/// When batches start and how much each reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Trigger {
    /// A batch every `interval` (back to back if a batch takes longer), until input ends.
    ProcessingTime { interval: Duration },
    /// One batch with everything available, then stop.
    Once,
    /// Everything available now, in batches of `max_offsets_per_trigger`, then stop.
    AvailableNow,
    /// Stateless pipelines: each record as soon as it arrives; offsets checkpointed every
    /// `checkpoint_interval`. At-least-once (docs/semantics.md).
    Continuous { checkpoint_interval: Duration },
}

#[derive(Debug, Clone)]
pub struct SourceConfig {
    pub kind: SourceKind,
    pub max_offsets_per_trigger: usize,
}

#[derive(Debug, Clone)]
pub enum SourceKind {
    Replay {
        path: PathBuf,
        format: ReplayFormat,
    },
    Kafka(KafkaSourceConfig),
    Dataset(DatasetRef),
    /// A group's stage-2 task: made by `scale/`, never written in a file.
    Repartition(Box<RepartitionConfig>),
}

/// One partition of a group's repartition topic, which the group's stage-1 tasks write
/// (`host/engine/src/source/repartition.rs`).
#[derive(Debug, Clone)]
pub struct RepartitionConfig {
    /// The topic, with the one partition in `partitions`.
    pub kafka: KafkaSourceConfig,
    /// The stage-1 tasks that write to it: the input topic's partitions.
    pub lanes: u32,
}

/// A project's dataset, as a flow names it. The project fills in where it lives
/// (`project/mod.rs`): the embedded log's directory here, or a Kafka topic, for which it
/// replaces the source or sink with Kafka's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DatasetRef {
    pub name: String,
    /// The embedded log's directory; `None` outside a project.
    pub log: Option<PathBuf>,
    pub table: bool,
    /// The project's input is bounded: reading ends once the dataset's writers are done and
    /// everything they wrote is read.
    pub bounded: bool,
    /// Written to: records older than this are dropped (the dataset's retention).
    pub retention: Option<Duration>,
}

impl DatasetRef {
    fn named(name: String) -> Self {
        Self { name, log: None, table: false, bounded: false, retention: None }
    }
}

impl SourceKind {
    pub fn name(&self) -> &'static str {
        match self {
            SourceKind::Replay { .. } => "replay",
            SourceKind::Kafka(_) => "kafka",
            SourceKind::Dataset(_) => "dataset",
            SourceKind::Repartition(_) => "repartition",
        }
    }

    /// What the source reads, for the checkpoint's fingerprint: a file by its canonical path (so
    /// `./orders.jsonl`, `orders.jsonl` and a start from another directory agree), topics by
    /// name. Called at start-up, not in validation: it reads the filesystem.
    pub fn identity(&self) -> String {
        match self {
            SourceKind::Replay { path, .. } => {
                let path = std::fs::canonicalize(path).unwrap_or_else(|_| path.clone());
                format!("replay:{}", path.display())
            }
            SourceKind::Kafka(k) => format!("kafka:{}", k.topics.join(",")),
            SourceKind::Dataset(d) => format!("dataset:{}", d.name),
            SourceKind::Repartition(r) => format!("repartition:{}", r.kafka.topics.join(",")),
        }
    }
}

#[derive(Debug, Clone)]
pub struct KafkaSourceConfig {
    pub topics: Vec<String>,
    /// Explicit (topic, partition) assignment; `None`: every partition of each topic.
    pub partitions: Option<Vec<(String, i32)>>,
    pub starting: StartingOffsets,
    /// librdkafka options, applied over Weir's defaults.
    pub options: Vec<(String, String)>,
    /// Group whose offsets Weir commits for lag monitoring: `kafka.group.id`, else `weir-NAME`.
    pub group_id: String,
}

/// Where rows go.
#[derive(Debug, Clone)]
pub enum SinkConfig {
    Wasm(StageSpec),
    Kafka(KafkaSinkConfig),
    /// A project's dataset; `key`: the row field whose value keys each row (`sink.key`).
    Dataset {
        dataset: DatasetRef,
        key: Option<String>,
    },
}

#[derive(Debug, Clone)]
pub struct KafkaSinkConfig {
    pub topic: String,
    pub options: Vec<(String, String)>,
    /// One transaction per batch (exactly-once for `read_committed` consumers).
    pub transactional: bool,
    /// `kafka.transactional.id`, else `weir-NAME`: stable across restarts, so a restarted
    /// pipeline fences its previous incarnation.
    pub transactional_id: String,
    /// `sink.key`: the row field whose value keys each message; `None`: the row's own key.
    pub key: Option<String>,
    /// Each message's timestamp is its row's event time: set for a project's Kafka-backed
    /// dataset, whose readers take event time from it.
    pub event_time_stamps: bool,
}

/// Default batch size: large enough that per-batch costs (a plan, a commit, a call per stage)
/// vanish, small enough that the watermark advances during a catch-up as it would on a live
/// stream. Memory grows with it (batches in flight, and the parsers' linear memories sized to
/// them); `docs/internals/performance-history.md` has the measurements behind the choice.
pub const DEFAULT_MAX_OFFSETS_PER_TRIGGER: usize = 50_000;
/// The largest `source.max_offsets_per_trigger`.
pub const MAX_OFFSETS_PER_TRIGGER: usize = 10_000_000;

/// The longest span of event time a pipeline file may give (`window.size`, `slide`, `gap`,
/// `offset`, `watermark.delay`, `allowed_lateness`, `idle_timeout`, `dedup.within`, `process.ttl`): ten years, which keeps every
/// window of any event time arithmetic well inside `i64` milliseconds.
pub const MAX_TIME_SPAN: Duration = Duration::from_secs(10 * 366 * 86_400);
/// The shortest window length, slide or gap: windows are in whole milliseconds.
pub const MIN_WINDOW: Duration = Duration::from_millis(1);
/// The most windows one event may belong to (`window.size / window.slide`): past it, one event
/// would make thousands of rows of state and output.
pub const MAX_WINDOWS_PER_EVENT: i64 = 1_000;
/// `parse.parallelism`: parser instances, each parsing a batch of its own on a thread of its
/// own while the trigger loop runs the batch before. Two keep both cores of a small machine busy,
/// measurably faster than one.
pub const DEFAULT_PARSE_PARALLELISM: usize = 2;
/// The longest `dedup.key` or `process.key` field name: it is looked up in every row.
pub const MAX_KEY_FIELD: usize = 256;
/// The most `parse.parallelism`.
pub const MAX_PARSE_PARALLELISM: usize = 64;
/// The longest `trigger.interval` (processing-time batches, continuous-mode checkpoints).
pub const MAX_TRIGGER_INTERVAL: Duration = Duration::from_secs(86_400);
/// The most `failure.retries`, and the longest `failure.backoff`.
pub const MAX_RETRIES: u32 = 20;
pub const MAX_BACKOFF: Duration = Duration::from_secs(3_600);

#[derive(Debug, Clone)]
pub struct EventTime {
    pub delay_ms: i64,
    pub idle_timeout: Option<Duration>,
    pub allowed_lateness_ms: i64,
    pub late: LatePolicy,
    pub late_path: Option<PathBuf>,
    /// Whether a run that reaches the end of bounded input emits every open window. `None`: as
    /// the run decides (`weir test` and `weir bench` do, `weir run` does not unless `--flush`).
    pub flush_at_end: Option<bool>,
}

/// `[dedup]`: events whose key was seen within `within_ms` of event time are dropped before
/// the window (`host/engine/src/operator/dedup.rs`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Dedup {
    /// The top-level row field whose JSON value is the key; `None`: the event's key.
    pub field: Option<String>,
    pub within_ms: i64,
}

/// `[join]`: each event looked up by key in a table built from a keyed source
/// (`host/engine/src/operator/table_join.rs`).
#[derive(Debug, Clone)]
pub struct TableJoin {
    /// Where the table's rows come from: each record upserts its key, an empty value deletes it.
    pub table: SourceConfig,
    /// The top-level row field whose value is the lookup key; `None`: the event's key.
    pub on: Option<String>,
    /// `join.as`: the field of the joined row that holds the table's row.
    pub field: String,
    pub kind: JoinKind,
}

/// `[join] type = "interval"`: events of the pipeline's stream and of the stream `stream` join
/// when their keys are equal and `left.time BETWEEN right.time - before AND right.time +
/// after` (`host/engine/src/operator/interval_join.rs`).
#[derive(Debug, Clone)]
pub struct IntervalJoin {
    /// The other stream's name (`[streams.NAME]`), its source and its parser.
    pub stream: String,
    pub source: SourceConfig,
    pub parse: StageSpec,
    /// The top-level row field whose value is the key, on both sides; `None`: the events' keys.
    pub on: Option<String>,
    /// `join.as`: the field of the joined row that holds the right event's row.
    pub field: String,
    pub before_ms: i64,
    pub after_ms: i64,
}

/// `[join]`.
#[derive(Debug, Clone)]
pub enum Join {
    Table(TableJoin),
    Interval(Box<IntervalJoin>),
}

/// Which events a join lets through.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum JoinKind {
    /// Only events whose key the table has.
    #[default]
    Inner,
    /// Every event; the table's field is `null` where the table has no row for the key.
    Left,
}

/// `join.as` without one.
pub const DEFAULT_JOIN_AS: &str = "table";

/// What a stateful pipeline keeps state for: events (after `[dedup]`) in event time, into
/// windows or a keyed processor.
#[derive(Debug, Clone)]
pub struct Stateful {
    pub dedup: Option<Dedup>,
    pub time: EventTime,
    pub keyed: Keyed,
}

/// The operator at the end of a stateful pipeline.
#[derive(Debug, Clone)]
pub enum Keyed {
    Window(Windowed),
    Process(Process),
    /// No operator of its own: the rows that `[dedup]` lets through go to the sink as they are.
    Rows,
}

impl Keyed {
    /// The plugin that owns the state, if any.
    pub fn plugin(&self) -> Option<&StageSpec> {
        match self {
            Keyed::Window(w) => Some(&w.aggregate),
            Keyed::Process(p) => Some(&p.plugin),
            Keyed::Rows => None,
        }
    }
}

/// A windowed aggregation: how to window, what to aggregate, what to emit.
#[derive(Debug, Clone)]
pub struct Windowed {
    pub window: WindowSpec,
    pub aggregate: StageSpec,
    pub output: OutputMode,
    /// `output.tombstones`: a tombstone when a window's state is dropped (update mode).
    pub tombstones: bool,
}

/// `[process]`: a keyed processor plugin with state and timers (`operator/processor/`).
#[derive(Debug, Clone)]
pub struct Process {
    pub plugin: StageSpec,
    /// The top-level row field whose JSON value is the key; `None`: the event's key.
    pub key: Option<String>,
    pub ttl: Option<Ttl>,
    /// `output.tombstones`: a tombstone when a key's state is deleted.
    pub tombstones: bool,
}

/// `process.ttl`: a key with no events for `ms` loses its state, without a call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ttl {
    pub ms: i64,
    pub clock: TtlClock,
}

/// The clock a TTL runs on.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum TtlClock {
    /// Since the batch that last gave the key events was planned.
    #[default]
    ProcessingTime,
    /// Since the latest event time the key had, as the watermark measures it.
    EventTime,
}

/// One `expect` entry (`expect.rs`).
#[derive(Debug, Clone)]
pub struct Expectation {
    pub name: String,
    pub check: ExpectCheck,
    pub on_violation: crate::expect::OnViolation,
}

#[derive(Debug, Clone)]
pub enum ExpectCheck {
    Rule(crate::expect::Rule),
    /// A transform plugin: the rows it does not return violate.
    Plugin(StageSpec),
}

/// A validated pipeline.
#[derive(Debug, Clone)]
pub struct Pipeline {
    pub name: String,
    pub source: SourceConfig,
    pub trigger: Trigger,
    /// `None`: a dataset's rows, taken as they are (`ingest/dataset_rows.rs`).
    pub parse: Option<StageSpec>,
    /// Parser instances, each parsing whole batches on a thread of its own ahead of the trigger
    /// loop (the events are the same as with one).
    pub parse_parallelism: usize,
    pub transforms: Vec<StageSpec>,
    /// `expect`: checked in order after the transforms.
    pub expect: Vec<Expectation>,
    /// `[join]`, between `[dedup]` and the window or processor.
    pub join: Option<Join>,
    pub stateful: Option<Stateful>,
    pub sink: Option<SinkConfig>,
    pub checkpoint: Option<PathBuf>,
    pub dead_letter: Option<PathBuf>,
    pub failure: FailurePolicy,
    /// `[scale] group`: the Kafka consumer group whose members share the pipeline's tasks, one
    /// per input partition (`scale/`); `None`: this process reads every partition.
    pub group: Option<String>,
}

impl Pipeline {
    /// Parser instances the run uses: `parse.parallelism`, but one in continuous mode, which
    /// parses on the loop's own thread as records arrive.
    pub fn parser_instances(&self) -> usize {
        if matches!(self.trigger, Trigger::Continuous { .. }) { 1 } else { self.parse_parallelism }
    }

    /// Every plugin stage, in the order the data meets them.
    pub fn stages(&self) -> impl Iterator<Item = &StageSpec> {
        let sink = match &self.sink {
            Some(SinkConfig::Wasm(s)) => Some(s),
            _ => None,
        };
        let stream = match &self.join {
            Some(Join::Interval(j)) => Some(&j.parse),
            _ => None,
        };
        let expect = self.expect.iter().filter_map(|e| match &e.check {
            ExpectCheck::Plugin(s) => Some(s),
            ExpectCheck::Rule(_) => None,
        });
        self.parse
            .iter()
            .chain(stream)
            .chain(&self.transforms)
            .chain(expect)
            .chain(self.stateful.as_ref().and_then(|s| s.keyed.plugin()))
            .chain(sink)
    }

    /// Whether every row that reaches the operator was checked to be one line of a JSON object:
    /// a rule expectation that drops or fails on what it refuses scans each row whole. Not with
    /// a join, whose rows take in another source's.
    pub fn rows_checked(&self) -> bool {
        self.join.is_none()
            && self
                .expect
                .iter()
                .any(|e| matches!(e.check, ExpectCheck::Rule(_)) && e.on_violation != crate::expect::OnViolation::Warn)
    }

    /// Whether any stage sets `limits.fuel` (the Wasm runtime must then meter fuel).
    pub fn uses_fuel(&self) -> bool {
        self.stages().any(|s| s.limits.fuel.is_some())
    }

    /// Whether the input ends: a recorded-events file, or a trigger that reads what is there now.
    pub fn bounded(&self) -> bool {
        matches!(self.trigger, Trigger::Once | Trigger::AvailableNow)
            || matches!(self.source.kind, SourceKind::Replay { .. })
            || matches!(&self.source.kind, SourceKind::Dataset(d) if d.bounded)
    }

    /// The pipeline run as tasks of consumer group `group` (`[scale] group`, `weir run --group`),
    /// or why it cannot be. A group runs pipelines on one Kafka topic: stateless ones in
    /// micro-batches or continuously, windowed aggregations in two stages around a shuffle. Other
    /// stateful operators (processors, dedup, joins) would need their input repartitioned by key
    /// first, which is not built yet (`docs/scale-out.md`).
    pub fn in_group(mut self, group: String) -> Result<Self, String> {
        if group.is_empty() || !group.chars().all(|c| c.is_ascii_alphanumeric() || "._-".contains(c)) {
            return Err(format!(
                "`{group}`: a group name is letters, digits, `.`, `_` and `-` (it names Kafka topics), e.g. \
                 \"orders-alerts\""
            ));
        }
        match &self.source.kind {
            SourceKind::Kafka(k) if k.topics.len() == 1 && k.partitions.is_none() => {}
            SourceKind::Kafka(_) => {
                return Err("a group's tasks are the partitions of one topic: give source.topics one topic and \
                            no source.partitions"
                    .into());
            }
            _ => return Err("a group shares a Kafka topic's partitions: the source must be type = \"kafka\"".into()),
        }
        if let Some(s) = &self.stateful {
            if !matches!(s.keyed, Keyed::Window(_)) || s.dedup.is_some() {
                return Err("a group runs stateless pipelines and windowed aggregations for now; [process] and \
                            [dedup] need their input repartitioned by key, which is not built yet: remove them, \
                            or run without a group"
                    .into());
            }
            if s.time.late == LatePolicy::SideOutput {
                return Err("in a group, lateness is judged after the shuffle, where events are already folded \
                            into partial accumulators, so late events cannot be written out: set \
                            watermark.late = \"drop\" (they are counted as lateEvents)"
                    .into());
            }
        }
        if self.join.is_some() {
            return Err("a group cannot run [join] yet (its table or second stream would need repartitioning by \
                        key): remove it, or run without a group"
                .into());
        }
        if matches!(self.trigger, Trigger::Once | Trigger::AvailableNow) {
            return Err("a group runs until it is stopped: set trigger.mode = \"processing-time\" or \
                        \"continuous\""
                .into());
        }
        if matches!(self.sink, Some(SinkConfig::Dataset { .. })) {
            return Err("a project's flows run in one process: a group's sink is Kafka or a plugin".into());
        }
        self.group = Some(group);
        Ok(self)
    }

    /// Reads and validates a pipeline file. Relative paths in it resolve against its directory,
    /// made absolute, so the pipeline means the same whatever directory Weir runs in.
    pub fn load(path: &Path) -> Result<Self, PipelineError> {
        let text =
            std::fs::read_to_string(path).map_err(|e| PipelineError::Read { path: path.to_path_buf(), source: e })?;
        let path = std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
        Self::parse(&text, &path)
    }

    /// Validates pipeline text; `path` locates relative paths and names the file in errors.
    pub fn parse(text: &str, path: &Path) -> Result<Self, PipelineError> {
        validate::pipeline(text, path)
    }
}

#[cfg(test)]
mod tests;
