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
//!
//! Its parts, a file each: `slots.rs` (finding a key's slot), `process.rs` (`process`, step by
//! step) and `leaving.rs` (the sessions that leave at the watermark, and the batch's entry in
//! the log).

mod leaving;
mod process;
mod slots;
#[cfg(test)]
mod tests;

use std::collections::BTreeMap;

use hashbrown::HashTable;
use smallvec::SmallVec;

use super::emit;
use super::session_ends::Ends;
use super::session_log::{self, Change};
use super::{MIGRATE_CHUNK, bound, final_at};
use crate::isolate::Policy;
use crate::operator::{Advanced, Opened, Operator, OperatorError, Processed, Scope};
use crate::pipeline::OutputMode;
use crate::plugin::{AggregateFns, EventBatch};
use crate::rows::Rows;
use crate::state::{StateStore, time_from_key};

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
#[inline]
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
        let batch = self.group_by_key(events, closed_before, &mut set_aside);
        let mut plan = self.plan(&batch);
        if plan.is_empty() {
            return Ok(set_aside);
        }
        let updated = self.call_plugin(&mut plan, events)?;
        // Nothing failed: from here on, memory changes.
        self.apply(&batch, &plan, updated);
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
}
