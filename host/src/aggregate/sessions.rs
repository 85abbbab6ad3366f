//! Session windows per key: an event opens `[t, t + gap)`, and a key's sessions that intersect
//! or touch merge, accumulators included (the aggregator's `merge`).
//!
//! State: `s` + key length + key + start → session end (8 bytes) + accumulator, so a key's
//! sessions are one range; and the index `e` + end + key length + key + start → nothing, so the
//! sessions that became final are a prefix of it.

use std::collections::BTreeMap;

use super::emit::{self, Policy};
use super::{WindowAcc, bound, final_at, open_accumulators};
use crate::columns;
use crate::operator::{Advanced, Opened, Operator, OperatorError, Processed};
use crate::pipeline::OutputMode;
use crate::plugin::{AggregateFns, EventBatch};
use crate::sink::Rows;
use crate::state::{StateStore, time_from_key, time_key};
use crate::window::{Interval, merge_sessions};

const PREFIX: u8 = crate::operator::Scope::Sessions as u8;
const INDEX: u8 = crate::operator::Scope::SessionEnds as u8;
/// Bytes of a stored session's value before its accumulator: its end.
const END_BYTES: usize = 8;

pub(super) struct SessionOperator {
    gap: i64,
    lateness: i64,
    mode: OutputMode,
    agg: Box<dyn AggregateFns>,
    policy: Policy,
    /// (key, start) of sessions written in the current batch, for update mode.
    changed: Vec<(Vec<u8>, i64)>,
}

impl SessionOperator {
    pub(super) fn new(gap: i64, lateness: i64, mode: OutputMode, agg: Box<dyn AggregateFns>, policy: Policy) -> Self {
        Self { gap, lateness, mode, agg, policy, changed: Vec::new() }
    }
}

fn session_prefix(key: &[u8]) -> Vec<u8> {
    let mut k = Vec::with_capacity(5 + key.len() + 8);
    k.push(PREFIX);
    k.extend_from_slice(&(key.len() as u32).to_be_bytes());
    k.extend_from_slice(key);
    k
}

fn session_key(key: &[u8], start: i64) -> Vec<u8> {
    let mut k = session_prefix(key);
    k.extend_from_slice(&time_key(start));
    k
}

