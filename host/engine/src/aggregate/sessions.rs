//! Session windows per key: an event opens `[t, t + gap)`, and a key's sessions that intersect
//! or touch merge, accumulators included (the aggregator's `merge`).
//!
//! The open sessions live in memory, with an index by end, rebuilt from the state store at
//! start. The store holds them as a log of changes (`session_log.rs`): a batch appends one entry
//! with the sessions it changed (once each, however many events reached them) and those that
//! left; a session that opens and closes within one batch never reaches the store. Reading the
//! store per key and keeping an end index in it cost four memtable writes per session over its
//! life, and a store entry per session, written at each batch that changed it, a memtable insert
//! per changed session per batch: both showed up as large shares of the operator's time.
//!
//! State, format [`FORMAT`]: the log under `Scope::SessionLog`. Formats 1 and 2 kept a key per
//! session (`s` + key length + key + start → end (8 bytes) + accumulator), and format 1 an end
//! index too (`e` + end + key length + key + start); `open` reads them, deletes them and writes
//! the log in their place, and records the format under `Scope::Formats`.
//!
//! `process` is all or nothing: it changes memory only after the plugin's calls succeeded, so
//! the failure policy's rollback of a failed call has nothing of this operator's to undo.
//!
//! A key with open sessions has a slot, found by one hash lookup per batch; the end index and
//! the batch's lists of changes name it by the slot's number. With a session per user, copying
//! keys and hashing them with SipHash showed up as a large share of the operator's time, and
//! sharing each key (`Arc`) through the index and the lists instead costs a cache miss on its
//! count at every clone and drop, and a `memcmp` at every tie of ends in the index.
//!
//! A slot holds its key, its first open session and that session's accumulator inline (keys and
//! accumulators up to 16 bytes), so touching a key costs its slot's cache lines and not a heap
//! block each for the key, the sessions and the accumulator. A slot is a miss whenever a batch
//! comes back to it (its key was last seen minutes of event time before), so the loops that walk
//! a batch's slots by number ask for them a few ahead.

use std::collections::BTreeMap;
use std::hash::BuildHasher;
use std::ops::Range;

use hashbrown::HashTable;
use rustc_hash::{FxBuildHasher, FxHashMap};
use smallvec::SmallVec;

use super::emit;
use super::session_ends::Ends;
use super::session_log::{self, Change};
use super::{MIGRATE_CHUNK, WindowAcc, bound, final_at};
use crate::columns;
use crate::isolate::Policy;
use crate::operator::{Advanced, Opened, Operator, OperatorError, Processed, Scope};
use crate::pipeline::OutputMode;
use crate::plugin::{AggregateFns, EventBatch};
use crate::rows::Rows;
use crate::state::{StateStore, time_from_key};
use crate::window::{Interval, merge_sessions};

/// Formats 1 and 2: a key per session.
const OLD_SESSIONS: u8 = Scope::Sessions as u8;
/// Format 1's end index in the store.
const OLD_INDEX: u8 = Scope::SessionEnds as u8;
/// Format 3: the log of changes.
const LOG: u8 = Scope::SessionLog as u8;
/// Bytes of a format-2 session's value before its accumulator: its end.
const END_BYTES: usize = 8;
/// The version of the sessions' state layout: 2 kept the end index in memory, 3 keeps the
/// sessions as a log of changes.
const FORMAT: u32 = 3;

/// Bytes of a key held in its slot itself; a longer key takes a heap block of its own.
const INLINE_KEY: usize = 16;
/// Bytes of an accumulator held in its session itself (`plugins/error-rate`'s are 16); a
/// longer one takes a heap block of its own.
const INLINE_ACC: usize = 16;

/// A group key, held by its slot.
type Key = SmallVec<[u8; INLINE_KEY]>;
/// An open session's accumulator.
type Acc = SmallVec<[u8; INLINE_ACC]>;

