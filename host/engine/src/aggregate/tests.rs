//! The window operators against a native counting aggregator, batch by batch: lateness at the
//! exact boundary, allowed lateness, each output mode, pane merging, session merging, the flush
//! horizon.

use super::*;
use crate::columns;
use crate::pipeline::OutputMode;
use crate::plugin::{EventBatch, PluginError};
use crate::rows::Rows;
use crate::watermark::NONE;
use crate::window::Panes;

use crate::testing::{Count, policy};

fn events(items: &[(i64, &str)]) -> EventBatch {
    crate::testing::batch(items.iter().map(|&(t, key)| (t, key, "{}")))
}

/// (start, end, key, count) of an emitted window.
type Emitted = (i64, i64, String, u64);

struct Harness {
    op: Box<dyn Operator>,
    state: StateStore,
    wm: i64,
    _dir: tempfile::TempDir,
}

/// Makes an operator with the given allowed lateness and output mode.
type Make = Box<dyn Fn(i64, OutputMode) -> Box<dyn Operator>>;

fn panes(size: i64, slide: i64) -> Make {
    Box::new(move |lateness, mode| {
        let panes = Panes { size, slide, offset: 0 };
        Box::new(panes::PaneOperator::new(panes, lateness, mode, Box::new(Count), policy()))
    })
}

fn sessions(gap: i64) -> Make {
    Box::new(move |lateness, mode| {
        Box::new(sessions::SessionOperator::new(gap, lateness, mode, Box::new(Count), policy()))
    })
}

impl Harness {
    fn new(op: Box<dyn Operator>) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let mut state = StateStore::open(dir.path()).unwrap();
        let mut op = op;
        assert_eq!(op.open(&mut state, None).unwrap(), Opened { state_version: Some(1), migrated: None });
        Self { op, state, wm: NONE, _dir: dir }
    }

    /// One batch: returns (late event indices, emitted windows).
    fn batch(&mut self, evs: &[(i64, &str)], new_wm: i64) -> (Vec<u32>, Vec<Emitted>) {
        let mut out = Rows::default();
        let set_aside = self.op.process(&events(evs), self.wm, &mut self.state, &mut out).unwrap();
        assert!(set_aside.invalid.is_empty(), "{:?}", set_aside.invalid);
        let late = set_aside.late;
        let advanced = self.op.advance(self.wm, new_wm, &mut self.state, &mut out).unwrap();
        assert!(advanced.failed.is_empty(), "{:?}", advanced.failed);
        let emitted = advanced.emitted;
        self.state.commit(b"m", &mut crate::checkpoint::Syncs::default()).unwrap();
        self.wm = new_wm;
        let rows: Vec<Emitted> = columns::items(&out.rows, &out.row_ends)
            .map(|r| {
                let v: serde_json::Value = serde_json::from_slice(r).unwrap();
                let key = v.get("key").and_then(|k| k.as_str()).unwrap_or("").to_string();
                (
                    v["window_start"].as_i64().unwrap(),
                    v["window_end"].as_i64().unwrap(),
                    key,
                    v["count"].as_u64().unwrap(),
                )
            })
            .collect();
        assert_eq!(rows.len(), emitted);
        (late, rows)
    }
}

const MIN: i64 = 60_000;

#[test]
fn append_emits_a_window_once_when_the_watermark_reaches_its_end() {
    let mut h = Harness::new(panes(MIN, MIN)(0, OutputMode::Append));
    let (late, out) = h.batch(&[(0, ""), (59_999, ""), (60_000, "")], 59_999);
    assert!(late.is_empty());
    assert!(out.is_empty(), "[0, 60000) is not final at watermark 59999");
    let (_, out) = h.batch(&[], 60_000);
    assert_eq!(out, vec![(0, MIN, String::new(), 2)]);
    let (_, out) = h.batch(&[], 60_001);
    assert!(out.is_empty(), "emitted once");
}

#[test]
fn an_event_is_late_when_its_window_ended_at_or_before_the_watermark_in_force() {
    let mut h = Harness::new(panes(MIN, MIN)(0, OutputMode::Append));
    h.batch(&[(1, "")], 60_000);
    let (late, out) = h.batch(&[(59_999, ""), (60_000, "")], 60_000);
    assert_eq!(late, vec![0], "window [0, 60000) ended at the watermark: late; [60000, ...) is open");
    assert!(out.is_empty());
    let (_, out) = h.batch(&[], i64::MAX);
    assert_eq!(out, vec![(MIN, 2 * MIN, String::new(), 1)]);
}

