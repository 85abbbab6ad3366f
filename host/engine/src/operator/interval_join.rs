//! The stream-stream interval join (`[join] type = "interval"`): events of the pipeline's stream
//! (the left side) and of a second, named stream (`[streams.NAME]`, the right side, with a
//! source and a parser of its own) join when they have the same key and
//! `left.time BETWEEN right.time - before AND right.time + after`. The joined row is the left
//! event's row with the right event's row under `join.as`; it goes to the sink under the key.
//! Spark's stream-stream join with watermarks and a time constraint is the model.
//!
//! The right stream is the operator's side input (`side_input.rs`), planned with each batch as
//! a table join's table is: read as far as it goes when the batch is planned, its end in the
//! plan, read to there again on a re-run; its position is state. So recovery replays both
//! streams from their checkpointed positions.
//!
//! **Time.** The join's watermark is the minimum of the two: the pipeline's (the left stream's)
//! and the right stream's own, its largest event time less `watermark.delay`. An event behind
//! the join's watermark in force, less `allowed_lateness`, is late: a left one is handled as
//! `watermark.late` says, a right one is a dead letter (kind `late`, stage `join`). Every
//! other event is buffered, in RocksDB and in memory, until no event that is not late could
//! still join it: a left event until the join's watermark passes its time by `before` plus the
//! lateness, a right one by `after` plus the lateness.
//!
//! **A batch.** Its right events are taken in with the plan ([`Operator::take_side`]), its left
//! events by `process`; at `advance`, each new left event is matched against every buffered
//! right event, and each new right event against the left events of earlier batches, so a pair
//! is emitted once, in the batch where its later half arrives. Then the buffers are cut by the
//! new watermark. State: `a` (left) and `b` (right) + key + time + sequence number → row, and
//! `i`: the right stream's position, its largest event time and the next sequence number.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use serde::{Deserialize, Serialize};

use super::join_rows::JoinRows;
use super::side_input::SideInput;
use super::{Advanced, Opened, Operator, OperatorError, Processed, Scope};
use crate::columns;
use crate::pipeline::{EventTime, FailurePolicy, IntervalJoin as Spec};
use crate::plugin::{EventBatch, ParseFns};
use crate::rows::Rows;
use crate::side_output::SideLetter;
use crate::source::Offsets;
use crate::state::{StateStore, time_from_key, time_key};
use crate::watermark;

/// One side's buffered events: key → (time, sequence number) → row.
type Buffer = BTreeMap<Vec<u8>, BTreeMap<(i64, u64), Vec<u8>>>;

/// What the operator keeps beside its buffers, in one entry.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
struct Meta {
    /// Where the right stream stands (`None`: not read yet).
    position: Option<Offsets>,
    /// The right stream's largest event time so far.
    right_max: Option<i64>,
    /// The sequence number the next buffered event gets: two events of one key and time are
    /// two entries.
    next_seq: u64,
}

/// The two sides.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Side {
    Left,
    Right,
}

impl Side {
    fn scope(self) -> Scope {
        match self {
            Side::Left => Scope::IntervalLeft,
            Side::Right => Scope::IntervalRight,
        }
    }
}

fn entry_key(side: Side, key: &[u8], time: i64, seq: u64) -> Vec<u8> {
    let mut k = side.scope().key(4 + key.len() + 16);
    k.extend_from_slice(&(key.len() as u32).to_be_bytes());
    k.extend_from_slice(key);
    k.extend_from_slice(&time_key(time));
    k.extend_from_slice(&seq.to_be_bytes());
    k
}

fn split_entry_key(k: &[u8]) -> Option<(Vec<u8>, i64, u64)> {
    let len = u32::from_be_bytes(k.get(1..5)?.try_into().ok()?) as usize;
    let key = k.get(5..5 + len)?.to_vec();
    let time = time_from_key(k.get(5 + len..13 + len)?);
    let seq = u64::from_be_bytes(k.get(13 + len..21 + len)?.try_into().ok()?);
    Some((key, time, seq))
}

