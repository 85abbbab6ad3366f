//! Retrying with exponential backoff, and waits that a stop request (SIGTERM) cuts short.
//!
//! One mechanism for every retry in the host: a plugin call the failure policy retries, a sink
//! delivery, a broker call. Each says how many attempts it allows and how the wait grows; all of
//! them give up at once when the run is asked to stop.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// How often a wait looks at the stop flag.
const STOP_CHECK: Duration = Duration::from_millis(10);

/// How a call is retried.
#[derive(Debug, Clone, Copy)]
pub struct Retry {
    /// Attempts after the first; `None`: until it succeeds or the run stops.
    pub retries: Option<u32>,
    /// Wait before the first retry; doubles with each, up to `max_wait`.
    pub first_wait: Duration,
    pub max_wait: Duration,
}

/// Why [`Retry::run`] returned an error.
#[derive(Debug)]
pub enum GaveUp<E> {
    /// The last attempt's error: not retriable, or the attempts are used up.
    Failed(E),
    /// The run was asked to stop while waiting to try again; the last attempt's error.
    Stopped(E),
}

impl<E> GaveUp<E> {
    pub fn into_inner(self) -> E {
        match self {
            GaveUp::Failed(e) | GaveUp::Stopped(e) => e,
        }
    }
}

impl Retry {
    /// Calls `call` until it succeeds, fails with an error `retriable` refuses, runs out of
    /// attempts, or `stop` is raised. Each retry is logged with `what` and the error.
    pub fn run<T, E: std::fmt::Display>(
        &self,
        stop: &AtomicBool,
        what: &str,
        mut call: impl FnMut() -> Result<T, E>,
        retriable: impl Fn(&E) -> bool,
    ) -> Result<T, GaveUp<E>> {
        let mut wait = self.first_wait;
        let mut attempt = 0u32;
        loop {
            match call() {
                Ok(v) => return Ok(v),
                Err(e) if !retriable(&e) || self.retries.is_some_and(|n| attempt >= n) => {
                    return Err(GaveUp::Failed(e));
                }
                Err(e) => {
                    if stop.load(Ordering::Relaxed) {
                        return Err(GaveUp::Stopped(e));
                    }
                    tracing::warn!("{what}: {e}; retrying in {wait:?}");
                    if sleep_unless(stop, wait) {
                        return Err(GaveUp::Stopped(e));
                    }
                    wait = wait.saturating_mul(2).min(self.max_wait);
                    attempt += 1;
                }
            }
        }
    }
}

/// Sleeps for `d` unless `stop` is raised first; returns whether it was.
pub fn sleep_unless(stop: &AtomicBool, d: Duration) -> bool {
    let until = Instant::now() + d;
    loop {
        if stop.load(Ordering::Relaxed) {
            return true;
        }
        let now = Instant::now();
        if now >= until {
            return false;
        }
        std::thread::sleep(STOP_CHECK.min(until - now));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const QUICK: Retry = Retry { retries: Some(2), first_wait: Duration::ZERO, max_wait: Duration::ZERO };

    /// A call that fails its first `failures` times, numbering its errors.
    fn failing(failures: u32) -> impl FnMut() -> Result<u32, String> {
        let mut calls = 0;
        move || {
            calls += 1;
            if calls <= failures { Err(format!("fail {calls}")) } else { Ok(calls) }
        }
    }

    #[test]
    fn retries_up_to_the_limit_then_gives_up_with_the_last_error() {
        let stop = AtomicBool::new(false);
        let r = QUICK.run(&stop, "t", failing(10), |_| true);
        assert!(matches!(r, Err(GaveUp::Failed(e)) if e == "fail 3"));
        assert!(matches!(QUICK.run(&stop, "t", failing(2), |_| true), Ok(3)));
    }

    #[test]
    fn an_error_that_is_not_retriable_or_a_stop_ends_it_at_once() {
        let stop = AtomicBool::new(false);
        let r = QUICK.run(&stop, "t", failing(10), |_| false);
        assert!(matches!(r, Err(GaveUp::Failed(e)) if e == "fail 1"));
        stop.store(true, Ordering::Relaxed);
        let forever =
            Retry { retries: None, first_wait: Duration::from_secs(3600), max_wait: Duration::from_secs(3600) };
        let r = forever.run(&stop, "t", failing(u32::MAX), |_| true);
        assert!(matches!(r, Err(GaveUp::Stopped(e)) if e == "fail 1"));
        assert!(sleep_unless(&stop, Duration::from_secs(3600)));
    }
}
