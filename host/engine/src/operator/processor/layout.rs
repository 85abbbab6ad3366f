//! Where the keyed processor's entries live in the state store, and how they are encoded.
//!
//! - `KEYS` + key → the key's [`Entry`]: a header (format version, when the key last had
//!   events, how many timers it has set) and the plugin's state bytes. A key with neither state
//!   nor timers has no entry.
//! - `TIMERS` + domain + time + key → nothing: range scans by time find the timers that are due.
//! - `EXPIRY` + time + key → nothing: when a key's TTL runs out, for state TTL.
//! - `TOTALS` → [`Totals`]: timers set and state bytes over every key, so the stage's budget is
//!   checked without a scan. A store without it (written before it was kept) has it counted
//!   once, at `open`.
//!
//! The header's first byte is [`FORMAT`]: an entry written in another format is refused as
//! corrupt rather than misread, and a later format can convert it in `open`.

use crate::operator::Scope;
use crate::plugin::{TimeDomain, Timer};
use crate::state::{time_from_key, time_key};

/// The version of [`Entry`]'s encoding.
pub(super) const FORMAT: u8 = 1;

/// Bytes of [`Entry`]'s header: format, two times, the timer count, whether state follows.
const HEADER: usize = 1 + 8 + 8 + 4 + 1;

/// One key's entry.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(super) struct Entry {
    /// The latest event time among the key's events (for event-time TTL).
    pub touched_event: i64,
    /// When the last batch that gave the key events was planned (processing-time TTL).
    pub touched_processing: i64,
    /// Timers of the key that are set.
    pub timers: u32,
    pub state: Option<Vec<u8>>,
}

impl Entry {
    pub(super) fn encode(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(HEADER + self.state.as_ref().map_or(0, Vec::len));
        v.push(FORMAT);
        v.extend_from_slice(&self.touched_event.to_be_bytes());
        v.extend_from_slice(&self.touched_processing.to_be_bytes());
        v.extend_from_slice(&self.timers.to_be_bytes());
        v.push(u8::from(self.state.is_some()));
        if let Some(s) = &self.state {
            v.extend_from_slice(s);
        }
        v
    }

    pub(super) fn decode(v: &[u8]) -> Result<Self, String> {
        if v.len() < HEADER {
            return Err(format!("a keyed-state entry of {} bytes is shorter than its header", v.len()));
        }
        if v[0] != FORMAT {
            return Err(format!("keyed-state format {} (this build reads {FORMAT})", v[0]));
        }
        let i64_at = |at: usize| i64::from_be_bytes(v[at..at + 8].try_into().unwrap_or_default());
        Ok(Entry {
            touched_event: i64_at(1),
            touched_processing: i64_at(9),
            timers: u32::from_be_bytes(v[17..21].try_into().unwrap_or_default()),
            state: (v[21] == 1).then(|| v[HEADER..].to_vec()),
        })
    }

    /// What the entry adds to the stage's [`Totals`].
    pub(super) fn footprint(&self) -> Totals {
        Totals { timers: u64::from(self.timers), state_bytes: self.state.as_ref().map_or(0, Vec::len) as u64 }
    }

    /// Whether the entry holds nothing and can go.
    pub(super) fn is_empty(&self) -> bool {
        self.state.is_none() && self.timers == 0
    }
}

/// The stage's totals over every key: what its `limits.max_stage_*` budget bounds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(super) struct Totals {
    pub timers: u64,
    /// Bytes of the plugin's state, headers not counted.
    pub state_bytes: u64,
}

impl Totals {
    pub(super) fn key() -> Vec<u8> {
        Scope::ProcessTotals.key(0)
    }

    pub(super) fn encode(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(16);
        v.extend_from_slice(&self.timers.to_be_bytes());
        v.extend_from_slice(&self.state_bytes.to_be_bytes());
        v
    }

    pub(super) fn decode(v: &[u8]) -> Result<Self, String> {
        let at = |i: usize| v.get(i..i + 8).and_then(|b| b.try_into().ok()).map(u64::from_be_bytes);
        match (v.len(), at(0), at(8)) {
            (16, Some(timers), Some(state_bytes)) => Ok(Totals { timers, state_bytes }),
            _ => Err(format!("the stage's totals are {} bytes, not 16", v.len())),
        }
    }

    /// These totals once a key's footprint ([`Entry::footprint`]) goes from `before` to
    /// `after`.
    pub(super) fn with(self, before: Totals, after: Totals) -> Self {
        Totals {
            timers: (self.timers + after.timers).saturating_sub(before.timers),
            state_bytes: (self.state_bytes + after.state_bytes).saturating_sub(before.state_bytes),
        }
    }
}

pub(super) fn key_entry(key: &[u8]) -> Vec<u8> {
    let mut k = Scope::ProcessKeys.key(key.len());
    k.extend_from_slice(key);
    k
}

