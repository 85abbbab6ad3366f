//! Deduplication within the watermark (`[dedup]`), in front of another operator: an event whose
//! key a kept event had within `within` of its event time is a duplicate and goes no further.
//! Spark's `dropDuplicatesWithinWatermark` is the model.
//!
//! The rule is a function of the events alone: an event is dropped if and only if an earlier
//! kept event (by input order) has the same key and an event time at most `within` away, so
//! where batches begin and end changes nothing. To decide that, a kept event's time must stay in
//! state as long as an event that is not late may still fall within `within` of it: an event is
//! late here when its time is more than `within` behind the watermark, so a kept time is dropped
//! once the watermark passes it by `2 × within`. Late events are set aside as late, as windows
//! set theirs aside: with their keys' state gone, whether they repeat cannot be told.
//!
//! State, under this operator's scopes: `KEPT` + key + time for each kept event, and
//! `EXPIRY` + time + key to find the ones the watermark has passed. Both are empty values.

use std::collections::HashMap;

use super::{Advanced, Opened, Operator, OperatorError, Passing, Processed, Scope};
use crate::columns;
use crate::pipeline::Dedup;
use crate::plugin::EventBatch;
use crate::sink::Rows;
use crate::state::{StateStore, time_key};

pub(crate) struct Deduplicate {
    spec: Dedup,
    /// The operator the events that are not duplicates go on to.
    next: Box<dyn Operator>,
}

impl Deduplicate {
    pub(crate) fn new(spec: Dedup, next: Box<dyn Operator>) -> Self {
        Self { spec, next }
    }

    fn key(&self, events: &EventBatch, i: usize) -> Result<Vec<u8>, String> {
        super::event_key(self.spec.field.as_deref(), "dedup.key", events, i)
    }
}

fn kept_key(key: &[u8], time: i64) -> Vec<u8> {
    let mut k = Scope::DedupKept.key(key.len() + 12);
    k.extend_from_slice(&(key.len() as u32).to_be_bytes());
    k.extend_from_slice(key);
    k.extend_from_slice(&time_key(time));
    k
}

fn expiry_key(time: i64, key: &[u8]) -> Vec<u8> {
    let mut k = Scope::DedupExpiry.key(key.len() + 12);
    k.extend_from_slice(&time_key(time));
    k.extend_from_slice(&(key.len() as u32).to_be_bytes());
    k.extend_from_slice(key);
    k
}

/// The kept entry an expiry entry points at.
fn kept_of_expiry(k: &[u8]) -> Option<Vec<u8>> {
    let rest = k.get(1..)?;
    let time = crate::state::time_from_key(rest.get(..8)?);
    let len = u32::from_be_bytes(rest.get(8..12)?.try_into().ok()?) as usize;
    Some(kept_key(rest.get(12..12 + len)?, time))
}

impl Operator for Deduplicate {
    fn open(&mut self, state: &mut StateStore, restored_version: Option<u32>) -> Result<Opened, OperatorError> {
        self.next.open(state, restored_version)
    }

    fn process(
        &mut self,
        events: &EventBatch,
        watermark: i64,
        state: &mut StateStore,
        out: &mut Rows,
    ) -> Result<Processed, OperatorError> {
        let within = self.spec.within_ms;
        let mut set_aside = Processed::default();
        // (index, key) of the events that are neither late nor invalid.
        let mut candidates = Vec::with_capacity(events.times.len());
        for (i, &t) in events.times.iter().enumerate() {
            if t.saturating_add(within) < watermark {
                set_aside.late.push(i as u32);
                continue;
            }
            match self.key(events, i) {
                Ok(key) => candidates.push((i, key)),
                Err(why) => set_aside.invalid.push((i as u32, why)),
            }
        }
        // Kept events of earlier batches near each candidate, in one pass over the store.
        let ranges: Vec<_> = candidates
            .iter()
            .map(|(i, key)| {
                let t = events.times[*i];
                (kept_key(key, t.saturating_sub(within)), kept_key(key, t.saturating_add(within).saturating_add(1)))
            })
            .collect();
        let earlier = state.ranges(&ranges)?;
        // Kept events of this batch, by key.
        let mut kept_now: HashMap<&[u8], Vec<i64>> = HashMap::new();
        let mut passed = Passing::default();
        for ((i, key), near) in candidates.iter().zip(&earlier) {
            let t = events.times[*i];
            let now = kept_now.entry(key.as_slice()).or_default();
            if !near.is_empty() || now.iter().any(|&k| k.abs_diff(t) <= within as u64) {
                set_aside.duplicates += 1;
                continue;
            }
            now.push(t);
            state.put(kept_key(key, t), Vec::new());
            state.put(expiry_key(t, key), Vec::new());
            passed.push(events, *i, columns::item(&events.rows, &events.row_ends, *i))?;
        }
        passed.forward(self.next.as_mut(), watermark, state, out, &mut set_aside)?;
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
        if cutoff > i64::MIN {
            let mut upto = Scope::DedupExpiry.key(8);
            upto.extend_from_slice(&time_key(cutoff));
            for (k, _) in state.range(&Scope::DedupExpiry.key(0), &upto)? {
                let kept = kept_of_expiry(&k).ok_or_else(|| OperatorError::Corrupt {
                    key: format!("{k:?}"),
                    message: "a dedup expiry entry".into(),
                })?;
                state.delete(kept);
                state.delete(k);
            }
        }
        self.next.advance(from, to, state, out)
    }

