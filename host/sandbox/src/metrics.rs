//! Per-plugin metrics: what each stage's plugin was asked to do and what it cost. Counters are
//! atomics updated by the stage's own thread, so reading them (progress, `/metrics`) never
//! blocks a pipeline. The registry lives in the [`Runtime`](super::Runtime), shared by every
//! pipeline of the process.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use serde::Serialize;

/// One stage's counters.
#[derive(Debug, Default)]
pub struct PluginMetrics {
    pub calls: AtomicU64,
    pub records_in: AtomicU64,
    pub records_out: AtomicU64,
    /// Record errors the plugin reported, and calls that failed (trap, deadline, limit).
    pub errors: AtomicU64,
    pub nanos: AtomicU64,
    pub fuel: AtomicU64,
    pub memory_high_water: AtomicU64,
    /// `host.log` messages dropped over the log budget.
    pub log_dropped: AtomicU64,
}

/// Adds `n` to a counter.
pub fn bump(counter: &AtomicU64, n: u64) {
    counter.fetch_add(n, Ordering::Relaxed);
}

impl PluginMetrics {
    pub fn snapshot(&self) -> Snapshot {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        Snapshot {
            calls: get(&self.calls),
            records_in: get(&self.records_in),
            records_out: get(&self.records_out),
            errors: get(&self.errors),
            seconds: get(&self.nanos) as f64 / 1e9,
            fuel: get(&self.fuel),
            memory_high_water_bytes: get(&self.memory_high_water),
            log_dropped: get(&self.log_dropped),
        }
    }
}

/// A stage's metrics at one moment.
#[derive(Debug, Clone, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Snapshot {
    pub calls: u64,
    pub records_in: u64,
    pub records_out: u64,
    pub errors: u64,
    pub seconds: f64,
    pub fuel: u64,
    pub memory_high_water_bytes: u64,
    pub log_dropped: u64,
}

/// Which stage a set of metrics belongs to (its Prometheus labels).
#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct StageLabels {
    pub pipeline: String,
    pub stage: String,
    pub plugin: String,
}

/// Every stage's metrics in the process.
#[derive(Debug, Default)]
pub struct Registry {
    stages: Mutex<Vec<(StageLabels, Arc<PluginMetrics>)>>,
}

impl Registry {
    /// The counters for a stage (the same ones again if it is registered twice, as a restarted
    /// stage would be).
    pub fn register(&self, labels: StageLabels) -> Arc<PluginMetrics> {
        let Ok(mut stages) = self.stages.lock() else { return Arc::default() };
        if let Some((_, m)) = stages
            .iter()
            .find(|(l, _)| l.pipeline == labels.pipeline && l.stage == labels.stage && l.plugin == labels.plugin)
        {
            return m.clone();
        }
        let m = Arc::new(PluginMetrics::default());
        stages.push((labels, m.clone()));
        m
    }

    /// Snapshots of one pipeline's stages, by stage name.
    pub fn pipeline(&self, pipeline: &str) -> Vec<(String, Snapshot)> {
        let Ok(stages) = self.stages.lock() else { return Vec::new() };
        stages.iter().filter(|(l, _)| l.pipeline == pipeline).map(|(l, m)| (l.stage.clone(), m.snapshot())).collect()
    }
}

/// The plugin metrics as a Prometheus collector: each scrape reads the counters as they stand
/// (atomics; no pipeline waits on a scrape) and encodes one series per stage.
impl prometheus_client::collector::Collector for Registry {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let snaps: Vec<(StageLabels, Snapshot)> = match self.stages.lock() {
            Ok(stages) => stages.iter().map(|(l, m)| (l.clone(), m.snapshot())).collect(),
            Err(_) => return Ok(()),
        };
        type Get = fn(&Snapshot) -> u64;
        let counters: [(&str, &str, Get); 6] = [
            ("weir_plugin_calls", "Calls into the plugin.", |s| s.calls),
            ("weir_plugin_records_in", "Records (or events, rows) passed in.", |s| s.records_in),
            ("weir_plugin_records_out", "Events, accumulators or rows passed back.", |s| s.records_out),
            ("weir_plugin_errors", "Record errors reported and calls failed.", |s| s.errors),
            ("weir_plugin_fuel_consumed", "Fuel burnt (with fuel metering on).", |s| s.fuel),
            ("weir_plugin_log_dropped", "host.log messages dropped over the log budget.", |s| s.log_dropped),
        ];
        for (name, help, get) in counters {
            let mut family = encoder.encode_descriptor(name, help, None, MetricType::Counter)?;
            for (labels, s) in &snaps {
                ConstCounter::new(get(s)).encode(family.encode_family(labels)?)?;
            }
        }
        let mut family = encoder.encode_descriptor(
            "weir_plugin_seconds",
            "Wall-clock time spent in the plugin.",
            None,
            MetricType::Counter,
        )?;
        for (labels, s) in &snaps {
            ConstCounter::new(s.seconds).encode(family.encode_family(labels)?)?;
        }
        let mut family = encoder.encode_descriptor(
            "weir_plugin_memory_high_water_bytes",
            "Largest linear memory of any of its instances.",
            None,
            MetricType::Gauge,
        )?;
        for (labels, s) in &snaps {
            ConstGauge::new(s.memory_high_water_bytes as i64).encode(family.encode_family(labels)?)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prometheus_text_has_one_series_per_stage() {
        let r = Arc::new(Registry::default());
        let labels = |stage: &str| StageLabels { pipeline: "p".into(), stage: stage.into(), plugin: "a.wasm".into() };
        let m = r.register(labels("parse"));
        bump(&m.calls, 3);
        assert!(Arc::ptr_eq(&m, &r.register(labels("parse"))));
        r.register(labels("sink"));
        let mut exposition = prometheus_client::registry::Registry::default();
        exposition.register_collector(Box::new(r.clone()));
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &exposition).unwrap();
        assert!(text.contains("weir_plugin_calls_total{pipeline=\"p\",stage=\"parse\",plugin=\"a.wasm\"} 3"), "{text}");
        assert!(text.contains("weir_plugin_calls_total{pipeline=\"p\",stage=\"sink\",plugin=\"a.wasm\"} 0"), "{text}");
        assert!(text.contains("# TYPE weir_plugin_memory_high_water_bytes gauge"), "{text}");
        assert_eq!(r.pipeline("p").len(), 2);
    }
}