/// What the meta entry is called in an error.
const META: &str = "interval join meta";

fn meta_key() -> Vec<u8> {
    Scope::IntervalMeta.key(0)
}

/// An event taken in this batch, not yet matched: key, time, sequence number, row.
type New = (Vec<u8>, i64, u64, Vec<u8>);

pub struct IntervalJoin {
    spec: Spec,
    /// `join.on`, if the key is a row field.
    on: Option<super::KeyField>,
    delay_ms: i64,
    lateness_ms: i64,
    failure: FailurePolicy,
    stop: Arc<AtomicBool>,
    parser: Box<dyn ParseFns>,
    /// The right stream, opened at the position the state holds.
    right_input: SideInput,
    /// Each event's key, and the joined row (`join_rows.rs`).
    join: JoinRows,
    meta: Meta,
    /// The sequence number this batch's left events count from (after its right events').
    batch_seq: u64,
    left: Buffer,
    right: Buffer,
    /// Each side's buffered events by time, to cut the buffers by the watermark.
    left_by_time: BTreeSet<(i64, Vec<u8>, u64)>,
    right_by_time: BTreeSet<(i64, Vec<u8>, u64)>,
    /// The right stream's watermark in force for the batch (the batch before reached it).
    right_in_force: i64,
    new_left: Vec<New>,
    new_right: Vec<New>,
}

impl IntervalJoin {
    pub fn new(
        spec: Spec,
        time: &EventTime,
        to_the_end: bool,
        failure: FailurePolicy,
        stop: Arc<AtomicBool>,
        parser: Box<dyn ParseFns>,
    ) -> Self {
        let right_input = SideInput::new(spec.source.clone(), to_the_end, stop.clone());
        let join = JoinRows::new(spec.on.as_deref(), &spec.field);
        Self {
            on: spec.on.as_deref().map(super::KeyField::new),
            spec,
            delay_ms: time.delay_ms,
            lateness_ms: time.allowed_lateness_ms,
            failure,
            stop,
            parser,
            right_input,
            join,
            meta: Meta::default(),
            batch_seq: 0,
            left: Buffer::new(),
            right: Buffer::new(),
            left_by_time: BTreeSet::new(),
            right_by_time: BTreeSet::new(),
            right_in_force: watermark::NONE,
            new_left: Vec::new(),
            new_right: Vec::new(),
        }
    }

    /// The right stream's watermark: its largest event time less the delay.
    fn right_watermark(&self) -> i64 {
        self.meta.right_max.map_or(watermark::NONE, |m| m.saturating_sub(self.delay_ms))
    }

    /// The bound below which an event is late, under the pipeline's watermark `left`.
    fn late_below(&self, left: i64) -> i64 {
        left.min(self.right_in_force).saturating_sub(self.lateness_ms)
    }

    /// Drops `side`'s events before `from`.
    fn cut(&mut self, side: Side, from: i64, state: &mut StateStore) {
        let (by_time, buf) = match side {
            Side::Left => (&mut self.left_by_time, &mut self.left),
            Side::Right => (&mut self.right_by_time, &mut self.right),
        };
        while let Some((t, key, seq)) = by_time.first().cloned().filter(|(t, _, _)| *t < from) {
            by_time.pop_first();
            state.delete(entry_key(side, &key, t, seq));
            if let Some(m) = buf.get_mut(&key) {
                m.remove(&(t, seq));
                if m.is_empty() {
                    buf.remove(&key);
                }
            }
        }
    }

    /// The row of `left_row` (checked when it was taken in) joined with `right_row`, under
    /// their key.
    /// At the left event's time `time`.
    fn emit(
        &self,
        key: &[u8],
        time: i64,
        left_row: &[u8],
        right_row: &[u8],
        out: &mut Rows,
    ) -> Result<(), OperatorError> {
        let mut row = Vec::with_capacity(left_row.len() + right_row.len() + self.spec.field.len() + 4);
        self.join.splice(left_row, Some(right_row), &mut row);
        Ok(out.push(key, &row, time)?)
    }
}

