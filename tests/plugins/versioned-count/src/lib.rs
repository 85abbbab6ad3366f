//! The error-rate aggregator as a later build would ship it: the accumulator is now
//! `{"n", "e"}` in JSON instead of `plugins/error-rate`'s two little-endian u64s, so it
//! declares state version 3 and migrates version-2 accumulators. The tests restart a pipeline
//! checkpointed by `error-rate` with this build (migrated), and the other way round (refused).

use serde::{Deserialize, Serialize};
use weir_guest::{Aggregator, Config, Event, PluginError, export_plugin};

struct ErrorRateV2;

#[derive(Default, Serialize, Deserialize)]
struct Acc {
    n: u64,
    e: u64,
}

#[derive(Serialize)]
struct Output {
    count: u64,
    errors: u64,
    error_rate: f64,
}

impl Aggregator for ErrorRateV2 {
    type Acc = Acc;
    type Output = Output;
    const STATE_VERSION: u32 = 3;

    fn new(_: &Config) -> Result<Self, PluginError> {
        Ok(ErrorRateV2)
    }

    fn add(&self, acc: &mut Acc, event: &Event<'_>) -> Result<(), PluginError> {
        let status = event.field_str("status").map_err(|e| PluginError::Internal(format!("bad row: {e:?}")))?;
        acc.n += 1;
        acc.e += u64::from(status.as_deref() == Some("ERROR"));
        Ok(())
    }

    fn merge(&self, acc: &mut Acc, other: Acc) {
        acc.n += other.n;
        acc.e += other.e;
    }

    fn finish(&self, acc: &Acc) -> Option<Output> {
        (acc.n > 0).then(|| Output { count: acc.n, errors: acc.e, error_rate: acc.e as f64 / acc.n as f64 })
    }

    fn migrate(&self, from: u32, acc: &[u8]) -> Result<Acc, PluginError> {
        match from {
            // What `plugins/error-rate` (state version 2) writes: count, then errors.
            2 => {
                let word = |at: usize| acc.get(at..at + 8).and_then(|b| b.try_into().ok()).map(u64::from_le_bytes);
                match (acc.len(), word(0), word(8)) {
                    (16, Some(n), Some(e)) => Ok(Acc { n, e }),
                    _ => Err(PluginError::BadState(format!("not a version-2 accumulator: {} bytes", acc.len()))),
                }
            }
            v => Err(PluginError::Unsupported(format!("no migration from state version {v}"))),
        }
    }
}

export_plugin!(aggregator: ErrorRateV2);
