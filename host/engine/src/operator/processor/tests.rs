//! The keyed processor against a native plugin, batch by batch: timers on both clocks fire once
//! and only when due, TTL on both clocks, the timer cap and the stage's budget, lateness, the
//! flush horizon.

use super::*;
use crate::pipeline::Ttl;
use crate::watermark::NONE;

/// Counts each key's events (the state is the count in decimal) and emits `{"key","n"}` per
/// event; an event whose row says `"timer": T` sets an event-time timer at T, `"ptimer": T` a
/// processing-time one, `"cancel": T` cancels the event-time timer at T. Fired timers emit
/// `{"key","fired"}` and leave the state as it is.
struct Counter {
    max_timers: usize,
    budget: crate::plugin::StageBudget,
    /// The event times `process` saw, in the order it saw them.
    seen: std::sync::Arc<std::sync::Mutex<Vec<i64>>>,
}

fn count(state: &Option<Vec<u8>>) -> u64 {
    state.as_ref().and_then(|s| std::str::from_utf8(s).ok()?.parse().ok()).unwrap_or(0)
}

fn result() -> KeyResult {
    KeyResult { state: None, times: vec![], rows: vec![], row_ends: vec![], set_timers: vec![], delete_timers: vec![] }
}

fn emit(r: &mut KeyResult, time: i64, row: String) {
    r.times.push(time);
    columns::push(&mut r.rows, &mut r.row_ends, row.as_bytes()).unwrap();
}

impl ProcessFns for Counter {
    fn process(
        &mut self,
        _: Clock,
        keys: &[Keyed],
        events: &EventBatch,
        members: &[u32],
        ends: &[u32],
    ) -> Result<Vec<KeyResult>, PluginError> {
        let mut start = 0;
        let mut out = Vec::new();
        for (k, &end) in keys.iter().zip(ends) {
            let mut r = result();
            let mut n = count(&k.state);
            for &m in &members[start..end as usize] {
                n += 1;
                self.seen.lock().unwrap().push(events.times[m as usize]);
                let row: serde_json::Value =
                    serde_json::from_slice(columns::item(&events.rows, &events.row_ends, m as usize)).unwrap();
                if let Some(at) = row["timer"].as_i64() {
                    r.set_timers.push(Timer { domain: TimeDomain::EventTime, at });
                }
                if let Some(at) = row["ptimer"].as_i64() {
                    r.set_timers.push(Timer { domain: TimeDomain::ProcessingTime, at });
                }
                if let Some(at) = row["cancel"].as_i64() {
                    r.delete_timers.push(Timer { domain: TimeDomain::EventTime, at });
                }
                let key = String::from_utf8_lossy(&k.key);
                emit(&mut r, events.times[m as usize], format!("{{\"key\":\"{key}\",\"n\":{n}}}"));
            }
            r.state = Some(n.to_string().into_bytes());
            out.push(r);
            start = end as usize;
        }
        Ok(out)
    }

    fn on_timers(
        &mut self,
        _: Clock,
        keys: &[Keyed],
        timers: &[Timer],
        ends: &[u32],
    ) -> Result<Vec<KeyResult>, PluginError> {
        let mut start = 0;
        let mut out = Vec::new();
        for (k, &end) in keys.iter().zip(ends) {
            let mut r = result();
            for t in &timers[start..end as usize] {
                emit(&mut r, t.at, format!("{{\"key\":\"{}\",\"fired\":{}}}", String::from_utf8_lossy(&k.key), t.at));
            }
            r.state = k.state.clone();
            out.push(r);
            start = end as usize;
        }
        Ok(out)
    }

    fn stage(&self) -> &str {
        "test/process"
    }

    fn max_timers(&self) -> usize {
        self.max_timers
    }

    fn stage_budget(&self) -> crate::plugin::StageBudget {
        self.budget
    }
}

use crate::testing::policy;

