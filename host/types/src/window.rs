//! Window assignment on event time. Windows are half-open `[start, end)` in epoch ms, aligned to
//! the epoch plus an optional offset.
//!
//! Tumbling and sliding windows share one mechanism: **panes**. Time is cut into panes of one
//! slide; an event is accumulated into exactly one pane, and a window's result is the merge of
//! the `size / slide` panes it covers. A sliding window therefore costs one accumulator update
//! per event, like a tumbling one, instead of `size / slide`. Tumbling is the case slide = size,
//! where a window is one pane and no merge is needed.
//!
//! Session windows are per key: an event opens `[t, t + gap)`, and sessions that intersect (or
//! touch) merge, together with their accumulators.

use std::ops::Range;

/// How events are windowed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WindowSpec {
    /// Windows of `size` every `slide` (tumbling when `slide == size`); `slide` divides `size`,
    /// both at least 1 ms (the pipeline validator sees to it).
    Panes { size: i64, slide: i64, offset: i64 },
    /// Per-key sessions closed by `gap` of inactivity.
    Session { gap: i64 },
}

impl WindowSpec {
    pub fn sliding(size: i64, slide: i64, offset: i64) -> Self {
        WindowSpec::Panes { size, slide, offset: offset.rem_euclid(slide) }
    }
}

/// Pane and window arithmetic for tumbling and sliding windows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Panes {
    pub size: i64,
    pub slide: i64,
    pub offset: i64,
}

impl Panes {
    /// Start of the pane holding time `t`; `None` when that pane, or a window covering it, would
    /// start or end outside the timeline (`i64` milliseconds): such an event has no window.
    pub fn pane_of(&self, t: i64) -> Option<i64> {
        let pane =
            t.checked_sub(self.offset)?.div_euclid(self.slide).checked_mul(self.slide)?.checked_add(self.offset)?;
        pane.checked_sub(self.size - self.slide)?;
        pane.checked_add(self.size)?;
        Some(pane)
    }

    /// End of the last window that covers the pane starting at `pane` (a pane from
    /// [`Panes::pane_of`]). Once that window is final, nothing can read the pane again.
    pub fn last_window_end(&self, pane: i64) -> i64 {
        pane.saturating_add(self.size)
    }

    /// Starts of the windows covering the pane starting at `pane`, earliest first.
    pub fn windows_of(&self, pane: i64) -> impl Iterator<Item = i64> + use<> {
        let (size, slide) = (self.size, self.slide);
        (0..size / slide).rev().map(move |k| pane - k * slide)
    }

    /// Whether a window is a single pane (tumbling), so that no merge is needed.
    pub fn one_pane_per_window(&self) -> bool {
        self.size == self.slide
    }
}

/// A session interval with the index of whatever it stands for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Interval {
    pub start: i64,
    pub end: i64,
    pub id: usize,
}

