//! What a stateful pipeline does after its stages, as validated: event time and lateness,
//! `[dedup]`, `[join]`, and the operator that keeps state (windows, a keyed processor, or the
//! rows as they are). Spans of event time are whole milliseconds, within `MAX_TIME_SPAN`.

use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;

use crate::connectors::SourceConfig;
use crate::plugin::StageSpec;
use crate::window::WindowSpec;

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
