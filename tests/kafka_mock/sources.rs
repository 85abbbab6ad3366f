//! What reads the mock's topics: the metrics endpoint beside idle connections; the demo; and a
//! source topic written in transactions, read exactly through its commit markers.

use std::io::{BufRead, BufReader};
use std::process::Stdio;
use std::time::Duration;

use crate::common::kafka::*;
use crate::common::*;
use rdkafka::mocking::MockCluster;

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

/// The orders-alerts pipeline on `cluster`, with both its topics made there.
fn alerts_pipeline(
    cluster: &MockCluster<'_, rdkafka::producer::DefaultProducerContext>,
    dir: &std::path::Path,
) -> std::path::PathBuf {
    cluster.create_topic("orders", 1, 1).unwrap();
    cluster.create_topic("orders-alerts", 1, 1).unwrap();
    alerts_pipeline_on(&cluster.bootstrap_servers(), dir)
}

/// The metrics endpoint is a real HTTP server: clients that connect and send nothing do not
/// hold up a scrape, and stay connected while it is answered.
#[test]
fn a_scrape_is_answered_beside_idle_connections() {
    use std::io::Read;
    let cluster = MockCluster::new(1).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let p = alerts_pipeline(&cluster, dir.path());
    let mut child = weir()
        .arg("run")
        .arg(&p)
        .args(["--metrics-addr", "127.0.0.1:0"])
        .env("WEIR_LOG", "info")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    // The server's address, then the source's start: the stages (and their metrics) exist.
    let mut addr = None;
    loop {
        let line = lines.next().expect("weir ended before it started").unwrap();
        if let Some(rest) = line.strip_prefix("metrics at http://") {
            addr = Some(rest.trim_end_matches("/metrics").to_string());
        }
        if line.contains("kafka source assigned") {
            break;
        }
    }
    let addr = addr.expect("the metrics address comes first");
    let idle: Vec<std::net::TcpStream> = (0..3).map(|_| std::net::TcpStream::connect(&addr).unwrap()).collect();
    let mut response = ureq::get(&format!("http://{addr}/metrics")).call().unwrap();
    assert_eq!(response.status(), 200);
    let body = response.body_mut().read_to_string().unwrap();
    assert!(body.contains("weir_plugin_calls_total{pipeline=\"orders-alerts\""), "{body}");
    for conn in &idle {
        conn.set_nonblocking(true).unwrap();
        let mut byte = [0u8; 1];
        let still_open = matches!((&*conn).read(&mut byte), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock);
        assert!(still_open, "an idle connection was closed before the scrape was answered");
    }
    ok(std::process::Command::new("kill").args(["-TERM", &child.id().to_string()]).output().unwrap());
    for line in lines {
        line.unwrap();
    }
    assert!(child.wait().unwrap().success());
}

/// A source topic written in transactions has offsets without records (each commit's marker),
/// and planned batch ends fall on them. Through repeated `kill -9` (so batches are re-read to
/// their recorded ends) every window is still counted from every committed order, once.
#[test]
fn a_topic_written_in_transactions_is_read_exactly_through_its_markers() {
    use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
    let cluster = MockCluster::new(1).unwrap();
    cluster.create_topic("orders", 2, 1).unwrap();
    let brokers = cluster.bootstrap_servers();
    let dir = tempfile::tempdir().unwrap();
    let events = orders(dir.path(), 12_000, 8);
    let producer: BaseProducer = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", &brokers)
        .set("transactional.id", "weir-test-orders")
        .create()
        .unwrap();
    producer.init_transactions(Duration::from_secs(10)).unwrap();
    let text = std::fs::read_to_string(&events).unwrap();
    // 250 orders a transaction: a marker every 126 offsets of each partition, so planned ends
    // (multiples of 500 offsets) land on markers as well as on records.
    for (n, chunk) in text.lines().collect::<Vec<_>>().chunks(250).enumerate() {
        producer.begin_transaction().unwrap();
        for (i, line) in chunk.iter().enumerate() {
            let record = BaseRecord::<(), str>::to("orders").payload(line).partition(((n * 250 + i) % 2) as i32);
            producer.send(record).map_err(|(e, _)| e).unwrap();
        }
        producer.commit_transaction(Duration::from_secs(10)).unwrap();
    }

    let out = dir.path().join("windows");
    std::fs::create_dir_all(&out).unwrap();
    let extra = format!("{}[checkpoint]\nlocation = \"{}\"", file_sink(&out), dir.path().join("checkpoint").display());
    let source = kafka_source(&brokers, "orders", 1_000);
    let p = pipeline(
        dir.path(),
        Spec {
            window: TUMBLING,
            watermark: "flush_at_end = true",
            extra: &extra,
            source: &source,
            ..Default::default()
        },
    );
    let kills = kill_repeatedly(&p, 6);
    assert!(kills >= 3, "only {kills} kills landed");
    let (kept, _) = kept_orders(&events);
    assert_eq!(windows_of(&sink_rows(&out)), sliding_reference(&kept, 60_000, 60_000), "each window once");
}