fn end_index_key(end: i64, key: &[u8], start: i64) -> Vec<u8> {
    let mut k = vec![INDEX];
    k.extend_from_slice(&time_key(end));
    k.extend_from_slice(&session_key(key, start)[1..]);
    k
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

fn put_session(state: &mut StateStore, key: &[u8], start: i64, end: i64, acc: &[u8]) {
    let mut v = time_key(end).to_vec();
    v.extend_from_slice(acc);
    state.put(session_key(key, start), v);
    state.put(end_index_key(end, key, start), Vec::new());
}

struct Session {
    start: i64,
    end: i64,
    key: Vec<u8>,
    /// Accumulators of stored sessions this one absorbed.
    stored: Vec<Vec<u8>>,
    /// This batch's events.
    events: Vec<u32>,
}

impl Operator for SessionOperator {
    fn open(&mut self, state: &mut StateStore, restored_version: Option<u32>) -> Result<Opened, OperatorError> {
        open_accumulators(self.agg.as_mut(), state, restored_version, PREFIX, END_BYTES)
    }

    fn stage(&self) -> &str {
        "aggregate"
    }

    fn fingerprint(&self) -> String {
        format!("{:?}/{:?}", crate::window::WindowSpec::Session { gap: self.gap }, self.mode)
    }

    fn mark(&self) -> usize {
        self.changed.len()
    }

    fn rollback(&mut self, mark: usize) {
        self.changed.truncate(mark);
    }

    fn process(
        &mut self,
        events: &EventBatch,
        watermark: i64,
        state: &mut StateStore,
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
        let ranges: Vec<(Vec<u8>, Vec<u8>)> = by_key
            .keys()
            .map(|key| {
                let prefix = session_prefix(key);
                let mut upper = prefix.clone();
                upper.extend_from_slice(&[0xff; 8]);
                (prefix, upper)
            })
            .collect();
        let all_stored = state.ranges(&ranges)?;
        for ((key, mut evs), stored) in by_key.into_iter().zip(all_stored) {
            evs.sort_unstable();
            // Intervals: stored sessions first (ids < stored.len()), then one per event.
            let mut ivs: Vec<Interval> = Vec::with_capacity(stored.len() + evs.len());
            let mut stored_parts = Vec::with_capacity(stored.len());
            for (id, (k, v)) in stored.iter().enumerate() {
                let (_, start) = split_session_key(k)?;
                let (end, acc) = split_session_value(k, v)?;
                ivs.push(Interval { start, end, id });
                stored_parts.push((start, end, acc));
            }
            for (j, &(t, _)) in evs.iter().enumerate() {
                // Fits: events whose session would not were set aside above.
                ivs.push(Interval { start: t, end: t.saturating_add(self.gap), id: stored.len() + j });
            }
            ivs.sort_by_key(|iv| (iv.start, iv.id));
            for (start, end, ids) in merge_sessions(&ivs) {
                // A stored session that no event of this batch reaches stays as it is, unwritten.
                if matches!(ids.as_slice(), [id] if *id < stored.len()) {
                    continue;
                }
                let mut s = Session { start, end, key: key.to_vec(), stored: Vec::new(), events: Vec::new() };
                for id in ids {
                    if id < stored.len() {
                        let (st, en, acc) = &stored_parts[id];
                        state.delete(session_key(key, *st));
                        state.delete(end_index_key(*en, key, *st));
                        s.stored.push(acc.clone());
                    } else {
                        s.events.push(evs[id - stored.len()].1);
                    }
                }
                sessions.push(s);
            }
        }
        if sessions.is_empty() {
            return Ok(set_aside);
        }
        // Sessions that swallowed several stored ones merge those first, in one call.
        let mut flat = Vec::new();
        let mut ends = Vec::new();
        let mut merging = Vec::new();
        for (i, s) in sessions.iter().enumerate() {
            if s.stored.len() > 1 {
                flat.extend(s.stored.iter().cloned());
                ends.push(flat.len() as u32);
                merging.push(i);
            }
        }
        if !merging.is_empty() {
            for (i, acc) in merging.into_iter().zip(self.agg.merge(&flat, &ends)?) {
                sessions[i].stored = vec![acc];
            }
        }
        let accs: Vec<Vec<u8>> = sessions.iter().map(|s| s.stored.first().cloned().unwrap_or_default()).collect();
        let mut members = Vec::new();
        let mut group_ends = Vec::with_capacity(sessions.len());
        for s in &sessions {
            members.extend_from_slice(&s.events);
            group_ends.push(members.len() as u32);
        }
        let updated = self.agg.accumulate(&accs, events, &members, &group_ends)?;
        for (s, acc) in sessions.iter().zip(updated) {
            put_session(state, &s.key, s.start, s.end, &acc);
            self.changed.push((s.key.clone(), s.start));
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
        let windows = self.sessions_leaving(to, state)?;
        let mut failed = Vec::new();
        let emitted = emit::finish(windows, self.agg.as_mut(), &self.policy, out, &mut failed)?;
        Ok(Advanced { emitted, failed })
    }

    fn horizon(&self, state: &StateStore) -> Result<Option<i64>, OperatorError> {
        let last = state.range(&[INDEX], &[INDEX + 1])?.last().map(|(k, _)| time_from_key(&k[1..9]));
        Ok(last.map(|end| final_at(end, self.lateness)))
    }
}

impl SessionOperator {
    /// The sessions that leave at `watermark` under the output mode (sorted by start, then key);
    /// final ones leave state.
    fn sessions_leaving(&mut self, watermark: i64, state: &mut StateStore) -> Result<Vec<WindowAcc>, OperatorError> {
        let now = bound(watermark, self.lateness);
        let changed = std::mem::take(&mut self.changed);
        let mut out = Vec::new();
        // Sessions by end: the final ones are a prefix of the index.
        let mut upper = vec![INDEX];
        upper.extend_from_slice(&time_key(now.saturating_add(1)));
        let index_upper = match self.mode {
            OutputMode::Append => upper,
            _ => vec![INDEX + 1],
        };
        for (k, _) in state.range(&[INDEX], &index_upper)? {
            let end = time_from_key(&k[1..9]);
            let mut skey = vec![PREFIX];
            skey.extend_from_slice(&k[9..]);
            let (key, start) = split_session_key(&skey)?;
            let final_now = end <= now;
            let take = match self.mode {
                OutputMode::Append => final_now,
                OutputMode::Update => changed.iter().any(|(ck, cs)| *ck == key && *cs == start),
                OutputMode::Complete => true,
            };
            if !take && !final_now {
                continue;
            }
            let Some(v) = state.get(&skey)? else { return Err(corrupt(&k, "index without session")) };
            let (_, acc) = split_session_value(&skey, &v)?;
            if take {
                out.push(WindowAcc { start, end, key, acc });
            }
            if final_now {
                state.delete(skey);
                state.delete(k);
            }
        }
        out.sort_by(|a, b| (a.start, &a.key).cmp(&(b.start, &b.key)));
        Ok(out)
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
