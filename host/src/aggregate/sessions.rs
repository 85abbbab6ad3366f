//! Session windows per key: an event opens `[t, t + gap)`, and a key's sessions that intersect
//! or touch merge, accumulators included (the aggregator's `merge`).
//!
//! The open sessions live in memory, with an index by end, rebuilt from the state store at
//! start; the store holds each open session once, as of the last committed batch. A batch
//! writes a session only if it changed (once, at the batch's end, however many events reached
//! it) and deletes it when it leaves; a session that opens and closes within one batch never
//! touches the store. Reading the store per key and keeping an end index in it cost four
//! memtable writes per session over its life, and made sessions 7–13× the cost of tumbling.
//!
//! State, format [`FORMAT`]: `s` + key length + key + start → session end (8 bytes) +
//! accumulator. Format 1 also kept the end index in the store (`e` + end + key length + key +
//! start); `open` drops it, and records the format under `Scope::Formats`.
//!
//! `process` is all or nothing: it changes memory only after the plugin's calls succeeded, so
//! the failure policy's rollback of a failed call has nothing of this operator's to undo.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use super::emit::{self, Policy};
use super::{WindowAcc, bound, final_at, open_accumulators};
use crate::columns;
use crate::operator::{Advanced, Opened, Operator, OperatorError, Processed, Scope};
use crate::pipeline::OutputMode;
use crate::plugin::{AggregateFns, EventBatch};
use crate::sink::Rows;
use crate::state::{StateStore, time_from_key, time_key};
use crate::window::{Interval, merge_sessions};

const PREFIX: u8 = Scope::Sessions as u8;
/// Format 1's end index in the store.
const OLD_INDEX: u8 = Scope::SessionEnds as u8;
/// Bytes of a stored session's value before its accumulator: its end.
const END_BYTES: usize = 8;
/// The version of the sessions' state layout: 2 keeps the end index in memory.
const FORMAT: u32 = 2;

/// An open session of a key.
#[derive(Debug, Clone)]
struct Open {
    start: i64,
    end: i64,
    acc: Vec<u8>,
    /// Whether the store holds it (as committed, or written in this batch).
    stored: bool,
}

pub(super) struct SessionOperator {
    gap: i64,
    lateness: i64,
    mode: OutputMode,
    agg: Box<dyn AggregateFns>,
    policy: Policy,
    /// Every open session, by key, each key's by start.
    open: HashMap<Vec<u8>, Vec<Open>>,
    /// (end, key, start) of every open session: the final ones are a prefix.
    ends: BTreeSet<(i64, Vec<u8>, i64)>,
    /// (key, start) of sessions changed in the current batch: written at its end, and what
    /// update mode emits.
    changed: Vec<(Vec<u8>, i64)>,
    /// Stored sessions absorbed into others in the current batch: deleted at its end.
    absorbed: Vec<Vec<u8>>,
}

impl SessionOperator {
    pub(super) fn new(gap: i64, lateness: i64, mode: OutputMode, agg: Box<dyn AggregateFns>, policy: Policy) -> Self {
        Self {
            gap,
            lateness,
            mode,
            agg,
            policy,
            open: HashMap::new(),
            ends: BTreeSet::new(),
            changed: Vec::new(),
            absorbed: Vec::new(),
        }
    }
}

fn session_key(key: &[u8], start: i64) -> Vec<u8> {
    let mut k = Vec::with_capacity(5 + key.len() + 8);
    k.push(PREFIX);
    k.extend_from_slice(&(key.len() as u32).to_be_bytes());
    k.extend_from_slice(key);
    k.extend_from_slice(&time_key(start));
    k
}

fn format_key() -> Vec<u8> {
    vec![Scope::Formats as u8, PREFIX]
}

fn corrupt(k: &[u8], message: &str) -> OperatorError {
    OperatorError::Corrupt { key: String::from_utf8_lossy(k).into(), message: message.into() }
}

/// A stored session's value: its end, then its accumulator.
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
    key: Vec<u8>,
    /// Open sessions this one absorbs (their starts), and their accumulators.
    starts: Vec<i64>,
    accs: Vec<Vec<u8>>,
    /// This batch's events.
    events: Vec<u32>,
}