/// A key's open sessions, by start, most often one. A slot without sessions is free: out of the
/// map, its number on the free list, its key kept until the slot is reused (an absorbed
/// session's delete, written at the batch's end, still needs it).
#[derive(Debug)]
struct Slot {
    key: Key,
    open: SmallVec<[Open; 1]>,
}

/// An open session of a key.
#[derive(Debug, Clone)]
struct Open {
    start: i64,
    end: i64,
    acc: Acc,
    /// Whether the store holds it (as committed, or written in this batch).
    stored: bool,
    /// Changed by the current batch, and not yet written: `changed` may list it more than once
    /// (a batch the failure policy splits makes several calls), this says whether it is done.
    changed: bool,
}

pub(super) struct SessionOperator {
    gap: i64,
    lateness: i64,
    mode: OutputMode,
    agg: Box<dyn AggregateFns>,
    policy: Policy,
    /// The slot of each key with open sessions and the high half of its key's hash, by that
    /// hash ([`key_hash`]); the key itself is compared in its slot.
    ids: HashTable<(u32, u32)>,
    /// Every key's open sessions, by slot number.
    slots: Vec<Slot>,
    /// Slots without sessions, to reuse.
    free: Vec<u32>,
    /// When the open sessions end (and, until their time, entries of sessions since changed).
    ends: Ends,
    /// (slot, start) of sessions changed in the current batch: written at its end, and what
    /// update mode emits.
    changed: Vec<(u32, i64)>,
    /// Stored sessions absorbed into others in the current batch (slot, start): deleted at its
    /// end.
    absorbed: Vec<(u32, i64)>,
    /// The bytes the open sessions take in a snapshot of the log: when to rewrite it.
    live_bytes: usize,
    /// Where the log stands.
    log: Log,
    /// The least the log grows to before it is rewritten.
    rewrite_min: usize,
    /// Stage 2 of a group (`merged.rs`): each event is a partial session whose row holds its
    /// end, rather than one event opening `[t, t + gap)`.
    over_partials: bool,
}

/// The log's entries in the store: sequence numbers `first..next`, of `bytes` in all.
#[derive(Debug, Default)]
struct Log {
    first: u64,
    next: u64,
    bytes: usize,
}

impl Log {
    /// Stages `entry` as the log's next.
    fn append(&mut self, state: &mut StateStore, entry: Vec<u8>) {
        self.bytes += entry.len();
        state.put(Scope::SessionLog.log_key(self.next), entry);
        self.next += 1;
    }
}

/// What an open session takes in a snapshot.
fn size(key: &[u8], acc: &[u8]) -> usize {
    session_log::PUT_OVERHEAD + key.len() + acc.len()
}

impl SessionOperator {
    pub(super) fn new(gap: i64, lateness: i64, mode: OutputMode, agg: Box<dyn AggregateFns>, policy: Policy) -> Self {
        Self {
            gap,
            lateness,
            mode,
            agg,
            policy,
            ids: HashTable::new(),
            slots: Vec::new(),
            free: Vec::new(),
            ends: Ends::default(),
            changed: Vec::new(),
            absorbed: Vec::new(),
            live_bytes: 0,
            log: Log::default(),
            rewrite_min: session_log::REWRITE_MIN_BYTES,
            over_partials: false,
        }
    }

    /// Over a group's partial sessions (stage 2): each event's row holds its session's end.
    pub(super) fn over_partials(mut self) -> Self {
        self.over_partials = true;
        self
    }

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

    /// A slot for `key`, which has none: a free one, or a new one.
    fn new_slot(&mut self, key: &[u8]) -> u32 {
        let id = match self.free.pop() {
            Some(id) => {
                self.slots[id as usize].key = Key::from_slice(key);
                id
            }
            None => {
                self.slots.push(Slot { key: Key::from_slice(key), open: SmallVec::new() });
                self.slots.len() as u32 - 1
            }
        };
        let slots = &self.slots;
        let hash = key_hash(key);
        self.ids.insert_unique(hash, (id, tag(hash)), |&(id, _)| key_hash(&slots[id as usize].key));
        id
    }

