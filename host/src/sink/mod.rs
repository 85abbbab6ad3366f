//! Sinks: where a batch's result rows go. A batch is delivered with its id; the same id always
//! carries the same rows, and after a crash a batch may be delivered again, so a sink that
//! dedupes on the batch id is exactly-once.

mod kafka;

use std::io::Write;

use crate::plugin::{PluginError, RowBatch, Sink};
use crate::source::KafkaError;

pub use kafka::{BATCH_HEADER, KafkaSink};

/// Rows of one batch, flat: row `i` is `data[ends[i-1]..ends[i]]`, a JSON object.
pub type Rows = RowBatch;

pub trait RowsExt {
    fn push(&mut self, row: &[u8]);
    fn iter_rows(&self) -> impl Iterator<Item = &[u8]>;
}

impl RowsExt for Rows {
    fn push(&mut self, row: &[u8]) {
        self.rows.extend_from_slice(row);
        self.row_ends.push(self.rows.len() as u32);
    }

    fn iter_rows(&self) -> impl Iterator<Item = &[u8]> {
        self.row_ends.iter().scan(0usize, |start, &end| {
            let r = &self.rows[*start..end as usize];
            *start = end as usize;
            Some(r)
        })
    }
}

#[derive(Debug, thiserror::Error)]
pub enum SinkError {
    #[error(transparent)]
    Plugin(#[from] PluginError),
    #[error("cannot write rows: {0}")]
    Io(#[from] std::io::Error),
    #[error(transparent)]
    Kafka(#[from] KafkaError),
}

/// Where result rows go.
pub trait RowSink {
    /// Delivers batch `batch_id` and makes it visible. Called again with the same rows if the
    /// process died before the batch was committed.
    fn deliver(&mut self, batch_id: u64, rows: &Rows) -> Result<(), SinkError>;

    /// Waits until everything delivered so far is durable; called before the source position
    /// is committed. For sinks whose `deliver` already waits, nothing to do.
    fn sync(&mut self) -> Result<(), SinkError> {
        Ok(())
    }
}

/// A Wasm sink plugin: `write-batch` then `commit`, skipped for empty batches.
pub struct WasmSink(pub Sink);

impl RowSink for WasmSink {
    fn deliver(&mut self, batch_id: u64, rows: &Rows) -> Result<(), SinkError> {
        if rows.row_ends.is_empty() {
            return Ok(());
        }
        self.0.write_batch(batch_id, rows)?;
        self.0.commit(batch_id)?;
        Ok(())
    }
}

/// JSON lines to a writer: the console sink of `weir run` without `[sink]`, and the capture of
/// `weir test`, which runs once and so needs no dedupe.
pub struct LineSink<W: Write>(pub W);

impl<W: Write> RowSink for LineSink<W> {
    fn deliver(&mut self, _batch_id: u64, rows: &Rows) -> Result<(), SinkError> {
        for row in rows.iter_rows() {
            self.0.write_all(row)?;
            self.0.write_all(b"\n")?;
        }
        self.0.flush()?;
        Ok(())
    }
}
