//! The changelog round trip on the mock Kafka cluster: windows into a keyed topic and that
//! topic back as a table a join reads; update mode's upserts and tombstones read back the same
//! way; and `weir test` showing the tombstones. Every window is checked against the per-user
//! minutes counted here from the orders the watermark keeps.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::common::kafka::*;
use crate::common::*;
use serde_json::{Value, json};

use super::support::{join_pipeline, join_pipeline_on, kafka_table, write_lines};

/// The orders per user in tumbling minutes into `topic` on the mock cluster, `output` more
/// lines of `[output]` and `key` as `sink.key` (or none).
fn changelog_pipeline(dir: &Path, events: &Path, brokers: &str, topic: &str, output: &str, key: &str) -> PathBuf {
    let key = if key.is_empty() { String::new() } else { format!("key = \"{key}\"\n") };
    let extra = format!(
        "[output]\n{output}\n[sink]\ntype = \"kafka\"\ntopic = \"{topic}\"\n{key}kafka.bootstrap.servers = \"{brokers}\"\n\
         [checkpoint]\nlocation = \"{}\"",
        dir.join(format!("cp-{topic}")).display()
    );
    let p = pipeline(
        dir,
        Spec {
            window: TUMBLING,
            parse_config: "key_by_user = true",
            watermark: "flush_at_end = true",
            extra: &extra,
            ..Default::default()
        },
    );
    let text = std::fs::read_to_string(&p).unwrap().replace("path = \"orders.jsonl\"", &format!("path = {events:?}"));
    let p2 = dir.join(format!("to-{topic}.toml"));
    std::fs::write(&p2, text).unwrap();
    p2
}

/// Per user, the minute windows of the kept orders: start → (count, errors).
fn per_user_minutes(events: &Path) -> BTreeMap<String, BTreeMap<i64, (u64, u64)>> {
    let (kept, _) = kept_orders(events);
    let mut by: BTreeMap<String, BTreeMap<i64, (u64, u64)>> = BTreeMap::new();
    for o in kept {
        let e = by.entry(o.user.to_string()).or_default().entry(o.ts.div_euclid(60_000) * 60_000).or_default();
        e.0 += 1;
        e.1 += o.error as u64;
    }
    by
}

#[test]
fn windows_round_trip_through_a_keyed_changelog_topic_into_a_table_and_a_join() {
    let cluster = rdkafka::mocking::MockCluster::new(1).unwrap();
    cluster.create_topic("rates", 2, 1).unwrap();
    let brokers = cluster.bootstrap_servers();
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let events = orders(d, 6_000, 8);
    let minutes = per_user_minutes(&events);

    // Each window once, keyed by its user: the topic's last row per user is its latest window.
    ok(weir().arg("run").arg(changelog_pipeline(d, &events, &brokers, "rates", "", "key")).output().unwrap());
    let n: usize = minutes.values().map(BTreeMap::len).sum();
    let msgs = read_topic(&brokers, "rates", |o| o.len() >= n, Duration::from_secs(30));
    assert_eq!(msgs.len(), n);
    for m in &msgs {
        assert_eq!(m.key.as_deref(), m.value["key"].as_str(), "a message is keyed by its row's key field");
    }

    // The topic read back as a table, each order joined with its user's latest window.
    let all = json_lines(&std::fs::read_to_string(&events).unwrap());
    let joined = d.join("joined");
    std::fs::create_dir_all(&joined).unwrap();
    ok(weir()
        .arg("run")
        .arg(join_pipeline(&joined, &events, &kafka_table(&brokers, "rates"), "inner"))
        .output()
        .unwrap());
    let got = sink_rows(&joined.join("out"));
    let mut want = 0;
    for o in &all {
        let user = o["user_id"].to_string();
        let Some((&start, &(count, errors))) = minutes.get(&user).and_then(|m| m.last_key_value()) else { continue };
        want += 1;
        let row = got.iter().find(|r| r["order_id"] == o["order_id"]).unwrap_or_else(|| panic!("order {o} is missing"));
        assert_eq!(
            (row["user"]["window_start"].as_i64(), row["user"]["count"].as_u64(), row["user"]["errors"].as_u64()),
            (Some(start), Some(count), Some(errors)),
            "{row}"
        );
    }
    assert_eq!(got.len(), want);
}