fn operator(ttl: Option<Ttl>, max_timers: usize) -> KeyedProcess {
    let counter = Counter { budget: Default::default(), max_timers, seen: Default::default() };
    KeyedProcess::new(Process { plugin: spec(), key: None, ttl, tombstones: false }, 0, Box::new(counter), policy())
}

fn spec() -> crate::plugin::StageSpec {
    crate::plugin::StageSpec {
        name: "test/process".into(),
        component: "none.wasm".into(),
        config_json: "{}".into(),
        grants: Default::default(),
        limits: Default::default(),
    }
}

/// Events `(time, key, extra JSON fields)`.
fn events(items: &[(i64, &str, &str)]) -> EventBatch {
    crate::testing::batch(
        items
            .iter()
            .map(|&(t, key, extra)| (t, key, if extra.is_empty() { "{}".to_string() } else { format!("{{{extra}}}") })),
    )
}

fn rows(out: &Rows) -> Vec<String> {
    columns::items(&out.rows, &out.row_ends).map(|r| String::from_utf8_lossy(r).into_owned()).collect()
}

struct Harness {
    op: KeyedProcess,
    state: StateStore,
    watermark: i64,
    _dir: tempfile::TempDir,
}

impl Harness {
    fn new(op: KeyedProcess) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let mut state = StateStore::open(dir.path()).unwrap();
        let mut op = op;
        op.open(&mut state, None).unwrap();
        Harness { op, state, watermark: NONE, _dir: dir }
    }

    /// One batch planned at `now`: its events, then the watermark moves to `to`. Returns its rows.
    fn batch(&mut self, now: i64, items: &[(i64, &str, &str)], to: i64) -> (Vec<String>, Processed) {
        let mut out = Rows::default();
        self.op.set_processing_time(now);
        let set_aside = self.op.process(&events(items), self.watermark, &mut self.state, &mut out).unwrap();
        let to = to.max(self.watermark);
        let advanced = self.op.advance(self.watermark, to, &mut self.state, &mut out).unwrap();
        assert!(advanced.failed.is_empty(), "{:?}", advanced.failed);
        self.watermark = to;
        (rows(&out), set_aside)
    }
}

