//! Per-plugin metrics: what each stage's plugin was asked to do and what it cost. Counters are
//! atomics updated by the stage's own thread, so reading them (progress, `/metrics`) never
//! blocks a pipeline. The registry lives in the [`Runtime`](super::Runtime), shared by every
//! pipeline of the process.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use serde::Serialize;

/// One stage's counters.
#[derive(Debug, Default)]
pub struct PluginMetrics {
    pub(crate) calls: AtomicU64,
    pub(crate) records_in: AtomicU64,
    pub(crate) records_out: AtomicU64,
    /// Record errors the plugin reported, and calls that failed (trap, deadline, limit).
    pub(crate) errors: AtomicU64,
    pub(crate) nanos: AtomicU64,
    pub(crate) fuel: AtomicU64,
    pub(crate) memory_high_water: AtomicU64,
}

/// Adds `n` to a counter.
pub(crate) fn bump(counter: &AtomicU64, n: u64) {
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
}

/// Which stage a set of metrics belongs to.
#[derive(Debug, Clone)]
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
    pub(crate) fn register(&self, labels: StageLabels) -> Arc<PluginMetrics> {
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

    /// The Prometheus text exposition format.
    pub fn prometheus(&self) -> String {
        let Ok(stages) = self.stages.lock() else { return String::new() };
        let snaps: Vec<(StageLabels, Snapshot)> = stages.iter().map(|(l, m)| (l.clone(), m.snapshot())).collect();
        drop(stages);
        type Get = fn(&Snapshot) -> f64;
        let families: [(&str, &str, &str, Get); 7] = [
            ("weir_plugin_calls_total", "counter", "Calls into the plugin.", |s| s.calls as f64),
            ("weir_plugin_records_in_total", "counter", "Records (or events, rows) passed in.", |s| {
                s.records_in as f64
            }),
            ("weir_plugin_records_out_total", "counter", "Events, accumulators or rows passed back.", |s| {
                s.records_out as f64
            }),
            ("weir_plugin_errors_total", "counter", "Record errors reported and calls failed.", |s| s.errors as f64),
            ("weir_plugin_seconds_total", "counter", "Wall-clock time spent in the plugin.", |s| s.seconds),
            ("weir_plugin_fuel_consumed_total", "counter", "Fuel burnt (with fuel metering on).", |s| s.fuel as f64),
            ("weir_plugin_memory_high_water_bytes", "gauge", "Largest linear memory of any of its instances.", |s| {
                s.memory_high_water_bytes as f64
            }),
        ];
        let mut out = String::new();
        for (name, kind, help, get) in families {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
            for (l, s) in &snaps {
                let _ = writeln!(
                    out,
                    "{name}{{pipeline=\"{}\",stage=\"{}\",plugin=\"{}\"}} {}",
                    escape(&l.pipeline),
                    escape(&l.stage),
                    escape(&l.plugin),
                    get(s)
                );
            }
        }
        out
    }
}

fn escape(v: &str) -> String {
    v.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prometheus_text_has_one_series_per_stage() {
        let r = Registry::default();
        let labels = |stage: &str| StageLabels { pipeline: "p".into(), stage: stage.into(), plugin: "a.wasm".into() };
        let m = r.register(labels("parse"));
        bump(&m.calls, 3);
        assert!(Arc::ptr_eq(&m, &r.register(labels("parse"))));
        r.register(labels("sink"));
        let text = r.prometheus();
        assert!(text.contains("weir_plugin_calls_total{pipeline=\"p\",stage=\"parse\",plugin=\"a.wasm\"} 3"), "{text}");
        assert!(text.contains("weir_plugin_calls_total{pipeline=\"p\",stage=\"sink\",plugin=\"a.wasm\"} 0"), "{text}");
        assert_eq!(r.pipeline("p").len(), 2);
    }
}
