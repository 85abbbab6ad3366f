//! Micro-batches: plan a batch (its range and idleness to the offsets log), run it through the
//! transforms and the operator, deliver its rows, commit. The next batch is read and parsed on a
//! thread of its own meanwhile (`ingest/`); its plan is still written only when the loop takes
//! it, with that moment's idleness decision, so a re-run after a crash is the same batch.
//!
//! The files: `batch/process.rs` takes a batch from its parsed events to its rows; this one
//! plans, runs, delivers and commits batches.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use super::{Run, RunError, ms};
use crate::checkpoint::{CheckpointError, Committed, Planned, StateMeta, now_ms};
use crate::ingest::{Ahead, Ask, Ingest, Ingested, Parsed};
use crate::pipeline::{Pipeline, Trigger};
use crate::progress::{BatchProgress, Progress, SourceProgress};
use crate::retry::sleep_unless;
use crate::sink::{Delivery, Rows, SinkError};
use crate::source::{Limit, Offsets, SourceBatch};

mod process;

/// Records in batch `batch_id`: batches start at [`FIRST_BATCH`] records and double up to `max`.
///
/// The first batch runs before any watermark exists, so nothing in it can be late; a small first
/// batch makes the watermark exist early, as it does on a stream that starts flowing, instead of
/// letting one large first batch accept events that are hours late. A function of how many
/// batches came before; a batch re-run after a crash reads its plan's range, whatever its size.
fn batch_size(batch_id: u64, max: usize) -> usize {
    FIRST_BATCH.checked_shl(batch_id.min(32) as u32).unwrap_or(usize::MAX).min(max)
}

const FIRST_BATCH: usize = 64;

/// Batches asked for ahead of the one that runs: one being read and one being parsed per parser
/// instance, so reading and parsing overlap the batch before them. A processing-time trigger
/// with an interval reads when it fires instead; with none (the default) its batches run back
/// to back, so the next one's read may as well start while this one runs: asking for it only
/// when this one ended left the parsers taking turns, one core busy of two.
fn read_ahead(trigger: Trigger, parsers: usize) -> u64 {
    match trigger {
        Trigger::ProcessingTime { interval } if !interval.is_zero() => 1,
        _ => parsers as u64 + 1,
    }
}

/// Checkpoint jobs left running past batches without rows before the loop waits for them anyway
/// (each batch gives three: its plan's sync, its state's sync, its commits-log entry).
const MAX_PENDING_SYNCS: usize = 24;

impl Run {
    /// Runs batches until the input ends (returns `true`) or a stop is asked for (`false`).
    /// `reruns` are the batches planned before a crash and never committed: they run first, as
    /// planned.
    pub(super) fn micro_batches(
        &mut self,
        ingest: Ingest,
        pipeline: &Pipeline,
        batch_id: &mut u64,
        mut reruns: VecDeque<Planned>,
        progress: &mut Progress,
    ) -> Result<bool, RunError> {
        let stop = self.stop.clone();
        let mut next_start = Instant::now();
        let bounded = pipeline.bounded();
        let limit = |id: u64| Limit {
            records: match pipeline.trigger {
                Trigger::Once => usize::MAX,
                _ => batch_size(id, pipeline.source.max_offsets_per_trigger),
            },
            bounded,
        };
        let depth = read_ahead(pipeline.trigger, ingest.parsers.len());
        let description = ingest.source.description();
        let mut ahead = Ahead::start(ingest)?;
        // What each outstanding ask is for: a re-run's plan, or a new batch.
        let mut asked: VecDeque<Option<Planned>> = VecDeque::new();
        let mut ended = false;
        while !stop.load(Ordering::Relaxed) {
            pace(pipeline.trigger, &mut next_start, &stop);
            ask_ahead(&mut ahead, depth, &mut reruns, &mut asked, *batch_id, limit);
            let t0 = Instant::now();
            let rerun = asked.pop_front().flatten();
            let mut ingested = ahead.take()?;
            let (plan, plan_time) = match rerun {
                Some(plan) => (plan, Duration::ZERO),
                None => {
                    let flush = match &ingested.batch {
                        Some(b) if b.is_empty() => continue,
                        Some(_) => false,
                        None => {
                            // The end of the input: one more batch, without records, if the run
                            // flushes and there is something to flush.
                            if !self.flushes || self.operator.horizon(&self.state)?.is_none() {
                                ended = true;
                                break;
                            }
                            ingested.batch = Some(SourceBatch::default());
                            true
                        }
                    };
                    self.plan_batch(*batch_id, &ingested, flush)?
                }
            };
            let waited = t0.elapsed() - plan_time;
            let Ingested { batch, parsed, read_ms, parse_ms, latest, .. } = ingested;
            let batch = batch.unwrap_or_default();
            let mut report = self.run_batch(*batch_id, &batch, parsed, &plan)?;
            report.sources = vec![source_progress(&description, &plan, latest, report.input_rows)];
            ahead.committed(&plan.end);
            ahead.recycle(batch);
            report.durations.read_ms = read_ms;
            report.durations.parse_ms = parse_ms;
            report.durations.read_wait_ms = waited.as_secs_f64() * 1e3;
            report.durations.plan_ms = plan_time.as_secs_f64() * 1e3;
            report.durations.total_ms = t0.elapsed().as_secs_f64() * 1e3;
            report.plugins = self.plugin_metrics();
            progress.batch(&report);
            *batch_id += 1;
            if plan.flush {
                ended = true;
                break;
            }
        }
        self.syncs.wait()?;
        ahead.finish();
        Ok(ended)
    }

