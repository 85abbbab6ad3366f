//! `process` step by step: group the batch's events by key ([`SessionOperator::group_by_key`]),
//! match each key's events with its open sessions into the sessions the batch reaches and lay
//! out the plugin's arguments for them ([`SessionOperator::plan`]), make the plugin's calls
//! ([`SessionOperator::call_plugin`]), and apply their results ([`SessionOperator::apply`]).
//!
//! Invariant: the steps before `apply` leave the operator's memory as it was (the calls write
//! only the plan and the plugin), so a failed call leaves nothing of this operator's to undo;
//! `apply`, the one step that changes it, cannot fail.

use std::ops::Range;

use rustc_hash::FxHashMap;

use super::slots::{PREFETCH_AHEAD, prefetch};
use super::{Acc, Open, SessionOperator, size};
use crate::columns;
use crate::operator::{OperatorError, Processed};
use crate::plugin::EventBatch;
use crate::window::{Interval, merge_sessions};

/// The batch's events that are neither invalid nor late, by key: groups in order of their key's
/// first appearance, each group's events by time, ties in input order.
pub(super) struct Grouped<'e> {
    /// Each group's key.
    keys: Vec<&'e [u8]>,
    /// Where each group's events end in `keyed`.
    group_ends: Vec<u32>,
    /// Each event's (time, session end, index in the batch), group by group.
    keyed: Vec<(i64, i64, u32)>,
}

/// A session this batch's events reach, before the plugin's calls.
struct Session {
    start: i64,
    end: i64,
    /// The key's group in the batch.
    group: usize,
    /// The key's slot if it has open sessions; `None` for a new key, whose sessions (all of
    /// its group's) share the slot made for the first of them.
    slot: Option<u32>,
    /// The starts of the open sessions it absorbs: a range of the batch's list of them.
    absorbed: Range<usize>,
}

/// Everything the calls need, laid out as the batch is walked, nothing per session: the starts
/// of the open sessions each session absorbs, one accumulator per session (those absorbing
/// several are merged first, in one call), its events as `members`.
pub(super) struct Plan {
    /// The sessions the batch's events reach.
    sessions: Vec<Session>,
    /// The starts of the open sessions they absorb ([`Session::absorbed`]).
    starts: Vec<i64>,
    /// Each session's accumulator before its events: empty for a new one, else its open
    /// session's, or the merge of those it absorbs.
    accs: Vec<Vec<u8>>,
    /// `merge`'s arguments: the accumulators of the open sessions that each session absorbing
    /// several merges, one after another...
    flat: Vec<Vec<u8>>,
    /// ...and where each such session's end in `flat`.
    flat_ends: Vec<u32>,
    /// Where each of `merge`'s results goes in `accs`.
    merging: Vec<usize>,
    /// `accumulate`'s arguments: each session's events, one session after another...
    members: Vec<u32>,
    /// ...and where each session's end in `members`.
    session_ends: Vec<u32>,
}

impl Plan {
    /// Whether the batch reaches no session: there is nothing to call the plugin for.
    pub(super) fn is_empty(&self) -> bool {
        self.sessions.is_empty()
    }

    /// Lays out the arguments for the session of `run` (intervals of the key's `open` sessions
    /// and of its events `evs`): the starts of the open sessions it absorbs, its events, its
    /// accumulator. Returns the range of `starts` it absorbs.
    #[inline]
    fn add_arguments(&mut self, open: &[Open], evs: &[(i64, i64, u32)], run: &[Interval]) -> Range<usize> {
        let first = self.starts.len();
        let first_member = self.members.len();
        for iv in run {
            match open.get(iv.id) {
                Some(o) => self.starts.push(o.start),
                None => self.members.push(evs[iv.id - open.len()].2),
            }
        }
        // A session's events go to the plugin in input order, as every window's do: the
        // plugin can then fold the whole batch front to back (the guest SDK does).
        let mine = &mut self.members[first_member..];
        if !mine.is_sorted() {
            mine.sort_unstable();
        }
        self.session_ends.push(self.members.len() as u32);
        let mut olds = run.iter().filter_map(|iv| open.get(iv.id));
        match self.starts.len() - first {
            0 => self.accs.push(Vec::new()),
            1 => self.accs.push(olds.next().map(|o| o.acc.to_vec()).unwrap_or_default()),
            _ => {
                self.flat.extend(olds.map(|o| o.acc.to_vec()));
                self.flat_ends.push(self.flat.len() as u32);
                self.merging.push(self.accs.len());
                self.accs.push(Vec::new());
            }
        }
        first..self.starts.len()
    }
}