#[test]
fn allowed_lateness_keeps_windows_open_and_counting() {
    let mut h = Harness::new(panes(MIN, MIN)(1_000, OutputMode::Append));
    let (_, out) = h.batch(&[(10, "")], 60_500);
    assert!(out.is_empty());
    let (late, out) = h.batch(&[(20, "")], 61_000);
    assert!(late.is_empty(), "60000 + 1000 > 60500: still open");
    assert_eq!(out, vec![(0, MIN, String::new(), 2)]);
    let (late, _) = h.batch(&[(30, "")], 61_000);
    assert_eq!(late, vec![0]);
}

#[test]
fn update_emits_the_windows_each_batch_changed() {
    let mut h = Harness::new(panes(MIN, MIN)(0, OutputMode::Update));
    let (_, out) = h.batch(&[(0, ""), (MIN, "")], NONE);
    assert_eq!(out, vec![(0, MIN, String::new(), 1), (MIN, 2 * MIN, String::new(), 1)]);
    let (_, out) = h.batch(&[(MIN + 1, "")], NONE);
    assert_eq!(out, vec![(MIN, 2 * MIN, String::new(), 2)], "only the changed window");
    let (_, out) = h.batch(&[], MIN);
    assert!(out.is_empty(), "a window that becomes final unchanged is not emitted again");
}

#[test]
fn complete_emits_every_window_in_state_until_it_is_final() {
    let mut h = Harness::new(panes(MIN, MIN)(0, OutputMode::Complete));
    h.batch(&[(0, ""), (MIN, ""), (MIN + 1, "")], NONE);
    let (_, out) = h.batch(&[], NONE);
    assert_eq!(out.len(), 2, "every window in state");
    let (_, out) = h.batch(&[], MIN);
    assert_eq!(out.len(), 2, "the window final in this batch is in it one last time");
    let (_, out) = h.batch(&[], MIN);
    assert_eq!(out, vec![(MIN, 2 * MIN, String::new(), 2)], "final windows leave state");
}

#[test]
fn sliding_windows_merge_their_panes_per_key() {
    let mut h = Harness::new(panes(3_000, 1_000)(0, OutputMode::Append));
    h.batch(&[(0, "a"), (1_500, "a"), (2_500, "b")], NONE);
    let (_, out) = h.batch(&[], i64::MAX);
    let want = vec![
        (-2_000, 1_000, "a".into(), 1),
        (-1_000, 2_000, "a".into(), 2),
        (0, 3_000, "a".into(), 2),
        (0, 3_000, "b".into(), 1),
        (1_000, 4_000, "a".into(), 1),
        (1_000, 4_000, "b".into(), 1),
        (2_000, 5_000, "b".into(), 1),
    ];
    assert_eq!(out, want);
}

#[test]
fn sessions_grow_and_merge_across_batches_per_key() {
    let mut h = Harness::new(sessions(10)(0, OutputMode::Append));
    h.batch(&[(0, "a"), (5, "a"), (30, "a"), (0, "b")], NONE);
    // 15 touches [0, 15); 25 touches [15, 25) and meets [30, 40): all of a's sessions merge.
    let (_, out) = h.batch(&[(15, "a"), (25, "a")], 20);
    assert_eq!(out, vec![(0, 10, "b".into(), 1)], "b's session ended at 10 <= 20");
    let (late, _) = h.batch(&[(9, "b")], 20);
    assert_eq!(late, vec![0], "9 + gap = 19 <= 20: its session could only be final");
    let (_, out) = h.batch(&[], i64::MAX);
    assert_eq!(out, vec![(0, 40, "a".into(), 5)]);
}