    fn set_processing_time(&mut self, planned_at_ms: i64) {
        self.next.set_processing_time(planned_at_ms)
    }

    fn plan_side(&mut self) -> Result<Option<crate::source::Offsets>, OperatorError> {
        self.next.plan_side()
    }

    fn take_side(
        &mut self,
        end: Option<&crate::source::Offsets>,
        watermark: i64,
        state: &mut StateStore,
    ) -> Result<Vec<crate::side_output::SideLetter>, OperatorError> {
        self.next.take_side(end, watermark, state)
    }

    fn horizon(&self, state: &StateStore) -> Result<Option<i64>, OperatorError> {
        // The keys kept hold nothing to emit: a flush waits only for what comes after.
        self.next.horizon(state)
    }

    fn stage(&self) -> &str {
        self.next.stage()
    }

    fn fingerprint(&self) -> String {
        let field = self.spec.field.as_deref().map_or_else(|| "event key".to_string(), |f| format!("{f:?} as text"));
        format!("dedup on {field} within {} ms, then {}", self.spec.within_ms, self.next.fingerprint())
    }

    fn mark(&self) -> usize {
        self.next.mark()
    }

    fn rollback(&mut self, mark: usize) {
        self.next.rollback(mark)
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::operator::passthrough::PassThrough;

    /// The rule of the module's doc, over all events at once.
    fn naive(events: &[(i64, u8)], within: i64) -> Vec<usize> {
        let mut kept: Vec<(u8, i64)> = Vec::new();
        let mut out = Vec::new();
        for (i, &(t, key)) in events.iter().enumerate() {
            if !kept.iter().any(|&(k, kt)| k == key && kt.abs_diff(t) <= within as u64) {
                kept.push((key, t));
                out.push(i);
            }
        }
        out
    }

    fn batch(events: &[(i64, u8)], first: usize, by_field: bool) -> EventBatch {
        let mut b = EventBatch::default();
        for (j, &(t, key)) in events.iter().enumerate() {
            b.times.push(t);
            let event_key = if by_field { Vec::new() } else { vec![key] };
            columns::push(&mut b.keys, &mut b.key_ends, &event_key).unwrap();
            let row = format!("{{\"id\":{key},\"n\":{}}}", first + j);
            columns::push(&mut b.rows, &mut b.row_ends, row.as_bytes()).unwrap();
            b.origins.push(j as u32);
        }
        b
    }

    proptest! {
        /// Where batches begin and end changes nothing: with any cuts, and a watermark that
        /// moves as far as it can without making an event late (so kept times do expire), the
        /// rows that pass are the naive rule's.
        #[test]
        fn batches_do_not_change_which_events_pass(
            events in proptest::collection::vec((0i64..2_000, 0u8..6), 1..120),
            cuts in proptest::collection::btree_set(1usize..120, 0..8),
            within in 1i64..300,
            by_field: bool,
        ) {
            let dir = tempfile::tempdir().unwrap();
            let mut state = StateStore::open(dir.path()).unwrap();
            let spec = Dedup { field: by_field.then(|| "id".to_string()), within_ms: within };
            let mut op = Deduplicate::new(spec, Box::new(PassThrough { checked: false }));
            op.open(&mut state, None).unwrap();
            let mut bounds: Vec<usize> = cuts.into_iter().filter(|&c| c < events.len()).collect();
            bounds.insert(0, 0);
            bounds.push(events.len());
            let mut rows = Rows::default();
            let mut wm = i64::MIN;
            for w in bounds.windows(2) {
                let (from, to) = (w[0], w[1]);
                let set_aside = op.process(&batch(&events[from..to], from, by_field), wm, &mut state, &mut rows).unwrap();
                prop_assert!(set_aside.late.is_empty() && set_aside.invalid.is_empty());
                // The furthest the watermark may go: every event still to come is within
                // `within` of it.
                let next = events[to..].iter().map(|e| e.0).min().map_or(i64::MAX, |t| t - within);
                op.advance(wm, next.max(wm), &mut state, &mut rows).unwrap();
                wm = next.max(wm);
            }
            let passed: Vec<usize> = columns::items(&rows.rows, &rows.row_ends)
                .map(|r| serde_json::from_slice::<serde_json::Value>(r).unwrap()["n"].as_u64().unwrap() as usize)
                .collect();
            prop_assert_eq!(passed, naive(&events, within));
        }
    }
}
