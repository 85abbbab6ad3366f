//! Micro-batches: plan a batch (its range and idleness to the offsets log), run it through the
//! transforms and the operator, deliver its rows, commit. The next batch is read and parsed on a
//! thread of its own meanwhile (`ingest/`); its plan is still written only when the loop takes
//! it, with that moment's idleness decision, so a re-run after a crash is the same batch.

use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use super::{Run, RunError, ms};
use crate::checkpoint::{CheckpointError, Committed, Planned, StateMeta, now_ms};
use crate::columns;
use crate::expect::OnViolation;
use crate::ingest::{Ahead, Ask, Ingest, Ingested, Parsed};
use crate::isolate::{isolate, joined, slice_events};
use crate::pipeline::{Pipeline, Trigger};
use crate::plugin::{BatchOutput, EventBatch, PluginError, TransformFns};
use crate::progress::{BatchProgress, Durations, Progress, SourceProgress};
use crate::retry::sleep_unless;
use crate::side_output::Failure;
use crate::sink::{Delivery, Rows, SinkError};
use crate::source::{Limit, Offsets, SourceBatch};
use crate::watermark::{self, PartitionId};

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
            if let Trigger::ProcessingTime { interval } = pipeline.trigger {
                let now = Instant::now();
                if next_start > now {
                    sleep_unless(&stop, next_start - now);
                }
                next_start = Instant::now() + interval;
            }
            while ahead.outstanding() < depth {
                let plan = reruns.pop_front();
                ahead.ask(match &plan {
                    Some(p) => Ask::Again(p.clone()),
                    // Sized by the batches before it (asks that find nothing make no batch).
                    None => Ask::Read(limit(*batch_id + asked.len() as u64)),
                });
                asked.push_back(plan);
            }
            let t0 = Instant::now();
            let rerun = asked.pop_front().flatten();
            let mut ingested = ahead.take()?;
            let mut plan_time = Duration::ZERO;
            let plan = match rerun {
                Some(plan) => plan,
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
                    let idle = self.time.as_ref().map(|w| w.idle(Instant::now())).unwrap_or_default();
                    let side = self.operator.plan_side()?;
                    let plan = Planned {
                        batch_id: *batch_id,
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
                    plan_time = t.elapsed();
                    plan
                }
            };
            let waited = t0.elapsed() - plan_time;
            let Ingested { batch, parsed, read_ms, parse_ms, latest, .. } = ingested;
            let batch = batch.unwrap_or_default();
            let mut report = self.run_batch(*batch_id, &batch, parsed, &plan)?;
            report.sources = vec![SourceProgress {
                description: description.clone(),
                lag: latest.as_ref().map(|l| plan.end.lag(l)).unwrap_or_default(),
                start_offset: plan.start.clone(),
                end_offset: plan.end.clone(),
                latest_offset: latest,
                num_input_rows: report.input_rows,
            }];
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
        self.deliver(batch_id, &rows)?;
        self.spare_rows = rows;
        report.durations.sink_ms = ms(t);
        let t = Instant::now();
        self.commit(batch_id, plan.end.clone(), &report)?;
        report.durations.commit_ms = ms(t);
        Ok(report)
    }

    /// Delivers a batch; a sink plugin's failure is retried with backoff (delivery is
    /// idempotent per delivery), then stops the pipeline: rows cannot be set aside the way
    /// input records can.
    pub(super) fn deliver(&mut self, batch_id: u64, rows: &Rows) -> Result<(), RunError> {
        let delivery = Delivery { checkpoint: &self.identity, batch_id };
        let (sink, stop) = (&mut self.sink, &self.stop);
        let retriable = |e: &SinkError| matches!(e, SinkError::Plugin(e) if crate::isolate::isolatable(e));
        let what = format!("delivering batch {batch_id}");
        self.failure
            .retry()
            .run(stop, &what, || sink.deliver(&delivery, rows), retriable)
            .map_err(|e| e.into_inner())?;
        Ok(())
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

    /// Everything between parsing and delivering: dead letters, transforms, the operator.
    pub(super) fn process(
        &mut self,
        batch_id: u64,
        batch: &SourceBatch,
        parsed: Parsed,
        flush: bool,
        idle: &[PartitionId],
    ) -> Result<(Rows, BatchProgress), RunError> {
        let mut report = BatchProgress { batch_id, input_rows: batch.len() + batch.bad.len(), ..Default::default() };
        let mut d = Durations::default();

        report.dead_letters += self.dead.undecodable(batch_id, batch)?;
        let Parsed { out, failed } = parsed;
        report.dead_letters +=
            self.dead.write(batch_id, "parse", batch, out.errors.iter().map(Failure::record), None)?;
        let failed = failed.iter().map(|(i, e)| Failure::isolated(*i, e));
        report.dead_letters += self.dead.write(batch_id, "parse", batch, failed, None)?;
        let mut events = out.events;

        let t = Instant::now();
        for i in 0..self.transforms.len() {
            if events.times.is_empty() {
                break;
            }
            let (input, transform) = (&events, &mut self.transforms[i]);
            let (out, failed) = isolate(input.times.len(), &self.failure, &self.stop, |r| {
                if r.len() == input.times.len() {
                    transform_chunks(transform.as_mut(), input)
                } else {
                    transform.transform(&slice_events(input, r))
                }
            })?;
            let stage = format!("transform[{i}]");
            let origins = Some(events.origins.as_slice());
            report.dead_letters +=
                self.dead.write(batch_id, &stage, batch, out.errors.iter().map(Failure::record), origins)?;
            let failed = failed.iter().map(|(i, e)| Failure::isolated(*i, e));
            report.dead_letters += self.dead.write(batch_id, &stage, batch, failed, origins)?;
            // Keep origins pointing at source records, whatever the number of transforms.
            let mut next = out.events;
            for o in next.origins.iter_mut() {
                *o = events.origins[*o as usize];
            }
            events = next;
        }
        self.expectations(batch_id, batch, &mut events, &mut report)?;
        d.transform_ms = ms(t);
        report.events = events.times.len();
        report.event_times = crate::progress::EventTimes::of(&events.times);

        // The operator, under the failure policy like parse and transform: a failed call leaves
        // no trace (its staged state, its own notes and its rows are rolled back), so the parts
        // that went through add up to the batch without the events that failed alone.
        let t = Instant::now();
        let in_force = self.in_force();
        let mut rows = std::mem::take(&mut self.spare_rows);
        rows.clear();
        let (op, state) = (&mut self.operator, &mut self.state);
        let (set_aside, failed) = isolate(events.times.len(), &self.failure, &self.stop, |r| {
            let mark = (state.savepoint(), op.mark(), rows.mark());
            let result = if r.len() == events.times.len() {
                op.process(&events, in_force, state, &mut rows)
            } else {
                op.process(&slice_events(&events, r), in_force, state, &mut rows)
            };
            if result.is_err() {
                state.rollback(mark.0);
                op.rollback(mark.1);
                rows.truncate(mark.2);
            }
            result
        })?;
        // What went through stays; the journal that could have undone it goes.
        state.release();
        report.late_events = set_aside.late.len();
        report.duplicates = set_aside.duplicates;
        report.unmatched = set_aside.unmatched;
        if let Some(side) = self.late.as_mut() {
            side.write(batch_id, batch, &events, &set_aside.late, in_force)?;
        }
        d.aggregate_ms = ms(t);

        // The watermark moves once per batch, at its end; the operator emits what that makes
        // final. A flush advances it to the operator's horizon instead, and remembers it.
        let t = Instant::now();
        if let Some(w) = self.time.as_mut() {
            let now = Instant::now();
            let mut maxes: std::collections::BTreeMap<PartitionId, i64> = std::collections::BTreeMap::new();
            for pos in &batch.positions {
                maxes.entry((pos.stream, pos.partition)).or_insert(watermark::NONE);
            }
            // What the source read of event time beside its records (a group's shuffle).
            for &(part, time) in &batch.lanes {
                let m = maxes.entry(part).or_insert(watermark::NONE);
                *m = (*m).max(time);
            }
            // An event the operator could not place (its windows would fall outside the
            // timeline) moves no watermark: one far-future record must not make the rest late.
            let invalid: std::collections::HashSet<u32> = set_aside.invalid.iter().map(|(i, _)| *i).collect();
            for (i, &time) in events.times.iter().enumerate() {
                if invalid.contains(&(i as u32)) {
                    continue;
                }
                let pos = batch.positions[events.origins[i] as usize];
                let m = maxes.entry((pos.stream, pos.partition)).or_insert(watermark::NONE);
                *m = (*m).max(time);
            }
            for (part, max) in maxes {
                w.observe(part, max, now);
            }
            report.watermark = Some(w.advance(idle));
        }
        if flush && let Some(horizon) = self.operator.horizon(&self.state)? {
            self.flushed_to = Some(self.flushed_to.map_or(horizon, |f| f.max(horizon)));
        }
        let to = self.in_force();
        let advanced = self.operator.advance(in_force, to, &mut self.state, &mut rows)?;
        report.windows_emitted = advanced.emitted;
        report.dead_letters += self.dead.windows(batch_id, self.operator.stage(), &advanced.failed)?;
        report.flushed_to = self.flushed_to;
        d.emit_ms = ms(t);

        let stage = self.operator.stage().to_string();
        let failed = failed.iter().map(|(i, e)| Failure::isolated(*i, e));
        let invalid = set_aside.invalid.iter().map(|(i, why)| Failure::invalid(*i as usize, why.clone()));
        report.dead_letters +=
            self.dead.write(batch_id, &stage, batch, failed.chain(invalid), Some(&events.origins))?;
        report.rows_out = rows.len();
        report.state_keys = self.state.estimated_keys();
        report.state_bytes = self.state.estimated_bytes();
        report.durations = d;
        Ok((rows, report))
    }
}

