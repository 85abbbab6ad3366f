//! Deduplication within the watermark (`[dedup]`), in front of another operator: an event whose
//! key a kept event had within `within` of its event time is a duplicate and goes no further.
//! Spark's `dropDuplicatesWithinWatermark` is the model.
//!
//! The rule is a function of the events alone: an event is dropped if and only if an earlier
//! kept event (by input order) has the same key and an event time at most `within` away, so
//! where batches begin and end changes nothing. To decide that, a kept event's time must stay in
//! state as long as an event that is not late may still fall within `within` of it: an event is
//! late here when its time is more than `within` behind the watermark, so a kept time may go
//! once the watermark passes it by `2 × within`. Late events are set aside as late, as windows
//! set theirs aside: with their keys' state gone, whether they repeat cannot be told. A kept
//! time held longer than that changes nothing: no event that is not late is near it.
//!
//! The kept keys and times live in memory, rebuilt from the state store at start. The store
//! holds them as a log (state format [`FORMAT`], under `Scope::DedupLog`): each `process` call
//! that keeps events appends one entry, its latest event time and then its kept events, and an
//! entry leaves the store and memory, its times with it, once the watermark passes its latest
//! time by `2 × within`. Format 1 kept two store entries per kept event (`DedupKept` + key +
//! time, `DedupExpiry` + time + key), and looked every event up with a RocksDB seek: a seek and
//! four writes per kept event over its life. `open` converts format 1 and records the format
//! under `Scope::Formats`.
//!
//! `process` takes the events it keeps into memory as it meets them (a repeat within the call
//! must see them) and forgets them again if the call fails; the call's log entry is staged only
//! once the operator behind it took the events. So a failed call leaves nothing behind.

use std::collections::VecDeque;

use rustc_hash::FxHashMap;

use super::{Advanced, KeyField, Opened, Operator, OperatorError, Passing, Processed, Scope};
use crate::bytes::ByteReader;
use crate::columns;
use crate::pipeline::Dedup;
use crate::plugin::EventBatch;
use crate::rows::Rows;
use crate::state::{StateStore, time_from_key};

/// The version of the dedup state's layout: 1 kept an entry per kept event and an expiry
/// index, 2 keeps a log of kept events.
const FORMAT: u32 = 2;
/// Format 1's kept events.
const OLD_KEPT: u8 = Scope::DedupKept as u8;
/// Format 1's expiry index.
const OLD_EXPIRY: u8 = Scope::DedupExpiry as u8;
/// Format 2's log.
const LOG: u8 = Scope::DedupLog as u8;
/// The most kept events format 1's conversion writes to one log entry.
const CONVERTED_PER_ENTRY: usize = 50_000;

pub struct Deduplicate {
    spec: Dedup,
    /// `dedup.key`, if the key is a row field.
    field: Option<KeyField>,
    /// The operator the events that are not duplicates go on to.
    next: Box<dyn Operator>,
    /// Every kept key's kept times, as the log holds them.
    kept: FxHashMap<Box<[u8]>, Times>,
    /// The log's entries in the store: (sequence number, latest event time), in order.
    entries: VecDeque<(u64, i64)>,
    /// The next entry's sequence number.
    next_seq: u64,
}

/// A key's kept times: one, almost always.
#[derive(Debug)]
enum Times {
    One(i64),
    Many(Vec<i64>),
}

impl Times {
    fn as_slice(&self) -> &[i64] {
        match self {
            Times::One(t) => std::slice::from_ref(t),
            Times::Many(ts) => ts,
        }
    }

    fn push(&mut self, t: i64) {
        match self {
            Times::One(first) => *self = Times::Many(vec![*first, t]),
            Times::Many(ts) => ts.push(t),
        }
    }

    /// Forgets one of `t`; says whether none is left.
    fn remove(&mut self, t: i64) -> bool {
        match self {
            Times::One(only) => *only == t,
            Times::Many(ts) => {
                if let Some(at) = ts.iter().position(|&k| k == t) {
                    ts.swap_remove(at);
                }
                ts.is_empty()
            }
        }
    }
}

impl Deduplicate {
    pub fn new(spec: Dedup, next: Box<dyn Operator>) -> Self {
        let field = spec.field.as_deref().map(KeyField::new);
        Self { spec, field, next, kept: FxHashMap::default(), entries: VecDeque::new(), next_seq: 0 }
    }

    fn key(&self, events: &EventBatch, i: usize) -> Result<Vec<u8>, String> {
        super::event_key(self.field.as_ref(), "dedup.key", events, i)
    }

