//! Sinks: where a batch's result rows go. Each batch is delivered with its [`Delivery`]: the
//! identity of the checkpoint that planned it and its batch id there. The same delivery always
//! carries the same rows, and after a crash a batch may be delivered again, so a sink that keeps
//! each delivery once (keyed on both parts: another checkpoint's batch 7 is other rows) is
//! exactly-once.
//!
//! One file per sink: `wasm.rs` (a sink plugin), `kafka.rs` (Weir's transactional Kafka sink),
//! `lines.rs` (JSON lines to a writer: the console, and `weir test`'s capture).

mod kafka;
mod lines;
mod wasm;

use crate::kafka::KafkaError;
use crate::plugin::{PluginError, RowBatch};

pub(crate) use kafka::{KafkaSink, producer_config};
pub(crate) use lines::LineSink;
pub(crate) use wasm::WasmSink;

/// Rows of one batch, flat: row `i` is `rows[row_ends[i-1]..row_ends[i]]`, a JSON object.
pub(crate) type Rows = RowBatch;

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