/// A long session that grows at every batch leaves a stale entry in the end index each time;
/// the index is rebuilt from the open sessions before they pile up, and the sessions come out
/// whole.
#[test]
fn sessions_growing_every_batch_keep_the_end_index_bounded() {
    let dir = tempfile::tempdir().unwrap();
    let mut state = StateStore::open(dir.path()).unwrap();
    let mut op = sessions::SessionOperator::new(1_000_000, 0, OutputMode::Append, Box::new(Count), policy());
    op.open(&mut state, None).unwrap();
    let mut out = Rows::default();
    let mut most = 0;
    for b in 0..3_000i64 {
        // Each key's session grows by 10 ms.
        let evs = events(&[(b * 10, "a"), (b * 10, "b"), (b * 10, "c"), (0, "a")]);
        op.process(&evs, NONE, &mut state, &mut out).unwrap();
        most = most.max(op.index_entries());
    }
    assert!(most <= 4_096 + 3, "{most} entries for 3 open sessions: rebuilt at 4,096");
    // Events inside the sessions move no end: their entries still name them, none is added.
    let before = op.index_entries();
    op.process(&events(&[(5, "a"), (5, "b"), (5, "c")]), NONE, &mut state, &mut out).unwrap();
    assert_eq!(op.index_entries(), before);
    let advanced = op.advance(NONE, i64::MAX, &mut state, &mut out).unwrap();
    assert_eq!(advanced.emitted, 3);
    let counts: Vec<u64> = columns::items(&out.rows, &out.row_ends)
        .map(|r| serde_json::from_slice::<serde_json::Value>(r).unwrap()["count"].as_u64().unwrap())
        .collect();
    assert_eq!(counts, vec![6_001, 3_001, 3_001]);
    assert_eq!(op.index_entries(), 0);
}

/// A key whose last session leaves frees its slot in the batch that also deletes a session it
/// absorbed; the slot, reused by another key in the next batch, must not have taken that delete
/// with it: reopened, the store holds exactly the open sessions.
#[test]
fn a_freed_slot_reused_by_another_key_leaves_the_log_right() {
    let make = || sessions(10)(0, OutputMode::Append);
    let mut h = Harness::new(make());
    assert_eq!(h.batch(&[(20, "a")], NONE).1, Vec::<Emitted>::new());
    // [5, 15) and [12, 22) reach a's stored [20, 30): one session [5, 30), which 30 closes.
    assert_eq!(h.batch(&[(5, "a"), (12, "a")], 30).1, vec![(5, 30, "a".into(), 3)]);
    assert_eq!(h.batch(&[(40, "b")], 30).1, Vec::<Emitted>::new());
    let mut reopened = make();
    reopened.open(&mut h.state, Some(1)).unwrap();
    h.op = reopened;
    assert_eq!(h.batch(&[], i64::MAX).1, vec![(40, 50, "b".into(), 1)], "a's absorbed [20, 30) is gone");
}

/// Advancing to the horizon emits exactly what advancing to +∞ would, and leaves no state: the
/// flush at the end of input needs no infinite watermark.
#[test]
fn the_horizon_makes_everything_held_final() {
    for make in [panes(3_000, 1_000), panes(MIN, MIN), sessions(10)] {
        for lateness in [0, 500] {
            let evs = [(0, "a"), (1_500, "a"), (2_500, "b"), (61_000, "c")];
            let mut flushed = Harness::new(make(lateness, OutputMode::Append));
            let mut infinite = Harness::new(make(lateness, OutputMode::Append));
            flushed.batch(&evs, 100);
            infinite.batch(&evs, 100);
            let horizon = flushed.op.horizon(&flushed.state).unwrap().unwrap();
            let (_, a) = flushed.batch(&[], horizon);
            let (_, b) = infinite.batch(&[], i64::MAX);
            assert_eq!(a, b);
            assert!(!a.is_empty());
            assert_eq!(flushed.op.horizon(&flushed.state).unwrap(), None, "nothing left");
            let mut short = Harness::new(make(lateness, OutputMode::Append));
            short.batch(&evs, 100);
            short.batch(&[], horizon - 1);
            assert!(short.op.horizon(&short.state).unwrap().is_some(), "the horizon is the lowest such watermark");
        }
    }
}

