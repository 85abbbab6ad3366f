//! What the engine's unit tests build their cases from: event batches, a counting aggregator
//! and the failure policy of a test run. One copy, used by the operators' tests alike.

use crate::columns;
use crate::isolate::Policy;
use crate::plugin::{AggregateFns, EventBatch, PluginError};

/// A batch of events `(time, key, row)`, each its own origin (its index in the batch).
pub fn batch<K: AsRef<[u8]>, R: AsRef<[u8]>>(items: impl IntoIterator<Item = (i64, K, R)>) -> EventBatch {
    let mut b = EventBatch::default();
    for (i, (t, key, row)) in items.into_iter().enumerate() {
        b.times.push(t);
        columns::push(&mut b.keys, &mut b.key_ends, key.as_ref()).expect("a test batch fits its columns");
        columns::push(&mut b.rows, &mut b.row_ends, row.as_ref()).expect("a test batch fits its columns");
        b.origins.push(i as u32);
    }
    b
}

/// The failure policy of a test: isolate failing calls, no retries, never stopped.
pub fn policy() -> Policy {
    let failure = crate::pipeline::FailurePolicy { fail_fast: false, retries: 0, backoff: std::time::Duration::ZERO };
    Policy { failure, stop: std::sync::Arc::default() }
}

/// Counts events; the accumulator is the count in decimal, and a window's row `{"count":N}`.
pub struct Count;

/// The count an accumulator holds (an empty one: none yet).
pub fn count(acc: &[u8]) -> u64 {
    std::str::from_utf8(acc).ok().and_then(|s| s.parse().ok()).unwrap_or(0)
}

impl AggregateFns for Count {
    fn accumulate(
        &mut self,
        accs: &[Vec<u8>],
        _: &EventBatch,
        _: &[u32],
        ends: &[u32],
    ) -> Result<Vec<Vec<u8>>, PluginError> {
        let mut start = 0;
        Ok(accs
            .iter()
            .zip(ends)
            .map(|(a, &e)| {
                let c = count(a) + u64::from(e - start);
                start = e;
                c.to_string().into_bytes()
            })
            .collect())
    }
    fn merge(&mut self, accs: &[Vec<u8>], ends: &[u32]) -> Result<Vec<Vec<u8>>, PluginError> {
        let mut start = 0;
        Ok(ends
            .iter()
            .map(|&e| {
                let c: u64 = accs[start..e as usize].iter().map(|a| count(a)).sum();
                start = e as usize;
                c.to_string().into_bytes()
            })
            .collect())
    }
    fn finish(&mut self, accs: &[Vec<u8>]) -> Result<Vec<Vec<u8>>, PluginError> {
        Ok(accs.iter().map(|a| format!("{{\"count\":{}}}", count(a)).into_bytes()).collect())
    }
    fn stage(&self) -> &str {
        "test/aggregate"
    }
}
