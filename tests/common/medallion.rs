//! The orders medallion example (`plugins/orders-medallion/`) for the project tests: a copy of
//! it over dirty generated orders, and what each of its datasets should hold, computed naively.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use serde_json::Value;

use super::{ok, root, weir};

/// The example project, copied into `dir` with its paths pointed at the built components and
/// at `orders.jsonl` in `dir`; each `(file, from, to)` edit applied to the copy.
pub fn medallion(dir: &Path, edits: &[(&str, &str, &str)]) -> PathBuf {
    let src = root().join("plugins/orders-medallion");
    let dist = root().join("plugins/dist");
    for entry in std::fs::read_dir(&src).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|x| x != "toml") {
            continue;
        }
        let name = path.file_name().unwrap().to_string_lossy().to_string();
        let mut text = std::fs::read_to_string(&path)
            .unwrap()
            .replace("../dist/", &format!("{}/", dist.display()))
            .replace("../../out/orders.jsonl", "orders.jsonl")
            .replace("state = \"../../out/orders-medallion\"", "state = \".weir\"");
        for (file, from, to) in edits {
            if *file == name {
                assert!(text.contains(from), "{name} has no {from:?}");
                text = text.replace(from, to);
            }
        }
        std::fs::write(dir.join(&name), text).unwrap();
    }
    dir.to_path_buf()
}

