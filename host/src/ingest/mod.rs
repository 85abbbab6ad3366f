//! Ingest: reading a batch from the source and parsing it, the steps that need no state. They
//! run ahead, on a thread of their own, while the batch before is aggregated, delivered and committed, and a batch's
//! records are parsed in chunks side by side (`parse.parallelism`). Neither changes a result: a
//! batch's range is fixed by the plan the driver writes when it takes the batch (before any of
//! its rows can reach the sink), and parsed chunks are joined back in record order.

use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Instant;

use crate::checkpoint::Planned;
use crate::columns;
use crate::isolate::{Isolated, StageOutput, isolate, slice_records};
use crate::pipeline::FailurePolicy;
use crate::plugin::{BatchOutput, ParseFns, PluginError, RawBatch};
use crate::source::{Limit, Offsets, Source, SourceBatch, SourceError};

#[derive(Debug, thiserror::Error)]
pub(crate) enum IngestError {
    #[error(transparent)]
    Source(#[from] SourceError),
    #[error(transparent)]
    Plugin(#[from] PluginError),
}

/// The source and the parser instances.
pub(crate) struct Ingest {
    pub source: Source,
    /// One per `parse.parallelism`.
    pub parsers: Vec<Box<dyn ParseFns>>,
    pub failure: FailurePolicy,
    pub stop: Arc<AtomicBool>,
}

/// A batch read and parsed, not yet planned.
pub(crate) struct Ingested {
    /// Where the source stood before and after reading it.
    pub start: Offsets,
    pub end: Offsets,
    /// `None`: the bounded input has ended.
    pub batch: Option<SourceBatch>,
    pub parsed: Parsed,
    pub read_ms: f64,
    pub parse_ms: f64,
}

/// A parser stage's result over a batch: events and record errors, and the records the
/// failure policy isolated.
pub(crate) struct Parsed {
    pub out: BatchOutput,
    pub failed: Isolated<PluginError>,
}

impl Ingest {
    /// Reads the next batch (at most `limit`) and parses it.
    pub(crate) fn next(&mut self, limit: Limit) -> Result<Ingested, IngestError> {
        let t = Instant::now();
        let start = self.source.offsets();
        let batch = self.source.next_batch(limit)?;
        self.finish(start, batch, t)
    }

    /// Reads exactly a planned batch's range again (its re-run after a crash) and parses it.
    pub(crate) fn again(&mut self, plan: &Planned) -> Result<Ingested, IngestError> {
        let t = Instant::now();
        let batch = self.source.read_until(&plan.end)?;
        self.finish(plan.start.clone(), Some(batch), t)
    }

    fn finish(&mut self, start: Offsets, batch: Option<SourceBatch>, t: Instant) -> Result<Ingested, IngestError> {
        let read_ms = t.elapsed().as_secs_f64() * 1e3;
        let t = Instant::now();
        let parsed = match &batch {
            Some(b) => self.parse(b)?,
            None => Parsed { out: BatchOutput::empty(), failed: Vec::new() },
        };
        let parse_ms = t.elapsed().as_secs_f64() * 1e3;
        Ok(Ingested { start, end: self.source.offsets(), batch, parsed, read_ms, parse_ms })
    }

    /// Parses a batch under the failure policy.
    pub(crate) fn parse(&mut self, batch: &SourceBatch) -> Result<Parsed, PluginError> {
        if batch.positions.is_empty() {
            return Ok(Parsed { out: BatchOutput::empty(), failed: Vec::new() });
        }
        let (records, parsers) = (&batch.records, &mut self.parsers);
        let (out, failed) = isolate(batch.len(), &self.failure, &self.stop, |r| {
            if r.len() == batch.len() {
                parse_chunks(parsers, records)
            } else {
                parsers[0].parse(&slice_records(records, r))
            }
        })?;
        Ok(Parsed { out, failed })
    }
}

/// Below this many records a batch is parsed in one call: a thread hand-off costs more.
const MIN_PARALLEL_PARSE: usize = 4_096;

/// Parses `records` in chunks, side by side (as many at once as there are parsers, the first on
/// this thread), and joins the outputs in order, so the events are those of one call over all.
/// Chunks stay below half the parser's output cap, so a batch of any size fits its calls; with
/// several parsers a batch of [`MIN_PARALLEL_PARSE`] records or more is cut into at least as many
/// chunks as there are parsers.
fn parse_chunks(parsers: &mut [Box<dyn ParseFns>], records: &RawBatch) -> Result<BatchOutput, PluginError> {
    let n = records.value_ends.len();
    let mut ranges = columns::chunks_by_bytes(&records.value_ends, parsers[0].max_call_bytes() / 2);
    if parsers.len() > 1 && n >= MIN_PARALLEL_PARSE && ranges.len() < parsers.len() {
        let chunk = n.div_ceil(parsers.len());
        let cuts =
            ranges.into_iter().flat_map(|r| (r.start..r.end).step_by(chunk).map(move |s| s..(s + chunk).min(r.end)));
        ranges = cuts.collect();
    }
    if ranges.len() == 1 {
        return parsers[0].parse(records);
    }
    let mut out = BatchOutput::empty();
    for wave in ranges.chunks(parsers.len()) {
        let (first, rest) = parsers.split_at_mut(1);
        let results: Vec<Result<BatchOutput, PluginError>> = std::thread::scope(|scope| {
            let others: Vec<_> = rest
                .iter_mut()
                .zip(&wave[1..])
                .map(|(p, r)| {
                    let input = slice_records(records, r.clone());
                    scope.spawn(move || p.parse(&input))
                })
                .collect();
            let mut results = vec![first[0].parse(&slice_records(records, wave[0].clone()))];
            for h in others {
                results.push(h.join().unwrap_or_else(|_| Err(PluginError::Engine("a parser thread panicked".into()))));
            }
            results
        });
        for (r, result) in wave.iter().zip(results) {
            out.append(result?, r.start as u32);
        }
    }
    Ok(out)
}