impl Operator for IntervalJoin {
    fn open(&mut self, state: &mut StateStore, _: Option<u32>) -> Result<Opened, OperatorError> {
        if let Some(meta) = super::load_json(state, &meta_key(), META)? {
            self.meta = meta;
        }
        for side in [Side::Left, Side::Right] {
            let scope = side.scope() as u8;
            for (k, row) in state.range(&[scope], &[scope + 1])? {
                let (key, time, seq) = split_entry_key(&k).ok_or_else(|| OperatorError::Corrupt {
                    key: format!("{k:?}"),
                    message: "a join buffer entry".into(),
                })?;
                let (by_time, buf) = match side {
                    Side::Left => (&mut self.left_by_time, &mut self.left),
                    Side::Right => (&mut self.right_by_time, &mut self.right),
                };
                by_time.insert((time, key.clone(), seq));
                buf.entry(key).or_default().insert((time, seq), row);
            }
        }
        self.right_input.open(self.meta.position.as_ref())?;
        Ok(Opened::default())
    }

    fn plan_side(&mut self) -> Result<Option<Offsets>, OperatorError> {
        self.right_input.plan().map(Some)
    }

    fn take_side(
        &mut self,
        end: Option<&Offsets>,
        watermark: i64,
        state: &mut StateStore,
    ) -> Result<Vec<SideLetter>, OperatorError> {
        self.right_in_force = self.right_watermark();
        self.batch_seq = self.meta.next_seq;
        let Some(end) = end else { return Ok(Vec::new()) };
        let taken = self.right_input.take(end)?;
        let mut bad = taken.undecodable();
        let letter = |kind: &'static str, error: String, rec: usize| taken.letter(kind, error, rec);
        let parsed = crate::ingest::parse(self.parser.as_mut(), &taken.batch, &self.failure, &self.stop)?;
        let crate::ingest::Parsed { out, failed } = parsed;
        for e in &out.errors {
            let f = crate::side_output::Failure::record(e);
            bad.push(letter(f.kind, f.message, f.index));
        }
        for (i, e) in &failed {
            bad.push(letter("plugin-failure", e.to_string(), *i));
        }
        let late_below = self.late_below(watermark);
        let events = &out.events;
        let mut right_max = self.meta.right_max;
        for i in 0..events.times.len() {
            let (t, rec) = (events.times[i], events.origins[i] as usize);
            if t < late_below {
                bad.push(letter("late", format!("behind the join's watermark ({late_below} ms)"), rec));
                continue;
            }
            let key = match super::event_key(self.on.as_ref(), "join.on", events, i) {
                Ok(k) => k,
                Err(why) => {
                    bad.push(letter("invalid-value", why, rec));
                    continue;
                }
            };
            let row = columns::item(&events.rows, &events.row_ends, i);
            if let Err(why) = crate::json::check_object(row) {
                bad.push(letter("invalid-value", why, rec));
                continue;
            }
            right_max = Some(right_max.map_or(t, |m| m.max(t)));
            let seq = self.meta.next_seq;
            self.meta.next_seq += 1;
            state.put(entry_key(Side::Right, &key, t, seq), row.to_vec());
            self.new_right.push((key, t, seq, row.to_vec()));
        }
        self.meta.right_max = right_max;
        self.meta.position = Some(end.clone());
        self.batch_seq = self.meta.next_seq;
        self.right_input.recycle(taken);
        Ok(bad)
    }

