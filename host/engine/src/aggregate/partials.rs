//! Stage 1 of a group's aggregation (`docs/scale-out.md`): a batch's events folded into partial
//! accumulators, one per (pane, key) for tumbling and sliding windows, one per (session, key)
//! for sessions, where a batch's session is a run of a key's events that lie within the gap of
//! each other. Nothing is kept: the partials leave as rows (`shuffle.rs`'s
//! [`partial_row`]), each under its group key at its start, and stage 2 merges them into its
//! windows with the aggregator's `merge` (`merged.rs`), where they meet the other lanes'.
//!
//! Nothing is late here: lateness is judged by stage 2's watermark, the minimum over every lane,
//! which this task does not know. What this task knows of event time leaves with the batch: one
//! empty row whose time is the largest event time the batch had, written when the batch ends
//! ([`Operator::advance`]), which the shuffle carries to every stage-2 task.
//!
//! A batch's partials are a pure function of its events, so a re-run batch ships the same
//! ones, which stage 2 skips as a replay.

use rustc_hash::FxHashMap;

use super::group_members;
use crate::columns;
use crate::operator::{Advanced, Opened, Operator, OperatorError, Processed};
use crate::plugin::{AggregateFns, EventBatch};
use crate::rows::Rows;
use crate::shuffle::{NO_TIME, partial_row};
use crate::state::StateStore;
use crate::window::{Interval, Panes, WindowSpec, merge_sessions};

pub struct Partials {
    window: WindowSpec,
    agg: Box<dyn AggregateFns>,
    /// The largest event time of each `process` call of the batch (one unless the failure
    /// policy split it): `mark`/`rollback` forget a failed call's.
    maxima: Vec<i64>,
}

impl Partials {
    pub fn new(window: WindowSpec, agg: Box<dyn AggregateFns>) -> Self {
        Self { window, agg, maxima: Vec::new() }
    }
}

/// A group of the batch: where it lies, its key and its events.
struct Group<'a> {
    start: i64,
    end: i64,
    key: &'a [u8],
}

impl Operator for Partials {
    fn open(&mut self, _state: &mut StateStore, _restored_version: Option<u32>) -> Result<Opened, OperatorError> {
        // The accumulators' version is stage 2's to keep; recorded here too, so a stage-1
        // checkpoint says which build wrote the partials it shipped.
        Ok(Opened { state_version: Some(self.agg.state_version()?), migrated: None })
    }

    fn process(
        &mut self,
        events: &EventBatch,
        _watermark: i64,
        _state: &mut StateStore,
        out: &mut Rows,
    ) -> Result<Processed, OperatorError> {
        let mut set_aside = Processed::default();
        let (groups, event_group) = match self.window {
            WindowSpec::Panes { size, slide, offset } => by_pane(events, Panes { size, slide, offset }, &mut set_aside),
            WindowSpec::Session { gap } => by_session(events, gap, &mut set_aside),
        };
        let mut max = NO_TIME;
        for (i, &g) in event_group.iter().enumerate() {
            if g != u32::MAX {
                max = max.max(events.times[i]);
            }
        }
        if !groups.is_empty() {
            let (members, ends) = group_members(&event_group, groups.len());
            let fresh = vec![Vec::new(); groups.len()];
            let accs = self.agg.accumulate(&fresh, events, &members, &ends)?;
            let mark = out.mark();
            for (g, acc) in groups.iter().zip(accs) {
                if let Err(e) = out.push(g.key, &partial_row(g.end, &acc), g.start) {
                    out.truncate(mark);
                    return Err(e.into());
                }
            }
        }
        self.maxima.push(max);
        Ok(set_aside)
    }

    fn advance(
        &mut self,
        _from: i64,
        _to: i64,
        _state: &mut StateStore,
        out: &mut Rows,
    ) -> Result<Advanced, OperatorError> {
        let max = self.maxima.drain(..).max().unwrap_or(NO_TIME);
        out.push(b"", b"", max)?;
        Ok(Advanced::default())
    }

    fn horizon(&self, _state: &StateStore) -> Result<Option<i64>, OperatorError> {
        Ok(None)
    }

    fn stage(&self) -> &str {
        "aggregate"
    }

    fn fingerprint(&self) -> String {
        format!("partials of {:?}", self.window)
    }

    fn mark(&self) -> usize {
        self.maxima.len()
    }

    fn rollback(&mut self, mark: usize) {
        self.maxima.truncate(mark);
    }
}

