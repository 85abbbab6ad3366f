//! When the open sessions end: an index from end time to (slot, start), for the watermark to
//! take the final ones. Entries sit in buckets of [`BUCKET_MS`] of end time, unsorted within a
//! bucket, so adding one is a push onto a short vector rather than an insert into an ordered
//! set; a `BTreeSet` of (end, slot, start) with a remove and an insert per changed session per
//! batch was the largest cost of the session operator's own after the plugin calls.
//!
//! Nothing is removed when a session grows, merges into another or moves to another start: its
//! old entry stays and is skipped when taken (the operator checks each taken entry against the
//! session it names). So the index may name more sessions than are open, never fewer; a stale
//! entry leaves when the watermark passes its end, as the session it stood for would have.
//!
//! Stale entries are bounded: a session that keeps growing leaves one behind at every batch
//! that moves its end, until the watermark passes that end, so with a long gap they could
//! outnumber the open sessions many times over. When the entries pass [`STALE_FACTOR`] times
//! the open sessions, the operator builds the index again from them ([`Ends::due_for_rebuild`]);
//! the threshold doubles from there, so the rebuilds cost O(1) per entry added.
//!
//! Invariant: every stale entry's end is at most the end of the open session that replaced it
//! (sessions only grow, and a merged session ends at the latest of its parts). So when
//! [`Ends::take_until`] has taken every entry up to a time, no stale entry outlives the
//! sessions that made it stale, and the latest end ever added that was not taken is an open
//! session's: the operator's horizon.

use std::collections::BTreeMap;

/// The width of a bucket of end times, in ms. A batch takes whole buckets up to its watermark
/// and scans only the one the watermark falls in, so the width bounds that scan: the sessions
/// (and stale entries) ending within one second.
const BUCKET_MS: i64 = 1_000;

/// How many entries per open session the index may hold before it is built again from the
/// open sessions alone.
pub(super) const STALE_FACTOR: usize = 4;

/// Below this many entries the index is never rebuilt: small indexes cost nothing to keep.
const REBUILD_FLOOR: usize = 4_096;

/// (end, slot, start) of the open sessions, and of sessions since changed.
#[derive(Debug, Default)]
pub(super) struct Ends {
    buckets: BTreeMap<i64, Vec<(i64, u32, i64)>>,
    /// The latest end added and not taken.
    latest: Option<i64>,
    /// Entries held, stale ones included.
    len: usize,
    /// Entries above which [`Ends::due_for_rebuild`] counts the open sessions again.
    check_at: usize,
}

impl Ends {
    pub(super) fn clear(&mut self) {
        self.buckets.clear();
        self.latest = None;
        self.len = 0;
    }

    /// Whether the index should be built again from the open sessions: asked after a batch's
    /// adds, `open` (which counts them) is called only when the entries have doubled since the
    /// last time it was.
    pub(super) fn due_for_rebuild(&mut self, open: impl FnOnce() -> usize) -> bool {
        if self.len <= self.check_at.max(REBUILD_FLOOR) {
            return false;
        }
        let open = open();
        let due = self.len > STALE_FACTOR * open;
        self.check_at = 2 * if due { open } else { self.len };
        due
    }

    /// Adds the session of `slot` starting at `start` and ending at `end`. Adding a session
    /// twice is harmless: the second entry is taken as stale.
    pub(super) fn add(&mut self, end: i64, slot: u32, start: i64) {
        self.buckets.entry(end.div_euclid(BUCKET_MS)).or_default().push((end, slot, start));
        self.latest = self.latest.max(Some(end));
        self.len += 1;
    }

    /// Entries held, stale ones included.
    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.len
    }

    /// The latest end of an open session, if any is open.
    pub(super) fn latest(&self) -> Option<i64> {
        self.latest
    }

    /// Removes and returns every entry that ends at or before `now`, stale ones included, in no
    /// particular order.
    pub(super) fn take_until(&mut self, now: i64) -> Vec<(i64, u32, i64)> {
        let mut taken = Vec::new();
        let last = now.div_euclid(BUCKET_MS);
        while let Some(bucket) = self.buckets.first_entry() {
            match (*bucket.key()).cmp(&last) {
                std::cmp::Ordering::Less => taken.append(&mut bucket.remove()),
                std::cmp::Ordering::Equal => {
                    let entries = bucket.into_mut();
                    entries.retain(|e| {
                        let due = e.0 <= now;
                        if due {
                            taken.push(*e);
                        }
                        !due
                    });
                    if entries.is_empty() {
                        self.buckets.remove(&last);
                    }
                    break;
                }
                std::cmp::Ordering::Greater => break,
            }
        }
        if self.buckets.is_empty() {
            self.latest = None;
        }
        self.len -= taken.len();
        taken
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    proptest! {
        /// Whatever is added, taking up to a time returns exactly the entries due by then, once,
        /// and `latest` is the latest end still held.
        #[test]
        fn takes_exactly_what_is_due(
            steps in prop::collection::vec(
                (prop::collection::vec((-5_000i64..5_000, 0u32..4, -50i64..50), 0..20), -6_000i64..6_000),
                1..20,
            ),
        ) {
            let mut ends = Ends::default();
            let mut naive: Vec<(i64, u32, i64)> = Vec::new();
            for (adds, now) in steps {
                for (end, slot, start) in adds {
                    ends.add(end, slot, start);
                    naive.push((end, slot, start));
                }
                let mut taken = ends.take_until(now);
                taken.sort_unstable();
                let mut due: Vec<_> = naive.iter().copied().filter(|e| e.0 <= now).collect();
                due.sort_unstable();
                naive.retain(|e| e.0 > now);
                prop_assert_eq!(taken, due);
                prop_assert_eq!(ends.latest(), naive.iter().map(|e| e.0).max());
                prop_assert_eq!(ends.len(), naive.len());
            }
        }
    }

    /// The index is rebuilt only when its entries pass [`STALE_FACTOR`] times the open
    /// sessions, and then counts them again only after its entries have doubled.
    #[test]
    fn a_rebuild_is_due_when_stale_entries_outnumber_the_open_sessions() {
        let mut ends = Ends::default();
        let mut counted = 0;
        for i in 0..REBUILD_FLOOR as i64 {
            ends.add(i, 0, 0);
        }
        assert!(!ends.due_for_rebuild(|| unreachable!("at the floor, nothing is counted")));
        ends.add(0, 0, 0);
        // 4,097 entries for 2,000 open sessions: kept, and not counted again until 8,194.
        assert!(!ends.due_for_rebuild(|| {
            counted += 1;
            2_000
        }));
        for _ in 0..REBUILD_FLOOR {
            ends.add(0, 0, 0);
        }
        assert!(!ends.due_for_rebuild(|| unreachable!("not yet doubled")));
        for _ in 0..2 {
            ends.add(0, 0, 0);
        }
        assert!(ends.due_for_rebuild(|| {
            counted += 1;
            10
        }));
        assert_eq!(counted, 2);
    }
}
