//! The keyed processor (`[process]`): a plugin's state per key, with timers and TTL, owned by
//! the host. Flink's `KeyedProcessFunction` and Spark's `transformWithState` are the models.
//!
//! Per batch, `process` groups the events that are not late by key (the parser's key, or
//! `process.key`), each key's events in event-time order, and hands the plugin every key's
//! state and events in as few calls as the output cap allows. Each key's result (new state,
//! rows, timers set and cancelled) is applied as a whole: a call that fails leaves nothing, and
//! the driver's failure policy rolls back and isolates the events that cause it.
//!
//! At the end of the batch, `advance` fires the timers that are due (event-time timers the new
//! watermark reached, processing-time timers at or before the batch's planning time, which the
//! plan recorded), in one `on-timers` call per chunk of keys, then expires the keys whose TTL ran
//! out. A timer fires once: its entry goes in the same commit as the rows it made. A timer that
//! `process` sets for a time the batch's end reaches fires in that batch; one that `on-timers`
//! sets for a time that has already come fires in the next batch.
//!
//! An event is late when it is behind the watermark in force (less `allowed_lateness`): the
//! event-time timers it could have moved may have fired.
//!
//! Besides each key's limits, the stage as a whole has a budget of timers and state
//! (`budget.rs`): a key whose result would pass it is refused whole, its events dead letters
//! naming the limit, and the batch goes on.

mod budget;
mod layout;

use std::borrow::Cow;
use std::collections::BTreeMap;

use layout::{Entry, Totals};

use super::{Advanced, FailedWindow, Opened, Operator, OperatorError, Processed};
use crate::columns;
use crate::isolate;
use crate::isolate::Policy;
use crate::pipeline::{Process, TtlClock};
use crate::plugin::{Clock, EventBatch, KeyResult, Keyed, LimitExceeded, PluginError, ProcessFns, TimeDomain, Timer};
use crate::rows::Rows;
use crate::state::StateStore;

/// Keys per `process` or `on-timers` call at most.
const KEYS_PER_CALL: usize = 10_000;

/// States per `migrate` call.
const MIGRATE_CHUNK: usize = 1_000;

pub struct KeyedProcess {
    spec: Process,
    /// `process.key`, if the key is a row field.
    field: Option<super::KeyField>,
    lateness: i64,
    plugin: Box<dyn ProcessFns>,
    policy: Policy,
    /// The running batch's planning time.
    processing_time: i64,
}

impl KeyedProcess {
    pub fn new(spec: Process, lateness: i64, plugin: Box<dyn ProcessFns>, policy: Policy) -> Self {
        let field = spec.key.as_deref().map(super::KeyField::new);
        Self { spec, field, lateness, plugin, policy, processing_time: 0 }
    }

    fn entry(state: &StateStore, key: &[u8]) -> Result<Option<Entry>, OperatorError> {
        let k = layout::key_entry(key);
        match state.get(&k)? {
            None => Ok(None),
            Some(v) => Entry::decode(&v).map(Some).map_err(|message| corrupt(&k, message)),
        }
    }