    /// Plans batch `batch_id` over the range read into `ingested`, with this moment's idleness
    /// and side-input ends, and writes the plan (the offsets log, and a group's ledger) before
    /// the batch runs. Returns it, and how long writing it took.
    fn plan_batch(&mut self, batch_id: u64, ingested: &Ingested, flush: bool) -> Result<(Planned, Duration), RunError> {
        let idle = self.time.as_ref().map(|w| w.idle(Instant::now())).unwrap_or_default();
        let side = self.operator.plan_side()?;
        let plan = Planned {
            batch_id,
            start: ingested.start.clone(),
            end: ingested.end.clone(),
            idle,
            flush,
            planned_at_ms: now_ms(),
            side,
        };
        let t = Instant::now();
        self.checkpoint.plan(&plan, &mut self.syncs)?;
        if let Some(ledger) = self.ledger.as_mut() {
            ledger.plan(&plan)?;
        }
        Ok((plan, t.elapsed()))
    }

    /// A planned batch, from its parsed events to its commit.
    fn run_batch(
        &mut self,
        batch_id: u64,
        batch: &SourceBatch,
        parsed: Parsed,
        plan: &Planned,
    ) -> Result<BatchProgress, RunError> {
        self.operator.set_processing_time(plan.planned_at_ms);
        let in_force = self.in_force();
        let side = self.operator.take_side(plan.side.as_ref(), in_force, &mut self.state)?;
        let (rows, mut report) = self.process(batch_id, batch, parsed, plan.flush, &plan.idle)?;
        report.dead_letters += self.dead.side(batch_id, &side)?;
        // Only rows need the plans and states before them on disk (checkpoint/mod.rs): a batch
        // that delivers none leaves its syncs running, for the next batch that does to wait for.
        if !rows.is_empty() || self.syncs.pending() >= MAX_PENDING_SYNCS {
            let t = Instant::now();
            self.syncs.wait()?;
            report.durations.sync_wait_ms = ms(t);
        }
        let t = Instant::now();
        report.dead_letters += self.deliver(batch_id, &rows)?;
        self.spare_rows = rows;
        report.durations.sink_ms = ms(t);
        let t = Instant::now();
        self.commit(batch_id, plan.end.clone(), &report)?;
        report.durations.commit_ms = ms(t);
        Ok(report)
    }

    /// Delivers a batch; a sink plugin's failure is retried with backoff (delivery is
    /// idempotent per delivery), then stops the pipeline: rows cannot be set aside the way
    /// input records can. Rows the sink itself refuses (they do not fit its schema) go to the
    /// dead letters; returns how many.
    pub(super) fn deliver(&mut self, batch_id: u64, rows: &Rows) -> Result<usize, RunError> {
        let delivery = Delivery { checkpoint: &self.identity, batch_id };
        let (sink, stop) = (&mut self.sink, &self.stop);
        let retriable = |e: &SinkError| matches!(e, SinkError::Plugin(e) if crate::isolate::isolatable(e));
        let what = format!("delivering batch {batch_id}");
        self.failure
            .retry()
            .run(stop, &what, || sink.deliver(&delivery, rows), retriable)
            .map_err(|e| e.into_inner())?;
        let rejected = self.sink.rejected();
        Ok(self.dead.rows(batch_id, rows, &rejected)?)
    }