    /// The slot of `key`, if it has open sessions.
    fn slot_of(&self, key: &[u8]) -> Option<u32> {
        self.ids.find(key_hash(key), |&(id, _)| *self.slots[id as usize].key == *key).map(|&(id, _)| id)
    }

    /// The slot that is most likely `key`'s, found by its hash alone, without reading a slot:
    /// [`Self::confirmed`] says whether it is. Finding every key of a batch this way first lets
    /// the walk that reads the slots ask for them ahead.
    fn candidate(&self, key: &[u8]) -> Option<u32> {
        let hash = key_hash(key);
        self.ids.find(hash, |&(_, t)| t == tag(hash)).map(|&(id, _)| id)
    }

    /// `key`'s slot, given its [`Self::candidate`] (found since the map last changed: a freed
    /// slot keeps its key until reused): that one when it holds `key`, else looked up again in
    /// full (two keys whose hashes share a high half).
    fn confirmed(&self, candidate: Option<u32>, key: &[u8]) -> Option<u32> {
        match candidate {
            Some(id) if *self.slots[id as usize].key == *key => Some(id),
            _ => self.slot_of(key),
        }
    }

    /// Rewrites the log once it holds `bytes` (tests: to rewrite small states often).
    #[cfg(test)]
    pub(super) fn rewriting_at(mut self, bytes: usize) -> Self {
        self.rewrite_min = bytes;
        self
    }

    /// Entries in the end index, stale ones included (tests: that they stay bounded).
    #[cfg(test)]
    pub(super) fn index_entries(&self) -> usize {
        self.ends.len()
    }
}

/// How many slots ahead the loops over a batch's slots ask for them ([`prefetch`]).
const PREFETCH_AHEAD: usize = 8;

