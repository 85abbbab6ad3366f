//! Event-time watermarks.
//!
//! Each source partition's watermark is the largest event time seen on it minus the delay. The
//! pipeline's watermark is the minimum over partitions that are not idle, so one slow partition
//! holds windows open rather than having its events dropped as late; a partition that has sent
//! nothing for `idle_timeout` stops holding it back. The watermark only moves forward and moves
//! once per batch, at its end: a batch's events are judged against the watermark reached by the
//! batch before.
//!
//! Idleness is the one input that depends on the wall clock, so it is decided when a batch is
//! planned ([`Watermark::idle`]) and recorded in the offsets log with the batch; a batch re-run
//! after a crash replays that decision instead of consulting the clock again.
//!
//! A partition that has delivered no event time yet does not count, except an *expected* one
//! ([`Watermark::expect`]): a group's stage-2 task knows every stage-1 task it will hear from,
//! and waits for each until it has an event time or is idle, since one that has not written yet
//! may hold the earliest events.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

/// No watermark yet: nothing is late.
pub const NONE: i64 = i64::MIN;

/// A source partition: the source's stream (Kafka topic) index and the partition in it.
pub type PartitionId = (u16, i32);

#[derive(Debug, Clone)]
struct Partition {
    max_event_time: i64,
    last_active: Instant,
    /// Delivered records in the current batch: not idle, whatever was planned.
    fresh: bool,
}

#[derive(Debug, Clone)]
pub struct Watermark {
    delay_ms: i64,
    idle_timeout: Option<Duration>,
    partitions: BTreeMap<PartitionId, Partition>,
    /// Partitions that hold the watermark until they have an event time or are idle.
    expected: Vec<PartitionId>,
    current: i64,
}

/// What a checkpoint keeps of the watermark.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Saved {
    pub current: i64,
    pub partitions: Vec<(PartitionId, i64)>,
}

impl Watermark {
    pub fn new(delay_ms: i64, idle_timeout: Option<Duration>) -> Self {
        Self { delay_ms, idle_timeout, partitions: BTreeMap::new(), expected: Vec::new(), current: NONE }
    }

    /// Waits for `partitions` (each until it has an event time or is idle, counting from `now`
    /// for one never heard from).
    pub fn expect(&mut self, partitions: &[PartitionId], now: Instant) {
        for &id in partitions {
            self.partitions.entry(id).or_insert(Partition { max_event_time: NONE, last_active: now, fresh: false });
        }
        self.expected = partitions.to_vec();
    }

    pub fn current(&self) -> i64 {
        self.current
    }

    /// Records that `partition` delivered records this batch, the largest event time among
    /// them being `max_event_time` (`NONE` if none of them carried one).
    pub fn observe(&mut self, partition: PartitionId, max_event_time: i64, now: Instant) {
        let p = self.partitions.entry(partition).or_insert(Partition {
            max_event_time: NONE,
            last_active: now,
            fresh: true,
        });
        p.max_event_time = p.max_event_time.max(max_event_time);
        p.last_active = now;
        p.fresh = true;
    }

    /// The partitions idle at `now`: what a batch planned now records.
    pub fn idle(&self, now: Instant) -> Vec<PartitionId> {
        let Some(timeout) = self.idle_timeout else { return Vec::new() };
        self.partitions
            .iter()
            .filter(|(_, p)| now.duration_since(p.last_active) >= timeout)
            .map(|(&id, _)| id)
            .collect()
    }

    /// Moves the watermark at the end of a batch and returns it. `idle` is what [`Self::idle`]
    /// said when the batch was planned; a partition that delivered records since is not idle.
    pub fn advance(&mut self, idle: &[PartitionId]) -> i64 {
        let waiting = self.expected.iter().any(|id| {
            self.partitions.get(id).is_some_and(|p| p.max_event_time == NONE && (p.fresh || !idle.contains(id)))
        });
        let candidate = self
            .partitions
            .iter()
            .filter(|(id, p)| p.max_event_time != NONE && (p.fresh || !idle.contains(id)))
            .map(|(_, p)| p.max_event_time.saturating_sub(self.delay_ms))
            .min();
        if let Some(c) = candidate.filter(|_| !waiting) {
            self.current = self.current.max(c);
        }
        for p in self.partitions.values_mut() {
            p.fresh = false;
        }
        self.current
    }

