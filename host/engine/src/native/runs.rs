//! Whole runs in-process, the driver on the native stages (no Wasm): against a naive reference,
//! a run split in two on one checkpoint, and a flush that the next run remembers.

use std::collections::BTreeMap;
use std::io::Write;
use std::sync::{Arc, Mutex};

use std::sync::atomic::AtomicBool;

use crate::driver::{Flush, Output, RunOptions, run};
use crate::pipeline::Pipeline;
use crate::progress::{Progress, Summary};

/// Rows written through `Output::Lines`, kept for the test to read.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().map_err(|_| std::io::Error::other("poisoned"))?.extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// (window start) → (count, errors)
type Windows = BTreeMap<i64, (u64, u64)>;

impl Captured {
    fn windows(&self) -> Windows {
        let bytes = self.0.lock().unwrap().clone();
        let mut w = Windows::new();
        for line in String::from_utf8(bytes).unwrap().lines() {
            let v: serde_json::Value = serde_json::from_str(line).unwrap();
            let prev = w.insert(
                v["window_start"].as_i64().unwrap(),
                (v["count"].as_u64().unwrap(), v["errors"].as_u64().unwrap()),
            );
            assert!(prev.is_none(), "window emitted twice: {line}");
        }
        w
    }
}

/// The 1-minute windows of the orders a 10-minute watermark keeps (the oracle's per-record
/// rule; with the generator's disorder every correct engine agrees).
fn reference(events: &std::path::Path) -> Windows {
    let mut max: Option<i64> = None;
    let mut w = Windows::new();
    for line in std::fs::read_to_string(events).unwrap().lines() {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        let ts = v["order_ts"].as_i64().unwrap();
        if max.is_some_and(|m| ts < m - 600_000) {
            continue;
        }
        max = Some(max.map_or(ts, |m| m.max(ts)));
        let e = w.entry(ts.div_euclid(60_000) * 60_000).or_default();
        e.0 += 1;
        e.1 += u64::from(v["status"] == "ERROR");
    }
    w
}

fn orders_pipeline(dir: &std::path::Path) -> Pipeline {
    let text = r#"
        name = "native"
        [source]
        type = "replay"
        path = "orders.jsonl"
        max_offsets_per_trigger = 2000
        [trigger]
        mode = "available-now"
        [parse]
        plugin = "orders_json.wasm"
        [watermark]
        delay = "10 minutes"
        [window]
        type = "tumbling"
        size = "1 minute"
        [aggregate]
        plugin = "error_rate.wasm"
    "#;
    Pipeline::parse(text, &dir.join("p.toml")).unwrap()
}

fn run_native(p: &Pipeline, checkpoint: &std::path::Path, flush: Flush) -> (Captured, Summary) {
    let rows = Captured::default();
    let stop = Arc::new(AtomicBool::new(false));
    let stages = crate::native::stages(p, Output::Lines(Box::new(rows.clone())), &stop).unwrap();
    let opts = RunOptions {
        checkpoint: checkpoint.to_path_buf(),
        dead_letters: None,
        progress: Progress::new(&p.name, false, None),
        stop,
        fsync: false,
        flush,
        own_share: true,
        ledger: None,
    };
    let summary = run(p, stages, opts).unwrap();
    (rows, summary)
}

#[test]
fn a_whole_run_on_native_stages_matches_the_reference() {
    let dir = tempfile::tempdir().unwrap();
    let events = dir.path().join("orders.jsonl");
    crate::workload::orders(40_000, 3, &mut std::io::BufWriter::new(std::fs::File::create(&events).unwrap())).unwrap();
    let p = orders_pipeline(dir.path());
    let (rows, summary) = run_native(&p, &dir.path().join("cp"), Flush::AsConfigured { default: true });
    assert_eq!(rows.windows(), reference(&events));
    assert!(!summary.interrupted);
    assert_eq!(summary.input_rows, 40_000);
}

/// Two bounded runs on one checkpoint, the file grown in between, give the rows of one run over
/// the whole file; the first, not flushing, leaves its last windows open for the second.
#[test]
fn two_runs_on_a_growing_file_equal_one_run_over_all_of_it() {
    let dir = tempfile::tempdir().unwrap();
    let events = dir.path().join("orders.jsonl");
    let mut all = Vec::new();
    crate::workload::orders(30_000, 8, &mut all).unwrap();
    let text = String::from_utf8(all).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    let (first, second) = lines.split_at(12_345);
    std::fs::write(&events, first.join("\n") + "\n").unwrap();
    let p = orders_pipeline(dir.path());
    let cp = dir.path().join("cp");
    let (a, _) = run_native(&p, &cp, Flush::AsConfigured { default: false });
    std::fs::write(&events, text.clone()).unwrap();
    let (b, _) = run_native(&p, &cp, Flush::Always);
    let mut got = a.windows();
    for (k, v) in b.windows() {
        assert!(got.insert(k, v).is_none(), "window {k} emitted by both runs");
    }
    assert_eq!(got, reference(&events));
    assert!(second.len() > 10_000);
}