/// Event times at the ends of the timeline have no window that fits: dead letters, not a
/// window at the other end, not a panic.
#[test]
fn events_whose_windows_do_not_fit_are_set_aside_as_invalid() {
    for make in [panes(MIN, MIN), panes(10 * MIN, MIN), sessions(10)] {
        let dir = tempfile::tempdir().unwrap();
        let mut state = StateStore::open(dir.path()).unwrap();
        let mut op = make(0, OutputMode::Append);
        op.open(&mut state, None).unwrap();
        let mut out = Rows::default();
        let got =
            op.process(&events(&[(i64::MAX, ""), (0, ""), (i64::MAX - 5, "")]), NONE, &mut state, &mut out).unwrap();
        assert_eq!(got.invalid.iter().map(|(i, _)| *i).collect::<Vec<_>>(), vec![0, 2]);
        assert!(got.invalid[0].1.contains("outside the timeline"), "{}", got.invalid[0].1);
        assert!(got.late.is_empty());
    }
    let dir = tempfile::tempdir().unwrap();
    let mut state = StateStore::open(dir.path()).unwrap();
    let mut op = panes(MIN, MIN)(0, OutputMode::Append);
    let got = op.process(&events(&[(i64::MIN, "")]), NONE, &mut state, &mut Rows::default()).unwrap();
    assert_eq!(got.invalid.len(), 1, "the first window would start before i64::MIN");
}

#[test]
fn members_are_laid_out_group_by_group_in_event_order() {
    let (members, ends) = group_members(&[1, 0, u32::MAX, 1, 0, 2], 3);
    assert_eq!(members, vec![1, 4, 0, 3, 5]);
    assert_eq!(ends, vec![2, 4, 5]);
}

/// Counts events as [`Count`] does, and records each group's members as it was given them.
struct Recording(std::sync::Arc<std::sync::Mutex<Vec<Vec<u32>>>>);

impl AggregateFns for Recording {
    fn accumulate(
        &mut self,
        accs: &[Vec<u8>],
        events: &EventBatch,
        members: &[u32],
        ends: &[u32],
    ) -> Result<Vec<Vec<u8>>, PluginError> {
        let mut seen = self.0.lock().unwrap();
        let mut start = 0;
        for &end in ends {
            seen.push(members[start..end as usize].to_vec());
            start = end as usize;
        }
        Count.accumulate(accs, events, members, ends)
    }
    fn merge(&mut self, accs: &[Vec<u8>], ends: &[u32]) -> Result<Vec<Vec<u8>>, PluginError> {
        Count.merge(accs, ends)
    }
    fn finish(&mut self, accs: &[Vec<u8>]) -> Result<Vec<Vec<u8>>, PluginError> {
        Count.finish(accs)
    }
    fn stage(&self) -> &str {
        "test/aggregate"
    }
}

/// A session's events reach the plugin in input order, as a tumbling window's do, however out
/// of order their times came: the guest SDK then folds a whole batch front to back.
#[test]
fn a_session_s_events_reach_the_plugin_in_input_order() {
    let seen = std::sync::Arc::default();
    let op = sessions::SessionOperator::new(
        MIN,
        0,
        OutputMode::Append,
        Box::new(Recording(std::sync::Arc::clone(&seen))),
        policy(),
    );
    let mut h = Harness::new(Box::new(op));
    // `a`: one session out of time order; `b`: two sessions, the later one first.
    let batch = [(30_000, "a"), (10 * MIN, "b"), (0, "a"), (MIN, "b"), (20_000, "a"), (10 * MIN + 5, "b")];
    let (late, _) = h.batch(&batch, NONE);
    assert!(late.is_empty());
    let mut groups = seen.lock().unwrap().clone();
    groups.sort();
    assert_eq!(groups, vec![vec![0, 2, 4], vec![1, 5], vec![3]]);
}

