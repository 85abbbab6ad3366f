//! A doorbell the client rings when any of the source's queues gets a record or an event, so a
//! reader with nothing to read sleeps until something arrives instead of blocking on one
//! partition's queue while another fills.
//!
//! Invariant: a waiter that saw generation `g` before it last looked at the queues is woken by
//! any ring after that look. The ringer bumps the generation and only then checks for a
//! sleeper; the waiter announces itself and only then checks the generation (both `SeqCst`),
//! so one of the two always sees the other. Ringing costs an atomic add when nobody sleeps: it
//! runs on librdkafka's threads for every record enqueued.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

#[derive(Default)]
pub(super) struct Bell {
    rings: AtomicU64,
    sleeping: AtomicBool,
    lock: Mutex<()>,
    woken: Condvar,
}

impl Bell {
    pub(super) fn ring(&self) {
        self.rings.fetch_add(1, Ordering::SeqCst);
        if self.sleeping.load(Ordering::SeqCst) {
            // Taking the lock orders this notify after the waiter's check or into its wait.
            let _held = self.lock.lock().unwrap_or_else(|e| e.into_inner());
            self.woken.notify_all();
        }
    }

    /// The generation now: take it before looking at the queues, and wait on it after.
    pub(super) fn seen(&self) -> u64 {
        self.rings.load(Ordering::SeqCst)
    }

    /// Waits until the bell rang since `seen`, at most `timeout`; whether it did.
    pub(super) fn wait(&self, seen: u64, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        let mut held = self.lock.lock().unwrap_or_else(|e| e.into_inner());
        self.sleeping.store(true, Ordering::SeqCst);
        let rang = loop {
            if self.rings.load(Ordering::SeqCst) != seen {
                break true;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break false;
            }
            held = match self.woken.wait_timeout(held, left) {
                Ok((g, _)) => g,
                Err(e) => e.into_inner().0,
            };
        };
        self.sleeping.store(false, Ordering::SeqCst);
        rang
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn a_ring_after_the_look_wakes_the_waiter_and_one_before_it_does_not_count() {
        let bell = Arc::new(Bell::default());
        bell.ring();
        let seen = bell.seen();
        assert!(!bell.wait(seen, Duration::from_millis(20)), "a ring before `seen` must not wake");
        for _ in 0..200 {
            let seen = bell.seen();
            let ringer = {
                let bell = bell.clone();
                std::thread::spawn(move || bell.ring())
            };
            assert!(bell.wait(seen, Duration::from_secs(60)), "a ring after `seen` must count");
            ringer.join().unwrap();
        }
    }
}