#[test]
fn update_mode_upserts_and_tombstones_are_a_changelog_a_table_reads_back() {
    let cluster = rdkafka::mocking::MockCluster::new(1).unwrap();
    cluster.create_topic("changes", 2, 1).unwrap();
    let brokers = cluster.bootstrap_servers();
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let events = orders(d, 6_000, 9);
    let minutes = per_user_minutes(&events);
    let output = "mode = \"update\"\ntombstones = true";
    ok(weir().arg("run").arg(changelog_pipeline(d, &events, &brokers, "changes", output, "")).output().unwrap());

    // Per message key (the window and its user): upserts, the last of them the window's final
    // count, then one tombstone, last.
    let windows: usize = minutes.values().map(BTreeMap::len).sum();
    let tombstones = |o: &[Out]| o.iter().filter(|m| m.value.is_null()).count();
    let msgs = read_topic(&brokers, "changes", |o| tombstones(o) >= windows, Duration::from_secs(30));
    let mut by_key: BTreeMap<String, Vec<&Value>> = BTreeMap::new();
    for m in &msgs {
        by_key.entry(m.key.clone().expect("every message is keyed")).or_default().push(&m.value);
    }
    let mut want = BTreeMap::new();
    for (user, ws) in &minutes {
        for (&start, &counts) in ws {
            want.insert(format!("[{start},{},{}]", start + 60_000, json!(user)), counts);
        }
    }
    assert_eq!(by_key.keys().collect::<Vec<_>>(), want.keys().collect::<Vec<_>>());
    for (key, values) in &by_key {
        let (last, rows) = values.split_last().unwrap();
        assert!(last.is_null(), "{key}: the tombstone comes last");
        assert!(rows.iter().all(|r| !r.is_null()), "{key}: one tombstone");
        let fin = rows.last().unwrap_or_else(|| panic!("{key}: no row before the tombstone"));
        assert_eq!((fin["count"].as_u64().unwrap(), fin["errors"].as_u64().unwrap()), want[key], "{key}");
    }

    // The topic as a table, looked up by each order's window key: every window's last word is
    // its tombstone, so no order finds a row. Without tombstones, each finds its window's
    // final count.
    let all = json_lines(&std::fs::read_to_string(&events).unwrap());
    let with_window: Vec<Value> = all
        .iter()
        .map(|o| {
            let start = o["order_ts"].as_i64().unwrap().div_euclid(60_000) * 60_000;
            let mut o = o.clone();
            o["window"] = json!(format!("[{start},{},{}]", start + 60_000, json!(o["user_id"].to_string())));
            o
        })
        .collect();
    let stream = d.join("with-window.jsonl");
    write_lines(&stream, &with_window, false);
    let joined = d.join("joined");
    std::fs::create_dir_all(&joined).unwrap();
    let p = join_pipeline_on(&joined, &stream, &kafka_table(&brokers, "changes"), "left", "window");
    ok(weir().arg("run").arg(p).output().unwrap());
    let got = sink_rows(&joined.join("out"));
    assert_eq!(got.len(), all.len());
    assert!(got.iter().all(|r| r["user"].is_null()));

    cluster.create_topic("upserts", 2, 1).unwrap();
    let output = "mode = \"update\"";
    ok(weir().arg("run").arg(changelog_pipeline(d, &events, &brokers, "upserts", output, "")).output().unwrap());
    let joined = d.join("joined-upserts");
    std::fs::create_dir_all(&joined).unwrap();
    let p = join_pipeline_on(&joined, &stream, &kafka_table(&brokers, "upserts"), "left", "window");
    ok(weir().arg("run").arg(p).output().unwrap());
    let got = sink_rows(&joined.join("out"));
    assert_eq!(got.len(), all.len());
    for r in &got {
        let key = r["window"].as_str().unwrap();
        // Orders the watermark dropped as late have a window key no window has.
        if let Some(&(count, errors)) = want.get(key) {
            assert_eq!((r["user"]["count"].as_u64(), r["user"]["errors"].as_u64()), (Some(count), Some(errors)), "{r}");
        }
    }
}

#[test]
fn weir_test_shows_tombstones_as_lines_of_their_own() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let events = orders(d, 3_000, 71);
    let extra = "[output]\nmode = \"update\"\ntombstones = true";
    let p = pipeline(d, Spec { window: TUMBLING, parse_config: "key_by_user = true", extra, ..Default::default() });
    let rows = weir_test(&p, &events);
    let minutes = per_user_minutes(&events);
    let windows: usize = minutes.values().map(BTreeMap::len).sum();
    let tombstones: Vec<&Value> = rows.iter().filter(|r| r["tombstone"] == true).collect();
    assert_eq!(tombstones.len(), windows, "one per window, at the flush");
    for (user, ws) in &minutes {
        for start in ws.keys() {
            let key = format!("[{start},{},{}]", start + 60_000, json!(user));
            let at = rows.iter().rposition(|r| r["key"] == json!(key)).unwrap_or_else(|| panic!("{key}: no tombstone"));
            let last_row = rows.iter().rposition(|r| r["window_start"] == json!(start) && r["key"] == json!(user));
            assert!(last_row.is_some_and(|r| r < at), "{key}: the tombstone follows the window's rows");
        }
    }
}
