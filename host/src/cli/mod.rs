//! The commands of the `weir` CLI that are more than a call into the library.

pub mod bench;
pub mod demo;
pub mod inspect;
pub mod latency;
pub mod metrics;
pub mod record;

use std::time::{Duration, Instant};

/// Paces a producer at `rate` records per second: record `n` is due `n / rate` seconds after
/// the start.
pub struct Pacer {
    started: Instant,
    rate: u64,
}

impl Pacer {
    pub fn new(rate: u64) -> Self {
        Self { started: Instant::now(), rate: rate.max(1) }
    }

    /// How long until record `n` is due; `None` when it is due now.
    pub fn ahead(&self, n: u64) -> Option<Duration> {
        let due = Duration::from_secs_f64(n as f64 / self.rate as f64);
        due.checked_sub(self.started.elapsed()).filter(|d| !d.is_zero())
    }

    pub fn elapsed(&self) -> Duration {
        self.started.elapsed()
    }
}