    fn process(
        &mut self,
        events: &EventBatch,
        watermark: i64,
        state: &mut StateStore,
        _out: &mut Rows,
    ) -> Result<Processed, OperatorError> {
        let mut set_aside = Processed::default();
        let late_below = self.late_below(watermark);
        for i in 0..events.times.len() {
            let t = events.times[i];
            if t < late_below {
                set_aside.late.push(i as u32);
                continue;
            }
            // A row the joined row cannot be made of is refused now, not when it matches.
            let key = match self.join.key(events, i) {
                Ok(k) => k,
                Err(why) => {
                    set_aside.invalid.push((i as u32, why));
                    continue;
                }
            };
            let row = columns::item(&events.rows, &events.row_ends, i);
            let seq = self.batch_seq + self.new_left.len() as u64;
            state.put(entry_key(Side::Left, &key, t, seq), row.to_vec());
            self.new_left.push((key, t, seq, row.to_vec()));
        }
        Ok(set_aside)
    }

    fn advance(
        &mut self,
        _from: i64,
        to: i64,
        state: &mut StateStore,
        out: &mut Rows,
    ) -> Result<Advanced, OperatorError> {
        let (before, after) = (self.spec.before_ms, self.spec.after_ms);
        let new_left = std::mem::take(&mut self.new_left);
        let new_right = std::mem::take(&mut self.new_right);
        self.meta.next_seq = self.batch_seq + new_left.len() as u64;
        let emitted_before = out.len();
        // This batch's right events with the left events of earlier batches (l.time in
        // [r.time - before, r.time + after]), then into the buffer.
        for (key, t, _, r) in &new_right {
            if let Some(lefts) = self.left.get(key) {
                let range = (t.saturating_sub(before), 0)..=(t.saturating_add(after), u64::MAX);
                for (&(lt, _), l) in lefts.range(range) {
                    self.emit(key, lt, l, r, out)?;
                }
            }
        }
        for (key, t, seq, row) in new_right {
            self.right_by_time.insert((t, key.clone(), seq));
            self.right.entry(key).or_default().insert((t, seq), row);
        }
        // This batch's left events with every buffered right event (r.time in
        // [l.time - after, l.time + before]), then into the buffer.
        for (key, t, _, l) in &new_left {
            if let Some(rights) = self.right.get(key) {
                let range = (t.saturating_sub(after), 0)..=(t.saturating_add(before), u64::MAX);
                for r in rights.range(range).map(|(_, r)| r) {
                    self.emit(key, *t, l, r, out)?;
                }
            }
        }
        for (key, t, seq, row) in new_left {
            self.left_by_time.insert((t, key.clone(), seq));
            self.left.entry(key).or_default().insert((t, seq), row);
        }
        // Cut the buffers: an event that is not late (at or after `w`) joins left events from
        // `w - before` and right events from `w - after` on.
        let w = to.min(self.right_watermark()).saturating_sub(self.lateness_ms);
        if w > watermark::NONE {
            self.cut(Side::Left, w.saturating_sub(before), state);
            self.cut(Side::Right, w.saturating_sub(after), state);
        }
        super::save_json(state, meta_key(), &self.meta, META)?;
        Ok(Advanced { emitted: out.len() - emitted_before, failed: Vec::new() })
    }

    fn horizon(&self, _: &StateStore) -> Result<Option<i64>, OperatorError> {
        // An inner join emits when the later half of a pair arrives: nothing waits for time.
        Ok(None)
    }

    fn stage(&self) -> &str {
        "join"
    }

    fn fingerprint(&self) -> String {
        let on = self.spec.on.as_deref().map_or_else(|| "event key".to_string(), |f| format!("{f:?} as text"));
        format!(
            "interval join on {on} with stream {:?} ({}) from -{} ms to +{} ms as {:?}",
            self.spec.stream,
            self.right_input.identity(),
            self.spec.before_ms,
            self.spec.after_ms,
            self.spec.field
        )
    }

    fn mark(&self) -> usize {
        self.new_left.len()
    }

    fn rollback(&mut self, mark: usize) {
        self.new_left.truncate(mark);
    }
}
