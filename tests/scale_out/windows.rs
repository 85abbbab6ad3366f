//! The windowed pipelines of the two-stage tests: their files, the references one process
//! gives, and the closers that move every task's event time past the last window.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::AtomicUsize;
use std::time::{Duration, Instant};

use crate::common::kafka::*;
use crate::common::*;
use crate::harness::*;

/// The watermark delay of the windowed pipelines: above the generator's disorder (< 30 s), so
/// only its very late events (hours behind) are late, whatever the batching.
pub(crate) const DELAY_MS: i64 = 40_000;
/// The error rate's window: 10-second tumbling windows over every order (the global window).
pub(crate) const RATE_WINDOW_MS: i64 = 10_000;
/// The sessions' gap: per user, a session closes after 2 seconds without orders.
pub(crate) const GAP_MS: i64 = 2_000;

/// The two windowed pipelines for process `process`, each in the group of its name, writing
/// to `dir/out/NAME`, its checkpoint in `dir/process-N/NAME`: `rate`, the error rate per
/// 10-second window over all orders, and `sessions`, the error rate per user session.
pub(crate) fn windowed_pipelines(dir: &Path, brokers: &str, process: usize, delay: &str) -> Vec<PathBuf> {
    let here = dir.join(format!("process-{process}"));
    std::fs::create_dir_all(&here).unwrap();
    let windows = [
        ("rate", "type = \"tumbling\"\nsize = \"10 seconds\"", "{}"),
        ("sessions", "type = \"session\"\ngap = \"2 seconds\"", "{ key_by_user = true }"),
    ];
    windows
        .iter()
        .map(|(name, window, parse_config)| {
            let out = dir.join("out").join(name);
            std::fs::create_dir_all(&out).unwrap();
            let text = format!(
                r#"
name = "{name}"
[source]
{source}
starting_offsets = "earliest"
{debug}
[trigger]
{MICRO_BATCHES}
[parse]
plugin = "{parse}"
config = {parse_config}
[watermark]
delay = "{delay}"
[window]
{window}
[aggregate]
plugin = "{aggregate}"
{sink}
[checkpoint]
location = "{checkpoint}"
[scale]
group = "{name}"
"#,
                source = group_source(brokers, "orders", 2000),
                parse = component("orders_json").display(),
                aggregate = component("error_rate").display(),
                sink = file_sink(&out),
                checkpoint = here.join(name).display(),
                debug = std::env::var("WEIR_TEST_KAFKA_DEBUG")
                    .map(|d| format!("kafka.debug = \"{d}\""))
                    .unwrap_or_default(),
            );
            let p = here.join(format!("{name}.toml"));
            std::fs::write(&p, text).unwrap();
            p
        })
        .collect()
}

/// The orders of `lines` a watermark `delay` behind the largest event time so far keeps (the
/// very late ones dropped), for the references.
pub(crate) fn kept_within(lines: &[String], delay: i64) -> Vec<Order> {
    let mut max: Option<i64> = None;
    let mut kept = Vec::new();
    for l in lines {
        let v: serde_json::Value = serde_json::from_str(l).unwrap();
        let ts = v["order_ts"].as_i64().unwrap();
        if max.is_some_and(|m| ts < m - delay) {
            continue;
        }
        max = Some(max.map_or(ts, |m| m.max(ts)));
        kept.push(Order { ts, user: v["user_id"].as_u64().unwrap(), error: v["status"] == "ERROR" });
    }
    kept
}

/// `n` orders for the windowed pipelines: [`input`]'s, without the very late orders of its
/// first third. A group's stage-2 task has no watermark until every stage-1 task has written to
/// it, so one lane's very late order that arrives before the slowest lane's first batch is not
/// late there, while one process, whose watermark exists after its first 64 records, drops it:
/// the timing of the group's start, not a difference of results. Later very late orders meet a
/// watermark in both and are dropped by both.
pub(crate) fn windowed_input(dir: &Path, n: u64) -> Vec<String> {
    let all = input(dir, n);
    let settled = all.len() / 3;
    let mut max = i64::MIN;
    let mut kept = Vec::with_capacity(all.len());
    for (i, l) in all.into_iter().enumerate() {
        let ts = serde_json::from_str::<serde_json::Value>(&l).unwrap()["order_ts"].as_i64().unwrap();
        if i < settled && ts < max.saturating_sub(DELAY_MS) {
            continue;
        }
        max = max.max(ts);
        kept.push(l);
    }
    kept
}