impl Run {
    /// Checks each expectation in turn on the events that reach it: counts its violations,
    /// and drops them to the dead letters (`drop`), keeps them (`warn`) or stops the flow at
    /// the first (`fail`). A pure function of the events, so a re-run batch counts and drops the
    /// same rows.
    fn expectations(
        &mut self,
        batch_id: u64,
        batch: &SourceBatch,
        events: &mut EventBatch,
        report: &mut BatchProgress,
    ) -> Result<(), RunError> {
        for e in &mut self.expect {
            if events.times.is_empty() {
                break;
            }
            let bad = e.violations(events)?;
            *report.expectations.entry(e.name.clone()).or_default() += bad.len() as u64;
            *self.violations.entry(e.name.clone()).or_default() += bad.len() as u64;
            match (e.on, bad.first()) {
                (_, None) | (OnViolation::Warn, _) => {}
                (OnViolation::Fail, Some(&i)) => {
                    let row = columns::items(&events.rows, &events.row_ends).nth(i as usize).unwrap_or_default();
                    let p = batch.positions[events.origins[i as usize] as usize];
                    let position = match p.line {
                        0 => format!("partition {} offset {}", p.partition, p.offset),
                        line => format!("line {line}"),
                    };
                    return Err(RunError::Expectation {
                        name: e.name.clone(),
                        rule: e.shown.clone(),
                        position,
                        row: String::from_utf8_lossy(&row[..row.len().min(500)]).into_owned(),
                    });
                }
                (OnViolation::Drop, Some(_)) => {
                    let message = format!("violates expectation {} ({})", e.name, e.shown);
                    let failures = bad.iter().map(|&i| Failure {
                        index: i as usize,
                        kind: "expectation",
                        message: message.clone(),
                    });
                    let stage = format!("expect.{}", e.name);
                    report.dead_letters +=
                        self.dead.write(batch_id, &stage, batch, failures, Some(events.origins.as_slice()))?;
                    *events = without(events, &bad);
                }
            }
        }
        Ok(())
    }
}

