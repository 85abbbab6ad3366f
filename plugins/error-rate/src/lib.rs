//! Error rate per window (and per key, when events are keyed): `count`, `errors` (rows whose
//! `status` is `config.error_status`, default "ERROR") and `error_rate` = errors / count.

use serde::{Deserialize, Serialize};
use weir_guest::{Aggregator, Config, Event, PluginError, export_plugin};

struct ErrorRate {
    error_status: String,
}

#[derive(Default, Serialize, Deserialize)]
struct Acc {
    count: u64,
    errors: u64,
}

#[derive(Serialize)]
struct Output {
    count: u64,
    errors: u64,
    error_rate: f64,
}

impl Aggregator for ErrorRate {
    type Acc = Acc;
    type Output = Output;

    fn new(config: &Config) -> Result<Self, PluginError> {
        Ok(ErrorRate { error_status: config.get("error_status")?.unwrap_or_else(|| "ERROR".into()) })
    }

    fn add(&self, acc: &mut Acc, event: &Event<'_>) -> Result<(), PluginError> {
        // One field of a row the parser already validated: no need to decode the whole row.
        let error = event
            .field_is("status", &self.error_status)
            .map_err(|e| PluginError::Internal(format!("bad row: {e:?}")))?;
        acc.count += 1;
        acc.errors += u64::from(error);
        Ok(())
    }

    fn merge(&self, acc: &mut Acc, other: Acc) {
        acc.count += other.count;
        acc.errors += other.errors;
    }

    fn finish(&self, acc: &Acc) -> Option<Output> {
        (acc.count > 0).then(|| Output {
            count: acc.count,
            errors: acc.errors,
            error_rate: acc.errors as f64 / acc.count as f64,
        })
    }
}

export_plugin!(aggregator: ErrorRate);
