//! Error rate per window (and per key, when events are keyed): `count`, `errors` (rows whose
//! `status` is `config.error_status`, default "ERROR") and `error_rate` = errors / count.
//!
//! The accumulator is stored as 16 bytes, `count` then `errors`, each a little-endian u64
//! (state version 2). Version 1 stored it as JSON, `{"count":N,"errors":M}`; with one session
//! per user, decoding and encoding that JSON once per session per batch was a tenth of the
//! pipeline's time. `plugins/error-rate-py` writes the same bytes.

use serde::{Deserialize, Serialize};
use weir_guest::{Aggregator, Config, Event, PluginError, export_plugin};

struct ErrorRate {
    error_status: String,
}

#[derive(Debug, Default, PartialEq, Serialize, Deserialize)]
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

/// Bytes of a stored accumulator: two u64s.
const ACC_BYTES: usize = 16;

impl Aggregator for ErrorRate {
    type Acc = Acc;
    type Output = Output;
    const STATE_VERSION: u32 = 2;

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

    fn encode_acc(&self, acc: &Acc) -> Result<Vec<u8>, PluginError> {
        let mut bytes = Vec::with_capacity(ACC_BYTES);
        bytes.extend_from_slice(&acc.count.to_le_bytes());
        bytes.extend_from_slice(&acc.errors.to_le_bytes());
        Ok(bytes)
    }

    fn decode_acc(&self, bytes: &[u8]) -> Result<Acc, PluginError> {
        let word = |at: usize| bytes.get(at..at + 8).and_then(|b| b.try_into().ok()).map(u64::from_le_bytes);
        match (bytes.len(), word(0), word(8)) {
            (ACC_BYTES, Some(count), Some(errors)) => Ok(Acc { count, errors }),
            (n, _, _) => Err(PluginError::BadState(format!("an accumulator is {ACC_BYTES} bytes, not {n}"))),
        }
    }

    fn migrate(&self, from: u32, acc: &[u8]) -> Result<Acc, PluginError> {
        match from {
            1 => serde_json::from_slice(acc)
                .map_err(|e| PluginError::BadState(format!("not a version-1 accumulator: {e}"))),
            v => {
                Err(PluginError::Unsupported(format!("no migration from state version {v} to {}", Self::STATE_VERSION)))
            }
        }
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

#[cfg(test)]
mod tests {
    use weir_guest::testing::{self, TestEvent};

    use super::*;

    fn orders(statuses: &[&str]) -> Vec<TestEvent> {
        let row = |i: usize, s: &str| format!(r#"{{"order_id":{i},"status":"{s}","order_ts":{i}}}"#);
        statuses.iter().enumerate().map(|(i, s)| testing::event(i as i64, &row(i, s))).collect()
    }

    #[test]
    fn the_accumulator_is_two_little_endian_counts_and_the_row_is_the_rate() {
        let mut statuses = vec!["OK"; 49];
        statuses.push("ERROR");
        let acc = testing::accumulate::<ErrorRate>("{}", &orders(&statuses), &[]).unwrap();
        assert_eq!(acc, [50u64.to_le_bytes(), 1u64.to_le_bytes()].concat());
        // Folding nothing more leaves the bytes as they were.
        assert_eq!(testing::accumulate::<ErrorRate>("{}", &[], &acc).unwrap(), acc);
        let row = testing::finish::<ErrorRate>("{}", &acc).unwrap();
        assert_eq!(row, br#"{"count":50,"errors":1,"error_rate":0.02}"#);
        let two = orders(&["ERROR", "OK"]);
        let row = testing::run_aggregator::<ErrorRate>(r#"{"error_status":"OK"}"#, &two).unwrap().unwrap();
        assert_eq!(row["errors"], 1);
    }

    #[test]
    fn version_one_json_accumulators_migrate_and_others_are_refused() {
        let got = testing::migrate::<ErrorRate>("{}", 1, &[br#"{"count":7,"errors":2}"#]).unwrap();
        let acc = ErrorRate { error_status: "ERROR".into() }.decode_acc(&got[0]).unwrap();
        assert_eq!(acc, Acc { count: 7, errors: 2 });
        assert!(testing::migrate::<ErrorRate>("{}", 1, &[b"not json"]).is_err());
        assert!(testing::migrate::<ErrorRate>("{}", 3, &[&got[0]]).is_err());
        // Bytes of another length are not an accumulator of this version.
        assert!(testing::accumulate::<ErrorRate>("{}", &[], br#"{"count":7,"errors":2}"#).is_err());
    }
}