/// A checkpoint of sessions state format 1 (a key per session, and the end index in the store)
/// opens as format 3: its sessions carry on from memory, the old keys go in the first commit,
/// and the log that replaces them opens to the same sessions.
#[test]
fn sessions_of_state_format_1_open_and_their_store_index_goes() {
    let dir = tempfile::tempdir().unwrap();
    let mut state = StateStore::open(dir.path()).unwrap();
    // Format 1 as it was written: `s` + len + key + start → end + acc, and `e` + end + the same.
    let mut s = vec![b's'];
    s.extend_from_slice(&1u32.to_be_bytes());
    s.extend_from_slice(b"a");
    s.extend_from_slice(&crate::state::time_key(0));
    let mut v = crate::state::time_key(10).to_vec();
    v.extend_from_slice(b"2");
    let mut e = vec![b'e'];
    e.extend_from_slice(&crate::state::time_key(10));
    e.extend_from_slice(&s[1..]);
    state.put(s, v);
    state.put(e, Vec::new());
    state.commit(b"m", &mut crate::checkpoint::Syncs::default()).unwrap();

    let mut op = sessions(10)(0, OutputMode::Append);
    op.open(&mut state, Some(1)).unwrap();
    assert_eq!(op.horizon(&state).unwrap(), Some(10), "the stored session is open in memory");
    let mut h = Harness { op, state, wm: NONE, _dir: dir };
    let (_, out) = h.batch(&[(5, "a")], 100);
    assert_eq!(out, vec![(0, 15, "a".to_string(), 3)], "it merged with the new event and left once");
    assert!(h.state.range(b"e", b"f").unwrap().is_empty(), "format 1's index is gone");
    assert!(h.state.range(b"s", b"t").unwrap().is_empty(), "and its session keys");
    assert!(!h.state.range(b"g", b"h").unwrap().is_empty(), "the log took their place");
    assert_eq!(h.state.get(b"fs").unwrap(), Some(3u32.to_be_bytes().to_vec()));
    let mut reopened = sessions(10)(0, OutputMode::Append);
    reopened.open(&mut h.state, Some(1)).unwrap();
    assert_eq!(reopened.horizon(&h.state).unwrap(), None, "the log replays to no open session");
}

/// The log of changes reopens to exactly the open sessions, through appends and rewrites:
/// many keys over many batches, reopened after each commit, must emit what one operator that
/// never closed emits.
#[test]
fn sessions_reopened_from_their_log_after_every_batch_emit_what_one_run_emits() {
    let batches: Vec<Vec<(i64, String)>> = (0..60)
        .map(|b| (0..400).map(|i| (b * 7 + (i % 13), format!("user-{}", (i * 31 + b * 17) % 500))).collect())
        .collect();
    // Rewritten whenever the log is twice the open sessions, or 2 KiB: many times in this run.
    let make = || {
        Box::new(
            sessions::SessionOperator::new(10, 0, OutputMode::Append, Box::new(Count), policy()).rewriting_at(2048),
        )
    };
    let run = |reopen: bool| {
        let mut h = Harness::new(make());
        let mut all = Vec::new();
        for (b, evs) in batches.iter().enumerate() {
            let evs: Vec<(i64, &str)> = evs.iter().map(|(t, k)| (*t, k.as_str())).collect();
            let (_, out) = h.batch(&evs, b as i64 * 7 - 20);
            all.extend(out);
            if reopen {
                let mut op = make();
                op.open(&mut h.state, Some(1)).unwrap();
                h.op = op;
            }
        }
        let (_, out) = h.batch(&[], i64::MAX);
        all.extend(out);
        all
    };
    let once = run(false);
    assert!(once.len() > 1_000, "{} sessions", once.len());
    assert_eq!(run(true), once);
    // And the rewrites happened: the log's first entry moved on from the first ever written.
    let mut h = Harness::new(make());
    for (b, evs) in batches.iter().take(20).enumerate() {
        let evs: Vec<(i64, &str)> = evs.iter().map(|(t, k)| (*t, k.as_str())).collect();
        h.batch(&evs, b as i64 * 7 - 20);
    }
    let log = h.state.range(b"g", b"h").unwrap();
    assert!(log.len() < 20, "{} entries: rewritten, not only appended", log.len());
    assert!(log[0].0 > b"g\0\0\0\0\0\0\0\x01".to_vec(), "the oldest entries were deleted by a rewrite");
}