    fn keep(&mut self, key: &[u8], t: i64) {
        match self.kept.get_mut(key) {
            Some(times) => times.push(t),
            None => {
                self.kept.insert(key.into(), Times::One(t));
            }
        }
    }

    /// Takes an entry's kept events into memory; returns its latest time.
    fn replay(&mut self, k: &[u8], entry: &[u8]) -> Result<i64, OperatorError> {
        let (latest, events) = decode(entry).map_err(|e| corrupt(k, &format!("dedup log entry: {e}")))?;
        for (key, t) in events {
            self.keep(key, t);
        }
        Ok(latest)
    }

    /// Judges each event, keeping (in memory and in `entry`) those that are neither late,
    /// invalid nor repeats, and hands those on; returns the latest time kept, if any.
    fn take(
        &mut self,
        events: &EventBatch,
        watermark: i64,
        state: &mut StateStore,
        out: &mut Rows,
        set_aside: &mut Processed,
        entry: &mut Vec<u8>,
    ) -> Result<Option<i64>, OperatorError> {
        let within = self.spec.within_ms;
        let mut latest = None;
        let mut passed = Passing::default();
        for (i, &t) in events.times.iter().enumerate() {
            if t.saturating_add(within) < watermark {
                set_aside.late.push(i as u32);
                continue;
            }
            let key = match self.key(events, i) {
                Ok(key) => key,
                Err(why) => {
                    set_aside.invalid.push((i as u32, why));
                    continue;
                }
            };
            match self.kept.get_mut(key.as_slice()) {
                Some(times) if times.as_slice().iter().any(|&k| k.abs_diff(t) <= within as u64) => {
                    set_aside.duplicates += 1;
                    continue;
                }
                Some(times) => {
                    times.push(t);
                    put(entry, &key, t);
                }
                None => {
                    put(entry, &key, t);
                    self.kept.insert(key.into_boxed_slice(), Times::One(t));
                }
            }
            latest = latest.max(Some(t));
            passed.push(events, i, columns::item(&events.rows, &events.row_ends, i))?;
        }
        passed.forward(self.next.as_mut(), watermark, state, out, set_aside)?;
        Ok(latest)
    }

    /// Forgets the kept events of an entry.
    fn forget(&mut self, entry: &[u8]) -> Result<(), String> {
        let (_, events) = decode(entry)?;
        for (key, t) in events {
            if self.kept.get_mut(key).is_some_and(|times| times.remove(t)) {
                self.kept.remove(key);
            }
        }
        Ok(())
    }

    /// Stages `entry` (kept events whose latest time is `latest`) as the log's next.
    fn append(&mut self, state: &mut StateStore, latest: i64, entry: Vec<u8>) {
        state.put(Scope::DedupLog.log_key(self.next_seq), entry);
        self.entries.push_back((self.next_seq, latest));
        self.next_seq += 1;
    }
}

fn corrupt(k: &[u8], message: &str) -> OperatorError {
    OperatorError::Corrupt { key: String::from_utf8_lossy(k).into(), message: message.into() }
}

/// A log entry's start: the latest time of its events (big-endian).
fn entry_with(latest: i64, capacity: usize) -> Vec<u8> {
    let mut entry = Vec::with_capacity(8 + capacity);
    entry.extend_from_slice(&latest.to_be_bytes());
    entry
}

/// Appends a kept event to an entry: key length (u32), key, time (i64), big-endian.
fn put(entry: &mut Vec<u8>, key: &[u8], t: i64) {
    entry.extend_from_slice(&(key.len() as u32).to_be_bytes());
    entry.extend_from_slice(key);
    entry.extend_from_slice(&t.to_be_bytes());
}

/// A log entry decoded: its latest time, and each kept event's key and time.
type Entry<'a> = (i64, Vec<(&'a [u8], i64)>);

/// An entry's latest time and kept events; an error names what is wrong and where.
fn decode(entry: &[u8]) -> Result<Entry<'_>, String> {
    let mut r = ByteReader::new(entry);
    let latest = r.i64_be()?;
    let mut out = Vec::new();
    while r.at() < entry.len() {
        let len = r.u32_be()? as usize;
        let key = r.take(len)?;
        out.push((key, r.i64_be()?));
    }
    Ok((latest, out))
}

/// Format 1's kept entry: scope, key length (u32), key, time.
fn split_old_kept(k: &[u8]) -> Option<(&[u8], i64)> {
    let len = u32::from_be_bytes(k.get(1..5)?.try_into().ok()?) as usize;
    Some((k.get(5..5 + len)?, time_from_key(k.get(5 + len..13 + len)?)))
}