/// The batch's (pane, key) groups, and each event's group (`u32::MAX`: none).
fn by_pane<'a>(events: &'a EventBatch, panes: Panes, set_aside: &mut Processed) -> (Vec<Group<'a>>, Vec<u32>) {
    let mut index: FxHashMap<(i64, &[u8]), u32> = FxHashMap::default();
    let mut groups = Vec::new();
    let mut event_group = Vec::with_capacity(events.times.len());
    for (i, &t) in events.times.iter().enumerate() {
        let Some(pane) = panes.pane_of(t) else {
            set_aside.invalid.push((i as u32, format!("event time {t}: its windows would fall outside the timeline")));
            event_group.push(u32::MAX);
            continue;
        };
        let key = columns::item(&events.keys, &events.key_ends, i);
        let g = *index.entry((pane, key)).or_insert_with(|| {
            groups.push(Group { start: pane, end: pane.saturating_add(panes.slide), key });
            groups.len() as u32 - 1
        });
        event_group.push(g);
    }
    (groups, event_group)
}

/// The batch's sessions: per key, its events' `[t, t + gap)` merged where they intersect or
/// touch, as the session operator merges them.
fn by_session<'a>(events: &'a EventBatch, gap: i64, set_aside: &mut Processed) -> (Vec<Group<'a>>, Vec<u32>) {
    let mut keyed: Vec<(&[u8], i64, u32)> = Vec::with_capacity(events.times.len());
    let mut event_group = vec![u32::MAX; events.times.len()];
    for (i, &t) in events.times.iter().enumerate() {
        if t.checked_add(gap).is_none() {
            set_aside.invalid.push((i as u32, format!("event time {t}: its session would end outside the timeline")));
            continue;
        }
        keyed.push((columns::item(&events.keys, &events.key_ends, i), t, i as u32));
    }
    keyed.sort_unstable();
    let mut groups = Vec::new();
    for evs in keyed.chunk_by(|a, b| a.0 == b.0) {
        let ivs: Vec<Interval> =
            evs.iter().enumerate().map(|(j, &(_, t, _))| Interval { start: t, end: t + gap, id: j }).collect();
        for (start, end, run) in merge_sessions(&ivs) {
            let g = groups.len() as u32;
            groups.push(Group { start, end, key: evs[0].0 });
            for iv in &ivs[run] {
                event_group[evs[iv.id].2 as usize] = g;
            }
        }
    }
    (groups, event_group)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shuffle::split_row;

    use crate::testing::Count;

    fn events(items: &[(&str, i64)]) -> EventBatch {
        crate::testing::batch(items.iter().map(|&(key, t)| (t, key, "{}")))
    }

    /// (key, start, end, count) of each partial, and the batch's largest event time.
    fn run(window: WindowSpec, items: &[(&str, i64)]) -> (Vec<(String, i64, i64, String)>, i64) {
        let dir = tempfile::tempdir().unwrap();
        let mut state = StateStore::open(dir.path()).unwrap();
        let mut op = Partials::new(window, Box::new(Count));
        let mut out = Rows::default();
        op.process(&events(items), i64::MIN, &mut state, &mut out).unwrap();
        op.advance(i64::MIN, i64::MIN, &mut state, &mut out).unwrap();
        let n = out.len();
        let mut partials: Vec<_> = (0..n - 1)
            .map(|i| {
                let key = String::from_utf8(columns::item(&out.keys, &out.key_ends, i).to_vec()).unwrap();
                let (end, acc) = split_row(columns::item(&out.rows, &out.row_ends, i)).unwrap();
                (key, out.times[i], end, String::from_utf8(acc.to_vec()).unwrap())
            })
            .collect();
        partials.sort();
        assert!(columns::item(&out.rows, &out.row_ends, n - 1).is_empty(), "the batch ends with its time");
        (partials, out.times[n - 1])
    }

    #[test]
    fn panes_get_one_partial_per_pane_and_key() {
        let (p, max) = run(WindowSpec::sliding(60_000, 60_000, 0), &[("a", 1), ("b", 2), ("a", 59_999), ("a", 60_000)]);
        let want = |k: &str, s: i64, n: &str| (k.to_string(), s, s + 60_000, n.to_string());
        assert_eq!(p, vec![want("a", 0, "2"), want("a", 60_000, "1"), want("b", 0, "1")]);
        assert_eq!(max, 60_000);
    }

    #[test]
    fn sessions_within_a_batch_are_runs_of_a_key_s_events_within_the_gap() {
        let (p, _) = run(WindowSpec::Session { gap: 10 }, &[("a", 0), ("a", 10), ("a", 25), ("b", 5)]);
        let want = |k: &str, s: i64, e: i64, n: &str| (k.to_string(), s, e, n.to_string());
        assert_eq!(p, vec![want("a", 0, 20, "2"), want("a", 25, 35, "1"), want("b", 5, 15, "1")]);
    }

    #[test]
    fn a_batch_of_nothing_placeable_still_says_it_had_no_time() {
        let (p, max) = run(WindowSpec::sliding(60_000, 60_000, 0), &[("a", i64::MAX)]);
        assert!(p.is_empty());
        assert_eq!(max, NO_TIME);
    }
}