/// The windows one process emits for `lines`, per pipeline: what the group must emit.
pub(crate) fn references(lines: &[String], delay: i64) -> BTreeMap<&'static str, Windows> {
    let kept = kept_within(lines, delay);
    BTreeMap::from([
        ("rate", sliding_reference(&kept, RATE_WINDOW_MS, RATE_WINDOW_MS)),
        ("sessions", session_reference(&kept, GAP_MS)),
    ])
}

/// Orders a day past the input, one to each partition: every stage-1 task's event time moves
/// past every window, which the watermark then closes. Their own windows never close, and
/// their users are no input's.
pub(crate) fn produce_closers(brokers: &str, dir: &Path, lines: &[String]) {
    produce_closers_to(brokers, "orders", dir, lines);
}

/// [`produce_closers`] to `topic`.
pub(crate) fn produce_closers_to(brokers: &str, topic: &str, dir: &Path, lines: &[String]) {
    let max = lines
        .iter()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()["order_ts"].as_i64().unwrap())
        .max()
        .unwrap();
    let text: String = (0..PARTITIONS)
        .map(|p| {
            format!(
                "{{\"order_id\":{},\"user_id\":{},\"status\":\"OK\",\"amount\":1.0,\"order_ts\":{}}}\n",
                900_000_000 + p,
                900_000_000 + p,
                max + 86_400_000
            )
        })
        .collect();
    let file = dir.join("closers.jsonl");
    std::fs::write(&file, text).unwrap();
    produce_lines(brokers, topic, PARTITIONS as i32, &file, false);
}

/// Waits until each pipeline's sink holds as many windows as its reference, then checks they
/// are the reference's, each once.
pub(crate) fn check_windows(dir: &Path, want: &BTreeMap<&str, Windows>, members: &[&Member]) {
    for (name, reference) in want {
        let out = dir.join("out").join(name);
        let deadline = Instant::now() + PATIENCE;
        loop {
            let got = windows_of(&delivered_rows(&out));
            if got.len() >= reference.len() {
                let missing: Vec<_> = reference.iter().filter(|(k, v)| got.get(k) != Some(v)).take(5).collect();
                let stray: Vec<_> = got.iter().filter(|(k, _)| !reference.contains_key(k)).take(5).collect();
                assert!(
                    missing.is_empty() && stray.is_empty(),
                    "{name}: windows differ: missing or other {missing:?}, not in the reference {stray:?}"
                );
                break;
            }
            let logs: String = members.iter().map(|m| m.log()).collect();
            assert!(
                Instant::now() < deadline,
                "{name}: {} of {} windows after {PATIENCE:?}; logs:\n{logs}",
                got.len(),
                reference.len()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

/// The rows the file sink has committed into `dir` so far: its files, without the one it may be
/// writing (a dot-file it renames when whole).
pub(crate) fn delivered_rows(dir: &Path) -> Vec<serde_json::Value> {
    let mut files: Vec<_> = std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().path()).collect();
    files.retain(|f| f.file_name().is_some_and(|n| !n.to_string_lossy().starts_with('.')));
    files.sort();
    files.iter().flat_map(|f| json_lines(&std::fs::read_to_string(f).unwrap())).collect()
}

/// Starts the group's first member and returns it once it holds every task of both pipelines'
/// groups.
pub(crate) fn start_leader_of_all(pipelines: &[PathBuf], read: &Arc<AtomicUsize>) -> Member {
    let m = Member::start_all(pipelines, read.clone());
    m.wait_logged("assigned to this process", pipelines.len());
    m
}
