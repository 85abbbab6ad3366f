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
