//! Operators: what a batch's events become between the transforms and the sink. A stateless
//! pipeline passes its rows through (`passthrough.rs`); a windowed aggregation keeps state and
//! emits rows as the watermark moves (`aggregate/`); a keyed processor (`processor/`) keeps a
//! plugin's state per key with timers; deduplication (`dedup.rs`) drops repeats in front of
//! another operator, which is how operators chain: one holds the next. Each is one
//! implementation of [`Operator`], which carries the operator's whole lifecycle; the driver
//! knows nothing else about it, so a new operator is a new file behind this trait.
//!
//! Lifecycle of a run: [`Operator::open`] once, over the state the last committed batch left
//! (rebuild what is kept in memory, convert state another plugin build wrote); then per batch
//! [`Operator::process`] (events into state; late ones reported) and [`Operator::advance`] (the
//! watermark moved: emit what became final, drop what nothing needs any more). At the end of
//! bounded input a run may flush: advance to [`Operator::horizon`], where everything held is
//! final.
//!
//! State changes are staged in the [`StateStore`] and commit with the batch's checkpoint record,
//! so an operator's state always matches a whole number of batches. A batch is a pure function
//! of its events, the watermark and that state: a re-run after a crash gives the same rows.
//! `mark`/`rollback` undo the operator's own notes of a `process` call that failed, beside the
//! state's savepoint, so that the failure policy can retry and bisect.

mod build;
pub mod dedup;
pub mod interval_join;
pub mod join_rows;
pub mod passthrough;
pub mod processor;
pub mod side_input;
pub mod table_join;
mod wrapping;

pub use build::{build, chain};
pub use wrapping::Wrapping;

use crate::columns::ColumnFull;
use crate::isolate;
use crate::plugin::{EventBatch, PluginError};
use crate::rows::Rows;
use crate::side_output::{FailedWindow, SideLetter};
use crate::source::{Offsets, SourceError};
use crate::state::{StateError, StateStore};

