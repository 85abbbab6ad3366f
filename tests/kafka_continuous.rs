//! Continuous mode and `weir record` on Apache Kafka: records passed through as they arrive,
//! the position committed on SIGTERM; every record out at least once through `kill -9`; and
//! `weir record` capturing what the topic holds, key, timestamp, partition, offset and headers.

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use crate::common::apache_kafka::ApacheKafka;
use crate::common::kafka::*;
use crate::common::*;

/// The orders-alerts pipeline on `broker`, with both its topics made there.
fn alerts_pipeline(broker: &ApacheKafka, dir: &Path) -> PathBuf {
    broker.create_topic("orders", 1);
    broker.create_topic("orders-alerts", 1);
    alerts_pipeline_on(&broker.brokers(), dir)
}

/// The ERROR and PENDING orders of `events`, in order.
fn alerts_of(events: &Path) -> Vec<serde_json::Value> {
    let text = std::fs::read_to_string(events).unwrap();
    json_lines(&text).into_iter().filter(|v| v["status"] == "ERROR" || v["status"] == "PENDING").collect()
}

#[test]
fn continuous_mode_passes_records_through_as_they_arrive_and_stops_on_sigterm() {
    let dir = tempfile::tempdir().unwrap();
    let broker = ApacheKafka::start(&dir.path().join("kafka"));
    let brokers = broker.brokers();
    let p = alerts_pipeline(&broker, dir.path());
    let mut child = weir().arg("run").arg(&p).stdout(Stdio::null()).stderr(Stdio::piped()).spawn().unwrap();
    // Records produced while it runs come out without any trigger.
    let events = orders(dir.path(), 5_000, 9);
    produce_lines(&brokers, "orders", 1, &events, true);
    let want = alerts_of(&events);
    let got = read_topic(&brokers, "orders-alerts", |o| o.len() >= want.len(), Duration::from_secs(60));
    let got: Vec<serde_json::Value> = got.into_iter().map(|o| o.value).collect();
    assert_eq!(got, want, "the alerts, in order, each once");
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let log: Vec<String> = BufReader::new(child.stderr.take().unwrap()).lines().map(|l| l.unwrap()).collect();
    let status = child.wait().unwrap();
    assert!(status.success(), "SIGTERM exits 0, got {status}:\n{}", log.join("\n"));
    let out = ok(weir().arg("inspect").arg(dir.path().join("checkpoint")).output().unwrap());
    let inspect = String::from_utf8(out.stdout).unwrap();
    assert!(inspect.contains("orders/0@5000"), "the position is committed on the way out:\n{inspect}");
}

/// Killed with `kill -9` once its first alerts are out, restarted, and given more orders: every
/// alert of both halves is in the output (continuous mode is at-least-once: some twice, none
/// missing, nothing else).
#[test]
fn continuous_mode_delivers_every_record_at_least_once_through_kill_9() {
    let dir = tempfile::tempdir().unwrap();
    let broker = ApacheKafka::start(&dir.path().join("kafka"));
    let brokers = broker.brokers();
    let p = alerts_pipeline(&broker, dir.path());
    let first = orders(dir.path(), 4_000, 21);
    let want_first = alerts_of(&first);
    let mut run = weir().arg("run").arg(&p).stdout(Stdio::null()).stderr(Stdio::null()).spawn().unwrap();
    produce_lines(&brokers, "orders", 1, &first, true);
    read_topic(&brokers, "orders-alerts", |o| o.len() >= want_first.len() / 2, Duration::from_secs(60));
    run.kill().unwrap();
    run.wait().unwrap();
    let mut run = weir().arg("run").arg(&p).stdout(Stdio::null()).stderr(Stdio::null()).spawn().unwrap();
    let second_dir = dir.path().join("second");
    std::fs::create_dir_all(&second_dir).unwrap();
    let second = orders(&second_dir, 4_000, 22);
    produce_lines(&brokers, "orders", 1, &second, true);
    let id = |v: &serde_json::Value| (v["order_id"].as_u64(), v["order_ts"].as_i64());
    let want: BTreeSet<_> = want_first.iter().chain(alerts_of(&second).iter()).map(id).collect();
    let got = read_topic(
        &brokers,
        "orders-alerts",
        |o| want.iter().all(|w| o.iter().any(|r| id(&r.value) == *w)),
        Duration::from_secs(120),
    );
    run.kill().unwrap();
    run.wait().unwrap();
    let stray: Vec<_> = got.iter().map(|o| id(&o.value)).filter(|g| !want.contains(g)).collect();
    assert!(stray.is_empty(), "alerts not in the input: {stray:?}");
}

#[test]
fn weir_record_captures_key_timestamp_partition_offset_and_headers() {
    let dir = tempfile::tempdir().unwrap();
    let broker = ApacheKafka::start(&dir.path().join("kafka"));
    broker.create_topic("orders", 3);
    let brokers = broker.brokers();
    let events = orders(dir.path(), 3_000, 2);
    produce_lines(&brokers, "orders", 3, &events, true);
    let out = ok(weir().args(["record", "--brokers", &brokers, "--topic", "orders"]).output().unwrap());
    let lines = json_lines(&String::from_utf8(out.stdout).unwrap());
    let sent = json_lines(&std::fs::read_to_string(&events).unwrap());
    assert_eq!(lines.len(), sent.len());
    for l in &lines {
        let (part, offset) = (l["partition"].as_i64().unwrap(), l["offset"].as_i64().unwrap());
        // Line i went to partition i % 3, at offset i / 3.
        let order = &sent[(offset * 3 + part) as usize];
        assert_eq!(
            l["value"].as_str().map(|v| serde_json::from_str::<serde_json::Value>(v).unwrap()).as_ref(),
            Some(order)
        );
        assert_eq!(l["key"], order["user_id"].to_string());
        assert_eq!(l["timestamp"], order["order_ts"]);
        assert_eq!(l["headers"]["producer"], "weir-test");
    }
}
