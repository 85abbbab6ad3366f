//! A tenant's pipelines in the Prometheus text format: engine gauges from each one's last
//! progress record, and its plugins' counters.

use super::*;

impl Service {
    /// The tenant's pipelines in the Prometheus text format: engine gauges from each one's last
    /// progress record, and its plugins' counters (from the same record, cumulative).
    pub fn metrics(&self, tenant: &str) -> String {
        use std::fmt::Write;
        type Get = fn(&serde_json::Value, i64) -> Option<f64>;
        let gauges: [(&str, &str, Get); 10] = [
            ("weir_pipeline_input_rows_per_second", "Rows read per second, over the last batch's interval.", |p, _| {
                p["inputRowsPerSecond"].as_f64()
            }),
            ("weir_pipeline_processed_rows_per_second", "Rows per second of the last batch's own duration.", |p, _| {
                p["processedRowsPerSecond"].as_f64()
            }),
            ("weir_pipeline_batch_duration_seconds", "The last batch's duration.", |p, _| {
                Some(p["durationMs"]["totalMs"].as_f64()? / 1e3)
            }),
            ("weir_pipeline_watermark_ms", "The watermark, epoch milliseconds.", |p, _| p["watermark"].as_f64()),
            ("weir_pipeline_watermark_lag_seconds", "Wall-clock time less the watermark.", |p, now| {
                Some((now - p["watermark"].as_i64()?) as f64 / 1e3)
            }),
            ("weir_pipeline_state_keys", "Keys in the pipeline's state.", |p, _| p["stateKeys"].as_f64()),
            ("weir_pipeline_state_bytes", "The state store's size, estimated by RocksDB.", |p, _| {
                p["stateBytes"].as_f64()
            }),
            (
                "weir_pipeline_source_lag_records",
                "Records on the source past the last batch (Kafka consumer lag).",
                |p, _| {
                    Some(
                        p["sources"]
                            .as_array()?
                            .iter()
                            .flat_map(|s| s["lag"].as_object().into_iter().flatten())
                            .filter_map(|(_, v)| v.as_f64())
                            .sum(),
                    )
                },
            ),
            ("weir_pipeline_batch_late_events", "Late events in the last batch.", |p, _| p["numLateEvents"].as_f64()),
            ("weir_pipeline_batch_dead_letters", "Dead letters in the last batch.", |p, _| {
                p["numDeadLetters"].as_f64()
            }),
        ];
        let names: Vec<String> = {
            let r = self.registry();
            r.tenants.get(tenant).map_or(Vec::new(), |t| t.pipelines.keys().cloned().collect())
        };
        let last: Vec<(String, serde_json::Value)> = names
            .into_iter()
            .filter_map(|n| {
                let p = self.supervisor.recent(&(tenant.to_string(), n.clone())).since(0, 1).pop()?;
                Some((n, serde_json::from_str(&p.1).ok()?))
            })
            .collect();
        let now = now_ms();
        let mut out = String::new();
        for (name, help, get) in gauges {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} gauge");
            for (pipeline, p) in &last {
                if let Some(v) = get(p, now) {
                    let _ = writeln!(out, "{name}{{pipeline=\"{pipeline}\"}} {v}");
                }
            }
        }
        let counters = [
            ("calls", "Calls into the plugin."),
            ("errors", "Record errors reported and calls failed."),
            ("fuel", "Fuel burnt."),
            ("memoryHighWaterBytes", "Largest linear memory of any instance."),
        ];
        for (field, help) in counters {
            let name = format!(
                "weir_plugin_{}",
                field
                    .chars()
                    .flat_map(|c| if c.is_ascii_uppercase() { vec!['_', c.to_ascii_lowercase()] } else { vec![c] })
                    .collect::<String>()
            );
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} gauge");
            for (pipeline, p) in &last {
                for (stage, m) in p["plugins"].as_object().into_iter().flatten() {
                    if let Some(v) = m[field].as_f64() {
                        let stage = stage.replace(['\\', '"', '\n'], "_");
                        let _ = writeln!(out, "{name}{{pipeline=\"{pipeline}\",stage=\"{stage}\"}} {v}");
                    }
                }
            }
        }
        out
    }
}