#[derive(Debug, thiserror::Error)]
pub enum OperatorError {
    #[error(transparent)]
    Plugin(#[from] PluginError),
    #[error(transparent)]
    State(#[from] StateError),
    #[error(transparent)]
    Columns(#[from] crate::columns::ColumnFull),
    /// A side input (a join's table) could not be read.
    #[error("join table: {0}")]
    Source(#[from] SourceError),
    #[error("state entry {key:?} is corrupt: {message}")]
    Corrupt { key: String, message: String },
    #[error(
        "the state holds accumulators of state version {from}; the plugin declares state version {to} and cannot \
         migrate them ({source}). Run the build that wrote them, or start a new checkpoint"
    )]
    Migrate { from: u32, to: u32, source: PluginError },
}

/// The first byte of every state key: whose entry it is. One list, so no two operators (or two
/// kinds of entry of one operator) can share a key; the checkpoint record (`m`) is outside it.
#[derive(Debug, Clone, Copy)]
#[repr(u8)]
pub enum Scope {
    /// Tumbling and sliding panes, by pane and key (`aggregate/panes.rs`).
    Panes = b'p',
    /// Sessions, by key and start (`aggregate/sessions/`).
    Sessions = b's',
    /// Sessions by end, in state format 1 only (format 2 keeps this index in memory): what
    /// `open` converts.
    SessionEnds = b'e',
    /// Sessions as a log of changes, by sequence, in state format 3 (`aggregate/session_log.rs`);
    /// formats 1 and 2 kept them under `Sessions`.
    SessionLog = b'g',
    /// Kept events, by key and time, in dedup state format 1 only: what `open` converts
    /// (`dedup.rs`).
    DedupKept = b'd',
    /// Format 1's kept events by time, to expire them.
    DedupExpiry = b'x',
    /// Kept events as a log, by sequence, in dedup state format 2.
    DedupLog = b'u',
    /// A keyed processor's state and its header, by key (`processor/layout.rs`).
    ProcessKeys = b'k',
    /// Its timers, by domain, time and key.
    ProcessTimers = b't',
    /// When its keys' TTL runs out, by time and key.
    ProcessExpiry = b'l',
    /// Its totals over every key, timers set and state bytes (one entry), which its
    /// `limits.max_stage_*` budget is checked against.
    ProcessTotals = b'n',
    /// The state format an operator wrote, by the operator's scope (`f` + `s`: sessions, `f` +
    /// `d`: deduplication; `state_format`).
    Formats = b'f',
    /// A join's table rows, by key (`table_join.rs`).
    Table = b'j',
    /// Where the join's table source stands (one entry).
    TablePosition = b'o',
    /// An interval join's buffered left events, by key, time and sequence
    /// (`interval_join.rs`).
    IntervalLeft = b'a',
    /// Its buffered right events.
    IntervalRight = b'b',
    /// Its right stream's position and watermark (one entry).
    IntervalMeta = b'i',
}

impl Scope {
    /// A key in this scope, with room for `rest` more bytes.
    pub fn key(self, rest: usize) -> Vec<u8> {
        let mut k = Vec::with_capacity(1 + rest);
        k.push(self as u8);
        k
    }

    /// The key of entry `seq` of a log in this scope (the sessions' and deduplication's): the
    /// scope's byte, then `seq` big-endian, so that byte order is replay order.
    pub fn log_key(self, seq: u64) -> Vec<u8> {
        let mut k = self.key(8);
        k.extend_from_slice(&seq.to_be_bytes());
        k
    }

    /// The sequence number of a log entry's key ([`Scope::log_key`]).
    pub fn log_seq(key: &[u8]) -> Option<u64> {
        Some(u64::from_be_bytes(key.get(1..9)?.try_into().ok()?))
    }
}

/// The layout an operator's state is in, recorded under `Scope::Formats` + `owner`'s byte: 1
/// when none is recorded (the layout before formats were). A layout newer than `newest`, the
/// one this build writes, is refused by name rather than misread.
pub fn state_format(state: &StateStore, owner: Scope, what: &str, newest: u32) -> Result<u32, OperatorError> {
    let key = [Scope::Formats as u8, owner as u8];
    let corrupt = |message: String| OperatorError::Corrupt { key: String::from_utf8_lossy(&key).into(), message };
    let format = match state.get(&key)? {
        None => 1,
        Some(v) => {
            u32::from_be_bytes(v.as_slice().try_into().map_err(|_| corrupt("a format that is not 4 bytes".into()))?)
        }
    };
    if format > newest {
        return Err(corrupt(format!(
            "{what} state format {format}, written by a newer build (this one reads up to {newest})"
        )));
    }
    Ok(format)
}

/// Records that `owner`'s state is now in layout `format`, staged with the conversion to it.
pub fn record_state_format(state: &mut StateStore, owner: Scope, format: u32) {
    state.put(vec![Scope::Formats as u8, owner as u8], format.to_be_bytes().to_vec());
}

/// An event's key for a keyed operator: the key of its row's field `field` ([`KeyField`]), or
/// the event's own key without one. `what` names the pipeline key in the
/// error.
pub fn event_key(field: Option<&KeyField>, what: &str, events: &EventBatch, i: usize) -> Result<Vec<u8>, String> {
    let Some(field) = field else {
        return Ok(crate::columns::item(&events.keys, &events.key_ends, i).to_vec());
    };
    field.key(crate::columns::item(&events.rows, &events.row_ends, i)).map_err(|e| format!("{what}: {e}"))
}

pub use weir_types::keys::{KeyField, key_text};

/// A state entry an operator keeps as JSON (a side input's position, its notes beside it),
/// under `key`; `what` names it if it does not decode.
pub fn load_json<T: serde::de::DeserializeOwned>(
    state: &StateStore,
    key: &[u8],
    what: &str,
) -> Result<Option<T>, OperatorError> {
    match state.get(key)? {
        None => Ok(None),
        Some(v) => serde_json::from_slice(&v)
            .map(Some)
            .map_err(|e| OperatorError::Corrupt { key: what.into(), message: e.to_string() }),
    }
}

/// Stages `value` as the JSON entry `key` ([`load_json`]).
pub fn save_json<T: serde::Serialize>(
    state: &mut StateStore,
    key: Vec<u8>,
    value: &T,
    what: &str,
) -> Result<(), OperatorError> {
    let v =
        serde_json::to_vec(value).map_err(|e| OperatorError::Corrupt { key: what.into(), message: e.to_string() })?;
    state.put(key, v);
    Ok(())
}

/// The events an operator in front of another (`[dedup]`, `[join]`) passes on, each with its
/// index in the operator's own input, so that what the next one sets aside is reported there.
#[derive(Default)]
pub struct Passing {
    events: EventBatch,
    origin: Vec<u32>,
}

impl Passing {
    /// Passes on event `i` of `from`, with `row` as its row.
    pub fn push(&mut self, from: &EventBatch, i: usize, row: &[u8]) -> Result<(), crate::columns::ColumnFull> {
        self.push_built(from, i, |rows| rows.extend_from_slice(row))
    }

    /// Passes on event `i` of `from`, its row written by `build` straight into the column.
    pub fn push_built(
        &mut self,
        from: &EventBatch,
        i: usize,
        build: impl FnOnce(&mut Vec<u8>),
    ) -> Result<(), crate::columns::ColumnFull> {
        let e = &mut self.events;
        let key = crate::columns::item(&from.keys, &from.key_ends, i);
        let key_end = crate::columns::end_after(e.keys.len(), key.len())?;
        let start = e.rows.len();
        build(&mut e.rows);
        let Ok(row_end) = u32::try_from(e.rows.len()) else {
            e.rows.truncate(start);
            return Err(crate::columns::ColumnFull);
        };
        e.keys.extend_from_slice(key);
        e.key_ends.push(key_end);
        e.row_ends.push(row_end);
        e.times.push(from.times[i]);
        e.origins.push(from.origins[i]);
        self.origin.push(i as u32);
        Ok(())
    }

    /// Runs `next` over the events passed on, and adds what it set aside to `set_aside`, by
    /// index in the input they came from.
    pub fn forward(
        self,
        next: &mut dyn Operator,
        watermark: i64,
        state: &mut StateStore,
        out: &mut Rows,
        set_aside: &mut Processed,
    ) -> Result<(), OperatorError> {
        let n = next.process(&self.events, watermark, state, out)?;
        let origin = &self.origin;
        set_aside.late.extend(n.late.iter().map(|&j| origin[j as usize]));
        set_aside.late.sort_unstable();
        set_aside.invalid.extend(n.invalid.into_iter().map(|(j, why)| (origin[j as usize], why)));
        set_aside.invalid.sort_unstable_by_key(|(i, _)| *i);
        set_aside.over_limit.extend(n.over_limit.into_iter().map(|(j, why)| (origin[j as usize], why)));
        set_aside.over_limit.sort_unstable_by_key(|(i, _)| *i);
        set_aside.duplicates += n.duplicates;
        set_aside.unmatched += n.unmatched;
        Ok(())
    }
}

/// What [`Operator::process`] set aside: indices of the batch's events.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Processed {
    /// Dropped as repeats of an event kept earlier (`dedup.rs`).
    pub duplicates: usize,
    /// Dropped by an inner join: no table row has their key (`table_join.rs`).
    pub unmatched: usize,
    /// Late for everything they belong to.
    pub late: Vec<u32>,
    /// Events the operator cannot place, with why (an event time whose windows would fall
    /// outside the timeline): dead letters, `invalid-value`.
    pub invalid: Vec<(u32, String)>,
    /// Events whose key's result the stage's budget refused (`limits.max_stage_*`), with the
    /// limit: dead letters, `over-limit`. Their times still count for the watermark.
    pub over_limit: Vec<(u32, String)>,
}

/// What [`Operator::advance`] did.
#[derive(Debug, Default)]
pub struct Advanced {
    /// Results emitted (rows appended).
    pub emitted: usize,
    pub failed: Vec<FailedWindow>,
}

/// What [`Operator::open`] found.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Opened {
    /// The state version to record with every commit from now on (`None`: no plugin state).
    pub state_version: Option<u32>,
    /// State entries converted from the checkpoint's state version; staged, to commit at once.
    pub migrated: Option<usize>,
}

