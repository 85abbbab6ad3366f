//! Deduplication's unit tests: which events pass, against a naive reference, whatever the
//! batches, failed calls and restarts; the state entries' codec on arbitrary bytes; and the
//! conversion of format-1 state.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

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
    crate::testing::batch(events.iter().enumerate().map(|(j, &(t, key))| {
        let event_key = if by_field { Vec::new() } else { vec![key] };
        (t, event_key, format!("{{\"id\":{key},\"n\":{}}}", first + j))
    }))
}

/// Hands events on, or fails every call while `fail` is set: the operator behind a
/// dedup whose call fails.
struct Flaky {
    inner: PassThrough,
    fail: Arc<AtomicBool>,
}

impl Operator for Flaky {
    fn open(&mut self, state: &mut StateStore, v: Option<u32>) -> Result<Opened, OperatorError> {
        self.inner.open(state, v)
    }
    fn process(
        &mut self,
        events: &EventBatch,
        watermark: i64,
        state: &mut StateStore,
        out: &mut Rows,
    ) -> Result<Processed, OperatorError> {
        if self.fail.load(Ordering::Relaxed) {
            return Err(OperatorError::Corrupt { key: String::new(), message: "failing on purpose".into() });
        }
        self.inner.process(events, watermark, state, out)
    }
    fn advance(&mut self, f: i64, t: i64, state: &mut StateStore, out: &mut Rows) -> Result<Advanced, OperatorError> {
        self.inner.advance(f, t, state, out)
    }
    fn horizon(&self, state: &StateStore) -> Result<Option<i64>, OperatorError> {
        self.inner.horizon(state)
    }
    fn stage(&self) -> &str {
        "flaky"
    }
    fn fingerprint(&self) -> String {
        "flaky".into()
    }
    fn mark(&self) -> usize {
        0
    }
    fn rollback(&mut self, _: usize) {}
}

/// A dedup in front of a [`Flaky`] that fails while the flag is set.
fn dedup(spec: &Dedup, fail: &Arc<AtomicBool>) -> Deduplicate {
    let next = Flaky { inner: PassThrough { checked: false, deletions: false }, fail: fail.clone() };
    Deduplicate::new(spec.clone(), Box::new(next))
}

proptest! {
    /// Where batches begin and end changes nothing, nor do calls that fail (the operator
    /// behind refuses them; the driver rolls the state back and runs them again) or
    /// restarts from the committed log: with any cuts, and a watermark that moves as far
    /// as it can without making an event late (so kept times do expire), the rows that
    /// pass are the naive rule's.
    #[test]
    fn batches_failed_calls_and_restarts_do_not_change_which_events_pass(
        events in proptest::collection::vec((0i64..2_000, 0u8..6), 1..120),
        cuts in proptest::collection::btree_set(1usize..120, 0..8),
        failing in proptest::collection::btree_set(0usize..120, 0..4),
        reopening in proptest::collection::btree_set(0usize..120, 0..4),
        within in 1i64..300,
        by_field: bool,
    ) {
        let dir = tempfile::tempdir().unwrap();
        let mut state = StateStore::open(dir.path()).unwrap();
        let spec = Dedup { field: by_field.then(|| "id".to_string()), within_ms: within };
        let fail = Arc::new(AtomicBool::new(false));
        let mut op = dedup(&spec, &fail);
        op.open(&mut state, None).unwrap();
        let mut bounds: Vec<usize> = cuts.into_iter().filter(|&c| c < events.len()).collect();
        bounds.insert(0, 0);
        bounds.push(events.len());
        let mut rows = Rows::default();
        let mut wm = i64::MIN;
        for w in bounds.windows(2) {
            let (from, to) = (w[0], w[1]);
            let b = batch(&events[from..to], from, by_field);
            if failing.contains(&from) {
                let at = state.savepoint();
                fail.store(true, Ordering::Relaxed);
                prop_assert!(op.process(&b, wm, &mut state, &mut rows).is_err());
                fail.store(false, Ordering::Relaxed);
                state.rollback(at);
            }
            let set_aside = op.process(&b, wm, &mut state, &mut rows).unwrap();
            state.release();
            prop_assert!(set_aside.late.is_empty() && set_aside.invalid.is_empty());
            // The furthest the watermark may go: every event still to come is within
            // `within` of it.
            let next = events[to..].iter().map(|e| e.0).min().map_or(i64::MAX, |t| t - within);
            op.advance(wm, next.max(wm), &mut state, &mut rows).unwrap();
            wm = next.max(wm);
            if reopening.contains(&from) {
                state.commit(b"m", &mut crate::checkpoint::Syncs::default()).unwrap();
                op = dedup(&spec, &fail);
                op.open(&mut state, None).unwrap();
            }
        }
        let passed: Vec<usize> = columns::items(&rows.rows, &rows.row_ends)
            .map(|r| serde_json::from_slice::<serde_json::Value>(r).unwrap()["n"].as_u64().unwrap() as usize)
            .collect();
        prop_assert_eq!(passed, naive(&events, within));
    }

    /// Whatever is written decodes to the same events; arbitrary bytes are an error or
    /// some events, never a panic.
    #[test]
    fn entries_round_trip_and_arbitrary_bytes_never_panic(
        kept in proptest::collection::vec((proptest::collection::vec(any::<u8>(), 0..6), any::<i64>()), 0..8),
        latest: i64,
        bytes in proptest::collection::vec(any::<u8>(), 0..64),
    ) {
        let mut entry = entry_with(latest, 0);
        for (key, t) in &kept {
            put(&mut entry, key, *t);
        }
        let want: Vec<(&[u8], i64)> = kept.iter().map(|(k, t)| (k.as_slice(), *t)).collect();
        prop_assert_eq!(decode(&entry).unwrap(), (latest, want));
        let _ = decode(&bytes);
    }
}