/// Merges intervals that intersect or touch: each merged interval, with the range of
/// `intervals` it absorbed. `intervals` must be sorted by start, so a merged interval's are
/// contiguous; nothing is allocated per merged interval.
pub fn merge_sessions(intervals: &[Interval]) -> impl Iterator<Item = (i64, i64, Range<usize>)> + '_ {
    let mut next = 0;
    std::iter::from_fn(move || {
        let first = intervals.get(next)?;
        let (from, start, mut end) = (next, first.start, first.end);
        next += 1;
        while let Some(iv) = intervals.get(next).filter(|iv| iv.start <= end) {
            end = end.max(iv.end);
            next += 1;
        }
        Some((start, end, from..next))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn panes(spec: WindowSpec) -> Panes {
        match spec {
            WindowSpec::Panes { size, slide, offset } => Panes { size, slide, offset },
            WindowSpec::Session { .. } => unreachable!(),
        }
    }

    #[test]
    fn tumbling_boundaries_are_half_open() {
        let p = panes(WindowSpec::sliding(60_000, 60_000, 0));
        assert_eq!(p.pane_of(0), Some(0));
        assert_eq!(p.pane_of(59_999), Some(0));
        assert_eq!(p.pane_of(60_000), Some(60_000));
        assert_eq!(p.pane_of(-1), Some(-60_000));
        assert_eq!(p.windows_of(60_000).collect::<Vec<_>>(), vec![60_000]);
        assert_eq!(p.last_window_end(60_000), 120_000);
        assert!(p.one_pane_per_window());
    }

    #[test]
    fn offsets_shift_the_alignment() {
        let p = panes(WindowSpec::sliding(60_000, 60_000, 15_000));
        assert_eq!(p.pane_of(14_999), Some(-45_000));
        assert_eq!(p.pane_of(15_000), Some(15_000));
    }

    #[test]
    fn sliding_windows_cover_each_pane_size_over_slide_times() {
        let p = panes(WindowSpec::sliding(600_000, 60_000, 0));
        let ws: Vec<i64> = p.windows_of(120_000).collect();
        assert_eq!(ws.len(), 10);
        assert_eq!(ws.first(), Some(&-420_000));
        assert_eq!(ws.last(), Some(&120_000));
        assert_eq!(p.last_window_end(120_000), 720_000);
        assert!(!p.one_pane_per_window());
    }

    #[test]
    fn sessions_merge_when_they_intersect_or_touch() {
        let iv = |start, end, id| Interval { start, end, id };
        let ivs = [iv(0, 10, 0), iv(10, 20, 1), iv(25, 30, 2), iv(26, 40, 3), iv(28, 29, 4), iv(41, 42, 5)];
        let merged: Vec<_> = merge_sessions(&ivs).collect();
        assert_eq!(merged, vec![(0, 20, 0..2), (25, 40, 2..5), (41, 42, 5..6)]);
        assert_eq!(merge_sessions(&[]).count(), 0);
    }

    /// Near the ends of the timeline an event's pane or windows would not fit: it has none,
    /// rather than a window at the other end.
    #[test]
    fn times_whose_windows_do_not_fit_have_no_pane() {
        let tumbling = panes(WindowSpec::sliding(60_000, 60_000, 0));
        assert_eq!(tumbling.pane_of(i64::MIN), None);
        assert_eq!(tumbling.pane_of(i64::MAX), None);
        assert!(tumbling.pane_of(i64::MAX - 120_000).is_some());
        let sliding = panes(WindowSpec::sliding(600_000, 60_000, 30_000));
        assert_eq!(sliding.pane_of(i64::MIN + 100_000), None, "an earlier window would start before i64::MIN");
    }

    proptest! {
        /// Any time and window: a pane, with every window covering it inside the timeline, or
        /// none; never a panic or a wrap-around.
        #[test]
        fn a_pane_is_found_or_refused_for_any_time(t in any::<i64>(), k in 1i64..1_000, slide in 1i64..i64::MAX / 1_000, offset in 0i64..1_000_000) {
            let p = panes(WindowSpec::sliding(slide * k, slide, offset));
            if let Some(pane) = p.pane_of(t) {
                prop_assert!(pane <= t && t - pane < slide);
                for s in p.windows_of(pane) {
                    prop_assert!(s <= t && (t as i128) < s as i128 + p.size as i128);
                }
            }
        }


        /// Every window a pane belongs to contains the pane, and a time's window set is exactly
        /// the windows `[s, s+size)` with `s <= t < s+size` on the slide grid.
        #[test]
        fn sliding_assignment_matches_the_definition(t in -10_000_000i64..10_000_000, k in 1i64..8, slide in 1i64..5_000, offset in 0i64..5_000) {
            let p = panes(WindowSpec::sliding(slide * k, slide, offset));
            let pane = p.pane_of(t).unwrap();
            prop_assert!(pane <= t && t < pane + slide);
            let ws: Vec<i64> = p.windows_of(pane).collect();
            prop_assert_eq!(ws.len() as i64, k);
            for s in ws {
                prop_assert!(s <= t && t < s + p.size);
                prop_assert_eq!((s - p.offset).rem_euclid(slide), 0);
            }
        }
    }
}
