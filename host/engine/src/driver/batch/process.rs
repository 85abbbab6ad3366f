//! A batch from its parsed events to its rows: parse failures to the dead letters, the
//! transforms and the expectations, the operator, then the watermark and what it makes final.
//!
//! Invariant: the steps run in this order, once per batch. Events that fail a stage go to the
//! dead letters before the next stage sees the rest; the operator judges events against the
//! watermark in force (where the batch before left it), and the watermark moves only after,
//! once, at the batch's end, so what that makes final is emitted in the same batch.

use std::time::Instant;

use crate::columns;
use crate::driver::{Run, RunError, ms};
use crate::expect::OnViolation;
use crate::ingest::Parsed;
use crate::isolate::{Isolated, isolate, joined, slice_events};
use crate::operator::{OperatorError, Processed};
use crate::plugin::{BatchOutput, EventBatch, PluginError, TransformFns};
use crate::progress::{BatchProgress, Durations};
use crate::side_output::Failure;
use crate::sink::Rows;
use crate::source::SourceBatch;
use crate::watermark::{self, PartitionId, Watermark};

impl Run {
    /// Everything between parsing and delivering: dead letters, transforms, the operator.
    pub(in crate::driver) fn process(
        &mut self,
        batch_id: u64,
        batch: &SourceBatch,
        parsed: Parsed,
        flush: bool,
        idle: &[PartitionId],
    ) -> Result<(Rows, BatchProgress), RunError> {
        let mut report = BatchProgress { batch_id, input_rows: batch.len() + batch.bad.len(), ..Default::default() };
        let mut d = Durations::default();

        let mut events = self.parse_dead_letters(batch_id, batch, parsed, &mut report)?;

        let t = Instant::now();
        self.run_transforms(batch_id, batch, &mut events, &mut report)?;
        self.expectations(batch_id, batch, &mut events, &mut report)?;
        d.transform_ms = ms(t);
        report.events = events.times.len();
        report.event_times = crate::progress::EventTimes::of(&events.times);

        // The operator, under the failure policy like parse and transform (`operate`).
        let t = Instant::now();
        let in_force = self.in_force();
        let mut rows = std::mem::take(&mut self.spare_rows);
        rows.clear();
        let (set_aside, failed) = self.operate(&events, in_force, &mut rows)?;
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
            report.watermark = Some(advance_watermark(w, batch, &events, &set_aside.invalid, idle));
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
        let over = set_aside.over_limit.iter().map(|(i, why)| Failure::over_limit(*i as usize, why.clone()));
        report.dead_letters +=
            self.dead.write(batch_id, &stage, batch, failed.chain(invalid).chain(over), Some(&events.origins))?;
        report.rows_out = rows.len();
        report.state_keys = self.state.estimated_keys();
        report.state_bytes = self.state.estimated_bytes();
        report.durations = d;
        Ok((rows, report))
    }

    /// Sets aside what never became events: the records the source could not decode, and those
    /// the parser rejected or failed on alone. Returns the events.
    fn parse_dead_letters(
        &mut self,
        batch_id: u64,
        batch: &SourceBatch,
        parsed: Parsed,
        report: &mut BatchProgress,
    ) -> Result<EventBatch, RunError> {
        report.dead_letters += self.dead.undecodable(batch_id, batch)?;
        let Parsed { out, failed } = parsed;
        report.dead_letters +=
            self.dead.write(batch_id, "parse", batch, out.errors.iter().map(Failure::record), None)?;
        let failed = failed.iter().map(|(i, e)| Failure::isolated(*i, e));
        report.dead_letters += self.dead.write(batch_id, "parse", batch, failed, None)?;
        if self.deletions {
            return Ok(out.events);
        }
        // A parser's deletions (events without a row) go on only where they leave as tombstones.
        let ends = &out.events.row_ends;
        let deletions: Vec<u32> =
            (0..ends.len()).filter(|&i| ends[i] == if i == 0 { 0 } else { ends[i - 1] }).map(|i| i as u32).collect();
        if deletions.is_empty() {
            return Ok(out.events);
        }
        let why = "a deletion (an event without a row): only a stateless pipeline with output.tombstones = true passes \
                   deletions on, as tombstones";
        let letters = deletions.iter().map(|&i| Failure::invalid(i as usize, why.to_string()));
        report.dead_letters += self.dead.write(batch_id, "parse", batch, letters, Some(&out.events.origins))?;
        Ok(without(&out.events, &deletions))
    }

    /// Runs the transforms in turn, each under the failure policy, on the events the one before
    /// let through; what one rejects or fails on alone goes to the dead letters.
    fn run_transforms(
        &mut self,
        batch_id: u64,
        batch: &SourceBatch,
        events: &mut EventBatch,
        report: &mut BatchProgress,
    ) -> Result<(), RunError> {
        for i in 0..self.transforms.len() {
            if events.times.is_empty() {
                break;
            }
            let (input, transform) = (&*events, &mut self.transforms[i]);
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
            *events = next;
        }
        Ok(())
    }

    /// The operator over the batch's events, judged against the watermark `in_force`, its rows
    /// appended to `rows`. Under the failure policy like parse and transform: a failed call
    /// leaves no trace (its staged state, its own notes and its rows are rolled back), so the
    /// parts that went through add up to the batch without the events that failed alone.
    /// Returns what the operator set aside, and the events that failed alone.
    fn operate(
        &mut self,
        events: &EventBatch,
        in_force: i64,
        rows: &mut Rows,
    ) -> Result<(Processed, Isolated<OperatorError>), RunError> {
        let (op, state) = (&mut self.operator, &mut self.state);
        let (set_aside, failed) = isolate(events.times.len(), &self.failure, &self.stop, |r| {
            let mark = (state.savepoint(), op.mark(), rows.mark());
            let result = if r.len() == events.times.len() {
                op.process(events, in_force, state, rows)
            } else {
                op.process(&slice_events(events, r), in_force, state, rows)
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
        Ok((set_aside, failed))
    }

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

/// Observes the batch's event times, the latest of each partition it read, and moves `w` once,
/// at the batch's end, with `idle` judged idle by its plan. Returns the watermark it moved to.
fn advance_watermark(
    w: &mut Watermark,
    batch: &SourceBatch,
    events: &EventBatch,
    invalid: &[(u32, String)],
    idle: &[PartitionId],
) -> i64 {
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
    let invalid: std::collections::HashSet<u32> = invalid.iter().map(|(i, _)| *i).collect();
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
    w.advance(idle)
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
