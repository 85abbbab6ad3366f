//! The aggregator's batch loops: fold events into accumulators, merge them, finish them into
//! rows, migrate old encodings. Whichever order `accumulate` reads the batch in, each group sees
//! exactly its events, in the order the host gave them.

use std::sync::OnceLock;

use super::{EventBatch, WitResult, groups, role, unsupported};
use crate::batch::EventBatchView;
use crate::{Aggregator, PluginError};

/// `accumulate` folds in batch order only when its groups hold at least one event in this many
/// of the batch: a batch-order pass visits every event, the group order only the members.
const BATCH_ORDER_MIN_SHARE: usize = 4;

/// Nor when the group order reads the batch in this many forward sweeps or fewer (a tumbling
/// window's few groups): each sweep is already read front to back, and the batch order would
/// only add its own pass.
const GROUP_ORDER_MAX_SWEEPS: usize = 8;

fn decode<A: Aggregator>(a: &A, bytes: &[u8]) -> Result<A::Acc, PluginError> {
    if bytes.is_empty() {
        return Ok(A::Acc::default());
    }
    a.decode_acc(bytes)
}

fn encode<A: Aggregator>(a: &A, acc: &A::Acc) -> Result<Vec<u8>, PluginError> {
    let bytes = a.encode_acc(acc)?;
    if bytes.is_empty() {
        return Err(PluginError::Internal("an accumulator encoded to no bytes (empty stands for a new one)".into()));
    }
    Ok(bytes)
}

pub fn accumulate<A: Aggregator>(
    cell: &OnceLock<A>,
    accs: Vec<Vec<u8>>,
    events: EventBatch,
    members: Vec<u32>,
    group_ends: Vec<u32>,
) -> WitResult<Vec<Vec<u8>>> {
    if !A::IMPLEMENTED {
        return Err(unsupported("aggregator"));
    }
    let a = role(cell, A::new)?;
    let view = EventBatchView::new(&events)?;
    if accs.len() != group_ends.len() {
        return Err(PluginError::Internal("one accumulator per group expected".into()).into());
    }
    if members.iter().any(|&m| m as usize >= view.len()) {
        return Err(PluginError::Internal("group member past the end of the events".into()).into());
    }
    let ranges: Vec<_> = groups(&group_ends, members.len())?.collect();
    let mut folded = accs.iter().map(|bytes| decode(a, bytes)).collect::<Result<Vec<_>, _>>()?;
    match batch_order(&members, &ranges, view.len()) {
        // Each group still sees its events in the order given; only the groups interleave.
        Some(owner) => {
            for (i, &g) in owner.iter().enumerate() {
                if let Some(acc) = folded.get_mut(g as usize) {
                    a.add(acc, &view.event(i))?;
                }
            }
        }
        None => {
            for (acc, range) in folded.iter_mut().zip(ranges) {
                for &m in &members[range] {
                    a.add(acc, &view.event(m as usize))?;
                }
            }
        }
    }
    folded.iter().map(|acc| encode(a, acc)).collect::<Result<_, _>>().map_err(Into::into)
}

/// Each event's group (`u32::MAX`: none), when the events can be folded in batch order without
/// changing what any group sees: every event in one group at most, and each group's events
/// given in batch order. Reading the rows front to back instead of group by group is what this
/// buys: with many small groups (sessions per user) the group order jumps across the whole batch,
/// and each jump was a cache miss on a row. `None` when the groups overlap or one's events are
/// not in batch order, or when a pass over the whole batch would not pay: the groups hold too
/// few of its events, or the group order already reads it in a few forward sweeps.
fn batch_order(members: &[u32], ranges: &[std::ops::Range<usize>], events: usize) -> Option<Vec<u32>> {
    if members.len().saturating_mul(BATCH_ORDER_MIN_SHARE) < events {
        return None;
    }
    let sweeps = 1 + members.windows(2).filter(|w| w[1] < w[0]).count();
    if sweeps <= GROUP_ORDER_MAX_SWEEPS {
        return None;
    }
    let mut owner = vec![u32::MAX; events];
    for (g, range) in ranges.iter().enumerate() {
        let mut last = None;
        for &m in &members[range.clone()] {
            let slot = owner.get_mut(m as usize)?;
            if *slot != u32::MAX || last.is_some_and(|l| l >= m) {
                return None;
            }
            *slot = g as u32;
            last = Some(m);
        }
    }
    Some(owner)
}

pub fn merge<A: Aggregator>(cell: &OnceLock<A>, accs: Vec<Vec<u8>>, group_ends: Vec<u32>) -> WitResult<Vec<Vec<u8>>> {
    if !A::IMPLEMENTED {
        return Err(unsupported("aggregator"));
    }
    let a = role(cell, A::new)?;
    let mut out = Vec::with_capacity(group_ends.len());
    for range in groups(&group_ends, accs.len())? {
        let mut acc = A::Acc::default();
        for bytes in &accs[range] {
            a.merge(&mut acc, decode(a, bytes)?);
        }
        out.push(encode(a, &acc)?);
    }
    Ok(out)
}

pub fn finish<A: Aggregator>(cell: &OnceLock<A>, accs: Vec<Vec<u8>>) -> WitResult<Vec<Vec<u8>>> {
    if !A::IMPLEMENTED {
        return Err(unsupported("aggregator"));
    }
    let a = role(cell, A::new)?;
    let mut out = Vec::with_capacity(accs.len());
    for bytes in &accs {
        let row = match a.finish(&decode(a, bytes)?) {
            Some(row) => serde_json::to_vec(&row)
                .map_err(|e| PluginError::Internal(format!("result row does not serialize: {e}")))?,
            None => Vec::new(),
        };
        out.push(row);
    }
    Ok(out)
}

