//! The process's roll-up of its tasks' progress: every task's batch records (the per-task
//! progress lines) are also folded here, and the group runner reports the sum for the tasks
//! this process ran, every [`ROLLUP_EVERY`] while batches arrive and once at the end. A
//! roll-up covers only what its tasks had reported when it was written, so the last one adds
//! up every task line this process printed.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

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
    /// Records behind the input's end, summed over the tasks' last batches.
    lag: u64,
}

#[derive(Default)]
struct Inner {
    tasks: BTreeMap<String, Sums>,
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

#[derive(Default)]
pub(super) struct Rollup(Mutex<Inner>);

impl Rollup {
    /// The tap to give task `task`'s progress.
    pub(super) fn tap(self: &Arc<Self>, task: &str) -> Arc<dyn Tap> {
        Arc::new(TaskTap { task: task.to_string(), rollup: self.clone() })
    }

    /// Writes the roll-up to stderr, a JSON line if `json`, else a log line, if a batch
    /// arrived since the last (or `always`).
    pub(super) fn report(&self, pipeline: &str, group: &str, process: &str, json: bool, always: bool) {
        let Ok(mut inner) = self.0.lock() else { return };
        if !(inner.fresh || always) {
            return;
        }
        inner.fresh = false;
        let mut total = Sums::default();
        for s in inner.tasks.values() {
            total.num_batches += s.num_batches;
            total.num_input_rows += s.num_input_rows;
            total.num_dead_letters += s.num_dead_letters;
            total.num_rows_out += s.num_rows_out;
            total.lag += s.lag;
        }
        if json {
            let line = Line { name: pipeline, group, process, total, tasks: &inner.tasks };
            if let Ok(s) = serde_json::to_string(&line) {
                eprintln!("{s}");
            }
        } else {
            let tasks: Vec<&String> = inner.tasks.keys().collect();
            tracing::info!(
                "{pipeline}: this process ran tasks {tasks:?}: {} batches, {} rows in, {} out, {} dead letters, lag {}",
                total.num_batches,
                total.num_input_rows,
                total.num_rows_out,
                total.num_dead_letters,
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
        let Ok(mut inner) = self.rollup.0.lock() else { return };
        inner.fresh = true;
        let s = inner.tasks.entry(self.task.clone()).or_default();
        s.num_batches += 1;
        s.num_input_rows += n("numInputRows");
        s.num_dead_letters += n("numDeadLetters");
        s.num_rows_out += n("numRowsOut");
        s.lag = lag;
    }
}