/// `events` without the events at `drop` (ascending indices).
fn without(events: &EventBatch, drop: &[u32]) -> EventBatch {
    let mut out = EventBatch::default();
    let mut next = drop.iter().peekable();
    let rows = columns::items(&events.rows, &events.row_ends);
    let keys = columns::items(&events.keys, &events.key_ends);
    for (i, (row, key)) in rows.zip(keys).enumerate() {
        if next.peek() == Some(&&(i as u32)) {
            next.next();
            continue;
        }
        out.times.push(events.times[i]);
        out.origins.push(events.origins[i]);
        // The columns only shrink: what fit before fits now.
        let pushed = columns::push(&mut out.rows, &mut out.row_ends, row)
            .and_then(|()| columns::push(&mut out.keys, &mut out.key_ends, key));
        debug_assert!(pushed.is_ok());
    }
    out
}

/// Transforms `events` in calls that stay below half the plugin's output cap, joined in order.
fn transform_chunks(t: &mut dyn TransformFns, events: &EventBatch) -> Result<BatchOutput, PluginError> {
    let ranges = columns::chunks_by_bytes(&events.row_ends, t.max_call_bytes() / 2);
    joined(ranges, |r| match r {
        None => t.transform(events),
        Some(r) => t.transform(&slice_events(events, r)),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batches_start_small_and_double_up_to_the_maximum() {
        let sizes: Vec<usize> = (0..10).map(|b| batch_size(b, 5_000)).collect();
        assert_eq!(sizes, vec![64, 128, 256, 512, 1024, 2048, 4096, 5000, 5000, 5000]);
        assert_eq!(batch_size(u64::MAX, 10), 10);
        assert_eq!(batch_size(0, 10), 10);
    }

    #[test]
    fn batches_back_to_back_are_read_ahead_and_a_timed_trigger_reads_when_it_fires() {
        let timed = Trigger::ProcessingTime { interval: Duration::from_secs(1) };
        let back_to_back = Trigger::ProcessingTime { interval: Duration::ZERO };
        assert_eq!(read_ahead(timed, 2), 1);
        assert_eq!(read_ahead(back_to_back, 2), 3);
        assert_eq!(read_ahead(Trigger::AvailableNow, 2), 3);
        assert_eq!(read_ahead(Trigger::Once, 4), 5);
    }
}