pub fn state_version<A: Aggregator>() -> u32 {
    A::STATE_VERSION
}

pub fn migrate<A: Aggregator>(cell: &OnceLock<A>, from: u32, accs: Vec<Vec<u8>>) -> WitResult<Vec<Vec<u8>>> {
    if !A::IMPLEMENTED {
        return Err(unsupported("aggregator"));
    }
    let a = role(cell, A::new)?;
    let mut out = Vec::with_capacity(accs.len());
    for bytes in &accs {
        out.push(encode(a, &a.migrate(from, bytes)?)?);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::testing::{self, TestEvent};
    use crate::{Config, Event};

    /// Remembers the order it was given events in: their times, as added.
    struct Seen;

    impl Aggregator for Seen {
        type Acc = Vec<i64>;
        type Output = Vec<i64>;

        fn new(_: &Config) -> Result<Self, PluginError> {
            Ok(Seen)
        }

        fn add(&self, acc: &mut Vec<i64>, event: &Event<'_>) -> Result<(), PluginError> {
            acc.push(event.time);
            Ok(())
        }

        fn merge(&self, acc: &mut Vec<i64>, other: Vec<i64>) {
            acc.extend(other);
        }

        fn finish(&self, acc: &Vec<i64>) -> Option<Vec<i64>> {
            Some(acc.clone())
        }
    }

    /// `members` and `group_ends` from each group's list of event indexes.
    fn layout(groups: &[Vec<u32>]) -> (Vec<u32>, Vec<u32>, Vec<std::ops::Range<usize>>) {
        let (mut members, mut ends, mut ranges) = (Vec::new(), Vec::new(), Vec::new());
        for g in groups {
            let from = members.len();
            members.extend(g);
            ends.push(members.len() as u32);
            ranges.push(from..members.len());
        }
        (members, ends, ranges)
    }

    #[test]
    fn many_small_groups_in_batch_order_are_folded_front_to_back() {
        // Sessions per user: 40 events, 20 groups of two, each group's in batch order.
        let groups: Vec<Vec<u32>> = (0..20).map(|g| vec![g, g + 20]).collect();
        let (members, _, ranges) = layout(&groups);
        let owner = batch_order(&members, &ranges, 40).expect("batch order");
        assert_eq!(owner[..3], [0, 1, 2]);
        assert_eq!(owner[20..23], [0, 1, 2]);
        // One group's events out of batch order, an event in two groups, groups holding too
        // few of the batch, or a few groups read in as many sweeps: the group order stays.
        let mut unordered = groups.clone();
        unordered[5].reverse();
        let mut overlapping = groups.clone();
        overlapping[6].push(7);
        for (why, groups, events) in [
            ("unordered", unordered, 40),
            ("overlapping", overlapping, 40),
            ("sparse", groups.clone(), 40 * BATCH_ORDER_MIN_SHARE as u32 + 1),
            ("few sweeps", vec![(0..20).collect(), (20..40).collect()], 40),
        ] {
            let (members, _, ranges) = layout(&groups);
            assert_eq!(batch_order(&members, &ranges, events as usize), None, "{why}");
        }
    }

    proptest! {
        /// Whichever order `accumulate` folds in, each group sees exactly its events, in the
        /// order they were given, after what its accumulator held.
        #[test]
        fn each_group_sees_its_events_in_the_order_given(
            n in 1usize..120,
            picks in proptest::collection::vec((0usize..40, any::<bool>(), any::<bool>()), 120),
            groups in 1usize..40,
            held in proptest::collection::vec(proptest::option::of(proptest::collection::vec(-5i64..0, 0..3)), 40),
        ) {
            let events: Vec<TestEvent> = (0..n).map(|i| testing::event(i as i64, "{}")).collect();
            // Each event joins a group or none; some groups take theirs out of order, or an
            // event already in another group.
            let mut of: Vec<Vec<u32>> = vec![Vec::new(); groups];
            for (i, &(g, skip, reverse)) in picks.iter().take(n).enumerate() {
                if skip && g % 3 == 0 {
                    continue;
                }
                of[g % groups].push(i as u32);
                if reverse && g % 11 == 0 {
                    of[(g + 1) % groups].push(i as u32);
                }
            }
            for (g, members) in of.iter_mut().enumerate() {
                if picks[g].2 && g % 7 == 0 {
                    members.reverse();
                }
            }
            let accs: Vec<Vec<u8>> = (0..groups)
                .map(|g| held[g].as_ref().map(|h| serde_json::to_vec(h).unwrap()).unwrap_or_default())
                .collect();
            let (members, ends, _) = layout(&of);
            let cell = testing::role("{}", Seen::new).unwrap();
            let out = accumulate(&cell, accs, testing::event_batch(&events), members, ends).unwrap();
            prop_assert_eq!(out.len(), groups);
            for (g, bytes) in out.iter().enumerate() {
                let got: Vec<i64> = serde_json::from_slice(bytes).unwrap();
                let mut want = held[g].clone().unwrap_or_default();
                want.extend(of[g].iter().map(|&i| i as i64));
                prop_assert_eq!(got, want);
            }
        }
    }
}