    /// Applies one key's result: its timers (cancelled first, then set), its state, its TTL
    /// and its rows, and what they change of the stage's `totals`. `events_up_to` is the latest
    /// event time of the key's events in this call (`None`: a timer call, which does not restart
    /// the TTL). Refused, with nothing applied, when the key would have more timers than
    /// `limits.max_timers`, or the stage would pass its budget.
    #[allow(clippy::too_many_arguments)]
    fn apply(
        &self,
        state: &mut StateStore,
        key: &[u8],
        before: Option<Entry>,
        result: KeyResult,
        events_up_to: Option<i64>,
        out: &mut Rows,
        totals: &mut Totals,
    ) -> Result<Result<(), PluginError>, OperatorError> {
        // What the TTL index and the entry itself held before, then the entry to change.
        let expiry = |e: &Entry| {
            self.spec.ttl.map(|ttl| match ttl.clock {
                TtlClock::EventTime => e.touched_event.saturating_add(ttl.ms),
                TtlClock::ProcessingTime => e.touched_processing.saturating_add(ttl.ms),
            })
        };
        let had_state = before.as_ref().is_some_and(|e| e.state.is_some());
        let old_expiry = before.as_ref().filter(|e| e.state.is_some()).and_then(expiry);
        let existed = before.is_some();
        let mut entry = before.unwrap_or(Entry { touched_event: i64::MIN, ..Entry::default() });
        let was = entry.footprint();
        // Timer changes, deduplicated, against what is set.
        let mut changes: BTreeMap<Timer, bool> = BTreeMap::new();
        for t in result.delete_timers {
            changes.insert(t, false);
        }
        for t in result.set_timers {
            changes.insert(t, true);
        }
        let mut timers = i64::from(entry.timers);
        let mut writes = Vec::new();
        for (t, set) in changes {
            let k = layout::timer_entry(t, key);
            // A key with no timers set has none to look up: a new key's, most of a fan-out's.
            let exists = entry.timers > 0 && state.get(&k)?.is_some();
            match (exists, set) {
                (false, true) => timers += 1,
                (true, false) => timers -= 1,
                _ => continue,
            }
            writes.push((k, set));
        }
        let max = self.plugin.max_timers();
        let refused = |limit| Ok(Err(PluginError::Limit { stage: self.plugin.stage().to_string(), limit }));
        if timers > max as i64 {
            return refused(LimitExceeded::Timers { max });
        }
        let will =
            Totals { timers: timers.max(0) as u64, state_bytes: result.state.as_ref().map_or(0, Vec::len) as u64 };
        match budget::check(self.plugin.stage_budget(), *totals, was, will) {
            Ok(next) => *totals = next,
            Err(limit) => return refused(limit),
        }
        for (k, set) in writes {
            if set {
                state.put(k, Vec::new());
            } else {
                state.delete(k);
            }
        }
        entry.timers = timers.max(0) as u32;
        if let Some(t) = events_up_to {
            entry.touched_event = entry.touched_event.max(t);
            entry.touched_processing = self.processing_time;
        }
        entry.state = result.state;
        // The TTL's entry follows the state: one for a key with state, at its expiry.
        let new_expiry = entry.state.as_ref().and_then(|_| expiry(&entry));
        if old_expiry != new_expiry {
            if let Some(at) = old_expiry {
                state.delete(layout::expiry_entry(at, key));
            }
            if let Some(at) = new_expiry {
                state.put(layout::expiry_entry(at, key), Vec::new());
            }
        }
        // Most keys of a batch never had an entry: deleting one that is not there would still be
        // a write.
        match (entry.is_empty(), existed) {
            (true, true) => state.delete(layout::key_entry(key)),
            (true, false) => {}
            (false, _) => state.put(layout::key_entry(key), entry.encode()),
        }
        let mut last = i64::MIN;
        for (row, &time) in columns::items(&result.rows, &result.row_ends).zip(&result.times) {
            out.push(key, row, time)?;
            last = last.max(time);
        }
        if self.spec.tombstones && had_state && entry.state.is_none() {
            out.push_tombstone(key, events_up_to.unwrap_or(last))?;
        }
        Ok(Ok(()))
    }

    fn clock(&self, watermark: i64) -> Clock {
        Clock { watermark, processing_time: self.processing_time }
    }