/// A checkpoint of format 1 (an entry per kept event and an expiry index) opens as the log:
/// its kept events still make repeats, and its entries are gone from the store.
#[test]
fn format_1_state_is_converted_to_the_log() {
    fn old_kept(key: &[u8], t: i64) -> Vec<u8> {
        let mut k = vec![OLD_KEPT];
        k.extend_from_slice(&(key.len() as u32).to_be_bytes());
        k.extend_from_slice(key);
        k.extend_from_slice(&crate::state::time_key(t));
        k
    }
    fn old_expiry(t: i64, key: &[u8]) -> Vec<u8> {
        let mut k = vec![OLD_EXPIRY];
        k.extend_from_slice(&crate::state::time_key(t));
        k.extend_from_slice(&(key.len() as u32).to_be_bytes());
        k.extend_from_slice(key);
        k
    }
    let dir = tempfile::tempdir().unwrap();
    let mut state = StateStore::open(dir.path()).unwrap();
    for (key, t) in [(1u8, 100i64), (2, 150), (1, 400)] {
        state.put(old_kept(&[key], t), Vec::new());
        state.put(old_expiry(t, &[key]), Vec::new());
    }
    state.commit(b"m", &mut crate::checkpoint::Syncs::default()).unwrap();
    let spec = Dedup { field: None, within_ms: 50 };
    let fail = Arc::new(AtomicBool::new(false));
    let mut op = dedup(&spec, &fail);
    op.open(&mut state, None).unwrap();
    state.commit(b"m", &mut crate::checkpoint::Syncs::default()).unwrap();
    for scope in [OLD_KEPT, OLD_EXPIRY] {
        assert!(state.range(&[scope], &[scope + 1]).unwrap().is_empty(), "format 1's entries are deleted");
    }
    assert_eq!(crate::operator::state_format(&state, Scope::DedupKept, "dedup", FORMAT).unwrap(), FORMAT);
    // Reopened from the log alone: key 1 at 120 and key 2 at 190 repeat, key 1 at 300 does not.
    let mut op = dedup(&spec, &fail);
    op.open(&mut state, None).unwrap();
    let mut rows = Rows::default();
    let set_aside = op.process(&batch(&[(120, 1), (190, 2), (300, 1)], 0, false), 90, &mut state, &mut rows).unwrap();
    assert_eq!(set_aside.duplicates, 2);
    assert_eq!(columns::items(&rows.rows, &rows.row_ends).count(), 1);
}