    pub fn save(&self) -> Saved {
        Saved {
            current: self.current,
            partitions: self.partitions.iter().map(|(&p, s)| (p, s.max_event_time)).collect(),
        }
    }

    pub fn restore(&mut self, saved: &Saved, now: Instant) {
        self.current = saved.current;
        self.partitions = saved
            .partitions
            .iter()
            .map(|&(p, max_event_time)| (p, Partition { max_event_time, last_active: now, fresh: false }))
            .collect();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn is_the_minimum_over_partitions_minus_the_delay() {
        let now = Instant::now();
        let mut w = Watermark::new(100, None);
        assert_eq!(w.advance(&[]), NONE);
        w.observe((0, 0), 1_000, now);
        w.observe((0, 1), 5_000, now);
        assert_eq!(w.advance(&[]), 900);
    }

    #[test]
    fn never_moves_back() {
        let now = Instant::now();
        let mut w = Watermark::new(0, None);
        w.observe((0, 0), 1_000, now);
        assert_eq!(w.advance(&[]), 1_000);
        w.observe((0, 1), 10, now); // a new, slower partition appears
        assert_eq!(w.advance(&[]), 1_000);
    }

    #[test]
    fn an_idle_partition_stops_holding_it_back() {
        let t0 = Instant::now();
        let mut w = Watermark::new(0, Some(Duration::from_secs(5)));
        w.observe((0, 0), 1_000, t0);
        w.observe((0, 1), 9_000, t0);
        assert_eq!(w.advance(&w.idle(t0)), 1_000);
        let later = t0 + Duration::from_secs(6);
        // Planned at `later`: both partitions idle; partition 1 then delivers.
        let idle = w.idle(later);
        assert_eq!(idle, vec![(0, 0), (0, 1)]);
        w.observe((0, 1), 12_000, later);
        assert_eq!(w.advance(&idle), 12_000);
        // Every partition idle: the watermark holds.
        let much_later = later + Duration::from_secs(60);
        assert_eq!(w.advance(&w.idle(much_later)), 12_000);
    }

    #[test]
    fn partitions_without_event_times_do_not_count() {
        let now = Instant::now();
        let mut w = Watermark::new(0, None);
        w.observe((0, 0), NONE, now);
        w.observe((0, 1), 500, now);
        assert_eq!(w.advance(&[]), 500);
    }

    #[test]
    fn expected_partitions_hold_it_until_they_have_a_time_or_are_idle() {
        let t0 = Instant::now();
        let mut w = Watermark::new(0, Some(Duration::from_secs(5)));
        w.expect(&[(1, 0), (2, 0)], t0);
        w.observe((1, 0), 1_000, t0);
        assert_eq!(w.advance(&w.idle(t0)), NONE, "(2, 0) has not been heard from");
        w.observe((2, 0), NONE, t0);
        assert_eq!(w.advance(&w.idle(t0)), NONE, "heard from, but without an event time yet");
        let later = t0 + Duration::from_secs(6);
        w.observe((1, 0), 2_000, later);
        assert_eq!(w.advance(&w.idle(later)), 2_000, "(2, 0) idle: it stops holding the watermark");
        w.observe((2, 0), 1_500, later);
        assert_eq!(w.advance(&[]), 2_000, "and it never moves back");
    }

    #[test]
    fn survives_save_and_restore() {
        let now = Instant::now();
        let mut w = Watermark::new(10, None);
        w.observe((0, 3), 1_000, now);
        w.advance(&[]);
        let mut r = Watermark::new(10, None);
        r.restore(&w.save(), now);
        assert_eq!(r.current(), 990);
        r.observe((0, 4), 2_000, now);
        assert_eq!(r.advance(&[]), 990);
    }
}
