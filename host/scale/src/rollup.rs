//! The process's roll-up of its tasks' progress: every task's batch records (the per-task
//! progress lines) are also folded here, and the group runner reports the sum for the tasks
//! this process ran, every [`ROLLUP_EVERY`] while batches arrive and once at the end. A
//! roll-up covers only what its tasks had reported when it was written, so the last one adds
//! up every task line this process printed.
//!
//! The same sums are the process's per-task metrics (`--metrics-addr`): one series per task it
//! ran, labelled by pipeline and task, and whether it still runs that task. Summing over tasks
//! is the scraper's (`sum by (instance)`), so the exposition holds no second copy of a number.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use serde::Serialize;

use crate::progress::Tap;

/// How often a process reports its roll-up while its tasks commit batches.
pub(super) const ROLLUP_EVERY: Duration = Duration::from_secs(5);

/// The sums over the tasks one process ran.
#[derive(Debug, Default, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
struct Sums {
    num_batches: u64,
    num_input_rows: u64,
    num_dead_letters: u64,
    num_rows_out: u64,
    num_windows_emitted: u64,
    num_late_events: u64,
    /// Records behind the input's end, summed over the tasks' last batches.
    lag: u64,
    /// The task's watermark after its last batch; in the sums, the lowest over the tasks
    /// running here (epoch ms; absent without event time).
    #[serde(skip_serializing_if = "Option::is_none")]
    watermark: Option<i64>,
}

#[derive(Debug, Default)]
struct Inner {
    tasks: BTreeMap<String, Sums>,
    /// The tasks running here now (a moved task's counts stay, as what this process did).
    running: BTreeSet<String>,
    /// Whether a batch arrived since the last report.
    fresh: bool,
}

/// One line of the roll-up (`--progress-json`): `name` is the pipeline, `tasks` what each
/// task added, the rest their sums.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Line<'a> {
    name: &'a str,
    group: &'a str,
    process: &'a str,
    #[serde(flatten)]
    total: Sums,
    tasks: &'a BTreeMap<String, Sums>,
}

#[derive(Debug)]
pub struct Rollup {
    /// The pipeline, for the metrics' labels.
    pipeline: String,
    inner: Mutex<Inner>,
}

impl Rollup {
    pub fn new(pipeline: &str) -> Rollup {
        Rollup { pipeline: pipeline.to_string(), inner: Mutex::default() }
    }

    /// The tap to give task `task`'s progress; the task counts as running here until
    /// [`Rollup::release`].
    pub(super) fn tap(self: &Arc<Self>, task: &str) -> Arc<dyn Tap> {
        if let Ok(mut inner) = self.inner.lock() {
            inner.running.insert(task.to_string());
        }
        Arc::new(TaskTap { task: task.to_string(), rollup: self.clone() })
    }

    /// Task `task` stopped here (revoked, fenced, failed or the process stopping).
    pub(super) fn release(&self, task: &str) {
        if let Ok(mut inner) = self.inner.lock() {
            inner.running.remove(task);
        }
    }

    /// Writes the roll-up to stderr, a JSON line if `json`, else a log line, if a batch
    /// arrived since the last (or `always`).
    pub(super) fn report(&self, pipeline: &str, group: &str, process: &str, json: bool, always: bool) {
        // A copy, written with the lock let go: a task's progress writes to stderr and then
        // takes this lock, so holding it while writing could deadlock the two.
        let (tasks, running) = {
            let Ok(mut inner) = self.inner.lock() else { return };
            if !(inner.fresh || always) {
                return;
            }
            inner.fresh = false;
            (inner.tasks.clone(), inner.running.clone())
        };
        let mut total = Sums::default();
        for (task, s) in &tasks {
            total.num_batches += s.num_batches;
            total.num_input_rows += s.num_input_rows;
            total.num_dead_letters += s.num_dead_letters;
            total.num_rows_out += s.num_rows_out;
            total.num_windows_emitted += s.num_windows_emitted;
            total.num_late_events += s.num_late_events;
            total.lag += s.lag;
            // A task that moved on has a watermark that no longer moves here.
            if running.contains(task) {
                total.watermark = super::member::lowest(total.watermark, s.watermark);
            }
        }
        if json {
            let line = Line { name: pipeline, group, process, total, tasks: &tasks };
            if let Ok(s) = serde_json::to_string(&line) {
                eprintln!("{s}");
            }
        } else {
            let tasks: Vec<&String> = tasks.keys().collect();
            let wm = total.watermark.map_or("none".to_string(), crate::progress::show_time);
            tracing::info!(
                "{pipeline}: this process ran tasks {tasks:?}: {} batches, {} rows in, {} out, {} dead letters, {} \
                 windows emitted, {} late events, lag {}, watermark {wm}",
                total.num_batches,
                total.num_input_rows,
                total.num_rows_out,
                total.num_dead_letters,
                total.num_windows_emitted,
                total.num_late_events,
                total.lag
            );
        }
    }
}

struct TaskTap {
    task: String,
    rollup: Arc<Rollup>,
}