pub trait Operator: Send {
    /// Called once at start-up. `restored_version` is the state version the checkpoint recorded
    /// (`None`: a new checkpoint; one from before versioning holds version 1).
    fn open(&mut self, state: &mut StateStore, restored_version: Option<u32>) -> Result<Opened, OperatorError>;

    /// Takes a batch's events into state (or straight to `out`). An event is judged against
    /// `watermark`, the watermark in force for the batch (the one the batch before reached).
    /// Returns the events set aside: late for everything they belong to, or invalid. Must leave
    /// no trace when it fails: the caller rolls the state back and calls `rollback`.
    fn process(
        &mut self,
        events: &EventBatch,
        watermark: i64,
        state: &mut StateStore,
        out: &mut Rows,
    ) -> Result<Processed, OperatorError>;

    /// The watermark moved from `from` to `to` at the end of a batch: appends the rows that leave
    /// now to `out`, drops state nothing needs any more, and says what it emitted and what it
    /// could not.
    fn advance(
        &mut self,
        from: i64,
        to: i64,
        state: &mut StateStore,
        out: &mut Rows,
    ) -> Result<Advanced, OperatorError>;

    /// The lowest watermark at which everything the operator holds is final (`None`: it holds
    /// nothing). A flush at the end of input advances to it, and not to +∞, so the next run on
    /// the checkpoint judges lateness as if the stream had gone on.
    fn horizon(&self, state: &StateStore) -> Result<Option<i64>, OperatorError>;

    /// Reads the operator's side inputs (a join's table) as far as they go now, for the batch
    /// being planned, and says where that is: the plan records it, so that a re-run reads the
    /// same. `None`: it has none. Called for new batches only, just before each is planned.
    fn plan_side(&mut self) -> Result<Option<Offsets>, OperatorError> {
        Ok(None)
    }

