//! Ingest: reading a batch from the source and parsing it, the steps that need no state. With
//! micro-batches they run ahead of the trigger loop on threads of their own (`ahead.rs`): one
//! reads batches in order, `parse.parallelism` others parse them side by side, and the loop
//! takes them in order while it aggregates, delivers and commits the batch before. None of that
//! changes a result: a batch's range is fixed by the plan the driver writes when it takes the
//! batch (before any of its rows can reach the sink), and every batch is parsed whole by one
//! parser instance, in chunks below the plugin's output cap that are joined back in order.

mod ahead;
mod dataset_rows;

pub use ahead::{Ahead, Ask};
pub use dataset_rows::DatasetRows;

use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Instant;

use crate::columns;
use crate::isolate::{Isolated, StageOutput, isolate, joined, slice_records};
use crate::pipeline::FailurePolicy;
use crate::plugin::{BatchOutput, ParseFns, PluginError, RawBatch};
use crate::source::{Offsets, Source, SourceBatch, SourceError};

#[derive(Debug, thiserror::Error)]
pub enum IngestError {
    #[error(transparent)]
    Source(#[from] SourceError),
    #[error(transparent)]
    Plugin(#[from] PluginError),
}

/// The source and the parser instances.
pub struct Ingest {
    pub source: Box<dyn Source>,
    /// One per `parse.parallelism`.
    pub parsers: Vec<Box<dyn ParseFns>>,
    pub failure: FailurePolicy,
    pub stop: Arc<AtomicBool>,
}

/// A batch read and parsed, not yet planned.
pub struct Ingested {
    /// Where the source stood before and after reading it.
    pub start: Offsets,
    pub end: Offsets,
    /// The latest position the source knew of after reading it (`Source::latest`).
    pub latest: Option<Offsets>,
    /// `None`: the bounded input has ended.
    pub batch: Option<SourceBatch>,
    pub parsed: Parsed,
    pub read_ms: f64,
    pub parse_ms: f64,
}

/// A parser stage's result over a batch: events and record errors, and the records the
/// failure policy isolated.
pub struct Parsed {
    pub out: BatchOutput,
    pub failed: Isolated<PluginError>,
}

impl Parsed {
    fn nothing() -> Self {
        Parsed { out: BatchOutput::empty(), failed: Vec::new() }
    }
}

impl Ingest {
    /// Parses a batch with the first parser (continuous mode, which reads as records arrive).
    pub fn parse(&mut self, batch: &SourceBatch) -> Result<Parsed, PluginError> {
        parse(self.parsers[0].as_mut(), batch, &self.failure, &self.stop)
    }
}

/// Parses a batch under the failure policy, timing it.
fn parse_timed(
    parser: &mut dyn ParseFns,
    batch: &SourceBatch,
    failure: &FailurePolicy,
    stop: &AtomicBool,
) -> Result<(Parsed, f64), PluginError> {
    let t = Instant::now();
    let parsed = parse(parser, batch, failure, stop)?;
    Ok((parsed, t.elapsed().as_secs_f64() * 1e3))
}

/// Parses a batch under the failure policy: in chunks below half the parser's output cap, and
/// when a call fails, retried and then bisected down to the records that fail alone.
pub fn parse(
    parser: &mut dyn ParseFns,
    batch: &SourceBatch,
    failure: &FailurePolicy,
    stop: &AtomicBool,
) -> Result<Parsed, PluginError> {
    if batch.positions.is_empty() {
        return Ok(Parsed::nothing());
    }
    let records = &batch.records;
    let (out, failed) = isolate(batch.len(), failure, stop, |r| {
        if r.len() == batch.len() { parse_chunks(parser, records) } else { parser.parse(&slice_records(records, r)) }
    })?;
    Ok(Parsed { out, failed })
}

/// Parses `records` in calls whose output stays below half the parser's output cap, joined in
/// order, so the events are those of one call over all.
fn parse_chunks(parser: &mut dyn ParseFns, records: &RawBatch) -> Result<BatchOutput, PluginError> {
    let ranges = columns::chunks_by_bytes(&records.value_ends, parser.max_call_bytes() / 2);
    joined(ranges, |r| match r {
        None => parser.parse(records),
        Some(r) => parser.parse(&slice_records(records, r)),
    })
}