    /// Fires the timers due at `watermark` and the batch's processing time.
    fn fire(&mut self, watermark: i64, state: &mut StateStore, out: &mut Rows) -> Result<Advanced, OperatorError> {
        let mut due: BTreeMap<Vec<u8>, Vec<Timer>> = BTreeMap::new();
        for (domain, now) in [(TimeDomain::EventTime, watermark), (TimeDomain::ProcessingTime, self.processing_time)] {
            if now == i64::MIN {
                continue;
            }
            let to = match now.checked_add(1) {
                Some(next) => layout::timers_from(domain, next),
                None => layout::timers_end(domain),
            };
            for (k, _) in state.range(&layout::timers_from(domain, i64::MIN), &to)? {
                let (timer, key) = layout::timer_of_entry(&k).ok_or_else(|| corrupt(&k, "a timer entry".into()))?;
                due.entry(key.to_vec()).or_default().push(timer);
                state.delete(k);
            }
        }
        let mut advanced = Advanced::default();
        if due.is_empty() {
            return Ok(advanced);
        }
        let was = budget::read(state)?;
        let mut totals = was;
        let mut keys = Vec::with_capacity(due.len());
        for (key, timers) in due.iter_mut() {
            timers.sort_by_key(|t| (t.at, t.domain));
            totals.timers = totals.timers.saturating_sub(timers.len() as u64);
            // The fired timers are gone, whatever the plugin makes of them.
            let mut entry = Self::entry(state, key)?.unwrap_or_default();
            entry.timers = entry.timers.saturating_sub(timers.len() as u32);
            keys.push((key.clone(), Some(entry)));
        }
        let clock = self.clock(watermark);
        let fired: Vec<&Vec<Timer>> = due.values().collect();
        let (plugin, policy) = (&mut self.plugin, &self.policy);
        let bytes = |i: usize| state_bytes(&keys[i].1) + fired[i].len() * 16;
        let chunks = calls(keys.len(), bytes, plugin.max_timers(), plugin.max_call_bytes());
        let results = isolate::each(chunks, &policy.failure, &policy.stop, |r| {
            let keyed = keyed(&keys[r.clone()]);
            let mut flat = Vec::new();
            let mut ends = Vec::with_capacity(r.len());
            for t in &fired[r] {
                flat.extend(t.iter().copied());
                ends.push(flat.len() as u32);
            }
            plugin.on_timers(clock, &keyed, &flat, &ends)
        })?;
        for (((key, entry), result), timers) in keys.into_iter().zip(results).zip(fired) {
            let entry = entry.unwrap_or_default();
            let refused = match result {
                Ok(result) => {
                    let before = rows_in(out);
                    match self.apply(state, &key, Some(entry.clone()), result, None, out, &mut totals)? {
                        Ok(()) => {
                            advanced.emitted += rows_in(out) - before;
                            continue;
                        }
                        Err(e) => e.to_string(),
                    }
                }
                Err(e) => e,
            };
            // The key keeps its state; its fired timers are gone, and they go to the dead letters.
            let k = layout::key_entry(&key);
            if entry.is_empty() {
                state.delete(k)
            } else {
                state.put(k, entry.encode())
            }
            advanced.failed.push(FailedWindow {
                start: timers.first().map_or(0, |t| t.at),
                end: timers.last().map_or(0, |t| t.at),
                key,
                accs: entry.state.into_iter().collect(),
                kind: "plugin-failure",
                error: refused,
            });
        }
        budget::write(state, was, totals);
        Ok(advanced)
    }

    /// Deletes the state of keys whose TTL ran out by `now` (on the TTL's clock), with a
    /// tombstone each under `output.tombstones`.
    fn expire(&self, now: i64, state: &mut StateStore, out: &mut Rows) -> Result<(), OperatorError> {
        if now == i64::MIN {
            return Ok(());
        }
        let was = budget::read(state)?;
        let mut totals = was;
        for (k, _) in state.range(&layout::expiry_entry(i64::MIN, &[]), &layout::expiry_through(now))? {
            let (_, key) = layout::expiry_of_entry(&k).ok_or_else(|| corrupt(&k, "an expiry entry".into()))?;
            let key = key.to_vec();
            state.delete(k);
            let Some(mut entry) = Self::entry(state, &key)? else { continue };
            if let Some(gone) = entry.state.take() {
                totals.state_bytes = totals.state_bytes.saturating_sub(gone.len() as u64);
                if self.spec.tombstones {
                    out.push_tombstone(&key, now)?;
                }
            }
            let k = layout::key_entry(&key);
            if entry.is_empty() {
                state.delete(k);
            } else {
                state.put(k, entry.encode());
            }
        }
        budget::write(state, was, totals);
        Ok(())
    }
}

fn state_bytes(e: &Option<Entry>) -> usize {
    e.as_ref().and_then(|e| e.state.as_ref()).map_or(0, Vec::len)
}

fn rows_in(out: &Rows) -> usize {
    out.len()
}

