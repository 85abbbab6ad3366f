//! {{name}}: an aggregator. Per window and key: how many events, and the sum of their `amount`.
//! The host keeps the accumulators (`Acc`, stored as JSON) in its state store; the plugin keeps
//! nothing between calls.
//!
//! `weir build`, then `weir test pipeline.toml --events events.jsonl --expect expected.jsonl`.

use serde::{Deserialize, Serialize};
use weir_guest::{
    Aggregator, Config, Emitter, Event, Parser, Paths, PluginError, Record, RecordError, export_plugin,
};

struct {{Type}};

#[derive(Default, Serialize, Deserialize)]
struct Acc {
    count: u64,
    total: f64,
}

#[derive(Serialize)]
struct Output {
    count: u64,
    total: f64,
}

impl Aggregator for {{Type}} {
    type Acc = Acc;
    type Output = Output;

    fn new(_config: &Config) -> Result<Self, PluginError> {
        Ok({{Type}})
    }

    fn add(&self, acc: &mut Acc, event: &Event<'_>) -> Result<(), PluginError> {
        let amount: Option<f64> = event.field("amount").map_err(|e| PluginError::Internal(format!("{e:?}")))?;
        acc.count += 1;
        acc.total += amount.unwrap_or(0.0);
        Ok(())
    }

    fn merge(&self, acc: &mut Acc, other: Acc) {
        acc.count += other.count;
        acc.total += other.total;
    }

    fn finish(&self, acc: &Acc) -> Option<Output> {
        (acc.count > 0).then(|| Output { count: acc.count, total: acc.total })
    }
}
{{events}}
export_plugin!(parser: Events, aggregator: {{Type}});

#[cfg(test)]
mod tests {
    use weir_guest::testing;

    use super::*;

    #[test]
    fn counts_and_sums() {
        let events = [testing::event(1, r#"{"amount":3}"#), testing::event(2, r#"{"amount":4.5}"#)];
        let row = testing::run_aggregator::<{{Type}}>("{}", &events).expect("config").expect("a row");
        assert_eq!(row, serde_json::json!({"count": 2, "total": 7.5}));
    }
}