/// Asks for a slot's cache lines ahead of its use. The walks over a batch's slots (matching its
/// keys with their open sessions, applying the plugin's results, taking the sessions that leave,
/// writing the changed ones) know every slot number up front, and each slot is a miss: its key
/// was last seen minutes of event time before.
#[inline]
fn prefetch(slots: &[Slot], id: Option<u32>) {
    #[cfg(target_arch = "x86_64")]
    if let Some(slot) = id.and_then(|id| slots.get(id as usize)) {
        use std::arch::x86_64::{_MM_HINT_T0, _mm_prefetch};
        let first = (slot as *const Slot).cast::<i8>();
        // SAFETY: a prefetch is a hint: it reads nothing the program sees and never faults, and
        // SSE, which it needs, is part of every x86-64 target.
        unsafe {
            _mm_prefetch::<_MM_HINT_T0>(first);
            _mm_prefetch::<_MM_HINT_T0>(first.wrapping_add(std::mem::size_of::<Slot>() - 1));
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (slots, id);
}

/// The hash the slots are found by.
fn key_hash(key: &[u8]) -> u64 {
    FxBuildHasher.hash_one(key)
}

/// The high half of a key's hash, kept beside its slot number.
fn tag(hash: u64) -> u32 {
    (hash >> 32) as u32
}

fn corrupt(k: &[u8], message: &str) -> OperatorError {
    OperatorError::Corrupt { key: String::from_utf8_lossy(k).into(), message: message.into() }
}

/// A format-2 session's value: its end, then its accumulator.
fn split_session_value(k: &[u8], v: &[u8]) -> Result<(i64, Vec<u8>), OperatorError> {
    if v.len() < END_BYTES {
        return Err(corrupt(k, "short value"));
    }
    Ok((time_from_key(&v[..END_BYTES]), v[END_BYTES..].to_vec()))
}

/// Decodes `s` + len + key + start.
fn split_session_key(k: &[u8]) -> Result<(Vec<u8>, i64), OperatorError> {
    let bad = || corrupt(k, "bad session key");
    let len = u32::from_be_bytes(k.get(1..5).ok_or_else(bad)?.try_into().map_err(|_| bad())?) as usize;
    let key = k.get(5..5 + len).ok_or_else(bad)?.to_vec();
    let start = k.get(5 + len..13 + len).ok_or_else(bad)?;
    Ok((key, time_from_key(start)))
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

impl Operator for SessionOperator {
    fn open(&mut self, state: &mut StateStore, restored_version: Option<u32>) -> Result<Opened, OperatorError> {
        let format = crate::operator::state_format(state, Scope::Sessions, "sessions", FORMAT)?;
        self.log = Log::default();
        let mut sessions: BTreeMap<(Vec<u8>, i64), (i64, Vec<u8>)> = BTreeMap::new();
        if format < 3 {
            for (k, v) in state.range(&[OLD_SESSIONS], &[OLD_SESSIONS + 1])? {
                let (key, start) = split_session_key(&k)?;
                let (end, acc) = split_session_value(&k, &v)?;
                sessions.insert((key, start), (end, acc));
                state.delete(k);
            }
            for (k, _) in state.range(&[OLD_INDEX], &[OLD_INDEX + 1])? {
                state.delete(k);
            }
        } else {
            for (i, (k, v)) in state.range(&[LOG], &[LOG + 1])?.into_iter().enumerate() {
                let seq = Scope::log_seq(&k).ok_or_else(|| corrupt(&k, "bad sessions log key"))?;
                if i == 0 {
                    self.log.first = seq;
                }
                self.log.next = seq + 1;
                self.log.bytes += v.len();
                for change in session_log::decode(&v).map_err(|e| corrupt(&k, &format!("sessions log entry: {e}")))? {
                    match change {
                        Change::Put { key, start, end, acc } => {
                            sessions.insert((key.to_vec(), start), (end, acc.to_vec()));
                        }
                        Change::Delete { key, start } => {
                            sessions.remove(&(key.to_vec(), start));
                        }
                    }
                }
            }
        }
        let to = self.agg.state_version()?;
        let migrating = restored_version.filter(|&from| from != to);
        if let Some(from) = migrating {
            let mut values: Vec<&mut (i64, Vec<u8>)> = sessions.values_mut().collect();
            for chunk in values.chunks_mut(MIGRATE_CHUNK) {
                let accs: Vec<Vec<u8>> = chunk.iter().map(|(_, acc)| acc.clone()).collect();
                let migrated =
                    self.agg.migrate(from, &accs).map_err(|source| OperatorError::Migrate { from, to, source })?;
                for (v, acc) in chunk.iter_mut().zip(migrated) {
                    v.1 = acc;
                }
            }
        }
        self.ids.clear();
        self.slots.clear();
        self.free.clear();
        self.live_bytes = 0;
        let n = sessions.len();
        for ((key, start), (end, acc)) in sessions {
            // Sessions come in key order: a slot per run of them, in start order.
            if self.slots.last().is_none_or(|slot| *slot.key != *key) {
                self.new_slot(&key);
            }
            let id = self.slots.len() as u32 - 1;
            let slot = &mut self.slots[id as usize];
            self.live_bytes += size(&slot.key, &acc);
            slot.open.push(Open { start, end, acc: Acc::from_vec(acc), stored: true, changed: false });
        }
        self.index_ends();
        // Another layout or other accumulators: the log is written anew, committed with the
        // record of the new format and version.
        if format < FORMAT || migrating.is_some() {
            self.rewrite_log(state);
            crate::operator::record_state_format(state, Scope::Sessions, FORMAT);
        }
        Ok(Opened { state_version: Some(to), migrated: migrating.map(|_| n) })
    }

    fn stage(&self) -> &str {
        "aggregate"
    }

    fn fingerprint(&self) -> String {
        format!("{:?}/{:?}", crate::window::WindowSpec::Session { gap: self.gap }, self.mode)
    }

    fn mark(&self) -> usize {
        0
    }

    fn rollback(&mut self, _: usize) {}

    fn process(
        &mut self,
        events: &EventBatch,
        watermark: i64,
        _state: &mut StateStore,
        _out: &mut Rows,
    ) -> Result<Processed, OperatorError> {
        let closed_before = bound(watermark, self.lateness);
        let mut set_aside = Processed::default();
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
        for &to in &group_ends {
            let evs = &mut keyed[from..to as usize];
            if !evs.is_sorted() {
                evs.sort_unstable();
            }
            from = to as usize;
        }
        // Everything the calls need, laid out as the batch is walked, nothing per session: the
        // starts of the open sessions each session absorbs, one accumulator per session (those
        // absorbing several are merged first, in one call), its events as `members`.
        let mut sessions: Vec<Session> = Vec::new();
        let mut starts: Vec<i64> = Vec::new();
        let mut accs: Vec<Vec<u8>> = Vec::new();
        let (mut flat, mut flat_ends, mut merging) = (Vec::new(), Vec::new(), Vec::new());
        let mut members: Vec<u32> = Vec::with_capacity(keyed.len());
        let mut session_ends: Vec<u32> = Vec::new();
        let mut ivs: Vec<Interval> = Vec::new();
        let candidates: Vec<Option<u32>> = keys.iter().map(|key| self.candidate(key)).collect();
        let mut from = 0;
        for (group, (&key, &to)) in keys.iter().zip(&group_ends).enumerate() {
            let evs = &keyed[from..to as usize];
            from = to as usize;
            prefetch(&self.slots, candidates.get(group + PREFETCH_AHEAD).copied().flatten());
            let slot = self.confirmed(candidates[group], key);
            let open = slot.map_or(&[][..], |id| self.slots[id as usize].open.as_slice());
            // Intervals by start, an open session before an event that starts with it: the
            // key's open sessions (ids < open.len()) and its events, both already in order.
            ivs.clear();
            let (mut a, mut b) = (0, 0);
            while a < open.len() || b < evs.len() {
                if b == evs.len() || (a < open.len() && open[a].start <= evs[b].0) {
                    ivs.push(Interval { start: open[a].start, end: open[a].end, id: a });
                    a += 1;
                } else {
                    // Fits: events whose session would not were set aside above.
                    ivs.push(Interval { start: evs[b].0, end: evs[b].1, id: open.len() + b });
                    b += 1;
                }
            }
            for (start, end, run) in merge_sessions(&ivs) {
                let run = &ivs[run];
                // An open session that no event of this batch reaches stays as it is.
                if matches!(run, [only] if only.id < open.len()) {
                    continue;
                }
                let first = starts.len();
                let first_member = members.len();
                for iv in run {
                    match open.get(iv.id) {
                        Some(o) => starts.push(o.start),
                        None => members.push(evs[iv.id - open.len()].2),
                    }
                }
                // A session's events go to the plugin in input order, as every window's do: the
                // plugin can then fold the whole batch front to back (the guest SDK does).
                let mine = &mut members[first_member..];
                if !mine.is_sorted() {
                    mine.sort_unstable();
                }
                session_ends.push(members.len() as u32);
                let mut olds = run.iter().filter_map(|iv| open.get(iv.id));
                match starts.len() - first {
                    0 => accs.push(Vec::new()),
                    1 => accs.push(olds.next().map(|o| o.acc.to_vec()).unwrap_or_default()),
                    _ => {
                        flat.extend(olds.map(|o| o.acc.to_vec()));
                        flat_ends.push(flat.len() as u32);
                        merging.push(accs.len());
                        accs.push(Vec::new());
                    }
                }
                sessions.push(Session { start, end, group, slot, absorbed: first..starts.len() });
            }
        }
        if sessions.is_empty() {
            return Ok(set_aside);
        }
        if !merging.is_empty() {
            for (&i, acc) in merging.iter().zip(self.agg.merge(&flat, &flat_ends)?) {
                accs[i] = acc;
            }
        }
        let updated = self.agg.accumulate(&accs, events, &members, &session_ends)?;
        // Nothing failed: from here on, memory changes.
        let mut made: Option<(usize, u32)> = None;
        for (i, (s, acc)) in sessions.iter().zip(updated).enumerate() {
            prefetch(&self.slots, sessions.get(i + PREFETCH_AHEAD).and_then(|s| s.slot));
            let id = match (s.slot, made) {
                (Some(id), _) => id,
                (None, Some((group, id))) if group == s.group => id,
                (None, _) => {
                    let id = self.new_slot(keys[s.group]);
                    made = Some((s.group, id));
                    id
                }
            };
            let slot = &mut self.slots[id as usize];
            let absorbed = &starts[s.absorbed.clone()];
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
        let slots = &self.slots;
        if self.ends.due_for_rebuild(|| slots.iter().map(|slot| slot.open.len()).sum()) {
            self.index_ends();
        }
        Ok(set_aside)
    }

    /// A session is emitted by its own end, whatever was final before: `from` does not matter.
    fn advance(
        &mut self,
        _from: i64,
        to: i64,
        state: &mut StateStore,
        out: &mut Rows,
    ) -> Result<Advanced, OperatorError> {
        let windows = self.sessions_leaving(to, state);
        let mut failed = Vec::new();
        let emitted = emit::finish(windows, self.agg.as_mut(), &self.policy, out, &mut failed)?;
        Ok(Advanced { emitted, failed })
    }

    fn horizon(&self, _state: &StateStore) -> Result<Option<i64>, OperatorError> {
        Ok(self.ends.latest().map(|end| final_at(end, self.lateness)))
    }
}

impl SessionOperator {
    /// Builds the end index from the open sessions alone: at open, and to drop stale entries.
    fn index_ends(&mut self) {
        self.ends.clear();
        for (id, slot) in self.slots.iter().enumerate() {
            for o in &slot.open {
                self.ends.add(o.end, id as u32, o.start);
            }
        }
    }

    /// The sessions that leave at `watermark` under the output mode (sorted by start, then
    /// key); final ones leave memory and the store. Then the batch's writes: absorbed sessions
    /// deleted, changed ones that are still open written, once each.
    fn sessions_leaving(&mut self, watermark: i64, state: &mut StateStore) -> Vec<WindowAcc> {
        let now = bound(watermark, self.lateness);
        let changed = std::mem::take(&mut self.changed);
        // The batch's entry in the log.
        let mut entry = Vec::new();
        let mut out = Vec::new();
        let leaving = self.ends.take_until(now);
        for (i, &(end, id, start)) in leaving.iter().enumerate() {
            prefetch(&self.slots, leaving.get(i + PREFETCH_AHEAD).map(|e| e.1));
            // An entry of a session that has since grown, merged or closed names none.
            let Some(slot) = self.slots.get_mut(id as usize) else { continue };
            let Some(at) = slot.open.iter().position(|o| o.start == start && o.end == end) else { continue };
            let o = slot.open.remove(at);
            if slot.open.is_empty() {
                if let Ok(entry) = self.ids.find_entry(key_hash(&slot.key), |&(other, _)| other == id) {
                    entry.remove();
                }
                self.free.push(id);
            }
            self.live_bytes = self.live_bytes.saturating_sub(size(&slot.key, &o.acc));
            if o.stored {
                session_log::delete(&mut entry, &slot.key, start);
            }
            let take = match self.mode {
                OutputMode::Append | OutputMode::Complete => true,
                OutputMode::Update => o.changed,
            };
            if take {
                out.push(WindowAcc { start, end, key: slot.key.to_vec(), acc: o.acc.into_vec() });
            }
        }
        if self.mode == OutputMode::Complete {
            for slot in &self.slots {
                for o in &slot.open {
                    out.push(WindowAcc { start: o.start, end: o.end, key: slot.key.to_vec(), acc: o.acc.to_vec() });
                }
            }
        }
        // A freed slot still has its key: no slot is reused before the batch's end.
        for (id, start) in self.absorbed.drain(..) {
            if let Some(slot) = self.slots.get(id as usize) {
                session_log::delete(&mut entry, &slot.key, start);
            }
        }
        // Each changed session still open: written once, and emitted in update mode.
        for (i, &(id, start)) in changed.iter().enumerate() {
            prefetch(&self.slots, changed.get(i + PREFETCH_AHEAD).map(|c| c.0));
            let Some(slot) = self.slots.get_mut(id as usize) else { continue };
            let Some(o) = slot.open.iter_mut().find(|o| o.start == start && o.changed) else { continue };
            o.changed = false;
            o.stored = true;
            session_log::put(&mut entry, &slot.key, start, o.end, &o.acc);
            if self.mode == OutputMode::Update {
                out.push(WindowAcc { start, end: o.end, key: slot.key.to_vec(), acc: o.acc.to_vec() });
            }
        }
        let limit = (session_log::REWRITE_FACTOR * self.live_bytes).max(self.rewrite_min);
        if self.log.bytes + entry.len() > limit {
            self.rewrite_log(state);
        } else if !entry.is_empty() {
            self.log.append(state, entry);
        }
        out.sort_by(|a, b| (a.start, &a.key).cmp(&(b.start, &b.key)));
        out
    }

    /// Replaces the log with a snapshot of the open sessions, in entries of at most
    /// `ENTRY_BYTES`, and the deletes of every entry before it: one atomic write at commit.
    fn rewrite_log(&mut self, state: &mut StateStore) {
        for seq in self.log.first..self.log.next {
            state.delete(Scope::SessionLog.log_key(seq));
        }
        self.log = Log { first: self.log.next, next: self.log.next, bytes: 0 };
        let mut entry = Vec::new();
        for Slot { key, open } in &mut self.slots {
            for o in open {
                session_log::put(&mut entry, key, o.start, o.end, &o.acc);
                o.stored = true;
                if entry.len() >= session_log::ENTRY_BYTES {
                    self.log.append(state, std::mem::take(&mut entry));
                }
            }
        }
        if !entry.is_empty() {
            self.log.append(state, entry);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::time_key;
    use crate::testing::{Count, policy};

    #[test]
    fn format_2_session_keys_are_read() {
        let mut k = vec![OLD_SESSIONS, 0, 0, 0, 6];
        k.extend_from_slice(b"user-7");
        k.extend_from_slice(&time_key(-42));
        assert_eq!(split_session_key(&k).unwrap(), (b"user-7".to_vec(), -42));
        assert!(split_session_key(b"s\0\0\0\x09ab").is_err());
    }

    /// Keys inline in their slots or not, found from the right candidate, a wrong one or none,
    /// and gone from the map when their slot is freed.
    #[test]
    fn slots_are_found_by_key_whatever_the_candidate() {
        let mut op = SessionOperator::new(60_000, 0, OutputMode::Append, Box::new(Count), policy());
        let long = [b'k'; INLINE_KEY + 9];
        let keys: [&[u8]; 4] = [b"", b"user-7", &long, &long[..INLINE_KEY]];
        let ids: Vec<u32> = keys.iter().map(|k| op.new_slot(k)).collect();
        for (key, &id) in keys.iter().zip(&ids) {
            assert_eq!(op.slot_of(key), Some(id));
            assert_eq!(op.candidate(key), Some(id));
            for wrong in [None, Some(ids[0]), Some(ids[2])] {
                assert_eq!(op.confirmed(wrong, key), Some(id), "{wrong:?}");
            }
        }
        assert_eq!(op.confirmed(Some(ids[1]), b"user-8"), None);
        // Freed as `sessions_leaving` frees a slot: out of the map, then reused for another key.
        let hash = key_hash(&op.slots[ids[2] as usize].key);
        let Ok(entry) = op.ids.find_entry(hash, |&(other, _)| other == ids[2]) else { panic!("not in the map") };
        entry.remove();
        op.free.push(ids[2]);
        assert_eq!(op.slot_of(&long), None);
        assert_eq!(op.candidate(&long), None);
        assert_eq!(op.new_slot(b"user-9"), ids[2]);
        assert_eq!(op.slot_of(b"user-9"), Some(ids[2]));
        assert_eq!(op.slot_of(&long[..INLINE_KEY]), Some(ids[3]));
    }
}