fn corrupt(k: &[u8], message: String) -> OperatorError {
    OperatorError::Corrupt { key: String::from_utf8_lossy(k).into_owned(), message }
}

fn keyed(keys: &[(Vec<u8>, Option<Entry>)]) -> Vec<Keyed> {
    keys.iter().map(|(key, e)| Keyed { key: key.clone(), state: e.as_ref().and_then(|e| e.state.clone()) }).collect()
}

/// Cuts `n` keys into calls of at most [`KEYS_PER_CALL`] keys and about half of `max_bytes`,
/// counting for each key its input and the timers it may set (`max_timers`): a call whose every
/// key sets all it may still fits the output cap, so a plugin that fans timers out neither fails
/// its calls on the cap nor grows its memory, or the host's copy, past one call's worth.
fn calls(n: usize, bytes: impl Fn(usize) -> usize, max_timers: usize, max_bytes: usize) -> Vec<std::ops::Range<usize>> {
    let timer_bytes = max_timers.saturating_mul(size_of::<Timer>());
    isolate::calls(n, KEYS_PER_CALL, |i| bytes(i).saturating_add(timer_bytes), max_bytes / 2)
}

impl Operator for KeyedProcess {
    fn open(&mut self, state: &mut StateStore, restored_version: Option<u32>) -> Result<Opened, OperatorError> {
        let to = self.plugin.state_version()?;
        let from = match restored_version {
            Some(from) if from != to => from,
            _ => {
                budget::count_if_missing(state)?;
                return Ok(Opened { state_version: Some(to), migrated: None });
            }
        };
        let mut with_state = Vec::new();
        let (from_key, to_key) = layout::all_keys();
        for (k, v) in state.range(&from_key, &to_key)? {
            let entry = Entry::decode(&v).map_err(|m| corrupt(&k, m))?;
            if entry.state.is_some() {
                with_state.push((k, entry));
            }
        }
        for chunk in with_state.chunks(MIGRATE_CHUNK) {
            let states: Vec<Vec<u8>> = chunk.iter().filter_map(|(_, e)| e.state.clone()).collect();
            let migrated =
                self.plugin.migrate(from, &states).map_err(|source| OperatorError::Migrate { from, to, source })?;
            for ((k, entry), s) in chunk.iter().zip(migrated) {
                let entry = Entry { state: Some(s), ..entry.clone() };
                state.put(k.clone(), entry.encode());
            }
        }
        budget::recount(state)?;
        Ok(Opened { state_version: Some(to), migrated: Some(with_state.len()) })
    }

    fn set_processing_time(&mut self, planned_at_ms: i64) {
        self.processing_time = planned_at_ms;
    }