impl Operator for SessionOperator {
    fn open(&mut self, state: &mut StateStore, restored_version: Option<u32>) -> Result<Opened, OperatorError> {
        let opened = open_accumulators(self.agg.as_mut(), state, restored_version, PREFIX, END_BYTES)?;
        let format = match state.get(&format_key())? {
            None => 1,
            Some(v) => u32::from_be_bytes(
                v.as_slice().try_into().map_err(|_| corrupt(&format_key(), "a format that is not 4 bytes"))?,
            ),
        };
        if format > FORMAT {
            return Err(corrupt(
                &format_key(),
                &format!("sessions state format {format}, written by a newer build (this one reads up to {FORMAT})"),
            ));
        }
        if format < FORMAT {
            for (k, _) in state.range(&[OLD_INDEX], &[OLD_INDEX + 1])? {
                state.delete(k);
            }
            state.put(format_key(), FORMAT.to_be_bytes().to_vec());
        }
        self.open.clear();
        self.ends.clear();
        for (k, v) in state.range(&[PREFIX], &[PREFIX + 1])? {
            let (key, start) = split_session_key(&k)?;
            let (end, acc) = split_session_value(&k, &v)?;
            self.ends.insert((end, key.clone(), start));
            self.open.entry(key).or_default().push(Open { start, end, acc, stored: true });
        }
        Ok(opened)
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
        let mut by_key: BTreeMap<&[u8], Vec<(i64, u32)>> = BTreeMap::new();
        for (i, &t) in events.times.iter().enumerate() {
            let Some(end) = t.checked_add(self.gap) else {
                let why = format!("event time {t}: its session would end outside the timeline");
                set_aside.invalid.push((i as u32, why));
                continue;
            };
            if end <= closed_before {
                set_aside.late.push(i as u32);
            } else {
                by_key.entry(columns::item(&events.keys, &events.key_ends, i)).or_default().push((t, i as u32));
            }
        }
        let mut sessions: Vec<Session> = Vec::new();
        let none = Vec::new();
        for (key, mut evs) in by_key {
            evs.sort_unstable();
            let open = self.open.get(key).unwrap_or(&none);
            // Intervals: open sessions first (ids < open.len()), then one per event.
            let mut ivs: Vec<Interval> = Vec::with_capacity(open.len() + evs.len());
            ivs.extend(open.iter().enumerate().map(|(id, o)| Interval { start: o.start, end: o.end, id }));
            for (j, &(t, _)) in evs.iter().enumerate() {
                // Fits: events whose session would not were set aside above.
                ivs.push(Interval { start: t, end: t.saturating_add(self.gap), id: open.len() + j });
            }
            ivs.sort_by_key(|iv| (iv.start, iv.id));
            for (start, end, ids) in merge_sessions(&ivs) {
                // An open session that no event of this batch reaches stays as it is.
                if matches!(ids.as_slice(), [id] if *id < open.len()) {
                    continue;
                }
                let mut s =
                    Session { start, end, key: key.to_vec(), starts: Vec::new(), accs: Vec::new(), events: Vec::new() };
                for id in ids {
                    match open.get(id) {
                        Some(o) => {
                            s.starts.push(o.start);
                            s.accs.push(o.acc.clone());
                        }
                        None => s.events.push(evs[id - open.len()].1),
                    }
                }
                sessions.push(s);
            }
        }
        if sessions.is_empty() {
            return Ok(set_aside);
        }
        // Sessions that swallowed several open ones merge those first, in one call.
        let mut flat = Vec::new();
        let mut ends = Vec::new();
        let mut merging = Vec::new();
        for (i, s) in sessions.iter().enumerate() {
            if s.accs.len() > 1 {
                flat.extend(s.accs.iter().cloned());
                ends.push(flat.len() as u32);
                merging.push(i);
            }
        }
        let mut merged = Vec::new();
        if !merging.is_empty() {
            merged = self.agg.merge(&flat, &ends)?;
        }
        let mut accs: Vec<Vec<u8>> = sessions.iter().map(|s| s.accs.first().cloned().unwrap_or_default()).collect();
        for (&i, acc) in merging.iter().zip(merged) {
            accs[i] = acc;
        }
        let mut members = Vec::new();
        let mut group_ends = Vec::with_capacity(sessions.len());
        for s in &sessions {
            members.extend_from_slice(&s.events);
            group_ends.push(members.len() as u32);
        }
        let updated = self.agg.accumulate(&accs, events, &members, &group_ends)?;
        // Nothing failed: from here on, memory changes.
        for (s, acc) in sessions.into_iter().zip(updated) {
            let list = self.open.entry(s.key.clone()).or_default();
            let mut stored = false;
            list.retain(|o| {
                if !s.starts.contains(&o.start) {
                    return true;
                }
                self.ends.remove(&(o.end, s.key.clone(), o.start));
                if o.start == s.start {
                    stored |= o.stored; // the merged session overwrites it in place
                } else if o.stored {
                    self.absorbed.push(session_key(&s.key, o.start));
                }
                false
            });
            let at = list.partition_point(|o| o.start < s.start);
            list.insert(at, Open { start: s.start, end: s.end, acc, stored });
            self.ends.insert((s.end, s.key.clone(), s.start));
            self.changed.push((s.key, s.start));
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
        Ok(self.ends.last().map(|(end, _, _)| final_at(*end, self.lateness)))
    }
}

impl SessionOperator {
    /// The sessions that leave at `watermark` under the output mode (sorted by start, then
    /// key); final ones leave memory and the store. Then the batch's writes: absorbed sessions
    /// deleted, changed ones that are still open written, once each.
    fn sessions_leaving(&mut self, watermark: i64, state: &mut StateStore) -> Vec<WindowAcc> {
        let now = bound(watermark, self.lateness);
        let changed: BTreeSet<(Vec<u8>, i64)> = std::mem::take(&mut self.changed).into_iter().collect();
        let mut out = Vec::new();
        while let Some((end, key, start)) = self.ends.first().cloned().filter(|(end, _, _)| *end <= now) {
            self.ends.pop_first();
            let Some(list) = self.open.get_mut(&key) else { continue };
            let Some(at) = list.iter().position(|o| o.start == start) else { continue };
            let o = list.remove(at);
            if list.is_empty() {
                self.open.remove(&key);
            }
            if o.stored {
                state.delete(session_key(&key, start));
            }
            let take = match self.mode {
                OutputMode::Append | OutputMode::Complete => true,
                OutputMode::Update => changed.contains(&(key.clone(), start)),
            };
            if take {
                out.push(WindowAcc { start, end, key, acc: o.acc });
            }
        }
        let still_open = |key: &[u8], start: i64, open: &HashMap<Vec<u8>, Vec<Open>>| {
            open.get(key).and_then(|l| l.iter().find(|o| o.start == start)).cloned()
        };
        match self.mode {
            OutputMode::Append => {}
            OutputMode::Update => {
                for (key, start) in &changed {
                    if let Some(o) = still_open(key, *start, &self.open) {
                        out.push(WindowAcc { start: o.start, end: o.end, key: key.clone(), acc: o.acc });
                    }
                }
            }
            OutputMode::Complete => {
                for (key, list) in &self.open {
                    for o in list {
                        out.push(WindowAcc { start: o.start, end: o.end, key: key.clone(), acc: o.acc.clone() });
                    }
                }
            }
        }
        for k in self.absorbed.drain(..) {
            state.delete(k);
        }
        for (key, start) in changed {
            let Some(list) = self.open.get_mut(&key) else { continue };
            let Some(o) = list.iter_mut().find(|o| o.start == start) else { continue };
            let mut v = time_key(o.end).to_vec();
            v.extend_from_slice(&o.acc);
            state.put(session_key(&key, start), v);
            o.stored = true;
        }
        out.sort_by(|a, b| (a.start, &a.key).cmp(&(b.start, &b.key)));
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn session_keys_round_trip() {
        let k = session_key(b"user-7", -42);
        assert_eq!(split_session_key(&k).unwrap(), (b"user-7".to_vec(), -42));
        assert!(split_session_key(b"s\0\0\0\x09ab").is_err());
    }
}