impl Tap for TaskTap {
    fn record(&self, json: &str) {
        let Ok(v) = serde_json::from_str::<serde_json::Value>(json) else { return };
        let n = |k: &str| v[k].as_u64().unwrap_or(0);
        let lag: u64 = v["sources"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|s| s["lag"].as_object())
            .flat_map(|l| l.values().filter_map(serde_json::Value::as_u64))
            .sum();
        let Ok(mut inner) = self.rollup.inner.lock() else { return };
        inner.fresh = true;
        let s = inner.tasks.entry(self.task.clone()).or_default();
        s.num_batches += 1;
        s.num_input_rows += n("numInputRows");
        s.num_dead_letters += n("numDeadLetters");
        s.num_rows_out += n("numRowsOut");
        s.num_windows_emitted += n("numWindowsEmitted");
        s.num_late_events += n("numLateEvents");
        s.lag = lag;
        s.watermark = v["watermark"].as_i64().or(s.watermark);
    }
}

/// A task's labels: the pipeline and the task (`PIPELINE[TOPIC-PARTITION]`).
#[derive(Clone, Debug, PartialEq, Eq, Hash, EncodeLabelSet)]
struct TaskLabels {
    pipeline: String,
    task: String,
}

/// The tasks' sums as a Prometheus collector: a scrape copies them under the lock a batch
/// record takes for a moment, and encodes a series per task.
impl prometheus_client::collector::Collector for Rollup {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let (tasks, running) = match self.inner.lock() {
            Ok(inner) => (inner.tasks.clone(), inner.running.clone()),
            Err(_) => return Ok(()),
        };
        let labels = |task: &str| TaskLabels { pipeline: self.pipeline.clone(), task: task.to_string() };
        type Get = fn(&Sums) -> u64;
        let counters: [(&str, &str, Get); 4] = [
            ("weir_task_batches", "Batches the task committed in this process.", |s| s.num_batches),
            ("weir_task_input_rows", "Input records of those batches.", |s| s.num_input_rows),
            ("weir_task_rows_out", "Rows those batches delivered.", |s| s.num_rows_out),
            ("weir_task_dead_letters", "Dead letters those batches wrote.", |s| s.num_dead_letters),
        ];
        for (name, help, get) in counters {
            let mut family = encoder.encode_descriptor(name, help, None, MetricType::Counter)?;
            for (task, s) in &tasks {
                ConstCounter::new(get(s)).encode(family.encode_family(&labels(task))?)?;
            }
        }
        let mut family = encoder.encode_descriptor(
            "weir_task_lag",
            "Records behind the input's end after the task's last batch here.",
            None,
            MetricType::Gauge,
        )?;
        for (task, s) in &tasks {
            ConstGauge::new(s.lag as i64).encode(family.encode_family(&labels(task))?)?;
        }
        let mut family = encoder.encode_descriptor(
            "weir_task_running",
            "1 while this process runs the task, 0 once it moved or stopped.",
            None,
            MetricType::Gauge,
        )?;
        let mut names: BTreeSet<&String> = tasks.keys().collect();
        names.extend(running.iter());
        for task in names {
            ConstGauge::new(i64::from(running.contains(task))).encode(family.encode_family(&labels(task))?)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn exposition(r: &Arc<Rollup>) -> String {
        let mut registry = prometheus_client::registry::Registry::default();
        registry.register_collector(Box::new(r.clone()));
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        text
    }

    #[test]
    fn metrics_hold_a_series_per_task_and_which_still_run_here() {
        let r = Arc::new(Rollup::new("p"));
        let a = r.tap("p[t-0]");
        let _b = r.tap("p[t-1]");
        a.record(r#"{"numInputRows": 7, "numRowsOut": 2, "numDeadLetters": 1, "sources": [{"lag": {"t-0": 5}}]}"#);
        a.record(r#"{"numInputRows": 3, "numRowsOut": 1, "sources": [{"lag": {"t-0": 0}}]}"#);
        r.release("p[t-0]");
        let text = exposition(&r);
        let has = |line: &str| assert!(text.lines().any(|l| l == line), "no {line:?} in\n{text}");
        has(r#"weir_task_batches_total{pipeline="p",task="p[t-0]"} 2"#);
        has(r#"weir_task_input_rows_total{pipeline="p",task="p[t-0]"} 10"#);
        has(r#"weir_task_rows_out_total{pipeline="p",task="p[t-0]"} 3"#);
        has(r#"weir_task_dead_letters_total{pipeline="p",task="p[t-0]"} 1"#);
        has(r#"weir_task_lag{pipeline="p",task="p[t-0]"} 0"#);
        has(r#"weir_task_running{pipeline="p",task="p[t-0]"} 0"#);
        // Claimed, no batch yet: running, and no counts to show.
        has(r#"weir_task_running{pipeline="p",task="p[t-1]"} 1"#);
        assert!(!text.contains(r#"weir_task_batches_total{pipeline="p",task="p[t-1]"}"#), "{text}");
    }
}