// The rest is the next operator's: the keys kept hold nothing to emit, so a flush waits only for
// what comes after (`horizon`), and the stage, side inputs and marks are the next one's.
impl super::Wrapping for Deduplicate {
    fn next(&self) -> &dyn Operator {
        self.next.as_ref()
    }

    fn next_mut(&mut self) -> &mut dyn Operator {
        self.next.as_mut()
    }

    fn open(&mut self, state: &mut StateStore, restored_version: Option<u32>) -> Result<Opened, OperatorError> {
        let format = super::state_format(state, Scope::DedupKept, "dedup", FORMAT)?;
        self.kept.clear();
        self.entries.clear();
        self.next_seq = 0;
        for (k, v) in state.range(&[LOG], &[LOG + 1])? {
            let seq = Scope::log_seq(&k).ok_or_else(|| corrupt(&k, "bad dedup log key"))?;
            let latest = self.replay(&k, &v)?;
            self.entries.push_back((seq, latest));
            self.next_seq = seq + 1;
        }
        if format < FORMAT {
            // Format 1's kept events become log entries, its two entries per event deleted.
            let old = state.range(&[OLD_KEPT], &[OLD_KEPT + 1])?;
            for chunk in old.chunks(CONVERTED_PER_ENTRY) {
                let mut events = Vec::with_capacity(chunk.len());
                for (k, _) in chunk {
                    events.push(split_old_kept(k).ok_or_else(|| corrupt(k, "a format-1 dedup entry"))?);
                }
                let latest = events.iter().map(|&(_, t)| t).max().unwrap_or(i64::MIN);
                let mut entry = entry_with(latest, chunk.iter().map(|(k, _)| k.len()).sum());
                for &(key, t) in &events {
                    put(&mut entry, key, t);
                    self.keep(key, t);
                }
                self.append(state, latest, entry);
            }
            for (k, _) in old {
                state.delete(k);
            }
            for (k, _) in state.range(&[OLD_EXPIRY], &[OLD_EXPIRY + 1])? {
                state.delete(k);
            }
            super::record_state_format(state, Scope::DedupKept, FORMAT);
        }
        self.next.open(state, restored_version)
    }

    fn process(
        &mut self,
        events: &EventBatch,
        watermark: i64,
        state: &mut StateStore,
        out: &mut Rows,
    ) -> Result<Processed, OperatorError> {
        let mut set_aside = Processed::default();
        // The call's entry in the log, its latest time filled in at the end: the events it
        // keeps, taken into memory as they are met, and forgotten again if the call fails.
        let mut entry = entry_with(i64::MIN, 0);
        match self.take(events, watermark, state, out, &mut set_aside, &mut entry) {
            Ok(Some(latest)) => {
                entry[..8].copy_from_slice(&latest.to_be_bytes());
                self.append(state, latest, entry);
            }
            Ok(None) => {}
            Err(e) => {
                self.forget(&entry).map_err(|why| corrupt(b"", &format!("this call's dedup entry: {why}")))?;
                return Err(e);
            }
        }
        Ok(set_aside)
    }

    fn advance(
        &mut self,
        from: i64,
        to: i64,
        state: &mut StateStore,
        out: &mut Rows,
    ) -> Result<Advanced, OperatorError> {
        let cutoff = to.saturating_sub(self.spec.within_ms.saturating_mul(2));
        // The entries whose every time the cutoff passed leave, their kept events with them.
        let expired: Vec<u64> = self.entries.iter().filter(|&&(_, latest)| latest < cutoff).map(|&(s, _)| s).collect();
        if !expired.is_empty() {
            self.entries.retain(|&(_, latest)| latest >= cutoff);
            for seq in expired {
                let k = Scope::DedupLog.log_key(seq);
                let entry = state.get(&k)?.ok_or_else(|| corrupt(&k, "a dedup log entry missing from the store"))?;
                self.forget(&entry).map_err(|e| corrupt(&k, &format!("dedup log entry: {e}")))?;
                state.delete(k);
            }
        }
        self.next.advance(from, to, state, out)
    }

    fn fingerprint(&self) -> String {
        let field = self.spec.field.as_deref().map_or_else(|| "event key".to_string(), |f| format!("{f:?} as text"));
        format!("dedup on {field} within {} ms, then {}", self.spec.within_ms, self.next.fingerprint())
    }
}

#[cfg(test)]
mod tests;
