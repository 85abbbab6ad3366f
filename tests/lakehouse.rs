//! Where the data lands, read back by the tools people read it with: Parquet files that DuckDB
//! and pyarrow read (`tests/lakehouse/read.py`), and PostgreSQL tables that `psql` reads, written
//! through repeated `kill -9` with each row once, rows that do not fit dead-lettered naming the
//! column, and bad settings refused naming the key.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::common::*;

mod debezium;
mod example;
mod iceberg;
mod parquet;
mod postgres;

fn python() -> PathBuf {
    std::env::var_os("WEIR_PYTHON").map_or_else(|| "python3".into(), PathBuf::from)
}

/// What `tests/lakehouse/read.py ARGS` prints: its first line (the readers' counts), then the rows.
fn read(args: &[&str]) -> (serde_json::Value, Vec<serde_json::Value>) {
    let script = root().join("tests").join("lakehouse").join("read.py");
    let out = Command::new(python()).arg(script).args(args).output().unwrap();
    assert!(out.status.success(), "read.py {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8(out.stdout).unwrap();
    let mut lines = text.lines().map(|l| serde_json::from_str(l).unwrap());
    let head = lines.next().expect("the counts line");
    (head, lines.collect())
}

/// `n` generated orders in `dir/orders.jsonl`, and the orders.
fn orders(dir: &Path, n: usize) -> (PathBuf, Vec<serde_json::Value>) {
    let events = dir.join("orders.jsonl");
    ok(weir().args(["gen", "orders", &n.to_string(), "--seed", "11", "--out"]).arg(&events).output().unwrap());
    let text = std::fs::read_to_string(&events).unwrap();
    (events, text.lines().map(|l| serde_json::from_str(l).unwrap()).collect())
}

/// An order as its five columns, the amount's bits so that rows compare exactly.
fn order(o: &serde_json::Value) -> (i64, i64, String, u64, i64) {
    (
        o["order_id"].as_i64().unwrap(),
        o["user_id"].as_i64().unwrap(),
        o["status"].as_str().unwrap().to_string(),
        o["amount"].as_f64().unwrap().to_bits(),
        o["order_ts"].as_i64().unwrap(),
    )
}

/// Runs `weir run PIPELINE --progress-json` to its end, calling `on_batch(n)` as the n-th batch
/// commits and `on_log(line)` for each line of its log (how an outage test takes a system away
/// and brings it back on the run's own progress); asserts it succeeded.
fn run_watching(pipeline: &Path, mut on_batch: impl FnMut(usize), mut on_log: impl FnMut(&str)) {
    use std::io::BufRead;
    let mut child = weir()
        .arg("run")
        .arg(pipeline)
        .arg("--progress-json")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let (mut batches, mut log) = (0, String::new());
    for line in std::io::BufReader::new(child.stderr.take().unwrap()).lines() {
        let line = line.unwrap();
        log.push_str(&line);
        log.push('\n');
        if line.starts_with('{') {
            batches += 1;
            on_batch(batches);
        } else {
            on_log(&line);
        }
    }
    let status = child.wait().unwrap();
    assert!(status.success(), "weir run: {status}\n{log}");
}