/// The range of every `KEYS` entry.
pub(super) fn all_keys() -> (Vec<u8>, Vec<u8>) {
    let from = Scope::ProcessKeys.key(0);
    let to = vec![Scope::ProcessKeys as u8 + 1];
    (from, to)
}

fn domain_byte(d: TimeDomain) -> u8 {
    match d {
        TimeDomain::EventTime => 0,
        TimeDomain::ProcessingTime => 1,
    }
}

/// The first timer entry of `domain` at or after `at` (for range scans).
pub(super) fn timers_from(domain: TimeDomain, at: i64) -> Vec<u8> {
    let mut k = Scope::ProcessTimers.key(9);
    k.push(domain_byte(domain));
    k.extend_from_slice(&time_key(at));
    k
}

/// The end of `domain`'s timers, for range scans.
pub(super) fn timers_end(domain: TimeDomain) -> Vec<u8> {
    let mut k = Scope::ProcessTimers.key(1);
    k.push(domain_byte(domain) + 1);
    k
}

pub(super) fn timer_entry(t: Timer, key: &[u8]) -> Vec<u8> {
    let mut k = timers_from(t.domain, t.at);
    k.extend_from_slice(key);
    k
}

/// The timer and key of a `TIMERS` entry.
pub(super) fn timer_of_entry(k: &[u8]) -> Option<(Timer, &[u8])> {
    let domain = match k.get(1)? {
        0 => TimeDomain::EventTime,
        1 => TimeDomain::ProcessingTime,
        _ => return None,
    };
    let at = time_from_key(k.get(2..10)?);
    Some((Timer { domain, at }, k.get(10..)?))
}

pub(super) fn expiry_entry(at: i64, key: &[u8]) -> Vec<u8> {
    let mut k = Scope::ProcessExpiry.key(8 + key.len());
    k.extend_from_slice(&time_key(at));
    k.extend_from_slice(key);
    k
}

/// The end of the expiry entries due at or before `at`, for range scans.
pub(super) fn expiry_through(at: i64) -> Vec<u8> {
    match at.checked_add(1) {
        Some(next) => {
            let mut k = Scope::ProcessExpiry.key(8);
            k.extend_from_slice(&time_key(next));
            k
        }
        None => vec![Scope::ProcessExpiry as u8 + 1],
    }
}

/// The time and key of an `EXPIRY` entry.
pub(super) fn expiry_of_entry(k: &[u8]) -> Option<(i64, &[u8])> {
    Some((time_from_key(k.get(1..9)?), k.get(9..)?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_round_trip_and_other_formats_are_refused() {
        for e in [
            Entry { touched_event: -5, touched_processing: 1_700_000_000_000, timers: 3, state: Some(b"{}".to_vec()) },
            Entry { touched_event: i64::MIN, touched_processing: 0, timers: 1, state: None },
            Entry { state: Some(Vec::new()), ..Entry::default() },
        ] {
            assert_eq!(Entry::decode(&e.encode()).unwrap(), e);
        }
        let mut v = Entry::default().encode();
        v[0] = FORMAT + 1;
        assert!(Entry::decode(&v).unwrap_err().contains("format"));
        assert!(Entry::decode(&v[..5]).is_err());
    }

    #[test]
    fn totals_round_trip_follow_an_entry_and_refuse_other_lengths() {
        let t = Totals { timers: 7, state_bytes: 1 << 40 };
        assert_eq!(Totals::decode(&t.encode()).unwrap(), t);
        assert!(Totals::decode(&t.encode()[..15]).is_err());
        let before = Entry { timers: 2, state: Some(vec![0; 10]), ..Entry::default() };
        let after = Entry { timers: 5, state: None, ..Entry::default() };
        assert_eq!(t.with(before.footprint(), after.footprint()), Totals { timers: 10, state_bytes: (1 << 40) - 10 });
        assert_eq!(Totals::default().with(before.footprint(), Totals::default()), Totals::default());
    }

    #[test]
    fn timer_and_expiry_keys_sort_by_time_and_decode() {
        let t = |at| Timer { domain: TimeDomain::EventTime, at };
        let a = timer_entry(t(-1), b"zz");
        let b = timer_entry(t(0), b"a");
        assert!(timers_from(TimeDomain::EventTime, i64::MIN) <= a && a < b && b < timers_end(TimeDomain::EventTime));
        let p = timer_entry(Timer { domain: TimeDomain::ProcessingTime, at: i64::MIN }, b"");
        assert!(timers_end(TimeDomain::EventTime) <= p);
        assert_eq!(timer_of_entry(&b), Some((t(0), &b"a"[..])));
        let e = expiry_entry(10, b"k");
        assert!(e < expiry_through(10) && expiry_through(9) <= e);
        assert!(expiry_entry(i64::MAX, b"k") < expiry_through(i64::MAX));
        assert_eq!(expiry_of_entry(&e), Some((10, &b"k"[..])));
    }
}
