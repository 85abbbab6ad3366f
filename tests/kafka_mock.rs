//! Fast Kafka tests on librdkafka's mock cluster, in this test process on a loopback port
//! (`weir` runs as a separate process and connects to it like to any broker). Within the mock's
//! limits (DESIGN.md §6): ≤ 5 MiB per partition; transactions commit, but `read_committed`
//! would also show aborted records, so these tests never abort one.

mod common;

use std::io::{BufRead, BufReader};
use std::process::Stdio;
use std::time::Duration;

use common::kafka::*;
use common::*;
use rdkafka::mocking::MockCluster;

/// The orders pipeline from the mock's `orders` topic into its `windows` topic through the
/// native transactional Kafka sink.
fn to_kafka(dir: &std::path::Path, brokers: &str, checkpoint: &str) -> std::path::PathBuf {
    let extra = format!(
        "[sink]\ntype = \"kafka\"\ntopic = \"windows\"\nkafka.bootstrap.servers = \"{brokers}\"\n\
         [checkpoint]\nlocation = \"{}\"",
        dir.join(checkpoint).display()
    );
    let source = kafka_source(brokers, "orders", 2_000);
    pipeline(dir, Spec { window: TUMBLING, extra: &extra, source: &source, ..Default::default() })
}

#[test]
fn the_kafka_sink_writes_each_batch_in_a_transaction_once() {
    let cluster = MockCluster::new(1).unwrap();
    cluster.create_topic("orders", 2, 1).unwrap();
    cluster.create_topic("windows", 2, 1).unwrap();
    let brokers = cluster.bootstrap_servers();
    let dir = tempfile::tempdir().unwrap();
    let events = orders(dir.path(), 20_000, 4);
    produce_lines(&brokers, "orders", 2, &events, true);
    let want = {
        let (kept, _) = kept_orders(&events);
        sliding_reference(&kept, 60_000, 60_000)
    };

    let p = to_kafka(dir.path(), &brokers, "checkpoint");
    ok(weir().arg("run").arg(&p).output().unwrap());
    let n = want.len();
    let first = read_topic(&brokers, "windows", |o| o.len() >= n, Duration::from_secs(30));
    let rows: Vec<_> = first.iter().map(|o| o.value.clone()).collect();
    assert_eq!(windows_of(&rows), want);
    assert!(first.iter().all(|o| o.batch.is_some()), "every message carries its batch id");

    // A new checkpoint recomputes every batch; the sink finds them in the topic and skips them.
    let p = to_kafka(dir.path(), &brokers, "checkpoint-again");
    let out = ok(weir().arg("run").arg(&p).env("WEIR_LOG", "info").output().unwrap());
    let log = String::from_utf8_lossy(&out.stderr);
    assert!(log.contains("are already in topic windows"), "{log}");
    // A marker at the end of each partition: once both are read, so is everything before them.
    produce_markers(&brokers, 2);
    let markers = |o: &[Out]| o.iter().filter(|r| r.value["marker"] == true).count() == 2;
    let all = read_topic(&brokers, "windows", markers, Duration::from_secs(30));
    assert_eq!(all.len(), n + 2, "the second run produced no duplicates");
}

fn produce_markers(brokers: &str, partitions: i32) {
    use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
    let p: BaseProducer = rdkafka::ClientConfig::new().set("bootstrap.servers", brokers).create().unwrap();
    for part in 0..partitions {
        p.send(BaseRecord::<(), str>::to("windows").payload("{\"marker\":true}").partition(part))
            .map_err(|(e, _)| e)
            .unwrap();
    }
    p.flush(Duration::from_secs(10)).unwrap();
}

#[test]
fn continuous_mode_passes_records_through_as_they_arrive_and_stops_on_sigterm() {
    let cluster = MockCluster::new(1).unwrap();
    cluster.create_topic("orders", 1, 1).unwrap();
    cluster.create_topic("orders-alerts", 1, 1).unwrap();
    let brokers = cluster.bootstrap_servers();
    let dir = tempfile::tempdir().unwrap();
    let text = std::fs::read_to_string(root().join("plugins/orders-alerts/pipeline.toml"))
        .unwrap()
        .replace("127.0.0.1:9092", &brokers)
        .replace("starting_offsets = \"latest\"", "starting_offsets = \"earliest\"")
        .replace("../dist/", &format!("{}/", root().join("plugins/dist").display()))
        .replace("../../out/orders-alerts/checkpoint", &dir.path().join("checkpoint").display().to_string());
    let p = dir.path().join("alerts.toml");
    std::fs::write(&p, text).unwrap();

    let mut child = weir().arg("run").arg(&p).stdout(Stdio::null()).stderr(Stdio::piped()).spawn().unwrap();
    // Records produced while it runs come out without any trigger.
    let events = orders(dir.path(), 5_000, 9);
    produce_lines(&brokers, "orders", 1, &events, true);
    let text = std::fs::read_to_string(&events).unwrap();
    let want: Vec<serde_json::Value> =
        json_lines(&text).into_iter().filter(|v| v["status"] == "ERROR" || v["status"] == "PENDING").collect();
    let got = read_topic(&brokers, "orders-alerts", |o| o.len() >= want.len(), Duration::from_secs(60));
    let got: Vec<serde_json::Value> = got.into_iter().map(|o| o.value).collect();
    assert_eq!(got, want, "the alerts, in order, each once");

    ok(std::process::Command::new("kill").args(["-TERM", &child.id().to_string()]).output().unwrap());
    let log: Vec<String> = BufReader::new(child.stderr.take().unwrap()).lines().map(|l| l.unwrap()).collect();
    let status = child.wait().unwrap();
    assert!(status.success(), "SIGTERM exits 0, got {status}:\n{}", log.join("\n"));
    let out = ok(weir().arg("inspect").arg(dir.path().join("checkpoint")).output().unwrap());
    let inspect = String::from_utf8(out.stdout).unwrap();
    assert!(inspect.contains("orders/0@5000"), "the position is committed on the way out:\n{inspect}");
}

#[test]
fn the_demo_prints_windows_and_alerts_and_stops_cleanly() {
    let out = ok(weir().current_dir(root()).args(["demo", "--events", "300000", "--rate", "100000"]).output().unwrap());
    let stdout = String::from_utf8(out.stdout).unwrap();
    let windows = stdout.lines().filter(|l| l.starts_with("window ")).count();
    assert!(windows >= 3, "finalized windows printed:\n{stdout}");
    assert!(stdout.lines().any(|l| l.starts_with("ALERT")), "the injected error burst raises an alert:\n{stdout}");
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(stderr.contains("produced 300000 orders"), "{stderr}");
}

#[test]
fn weir_record_captures_key_timestamp_partition_offset_and_headers() {
    let cluster = MockCluster::new(1).unwrap();
    cluster.create_topic("orders", 3, 1).unwrap();
    let brokers = cluster.bootstrap_servers();
    let dir = tempfile::tempdir().unwrap();
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