/// Stage 1's partials of `evs` (one lane's batch) as stage 2's events: each partial at its
/// start, under its key, its row the end and accumulator. The batch's closing row (its largest
/// event time) is no event.
fn partials_of(window: crate::window::WindowSpec, evs: &[(i64, &str)]) -> (EventBatch, i64) {
    let dir = tempfile::tempdir().unwrap();
    let mut state = StateStore::open(dir.path()).unwrap();
    let mut op = partials::Partials::new(window, Box::new(Count));
    let mut out = Rows::default();
    op.process(&events(evs), NONE, &mut state, &mut out).unwrap();
    op.advance(NONE, NONE, &mut state, &mut out).unwrap();
    let mut b = EventBatch::default();
    let mut max = NONE;
    let keys = columns::items(&out.keys, &out.key_ends);
    for ((key, row), &t) in keys.zip(columns::items(&out.rows, &out.row_ends)).zip(&out.times) {
        if row.is_empty() {
            max = t;
            continue;
        }
        b.times.push(t);
        columns::push(&mut b.keys, &mut b.key_ends, key).unwrap();
        columns::push(&mut b.rows, &mut b.row_ends, row).unwrap();
        b.origins.push(b.origins.len() as u32);
    }
    (b, max)
}

proptest::proptest! {
    /// Two stages equal one: events cut into batches of several lanes, each batch folded into
    /// partials and the partials merged in any order, emit the windows (tumbling, sliding,
    /// sessions) that one operator emits over the same events.
    #[test]
    fn partials_merged_in_any_order_emit_what_one_operator_emits(
        evs in proptest::collection::vec((0i64..400, 0usize..4), 1..120),
        cuts in proptest::collection::vec(0usize..120, 0..6),
        order in proptest::sample::subsequence((0usize..12).collect::<Vec<_>>(), 0..12),
        kind in 0usize..3,
    ) {
        let keys = ["a", "b", "", "user-7"];
        let evs: Vec<(i64, &str)> = evs.iter().map(|&(t, k)| (t, keys[k])).collect();
        let (window, one, two): (crate::window::WindowSpec, Make, Make) = match kind {
            0 => (
                crate::window::WindowSpec::sliding(50, 50, 0),
                panes(50, 50),
                Box::new(|l, m| Box::new(panes::PaneOperator::new(Panes { size: 50, slide: 50, offset: 0 }, l, m,
                    Box::new(merged::Merged(Box::new(Count))), policy()))),
            ),
            1 => (
                crate::window::WindowSpec::sliding(100, 25, 0),
                panes(100, 25),
                Box::new(|l, m| Box::new(panes::PaneOperator::new(Panes { size: 100, slide: 25, offset: 0 }, l, m,
                    Box::new(merged::Merged(Box::new(Count))), policy()))),
            ),
            _ => (
                crate::window::WindowSpec::Session { gap: 15 },
                sessions(15),
                Box::new(|l, m| Box::new(sessions::SessionOperator::new(15, l, m,
                    Box::new(merged::Merged(Box::new(Count))), policy()).over_partials())),
            ),
        };
        let mut single = Harness::new(one(0, OutputMode::Append));
        single.batch(&evs, NONE);
        let (_, mut want) = single.batch(&[], i64::MAX);
        // Batches: the events cut where `cuts` says, each batch a lane's.
        let mut bounds: Vec<usize> = cuts.into_iter().map(|c| c % evs.len()).collect();
        bounds.extend([0, evs.len()]);
        bounds.sort_unstable();
        bounds.dedup();
        let mut batches: Vec<EventBatch> =
            bounds.windows(2).map(|w| partials_of(window, &evs[w[0]..w[1]]).0).collect();
        // Stage 2 takes them in another order.
        let n = batches.len();
        for &i in order.iter().filter(|&&i| i < n) {
            let b = batches.remove(i % batches.len());
            batches.push(b);
        }
        let mut merged = Harness::new(two(0, OutputMode::Append));
        for b in &batches {
            let mut out = Rows::default();
            let set_aside = merged.op.process(b, NONE, &mut merged.state, &mut out).unwrap();
            proptest::prop_assert!(set_aside.late.is_empty() && set_aside.invalid.is_empty());
        }
        let (_, mut got) = merged.batch(&[], i64::MAX);
        want.sort();
        got.sort();
        proptest::prop_assert_eq!(got, want);
    }
}

#[test]
fn a_batch_s_partials_carry_its_largest_event_time() {
    let (_, max) = partials_of(crate::window::WindowSpec::sliding(50, 50, 0), &[(7, "a"), (90, "b"), (3, "a")]);
    assert_eq!(max, 90);
}