    /// Before each batch's `process`: takes in its side inputs up to `end`, where its plan
    /// says they end (the records [`Operator::plan_side`] read, or, for a batch planned before
    /// a restart, a read to there), staging their changes like state. `watermark` is the one
    /// in force for the batch. Returns the side records it could not take, for the dead
    /// letters.
    fn take_side(
        &mut self,
        _end: Option<&Offsets>,
        _watermark: i64,
        _state: &mut StateStore,
    ) -> Result<Vec<SideLetter>, OperatorError> {
        Ok(Vec::new())
    }

    /// The processing time of the batch about to run, as its plan recorded it (so a re-run
    /// batch sees the same): called before each batch's `process`. Only operators with
    /// processing-time timers or TTL need it.
    fn set_processing_time(&mut self, _planned_at_ms: i64) {}

    /// The stage name that dead letters of events this operator failed on carry.
    fn stage(&self) -> &str;

    /// What the checkpointed state means under this operator (its windowing and output mode):
    /// a checkpoint written under another fingerprint is refused, not reinterpreted.
    fn fingerprint(&self) -> String;

    /// Where the operator's notes on this batch stand, to [`Operator::rollback`] to.
    fn mark(&self) -> usize;

    /// Forgets what `process` noted since `mark` (its state changes are rolled back beside).
    fn rollback(&mut self, mark: usize);
}

/// A failing operator call is isolated as a plugin call is: by its plugin error.
impl isolate::StageFailure for OperatorError {
    fn isolatable(&self) -> bool {
        matches!(self, OperatorError::Plugin(e) if isolate::isolatable(e))
    }
    fn retriable(&self) -> bool {
        matches!(self, OperatorError::Plugin(e) if isolate::isolatable(e) && !isolate::too_much_output(e))
    }
    fn stopped(&self) -> Self {
        let stage = match self {
            OperatorError::Plugin(e) => e.stage().to_string(),
            _ => String::new(),
        };
        OperatorError::Plugin(PluginError::Stopped { stage })
    }
    fn too_large(&self, full: ColumnFull) -> Self {
        OperatorError::Columns(full)
    }
}

/// Operators: the events set aside.
impl isolate::StageOutput for Processed {
    fn empty() -> Self {
        Processed::default()
    }
    fn append(&mut self, o: Self, offset: u32) -> Result<(), ColumnFull> {
        self.duplicates += o.duplicates;
        self.unmatched += o.unmatched;
        self.late.extend(o.late.into_iter().map(|i| i + offset));
        self.invalid.extend(o.invalid.into_iter().map(|(i, why)| (i + offset, why)));
        self.over_limit.extend(o.over_limit.into_iter().map(|(i, why)| (i + offset, why)));
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::{KeyField, Scope};

    #[test]
    fn log_keys_order_by_sequence() {
        let entry_key = |seq| Scope::SessionLog.log_key(seq);
        assert!(entry_key(9) < entry_key(10) && entry_key(255) < entry_key(256));
        assert_eq!(Scope::log_seq(&entry_key(42)), Some(42));
        assert_eq!(Scope::log_seq(b"g"), None);
    }

    #[test]
    fn a_key_field_is_a_string_s_text_or_another_value_s_json() {
        let key = |row: &str, f: &str| KeyField::new(f).key(row.as_bytes()).map(|k| String::from_utf8(k).unwrap());
        assert_eq!(key(r#"{"u":"a1","n":2}"#, "u").unwrap(), "a1");
        assert_eq!(key(r#"{"u":"a\u0031"}"#, "u").unwrap(), "a1", "escapes decoded");
        assert_eq!(key(r#"{"u":42}"#, "u").unwrap(), "42");
        assert_eq!(key(r#"{"u":"42"}"#, "u").unwrap(), "42", "a string and an integer of the same text agree");
        assert_eq!(key(r#"{"u":-7}"#, "u").unwrap(), "-7");
        assert_eq!(key(r#"{"u":1.0}"#, "u").unwrap(), "1.0");
        assert_eq!(key(r#"{"u":1e2}"#, "u").unwrap(), "100.0", "other numbers as serde_json writes them");
        assert_eq!(key(r#"{"u":{"b":[1, 2]}}"#, "u").unwrap(), r#"{"b":[1,2]}"#);
        assert_eq!(key(r#"{"c":{"id":"x"}}"#, "c.id").unwrap(), "x", "dots reach inside objects");
        assert!(key(r#"{"v":1}"#, "u").unwrap_err().contains("no field"));
        assert!(key(r#"{"u":1,"u":2}"#, "u").unwrap_err().contains("twice"));
        assert!(key(r#"{"u":1"#, "u").unwrap_err().contains("not a JSON object"));
    }
}