impl SessionOperator {
    /// Where event `i`'s session ends: `t + gap`, or the end its partial carries; `None` when
    /// that falls outside the timeline (or a partial's row is too short to say).
    fn end_of(&self, events: &EventBatch, i: usize, t: i64) -> Option<i64> {
        if self.over_partials {
            let row = columns::item(&events.rows, &events.row_ends, i);
            crate::shuffle::split_row(row).map(|(end, _)| end).filter(|&end| end > t)
        } else {
            t.checked_add(self.gap)
        }
    }

    /// The batch grouped by key, less the events it sets aside: those whose session would end
    /// outside the timeline (invalid), and those whose session would end by `closed_before`
    /// (late).
    pub(super) fn group_by_key<'e>(
        &self,
        events: &'e EventBatch,
        closed_before: i64,
        set_aside: &mut Processed,
    ) -> Grouped<'e> {
        // The batch grouped by key in one pass (a map from key to group, groups in order of
        // first appearance), its events laid out group by group (a counting sort: each group's
        // stay in input order), then each group's sorted by time, ties in input order: a key's
        // events are few and mostly in order already. One sort of the whole batch by (hash of
        // the key, key, time) cost more: it compared keys, and moved 48-byte entries.
        let mut group_of: FxHashMap<&[u8], u32> = FxHashMap::default();
        let mut keys: Vec<&[u8]> = Vec::new();
        let mut group_ends: Vec<u32> = Vec::new();
        let mut placed: Vec<(u32, i64, i64, u32)> = Vec::with_capacity(events.times.len());
        for (i, &t) in events.times.iter().enumerate() {
            let Some(end) = self.end_of(events, i, t) else {
                let why = format!("event time {t}: its session would end outside the timeline");
                set_aside.invalid.push((i as u32, why));
                continue;
            };
            if end <= closed_before {
                set_aside.late.push(i as u32);
            } else {
                let key = columns::item(&events.keys, &events.key_ends, i);
                let g = *group_of.entry(key).or_insert_with(|| {
                    keys.push(key);
                    group_ends.push(0);
                    keys.len() as u32 - 1
                });
                group_ends[g as usize] += 1;
                placed.push((g, t, end, i as u32));
            }
        }
        let keyed = by_group(placed, &mut group_ends);
        Grouped { keys, group_ends, keyed }
    }

    /// The sessions the batch's events reach (each key's events merged with its open sessions)
    /// and the plugin's arguments for them. Reads the slots and changes nothing.
    pub(super) fn plan(&self, batch: &Grouped<'_>) -> Plan {
        let mut plan = Plan {
            sessions: Vec::new(),
            starts: Vec::new(),
            accs: Vec::new(),
            flat: Vec::new(),
            flat_ends: Vec::new(),
            merging: Vec::new(),
            members: Vec::with_capacity(batch.keyed.len()),
            session_ends: Vec::new(),
        };
        let mut ivs: Vec<Interval> = Vec::new();
        let candidates: Vec<Option<u32>> = batch.keys.iter().map(|key| self.candidate(key)).collect();
        let mut from = 0;
        for (group, (&key, &to)) in batch.keys.iter().zip(&batch.group_ends).enumerate() {
            let evs = &batch.keyed[from..to as usize];
            from = to as usize;
            prefetch(&self.slots, candidates.get(group + PREFETCH_AHEAD).copied().flatten());
            let slot = self.confirmed(candidates[group], key);
            let open = slot.map_or(&[][..], |id| self.slots[id as usize].open.as_slice());
            interleave(open, evs, &mut ivs);
            for (start, end, run) in merge_sessions(&ivs) {
                let run = &ivs[run];
                // An open session that no event of this batch reaches stays as it is.
                if matches!(run, [only] if only.id < open.len()) {
                    continue;
                }
                let absorbed = plan.add_arguments(open, evs, run);
                plan.sessions.push(Session { start, end, group, slot, absorbed });
            }
        }
        plan
    }

    /// The plugin's calls: one `merge` for the sessions that absorb several open ones, its
    /// results into their accumulators, then one `accumulate` for every session. The
    /// accumulators after the batch's events, a session's each.
    pub(super) fn call_plugin(&mut self, plan: &mut Plan, events: &EventBatch) -> Result<Vec<Vec<u8>>, OperatorError> {
        if !plan.merging.is_empty() {
            for (&i, acc) in plan.merging.iter().zip(self.agg.merge(&plan.flat, &plan.flat_ends)?) {
                plan.accs[i] = acc;
            }
        }
        let updated = self.agg.accumulate(&plan.accs, events, &plan.members, &plan.session_ends)?;
        Ok(updated)
    }

    /// Puts each session of the plan, with its accumulator from `updated`, among its key's open
    /// sessions (a new key's in a new slot) in place of those it absorbs, and records it in the
    /// end index and the batch's lists of changes.
    pub(super) fn apply(&mut self, batch: &Grouped<'_>, plan: &Plan, updated: Vec<Vec<u8>>) {
        let mut made: Option<(usize, u32)> = None;
        for (i, (s, acc)) in plan.sessions.iter().zip(updated).enumerate() {
            prefetch(&self.slots, plan.sessions.get(i + PREFETCH_AHEAD).and_then(|s| s.slot));
            let id = match (s.slot, made) {
                (Some(id), _) => id,
                (None, Some((group, id))) if group == s.group => id,
                (None, _) => {
                    let id = self.new_slot(batch.keys[s.group]);
                    made = Some((s.group, id));
                    id
                }
            };
            let slot = &mut self.slots[id as usize];
            let absorbed = &plan.starts[s.absorbed.clone()];
            let mut stored = false;
            // Whether the session was open before with the same start and end: its entry in the
            // end index still names it.
            let mut indexed = false;
            if !absorbed.is_empty() {
                slot.open.retain(|o| {
                    if !absorbed.contains(&o.start) {
                        return true;
                    }
                    self.live_bytes = self.live_bytes.saturating_sub(size(&slot.key, &o.acc));
                    if o.start == s.start {
                        stored |= o.stored; // the merged session overwrites it in place
                        indexed = o.end == s.end;
                    } else if o.stored {
                        self.absorbed.push((id, o.start));
                    }
                    false
                });
            }
            self.live_bytes += size(&slot.key, &acc);
            let at = slot.open.partition_point(|o| o.start < s.start);
            slot.open.insert(at, Open { start: s.start, end: s.end, acc: Acc::from_vec(acc), stored, changed: true });
            if !indexed {
                self.ends.add(s.end, id, s.start);
            }
            self.changed.push((id, s.start));
        }
    }
}