    fn process(
        &mut self,
        events: &EventBatch,
        watermark: i64,
        state: &mut StateStore,
        out: &mut Rows,
    ) -> Result<Processed, OperatorError> {
        let mut set_aside = Processed::default();
        let bound = watermark.saturating_sub(self.lateness);
        // (key, time, index) of the events that go to the plugin, in the order it sees them:
        // keys in byte order, a key's events by time, ties in input order. One sort, no
        // allocation per key: the batch's keys are borrowed unless `process.key` names a field.
        let mut order: Vec<(Cow<'_, [u8]>, i64, u32)> = Vec::with_capacity(events.times.len());
        for (i, &t) in events.times.iter().enumerate() {
            if t < bound {
                set_aside.late.push(i as u32);
                continue;
            }
            let key = match &self.field {
                None => Ok(Cow::Borrowed(columns::item(&events.keys, &events.key_ends, i))),
                Some(field) => super::event_key(Some(field), "process.key", events, i).map(Cow::Owned),
            };
            match key {
                Ok(key) => order.push((key, t, i as u32)),
                Err(why) => set_aside.invalid.push((i as u32, why)),
            }
        }
        order.sort_unstable_by(|a, b| (a.0.as_ref(), a.1, a.2).cmp(&(b.0.as_ref(), b.1, b.2)));
        let members: Vec<u32> = order.iter().map(|e| e.2).collect();
        // Each key, what it had, and where its events end in `members`; the latest event time.
        let mut keys: Vec<(Vec<u8>, Option<Entry>)> = Vec::new();
        let mut ends: Vec<u32> = Vec::new();
        let mut latest: Vec<i64> = Vec::new();
        for (j, (key, t, _)) in order.iter().enumerate() {
            if keys.last().is_none_or(|(k, _)| k.as_slice() != key.as_ref()) {
                keys.push((key.to_vec(), Self::entry(state, key)?));
                ends.push(0);
                latest.push(*t);
            }
            if let (Some(e), Some(l)) = (ends.last_mut(), latest.last_mut()) {
                *e = j as u32 + 1;
                *l = (*l).max(*t);
            }
        }
        drop(order);
        let start_of = |k: usize| if k == 0 { 0 } else { ends[k - 1] as usize };
        let row_bytes = |i: u32| columns::item(&events.rows, &events.row_ends, i as usize).len();
        let bytes = |k: usize| {
            state_bytes(&keys[k].1)
                + members[start_of(k)..ends[k] as usize].iter().map(|&i| row_bytes(i)).sum::<usize>()
        };
        let clock = self.clock(watermark);
        let was = budget::read(state)?;
        let mut totals = was;
        for r in calls(keys.len(), bytes, self.plugin.max_timers(), self.plugin.max_call_bytes()) {
            let keyed = keyed(&keys[r.clone()]);
            let base = start_of(r.start);
            let chunk_ends: Vec<u32> = ends[r.clone()].iter().map(|&e| e - base as u32).collect();
            let chunk = &members[base..ends[r.end - 1] as usize];
            let results = self.plugin.process(clock, &keyed, events, chunk, &chunk_ends)?;
            for (k, result) in r.zip(results) {
                let before = keys[k].1.take(); // each key is in one call: its entry is needed once
                match self.apply(state, &keys[k].0, before, result, Some(latest[k]), out, &mut totals)? {
                    Ok(()) => {}
                    Err(e) if budget::refused_by_budget(&e) => {
                        let why = e.to_string();
                        let events = &members[start_of(k)..ends[k] as usize];
                        set_aside.over_limit.extend(events.iter().map(|&i| (i, why.clone())));
                    }
                    Err(e) => return Err(e.into()),
                }
            }
        }
        budget::write(state, was, totals);
        set_aside.over_limit.sort_unstable_by_key(|(i, _)| *i);
        Ok(set_aside)
    }

    fn advance(
        &mut self,
        _from: i64,
        to: i64,
        state: &mut StateStore,
        out: &mut Rows,
    ) -> Result<Advanced, OperatorError> {
        let advanced = self.fire(to, state, out)?;
        if let Some(ttl) = self.spec.ttl {
            let now = match ttl.clock {
                TtlClock::EventTime => to,
                TtlClock::ProcessingTime => self.processing_time,
            };
            self.expire(now, state, out)?;
        }
        Ok(advanced)
    }

    fn horizon(&self, state: &StateStore) -> Result<Option<i64>, OperatorError> {
        // Processor state is never final; what a flush can still make happen is the event-time
        // timers that are set, up to the latest of them.
        let last = state.last_in_range(
            &layout::timers_from(TimeDomain::EventTime, i64::MIN),
            &layout::timers_end(TimeDomain::EventTime),
        )?;
        Ok(last.and_then(|(k, _)| layout::timer_of_entry(&k).map(|(t, _)| t.at)))
    }

    fn stage(&self) -> &str {
        self.plugin.stage()
    }

    fn fingerprint(&self) -> String {
        let key = self.spec.key.as_deref().map_or_else(|| "event key".to_string(), |f| format!("{f:?} as text"));
        let ttl = match self.spec.ttl {
            None => "no ttl".to_string(),
            Some(t) => format!("ttl {} ms of {:?}", t.ms, t.clock),
        };
        format!("process keyed by {key}, {ttl}, state format {}", layout::FORMAT)
    }

    fn mark(&self) -> usize {
        0
    }

    fn rollback(&mut self, _: usize) {}
}

#[cfg(test)]
mod tests;
