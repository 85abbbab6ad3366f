//! Event-time watermarks.
//!
//! Each source partition's watermark is the largest event time seen on it minus the delay. The
//! pipeline's watermark is the minimum over partitions that are not idle, so one slow partition
//! holds windows open rather than having its events dropped as late; a partition that has sent
//! nothing for `idle_timeout` stops holding it back. The watermark only moves forward and moves
//! once per batch, at its end: a batch's events are judged against the watermark reached by the
//! batch before.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

/// No watermark yet: nothing is late.
pub const NONE: i64 = i64::MIN;

#[derive(Debug, Clone)]
struct Partition {
    max_event_time: i64,
    last_active: Instant,
}

#[derive(Debug, Clone)]
pub struct Watermark {
    delay_ms: i64,
    idle_timeout: Option<Duration>,
    partitions: BTreeMap<i32, Partition>,
    current: i64,
}

/// What a checkpoint keeps of the watermark.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Saved {
    pub current: i64,
    pub partitions: Vec<(i32, i64)>,
}

impl Watermark {
    pub fn new(delay_ms: i64, idle_timeout: Option<Duration>) -> Self {
        Self { delay_ms, idle_timeout, partitions: BTreeMap::new(), current: NONE }
    }

    pub fn current(&self) -> i64 {
        self.current
    }

    /// Records that `partition` delivered records this batch, the largest event time among
    /// them being `max_event_time` (`NONE` if none of them carried one).
    pub fn observe(&mut self, partition: i32, max_event_time: i64, now: Instant) {
        let p = self.partitions.entry(partition).or_insert(Partition { max_event_time: NONE, last_active: now });
        p.max_event_time = p.max_event_time.max(max_event_time);
        p.last_active = now;
    }

    /// Moves the watermark at the end of a batch; returns it.
    pub fn advance(&mut self, now: Instant) -> i64 {
        let idle = |p: &Partition| self.idle_timeout.is_some_and(|t| now.duration_since(p.last_active) >= t);
        let candidate = self
            .partitions
            .values()
            .filter(|p| p.max_event_time != NONE && !idle(p))
            .map(|p| p.max_event_time.saturating_sub(self.delay_ms))
            .min();
        if let Some(c) = candidate {
            self.current = self.current.max(c);
        }
        self.current
    }

    /// End of bounded input: every window becomes final.
    pub fn flush(&mut self) -> i64 {
        self.current = i64::MAX;
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
            .map(|&(p, max_event_time)| (p, Partition { max_event_time, last_active: now }))
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
        assert_eq!(w.advance(now), NONE);
        w.observe(0, 1_000, now);
        w.observe(1, 5_000, now);
        assert_eq!(w.advance(now), 900);
    }

    #[test]
    fn never_moves_back() {
        let now = Instant::now();
        let mut w = Watermark::new(0, None);
        w.observe(0, 1_000, now);
        assert_eq!(w.advance(now), 1_000);
        w.observe(1, 10, now); // a new, slower partition appears
        assert_eq!(w.advance(now), 1_000);
    }

    #[test]
    fn an_idle_partition_stops_holding_it_back() {
        let t0 = Instant::now();
        let mut w = Watermark::new(0, Some(Duration::from_secs(5)));
        w.observe(0, 1_000, t0);
        w.observe(1, 9_000, t0);
        assert_eq!(w.advance(t0), 1_000);
        let later = t0 + Duration::from_secs(6);
        w.observe(1, 12_000, later);
        assert_eq!(w.advance(later), 12_000);
        // Every partition idle: the watermark holds.
        assert_eq!(w.advance(later + Duration::from_secs(60)), 12_000);
    }

    #[test]
    fn partitions_without_event_times_do_not_count() {
        let now = Instant::now();
        let mut w = Watermark::new(0, None);
        w.observe(0, NONE, now);
        w.observe(1, 500, now);
        assert_eq!(w.advance(now), 500);
    }

    #[test]
    fn survives_save_and_restore() {
        let now = Instant::now();
        let mut w = Watermark::new(10, None);
        w.observe(3, 1_000, now);
        w.advance(now);
        let mut r = Watermark::new(10, None);
        r.restore(&w.save(), now);
        assert_eq!(r.current(), 990);
        r.observe(4, 2_000, now);
        assert_eq!(r.advance(now), 990);
    }
}