/// Lays out the placed events (group, time, end, index) group by group, each group's by time,
/// ties in input order, and turns `group_ends` from each group's count into where it ends.
fn by_group(placed: Vec<(u32, i64, i64, u32)>, group_ends: &mut [u32]) -> Vec<(i64, i64, u32)> {
    let mut next: Vec<u32> = Vec::with_capacity(group_ends.len());
    let mut total = 0;
    for n in group_ends.iter_mut() {
        next.push(total);
        total += *n;
        *n = total;
    }
    let mut keyed: Vec<(i64, i64, u32)> = vec![(0, 0, 0); placed.len()];
    for &(g, t, end, i) in &placed {
        keyed[next[g as usize] as usize] = (t, end, i);
        next[g as usize] += 1;
    }
    drop(placed);
    let mut from = 0;
    for &to in group_ends.iter() {
        let evs = &mut keyed[from..to as usize];
        if !evs.is_sorted() {
            evs.sort_unstable();
        }
        from = to as usize;
    }
    keyed
}

/// Lays out in `ivs` a key's intervals by start, an open session before an event that starts
/// with it: its open sessions (ids < open.len()) and its events, both already in order.
#[inline]
fn interleave(open: &[Open], evs: &[(i64, i64, u32)], ivs: &mut Vec<Interval>) {
    ivs.clear();
    let (mut a, mut b) = (0, 0);
    while a < open.len() || b < evs.len() {
        if b == evs.len() || (a < open.len() && open[a].start <= evs[b].0) {
            ivs.push(Interval { start: open[a].start, end: open[a].end, id: a });
            a += 1;
        } else {
            // Fits: events whose session would not were set aside by `group_by_key`.
            ivs.push(Interval { start: evs[b].0, end: evs[b].1, id: open.len() + b });
            b += 1;
        }
    }
}