    /// Makes batch `batch_id` durable: side outputs, then the state with the source position
    /// (the point of no return), then the commits log. (The caller then tells the source, for
    /// the group offsets.)
    pub(super) fn commit(&mut self, batch_id: u64, end: Offsets, report: &BatchProgress) -> Result<(), RunError> {
        let (meta, committed) = self.records(batch_id, end, report)?;
        // A group's record first: the local state is then at most this commit ahead of it,
        // and only once the record names this directory (`Ledger::commit`; `scale/task.rs`
        // relies on that for the side outputs' lengths).
        if let Some(ledger) = self.ledger.as_mut() {
            ledger.commit(&meta, &self.state)?;
        }
        self.state.commit(&meta, &mut self.syncs)?;
        // Behind the state's sync: the state's record is the truth, and recovery rewrites an
        // entry a crash lost.
        self.syncs.run(self.checkpoint.commit_later(committed));
        Ok(())
    }

    /// What a commit of batch `batch_id` writes: the state's record of it (side outputs flushed
    /// first, since their lengths are in it) and its commits-log entry.
    pub(super) fn records(
        &mut self,
        batch_id: u64,
        end: Offsets,
        report: &BatchProgress,
    ) -> Result<(Vec<u8>, Committed), RunError> {
        self.records_in += report.input_rows as u64;
        self.rows_out += report.rows_out as u64;
        let meta = StateMeta {
            next_batch: batch_id + 1,
            source: end,
            watermark: self.time.as_ref().map(|w| w.save()).unwrap_or_default(),
            dead_letters_len: self.dead.flush()?,
            late_len: match self.late.as_mut() {
                Some(l) => l.flush()?,
                None => 0,
            },
            state_version: self.state_version,
            flushed_to: self.flushed_to,
            expectations: self.violations.clone(),
            records_in: self.records_in,
            rows_out: self.rows_out,
        };
        let bytes = serde_json::to_vec(&meta).map_err(|e| {
            CheckpointError::file(self.checkpoint.state_dir(), format!("cannot encode the batch record: {e}"))
        })?;
        let committed = Committed {
            batch_id,
            watermark: report.watermark,
            rows_out: Some(report.rows_out),
            committed_at_ms: now_ms(),
        };
        Ok((bytes, committed))
    }
}

/// A processing-time trigger's pace: sleeps until the batch is due (unless a stop is asked for),
/// and makes the next one due an interval later.
fn pace(trigger: Trigger, next_start: &mut Instant, stop: &AtomicBool) {
    if let Trigger::ProcessingTime { interval } = trigger {
        let now = Instant::now();
        if *next_start > now {
            sleep_unless(stop, *next_start - now);
        }
        *next_start = Instant::now() + interval;
    }
}

/// Asks `ahead` for batches until `depth` are outstanding: the re-runs' plans first, then new
/// batches, `next_batch` being the id of the batch that runs next. `asked` records what each
/// ask is for, in order.
fn ask_ahead(
    ahead: &mut Ahead,
    depth: u64,
    reruns: &mut VecDeque<Planned>,
    asked: &mut VecDeque<Option<Planned>>,
    next_batch: u64,
    limit: impl Fn(u64) -> Limit,
) {
    while ahead.outstanding() < depth {
        let plan = reruns.pop_front();
        ahead.ask(match &plan {
            Some(p) => Ask::Again(p.clone()),
            // Sized by the batches before it (asks that find nothing make no batch).
            None => Ask::Read(limit(next_batch + asked.len() as u64)),
        });
        asked.push_back(plan);
    }
}

/// The source's part of a batch's progress: the plan's range, and how far its end is behind
/// the latest offsets the source knew of.
fn source_progress(description: &str, plan: &Planned, latest: Option<Offsets>, input_rows: usize) -> SourceProgress {
    SourceProgress {
        description: description.to_owned(),
        lag: latest.as_ref().map(|l| plan.end.lag(l)).unwrap_or_default(),
        start_offset: plan.start.clone(),
        end_offset: plan.end.clone(),
        latest_offset: latest,
        num_input_rows: input_rows,
    }
}

#[cfg(test)]
mod tests;
