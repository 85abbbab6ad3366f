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
//!
//! The model is this file (the pipeline, its trigger, failure policy and limits) with
//! `connectors.rs` (its source and sink) and `operators.rs` (event time, dedup, joins, windows
//! and processors), re-exported here so every part is `weir_config::NAME`.

mod connectors;
mod file;
mod operators;
mod validate;

pub mod expect;

// The layers below, under the names this crate's modules use.
use weir_sandbox as plugin;
use weir_types::{columns, json, retry, window};

pub use connectors::{
    DatasetRef, KafkaSinkConfig, KafkaSourceConfig, RepartitionConfig, ReplayFormat, SchemaFormat, SchemaOut,
    SinkConfig, SourceConfig, SourceKind, StartingOffsets,
};
pub use file::Dur;
pub use operators::{
    DEFAULT_JOIN_AS, Dedup, EventTime, IntervalJoin, Join, JoinKind, Keyed, LatePolicy, OutputMode, Process, Stateful,
    TableJoin, Ttl, TtlClock, Windowed,
};
pub use validate::{dataset_name, deserialize, kafka_options};

use std::path::{Path, PathBuf};
use std::time::Duration;

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
    Plugin(Box<StageSpec>),
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
    /// `[registry]`: the schema registry the pipeline's stages and sink reach.
    pub registry: Option<weir_schema::RegistryConfig>,
    /// `output.tombstones` in a stateless pipeline: an event without a row (a parser's
    /// deletion, such as a Debezium delete) goes to the sink as a tombstone for its key, not to
    /// the dead letters.
    pub deletions: bool,
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
            ExpectCheck::Plugin(s) => Some(s.as_ref()),
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

    /// The same pipeline with `registry` in place of its `[registry]`, for every stage granted
    /// it and the Avro sink: how `weir test` reads recorded records with the schemas saved
    /// beside them (`weir_schema::saved`) rather than a live registry.
    pub fn with_registry(mut self, registry: weir_schema::RegistryConfig) -> Self {
        let swap = |s: &mut StageSpec| {
            if s.grants.registry.is_some() {
                s.grants.registry = Some(registry.clone());
            }
        };
        self.parse.iter_mut().for_each(swap);
        self.transforms.iter_mut().for_each(swap);
        if let Some(Join::Interval(j)) = &mut self.join {
            swap(&mut j.parse);
        }
        for e in &mut self.expect {
            if let ExpectCheck::Plugin(s) = &mut e.check {
                swap(s);
            }
        }
        if let Some(s) = &mut self.stateful {
            match &mut s.keyed {
                Keyed::Window(w) => swap(&mut w.aggregate),
                Keyed::Process(p) => swap(&mut p.plugin),
                Keyed::Rows => {}
            }
        }
        match &mut self.sink {
            Some(SinkConfig::Wasm(s)) => swap(s),
            Some(SinkConfig::Kafka(k)) => {
                if let Some(a) = &mut k.encoded {
                    a.registry = registry.clone();
                }
            }
            _ => {}
        }
        if self.registry.is_some() {
            self.registry = Some(registry);
        }
        self
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
mod format_tests;
#[cfg(test)]
mod tests;
