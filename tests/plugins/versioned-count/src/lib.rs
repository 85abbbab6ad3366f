//! The error-rate aggregator as a later build would ship it: the accumulator is now
//! `{"n", "e"}` instead of `plugins/error-rate`'s `{"count", "errors"}`, so it declares state
//! version 2 and migrates version-1 accumulators. The tests restart a pipeline checkpointed by
//! `error-rate` with this build (migrated), and the other way round (refused).

use serde::{Deserialize, Serialize};
use weir_guest::{Aggregator, Config, Event, PluginError, export_plugin};

struct ErrorRateV2;

#[derive(Default, Serialize, Deserialize)]
struct Acc {
    n: u64,
    e: u64,
}

/// What `plugins/error-rate` (state version 1) writes.
#[derive(Deserialize)]
struct AccV1 {
    count: u64,
    errors: u64,
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
    const STATE_VERSION: u32 = 2;

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
            1 => {
                let old: AccV1 = serde_json::from_slice(acc)
                    .map_err(|e| PluginError::BadState(format!("not a version-1 accumulator: {e}")))?;
                Ok(Acc { n: old.count, e: old.errors })
            }
            v => Err(PluginError::Unsupported(format!("no migration from state version {v}"))),
        }
    }
}

export_plugin!(aggregator: ErrorRateV2);