#[test]
fn event_time_timers_fire_once_when_the_watermark_reaches_them() {
    let mut h = Harness::new(operator(None, 10));
    let (out, _) = h.batch(0, &[(100, "a", "\"timer\":150"), (120, "b", "\"timer\":300")], 149);
    assert_eq!(out, vec![r#"{"key":"a","n":1}"#, r#"{"key":"b","n":1}"#], "nothing is due at 149");
    let (out, _) = h.batch(0, &[(160, "a", "")], 150);
    assert_eq!(out, vec![r#"{"key":"a","n":2}"#, r#"{"key":"a","fired":150}"#]);
    let (out, _) = h.batch(0, &[], 299);
    assert!(out.is_empty(), "a fired timer is gone: {out:?}");
    assert_eq!(h.op.horizon(&h.state).unwrap(), Some(300), "b's timer is what a flush waits for");
    let (out, _) = h.batch(0, &[], 10_000);
    assert_eq!(out, vec![r#"{"key":"b","fired":300}"#]);
    assert_eq!(h.op.horizon(&h.state).unwrap(), None);
}

#[test]
fn setting_a_timer_twice_is_one_timer_and_a_cancelled_one_never_fires() {
    let mut h = Harness::new(operator(None, 10));
    h.batch(0, &[(100, "a", "\"timer\":150"), (101, "a", "\"timer\":150"), (102, "c", "\"timer\":150")], 0);
    h.batch(0, &[(103, "c", "\"cancel\":150")], 0);
    let (out, _) = h.batch(0, &[], 200);
    assert_eq!(out, vec![r#"{"key":"a","fired":150}"#]);
}

#[test]
fn processing_time_timers_fire_by_the_batch_s_planning_time() {
    let mut h = Harness::new(operator(None, 10));
    h.batch(1_000, &[(5, "a", "\"ptimer\":1500")], 1_000_000);
    let (out, _) = h.batch(1_499, &[], 1_000_000);
    assert!(out.is_empty(), "not due before 1500, whatever the watermark: {out:?}");
    let (out, _) = h.batch(1_500, &[], 1_000_000);
    assert_eq!(out, vec![r#"{"key":"a","fired":1500}"#]);
}

#[test]
fn event_time_ttl_deletes_keys_without_events_and_nothing_else() {
    let ttl = Ttl { ms: 100, clock: TtlClock::EventTime };
    let mut h = Harness::new(operator(Some(ttl), 10));
    h.batch(0, &[(1_000, "a", ""), (1_000, "b", "")], 1_050);
    h.batch(0, &[(1_080, "b", "")], 1_099);
    // a was last touched at 1000: gone at watermark 1100; b (1080) stays until 1180.
    h.batch(0, &[], 1_100);
    let (out, _) = h.batch(0, &[(1_150, "a", ""), (1_150, "b", "")], 1_150);
    assert_eq!(out, vec![r#"{"key":"a","n":1}"#, r#"{"key":"b","n":3}"#]);
}

#[test]
fn processing_time_ttl_counts_from_the_last_batch_that_gave_the_key_events() {
    let ttl = Ttl { ms: 60_000, clock: TtlClock::ProcessingTime };
    let mut h = Harness::new(operator(Some(ttl), 10));
    h.batch(0, &[(1, "a", ""), (1, "b", "")], 1);
    h.batch(30_000, &[(2, "b", "")], 2);
    h.batch(60_000, &[], 2);
    let (out, _) = h.batch(61_000, &[(3, "a", ""), (3, "b", "")], 3);
    assert_eq!(out, vec![r#"{"key":"a","n":1}"#, r#"{"key":"b","n":3}"#]);
}

#[test]
fn a_key_over_its_timer_cap_fails_the_call_with_the_limit() {
    let mut h = Harness::new(operator(None, 2));
    h.op.set_processing_time(0);
    let batch = events(&[(1, "a", "\"timer\":10"), (2, "a", "\"timer\":11"), (3, "a", "\"timer\":12")]);
    let err = h.op.process(&batch, NONE, &mut h.state, &mut Rows::default()).unwrap_err();
    assert!(
        matches!(&err, OperatorError::Plugin(PluginError::Limit { limit: LimitExceeded::Timers { max: 2 }, .. })),
        "{err}"
    );
    // Two, then cancelling one and setting another, stays within the cap.
    h.batch(0, &[(1, "a", "\"timer\":10"), (2, "a", "\"timer\":11")], NONE);
    h.batch(0, &[(3, "a", "\"cancel\":10")], NONE);
    h.batch(0, &[(4, "a", "\"timer\":12")], NONE);
    let (out, _) = h.batch(0, &[], 100);
    assert_eq!(out, vec![r#"{"key":"a","fired":11}"#, r#"{"key":"a","fired":12}"#]);
}

#[test]
fn events_behind_the_watermark_are_late_and_change_nothing() {
    let mut h = Harness::new(operator(None, 10));
    h.batch(0, &[(100, "a", "")], 100);
    let (out, set_aside) = h.batch(0, &[(99, "a", ""), (100, "a", "")], 100);
    assert_eq!(set_aside.late, vec![0]);
    assert_eq!(out, vec![r#"{"key":"a","n":2}"#]);
}

#[test]
fn keys_reach_the_plugin_in_key_order_and_their_events_in_event_time_order() {
    let seen = std::sync::Arc::default();
    let counter = Counter { budget: Default::default(), max_timers: 10, seen: std::sync::Arc::clone(&seen) };
    let mut h = Harness::new(KeyedProcess::new(
        Process { plugin: spec(), key: None, ttl: None, tombstones: false },
        0,
        Box::new(counter),
        policy(),
    ));
    h.batch(0, &[(30, "b", ""), (30, "a", ""), (10, "a", ""), (20, "b", ""), (20, "a", "")], NONE);
    assert_eq!(*seen.lock().unwrap(), vec![10, 20, 30, 20, 30]);
}

/// A processor build that declares state version 2 and migrates version 1's decimal counts by
/// adding 1000, so the test can tell a migrated state from an unmigrated one.
struct Migrating(Counter);

impl ProcessFns for Migrating {
    fn process(
        &mut self,
        clock: Clock,
        keys: &[Keyed],
        events: &EventBatch,
        members: &[u32],
        ends: &[u32],
    ) -> Result<Vec<KeyResult>, PluginError> {
        self.0.process(clock, keys, events, members, ends)
    }
    fn on_timers(&mut self, c: Clock, k: &[Keyed], t: &[Timer], e: &[u32]) -> Result<Vec<KeyResult>, PluginError> {
        self.0.on_timers(c, k, t, e)
    }
    fn stage(&self) -> &str {
        "test/process-v2"
    }
    fn state_version(&mut self) -> Result<u32, PluginError> {
        Ok(2)
    }
    fn migrate(&mut self, from: u32, states: &[Vec<u8>]) -> Result<Vec<Vec<u8>>, PluginError> {
        assert_eq!(from, 1);
        Ok(states.iter().map(|s| (count(&Some(s.clone())) + 1_000).to_string().into_bytes()).collect())
    }
}

#[test]
fn another_state_version_migrates_every_key_s_state_and_keeps_its_timers() {
    let mut h = Harness::new(operator(None, 10));
    h.batch(0, &[(1, "a", "\"timer\":50"), (2, "a", ""), (3, "b", "")], NONE);
    let meta = b"{}".to_vec();
    h.state.commit(&meta, &mut crate::checkpoint::Syncs::default()).unwrap();
    let v2 = Migrating(Counter { budget: Default::default(), max_timers: 10, seen: Default::default() });
    let mut op = KeyedProcess::new(
        Process { plugin: spec(), key: None, ttl: None, tombstones: false },
        0,
        Box::new(v2),
        policy(),
    );
    let opened = op.open(&mut h.state, Some(1)).unwrap();
    assert_eq!(opened, Opened { state_version: Some(2), migrated: Some(2) });
    h.op = op;
    let (out, _) = h.batch(0, &[(10, "a", ""), (10, "b", "")], 60);
    assert_eq!(out, vec![r#"{"key":"a","n":1003}"#, r#"{"key":"b","n":1002}"#, r#"{"key":"a","fired":50}"#]);
}

#[test]
fn rows_carry_the_key_and_a_key_whose_state_expires_leaves_a_tombstone() {
    let ttl = Ttl { ms: 100, clock: TtlClock::EventTime };
    let counter = Counter { budget: Default::default(), max_timers: 10, seen: Default::default() };
    let spec = Process { plugin: spec(), key: None, ttl: Some(ttl), tombstones: true };
    let mut h = Harness::new(KeyedProcess::new(spec, 0, Box::new(counter), policy()));
    let keyed = |h: &mut Harness, items: &[(i64, &str, &str)], to: i64| {
        let mut out = Rows::default();
        h.op.process(&events(items), h.watermark, &mut h.state, &mut out).unwrap();
        h.op.advance(h.watermark, to, &mut h.state, &mut out).unwrap();
        h.watermark = to;
        out.iter()
            .map(|(k, r)| (String::from_utf8_lossy(k).into_owned(), String::from_utf8_lossy(r).into_owned()))
            .collect::<Vec<_>>()
    };
    let out = keyed(&mut h, &[(1_000, "a", ""), (1_060, "b", "")], 1_050);
    assert_eq!(out, vec![("a".into(), r#"{"key":"a","n":1}"#.into()), ("b".into(), r#"{"key":"b","n":1}"#.into())]);
    // a's state expires at 1100, b's at 1160: one tombstone each, once.
    assert_eq!(keyed(&mut h, &[], 1_100), vec![("a".to_string(), String::new())]);
    assert_eq!(keyed(&mut h, &[], 1_200), vec![("b".to_string(), String::new())]);
    assert!(keyed(&mut h, &[], 1_300).is_empty());
}

fn budgeted(timers: u64, state_bytes: u64) -> KeyedProcess {
    let budget = crate::plugin::StageBudget { timers, state_bytes };
    let counter = Counter { budget, max_timers: 10, seen: Default::default() };
    KeyedProcess::new(
        Process { plugin: spec(), key: None, ttl: None, tombstones: false },
        0,
        Box::new(counter),
        policy(),
    )
}

#[test]
fn a_key_past_the_stage_s_timer_budget_is_refused_whole_and_the_others_go_on() {
    let mut h = Harness::new(budgeted(5, 1 << 20));
    let t = |at: i64| format!("\"timer\":{at}");
    let (a, b, c) = (t(10), t(11), t(12));
    let items = [(1, "a", a.as_str()), (2, "a", b.as_str()), (3, "b", a.as_str()), (4, "b", b.as_str())];
    let (out, set_aside) = h.batch(0, &[&items[..], &[(5, "c", &a), (6, "c", &b)]].concat(), NONE);
    // Keys go in byte order: a and b hold 4 timers, c's 2 more would make 6.
    assert_eq!(out, [r#"{"key":"a","n":1}"#, r#"{"key":"a","n":2}"#, r#"{"key":"b","n":1}"#, r#"{"key":"b","n":2}"#]);
    assert_eq!(set_aside.over_limit.iter().map(|(i, _)| *i).collect::<Vec<_>>(), vec![4, 5]);
    assert!(set_aside.over_limit[0].1.contains("limits.max_stage_timers"), "{:?}", set_aside.over_limit);
    // Nothing of c was kept; the budget holds across a commit and a reopen of the operator.
    h.state.commit(b"{}", &mut crate::checkpoint::Syncs::default()).unwrap();
    h.op = budgeted(5, 1 << 20);
    h.op.open(&mut h.state, Some(1)).unwrap();
    let (out, set_aside) = h.batch(0, &[(7, "c", &a), (8, "c", &b)], NONE);
    assert_eq!((out.len(), set_aside.over_limit.len()), (0, 2), "still 4 set: {out:?}");
    // Cancelling one of a's makes room for one of c's; a timer that fires gives its room back.
    h.batch(0, &[(9, "a", "\"cancel\":10")], NONE);
    let (out, set_aside) = h.batch(0, &[(10, "c", &c)], NONE);
    assert_eq!((out, set_aside.over_limit.len()), (vec![r#"{"key":"c","n":1}"#.to_string()], 0));
    h.batch(0, &[], 11);
    let (out, _) = h.batch(0, &[(12, "b", &t(20)), (13, "a", &t(21))], 11);
    assert_eq!(out.len(), 2, "three fired at 11, two set: {out:?}");
}

#[test]
fn a_key_whose_state_would_pass_the_stage_s_state_budget_is_refused_and_one_that_does_not_grow_is_not() {
    // Each count is one or two decimal digits: five keys of one byte each, then a sixth is over.
    let mut h = Harness::new(budgeted(100, 5));
    let (out, set_aside) = h.batch(0, &[(1, "a", ""), (1, "b", ""), (1, "c", ""), (1, "d", ""), (1, "e", "")], NONE);
    assert_eq!((out.len(), set_aside.over_limit.len()), (5, 0));
    let (out, set_aside) = h.batch(0, &[(2, "f", ""), (2, "a", "")], NONE);
    assert_eq!(out.len(), 1, "a's count of 2 is one byte, as its 1 was: {out:?}");
    assert!(set_aside.over_limit[0].1.contains("limits.max_stage_state_mb"), "{:?}", set_aside.over_limit);
}