/// Generated orders with what a medallion must clean up: records that are not JSON or lack the
/// event time (dead letters of parsing), orders that break an expectation, and repeats.
pub fn dirty_orders(dir: &Path, n: u64, seed: u64) -> PathBuf {
    let clean = super::orders(dir, n, seed);
    let text = std::fs::read_to_string(&clean).unwrap();
    let mut out = String::new();
    for (i, line) in text.lines().enumerate() {
        out.push_str(line);
        out.push('\n');
        match i % 97 {
            5 => out.push_str("{not json\n"),
            11 => out.push_str(r#"{"order_id":1,"user_id":2,"status":"OK","amount":3.0}"#.to_owned().as_str()),
            23 => out.push_str(&line.replace("\"amount\":", "\"amount\":-")),
            31 => out.push_str(&line.replace("\"status\":\"", "\"status\":\"LOST")),
            // A repeat of an earlier order, a little later in the input.
            41 | 42 => {
                let earlier = text.lines().nth(i.saturating_sub(7)).unwrap();
                out.push_str(earlier);
            }
            _ => continue,
        }
        if !out.ends_with('\n') {
            out.push('\n');
        }
    }
    std::fs::write(&clean, out).unwrap();
    clean
}

/// What each dataset should hold, computed naively from the input lines.
pub struct Reference {
    pub bronze: Vec<String>,
    pub silver: Vec<String>,
    /// window start → (count, errors).
    pub error_rate: BTreeMap<i64, (u64, u64)>,
    /// user → orders.
    pub user_orders: BTreeMap<String, u64>,
    /// Rows dropped by each expectation.
    pub violations: BTreeMap<&'static str, u64>,
}

pub fn reference(events: &Path) -> Reference {
    let text = std::fs::read_to_string(events).unwrap();
    let mut r = Reference {
        bronze: Vec::new(),
        silver: Vec::new(),
        error_rate: BTreeMap::new(),
        user_orders: BTreeMap::new(),
        violations: BTreeMap::new(),
    };
    let (mut seen, mut newest) = (BTreeSet::new(), i64::MIN);
    for line in text.lines() {
        let Ok(v) = serde_json::from_str::<Value>(line) else { continue };
        let Some(ts) = v.get("order_ts").and_then(Value::as_i64) else { continue };
        if v["amount"].as_f64().is_none_or(|a| a <= 0.0) {
            *r.violations.entry("positive_amount").or_default() += 1;
            continue;
        }
        if !["OK", "PENDING", "ERROR"].contains(&v["status"].as_str().unwrap_or("")) {
            *r.violations.entry("known_status").or_default() += 1;
            continue;
        }
        r.bronze.push(line.to_string());
        // Silver: the watermark (10 minutes behind the newest order) drops the very late ones;
        // then the first of each order_id.
        let late = ts < newest.saturating_sub(10 * 60_000);
        newest = newest.max(ts);
        if late || !seen.insert(v["order_id"].to_string()) {
            continue;
        }
        r.silver.push(line.to_string());
        let w = r.error_rate.entry(ts - ts.rem_euclid(60_000)).or_default();
        w.0 += 1;
        w.1 += u64::from(v["status"] == "ERROR");
        *r.user_orders.entry(v["user_id"].to_string()).or_default() += 1;
    }
    r
}

/// Silver's change for the full-refresh tests: it also drops PENDING orders, through a
/// transform plugin.
pub fn drop_pending_in_silver(project: &Path) {
    let filter = super::component("status_filter");
    let silver = std::fs::read_to_string(project.join("silver.toml")).unwrap().replace(
        "[watermark]",
        &format!(
            "[[transform]]\nplugin = \"{}\"\nconfig = {{ keep = [\"OK\", \"ERROR\"] }}\n\n[watermark]",
            filter.display()
        ),
    );
    std::fs::write(project.join("silver.toml"), silver).unwrap();
}

/// What silver and gold hold once silver drops PENDING orders; bronze as before.
pub fn without_pending(mut r: Reference) -> Reference {
    r.silver.retain(|l| !l.contains("\"status\":\"PENDING\""));
    r.error_rate = BTreeMap::new();
    r.user_orders = BTreeMap::new();
    for l in &r.silver {
        let v: Value = serde_json::from_str(l).unwrap();
        let ts = v["order_ts"].as_i64().unwrap();
        let w = r.error_rate.entry(ts - ts.rem_euclid(60_000)).or_default();
        w.0 += 1;
        w.1 += u64::from(v["status"] == "ERROR");
        *r.user_orders.entry(v["user_id"].to_string()).or_default() += 1;
    }
    r
}

/// `weir query PROJECT DATASET`: its rows, as lines.
pub fn query(project: &Path, dataset: &str) -> Vec<String> {
    let out = ok(weir().arg("query").arg(project).arg(dataset).output().unwrap());
    String::from_utf8(out.stdout).unwrap().lines().map(str::to_string).collect()
}

/// [`query`], or `None` when the dataset cannot be read (a reset deleted its log).
pub fn try_query(project: &Path, dataset: &str) -> Option<Vec<String>> {
    let out = weir().arg("query").arg(project).arg(dataset).output().unwrap();
    out.status.success().then(|| String::from_utf8(out.stdout).unwrap().lines().map(str::to_string).collect())
}

/// The example's datasets.
pub const DATASETS: [&str; 4] = ["bronze", "silver", "error_rate", "user_orders"];

/// The checkpoint identity `weir inspect` prints for one of the project's flows.
pub fn identity(project: &Path, flow: &str) -> String {
    let out = ok(weir().arg("inspect").arg(project.join(".weir/flows").join(flow)).output().unwrap());
    String::from_utf8_lossy(&out.stdout).lines().find(|l| l.starts_with("identity")).unwrap().to_string()
}

pub fn sorted(mut v: Vec<String>) -> Vec<String> {
    v.sort();
    v
}

/// Every dataset, as `weir query` prints it (streams in order, tables by key).
pub fn datasets(project: &Path) -> BTreeMap<&'static str, Vec<String>> {
    DATASETS.into_iter().map(|d| (d, query(project, d))).collect()
}

pub fn check_against_reference(project: &Path, r: &Reference) {
    assert_eq!(sorted(query(project, "bronze")), sorted(r.bronze.clone()), "bronze");
    let silver = query(project, "silver");
    assert_eq!(sorted(silver.clone()), sorted(r.silver.clone()), "silver");
    let ids: BTreeSet<String> =
        silver.iter().map(|l| serde_json::from_str::<Value>(l).unwrap()["order_id"].to_string()).collect();
    assert_eq!(ids.len(), silver.len(), "silver holds each order once");
    let windows: BTreeMap<i64, (u64, u64)> = query(project, "error_rate")
        .iter()
        .map(|l| {
            let v: Value = serde_json::from_str(l).unwrap();
            (v["window_start"].as_i64().unwrap(), (v["count"].as_u64().unwrap(), v["errors"].as_u64().unwrap()))
        })
        .collect();
    assert_eq!(windows, r.error_rate, "error_rate");
    let users: BTreeMap<String, u64> = query(project, "user_orders")
        .iter()
        .map(|l| {
            let v: Value = serde_json::from_str(l).unwrap();
            (v["user_id"].as_str().unwrap().to_string(), v["orders"].as_u64().unwrap())
        })
        .collect();
    assert_eq!(users, r.user_orders, "user_orders");
}
