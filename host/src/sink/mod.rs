//! Sinks: where a batch's result rows go. Each batch is delivered with its [`Delivery`]: the
//! identity of the checkpoint that planned it and its batch id there. The same delivery always
//! carries the same rows, and after a crash a batch may be delivered again, so a sink that keeps
//! each delivery once (keyed on both parts: another checkpoint's batch 7 is other rows) is
//! exactly-once.
//!
//! One file per sink: `wasm.rs` (a sink plugin), `kafka.rs` (Weir's transactional Kafka sink),
//! `lines.rs` (JSON lines to a writer: the console, and `weir test`'s capture), `log.rs` (a
//! project's dataset in the embedded log), `repartition.rs` (a group's shuffle, stage 1's
//! partials to stage 2).

mod kafka;
mod lines;
mod log;
mod repartition;
mod wasm;

use crate::columns::{self, ColumnFull};
use crate::kafka::KafkaError;
use crate::plugin::PluginError;

pub(crate) use kafka::{KafkaSink, producer_config};
pub(crate) use lines::LineSink;
pub(crate) use log::LogSink;
pub(crate) use repartition::RepartitionSink;
pub(crate) use wasm::WasmSink;

/// Rows of one batch, flat, each with its key: row `i` is `rows[row_ends[i-1]..row_ends[i]]`, a
/// JSON object, and its key `keys[key_ends[i-1]..key_ends[i]]` (empty: none). The operator that
/// made a row gave it its key: a window's is the window and its group key, a processor's the
/// key it ran under, a stateless pipeline's the event's own (`docs/semantics.md`). An empty row
/// is a tombstone: its key's entry no longer exists (`output.tombstones`). `times[i]` is row
/// `i`'s event time: its event's, a window's last millisecond, what a processor gave it, so a
/// dataset keeps it and a flow reading the dataset needs no parser.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct Rows {
    pub rows: Vec<u8>,
    pub row_ends: Vec<u32>,
    pub keys: Vec<u8>,
    pub key_ends: Vec<u32>,
    pub times: Vec<i64>,
}

/// Where [`Rows`] stood, to [`Rows::truncate`] back to.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RowsMark(usize, usize, usize);

impl Rows {
    /// Appends a row under `key` at event time `time`; both columns checked before either grows.
    pub(crate) fn push(&mut self, key: &[u8], row: &[u8], time: i64) -> Result<(), ColumnFull> {
        columns::end_after(self.keys.len(), key.len())?;
        columns::push(&mut self.rows, &mut self.row_ends, row)?;
        columns::push(&mut self.keys, &mut self.key_ends, key)?;
        self.times.push(time);
        Ok(())
    }

    /// Appends a tombstone for `key`.
    pub(crate) fn push_tombstone(&mut self, key: &[u8], time: i64) -> Result<(), ColumnFull> {
        self.push(key, b"", time)
    }

    pub(crate) fn len(&self) -> usize {
        self.row_ends.len()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.row_ends.is_empty()
    }

    /// Each row's key and the row (empty: a tombstone).
    pub(crate) fn iter(&self) -> impl Iterator<Item = (&[u8], &[u8])> {
        columns::items(&self.keys, &self.key_ends).zip(columns::items(&self.rows, &self.row_ends))
    }

    pub(crate) fn mark(&self) -> RowsMark {
        RowsMark(self.rows.len(), self.keys.len(), self.row_ends.len())
    }

    /// Empties the columns, keeping their capacity.
    pub(crate) fn clear(&mut self) {
        self.truncate(RowsMark(0, 0, 0));
    }

    pub(crate) fn truncate(&mut self, m: RowsMark) {
        self.rows.truncate(m.0);
        self.keys.truncate(m.1);
        self.row_ends.truncate(m.2);
        self.key_ends.truncate(m.2);
        self.times.truncate(m.2);
    }
}

/// Which delivery a batch is. Exactly-once sinks dedupe on the pair: a batch id alone would make
/// a replay from a fresh checkpoint, or a second pipeline writing to the same place, look like a
/// re-delivery and be dropped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Delivery<'a> {
    /// The checkpoint's identity, created with it and kept for its life (`weir inspect` shows it).
    pub checkpoint: &'a str,
    pub batch_id: u64,
}

#[derive(Debug, thiserror::Error)]
pub(crate) enum SinkError {
    #[error(transparent)]
    Plugin(#[from] PluginError),
    #[error("cannot write rows: {0}")]
    Io(#[from] std::io::Error),
    #[error(transparent)]
    Kafka(#[from] KafkaError),
    #[error(transparent)]
    Log(crate::dataset::log::LogError),
    #[error(
        "dataset {dataset} is a table, which takes keyed rows only: {why}; key the flow's rows (a window, \
             a [process], or sink.key = \"FIELD\")"
    )]
    Unkeyed { dataset: String, why: String },
}

/// Where result rows go.
pub(crate) trait RowSink: Send {
    /// Delivers a batch and makes it visible. Called again with the same delivery and rows if
    /// the process died before the batch was committed.
    fn deliver(&mut self, delivery: &Delivery, rows: &Rows) -> Result<(), SinkError>;

    /// What waits until everything delivered so far is durable: run (on any thread) before
    /// the source position is committed. For sinks whose `deliver` already waits, nothing.
    fn barrier(&mut self) -> Barrier {
        Box::new(|| Ok(()))
    }
}

/// A wait for what a sink was given before it was taken (see [`RowSink::barrier`]).
pub(crate) type Barrier = Box<dyn FnOnce() -> Result<(), SinkError> + Send>;
