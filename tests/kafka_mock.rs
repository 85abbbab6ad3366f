//! Fast Kafka tests on librdkafka's mock cluster, in this test process on a loopback port
//! (`weir` runs as a separate process and connects to it like to any broker). Within the mock's
//! limits (`tests/common/kafka.rs`): ≤ 5 MiB per partition; transactions commit, but `read_committed`
//! would also show aborted records, so these tests never abort one.

use std::io::{BufRead, BufReader};
use std::process::Stdio;
use std::time::Duration;

use crate::common::kafka::*;
use crate::common::*;
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
    let flush = "flush_at_end = true";
    pipeline(dir, Spec { window: TUMBLING, watermark: flush, extra: &extra, source: &source, ..Default::default() })
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

    // A replay from a fresh checkpoint is other deliveries, not re-deliveries: it writes every
    // window again, under its own checkpoint identity.
    let p = to_kafka(dir.path(), &brokers, "checkpoint-again");
    ok(weir().arg("run").arg(&p).output().unwrap());
    let all = read_to_markers(&brokers);
    assert_eq!(all.len(), 2 * n, "the replay wrote its output");
    let by_checkpoint = per_checkpoint(&all);
    assert_eq!(by_checkpoint.len(), 2);
    for rows in by_checkpoint.values() {
        assert_eq!(windows_of(rows), want);
    }
}

/// The transactional Kafka sink through repeated `kill -9`: every window once. A batch whose
/// transaction committed before the kill, and whose checkpoint did not, is found in the topic
/// under this checkpoint's identity and skipped on the re-run.
#[test]
fn the_kafka_sink_writes_each_window_once_through_repeated_kill_9() {
    let cluster = MockCluster::new(1).unwrap();
    cluster.create_topic("orders", 2, 1).unwrap();
    cluster.create_topic("windows", 2, 1).unwrap();
    let brokers = cluster.bootstrap_servers();
    let dir = tempfile::tempdir().unwrap();
    let events = orders(dir.path(), 20_000, 6);
    produce_lines(&brokers, "orders", 2, &events, true);
    let (kept, _) = kept_orders(&events);
    let p = to_kafka(dir.path(), &brokers, "checkpoint");
    let kills = kill_repeatedly(&p, 12);
    assert!(kills >= 6, "only {kills} kills landed");
    let all = read_to_markers(&brokers);
    let by_checkpoint = per_checkpoint(&all);
    assert_eq!(by_checkpoint.len(), 1, "one checkpoint throughout");
    for rows in by_checkpoint.values() {
        assert_eq!(windows_of(rows), sliding_reference(&kept, 60_000, 60_000), "each window once");
    }
}

/// Everything in the `windows` topic, up to a marker produced at the end of each partition now.
fn read_to_markers(brokers: &str) -> Vec<Out> {
    produce_markers(brokers, 2);
    let markers = |o: &[Out]| o.iter().filter(|r| r.value["marker"] == true).count() == 2;
    let mut all = read_topic(brokers, "windows", markers, Duration::from_secs(30));
    all.retain(|o| o.value["marker"] != true);
    all
}

/// Output rows by the checkpoint that delivered them.
fn per_checkpoint(out: &[Out]) -> std::collections::BTreeMap<String, Vec<serde_json::Value>> {
    let mut by = std::collections::BTreeMap::<String, Vec<serde_json::Value>>::new();
    for o in out {
        let checkpoint = o.checkpoint.clone().expect("every message carries its checkpoint");
        by.entry(checkpoint).or_default().push(o.value.clone());
    }
    by
}

/// `plugins/orders-alerts/pipeline.toml` (continuous mode, Kafka to Kafka) on `cluster`, reading
/// from the earliest offset, with its checkpoint in `dir`.
fn alerts_pipeline(
    cluster: &MockCluster<'_, rdkafka::producer::DefaultProducerContext>,
    dir: &std::path::Path,
) -> std::path::PathBuf {
    cluster.create_topic("orders", 1, 1).unwrap();
    cluster.create_topic("orders-alerts", 1, 1).unwrap();
    let text = std::fs::read_to_string(root().join("plugins/orders-alerts/pipeline.toml"))
        .unwrap()
        .replace("127.0.0.1:9092", &cluster.bootstrap_servers())
        .replace("starting_offsets = \"latest\"", "starting_offsets = \"earliest\"")
        .replace("../dist/", &format!("{}/", root().join("plugins/dist").display()))
        .replace("../../out/orders-alerts/checkpoint", &dir.join("checkpoint").display().to_string());
    let p = dir.join("alerts.toml");
    std::fs::write(&p, text).unwrap();
    p
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
    let brokers = cluster.bootstrap_servers();
    let dir = tempfile::tempdir().unwrap();
    let p = alerts_pipeline(&cluster, dir.path());

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

/// The medallion example in `dir`, every dataset in a topic `medallion-DATASET` of two
/// partitions (a table's fold must follow each key to its partition) on `cluster`.
fn kafka_medallion<C: rdkafka::ClientContext>(
    dir: &std::path::Path,
    cluster: &MockCluster<'_, C>,
) -> std::path::PathBuf {
    let datasets = [("bronze", "stream"), ("silver", "stream"), ("error_rate", "table"), ("user_orders", "table")];
    for (d, _) in datasets {
        cluster.create_topic(&format!("medallion-{d}"), 2, 1).unwrap();
    }
    let brokers = cluster.bootstrap_servers();
    let edits: Vec<(String, String)> = datasets
        .iter()
        .map(|(d, kind)| {
            let kafka = format!(
                "storage = \"kafka\"\ntopic = \"medallion-{d}\"\nkafka = {{ \"bootstrap.servers\" = \"{brokers}\" }}"
            );
            (format!("[datasets.{d}]\nkind = \"{kind}\""), format!("[datasets.{d}]\nkind = \"{kind}\"\n{kafka}"))
        })
        .collect();
    let edits: Vec<(&str, &str, &str)> = edits.iter().map(|(a, b)| ("weir.toml", a.as_str(), b.as_str())).collect();
    crate::common::medallion::medallion(dir, &edits)
}

/// The orders medallion (`tests/project.rs`) with every dataset in a Kafka topic, written in
/// transactions: each checked against the reference through `weir query`, which reads the
/// topics (a table folded by key); and `weir test` on the same project, which runs it on the
/// embedded log instead. (tansu, the other test broker, spins on records with headers, which
/// every Weir message has.)
#[test]
fn the_medallion_runs_with_kafka_backed_datasets() {
    use crate::common::medallion::*;
    let cluster = MockCluster::new(1).unwrap();
    let brokers = cluster.bootstrap_servers();
    let dir = tempfile::tempdir().unwrap();
    let events = dirty_orders(dir.path(), 10_000, 3);
    let project = kafka_medallion(dir.path(), &cluster);
    let out = ok(weir().arg("validate").arg(&project).output().unwrap());
    assert!(String::from_utf8_lossy(&out.stdout).contains("dataset bronze (stream, kafka topic medallion-bronze)"));
    ok(weir().arg("run").arg(&project).arg("--flush").output().unwrap());

    let r = reference(&events);
    // The topics hold each row once (a transactional reader's view), as weir query shows them.
    let bronze = read_topic(&brokers, "medallion-bronze", |m| m.len() >= r.bronze.len(), Duration::from_secs(60));
    assert_eq!(bronze.len(), r.bronze.len());
    check_against_reference(&project, &r);
    // Nothing of the project's was written to the embedded log.
    assert!(!project.join(".weir/datasets").exists());
    // A key's row, read from the topic; a key with none is exit 1.
    let (user, orders) = r.user_orders.iter().next().unwrap();
    let row = ok(weir().arg("query").arg(&project).arg("user_orders").arg(user.trim_matches('"')).output().unwrap());
    let row: serde_json::Value = serde_json::from_slice(&row.stdout).unwrap();
    assert_eq!(row["orders"].as_u64(), Some(*orders));
    let none = weir().arg("query").arg(&project).arg("user_orders").arg("no-such-user").output().unwrap();
    assert_eq!(none.status.code(), Some(1));

    // weir test needs no broker: the cluster is gone, and the project's datasets are in the
    // scratch state's embedded log.
    drop(cluster);
    let users: Vec<String> =
        r.user_orders.iter().map(|(u, n)| format!("{{\"user_id\":{u:?},\"orders\":{n}}}")).collect();
    let expected = dir.path().join("users.jsonl");
    std::fs::write(&expected, users.join("\n") + "\n").unwrap();
    let test = weir()
        .arg("test")
        .arg(&project)
        .arg("--events")
        .arg(format!("bronze={}", events.display()))
        .arg("--expect")
        .arg(format!("user_orders={}", expected.display()))
        .output()
        .unwrap();
    assert!(test.status.success(), "{}", String::from_utf8_lossy(&test.stderr));
}

/// The example's own `kafka.toml`, as shipped but for its broker (the mock's): bronze and silver
/// in topics, the gold tables in the embedded log, every dataset as the reference has it.
#[test]
fn the_medallion_s_kafka_toml_runs_as_shipped() {
    use crate::common::medallion::*;
    let cluster = MockCluster::new(1).unwrap();
    for d in ["bronze", "silver"] {
        cluster.create_topic(&format!("medallion-{d}"), 2, 1).unwrap();
    }
    let brokers = cluster.bootstrap_servers();
    let tmp = tempfile::tempdir().unwrap();
    let events = dirty_orders(tmp.path(), 10_000, 6);
    let edits = [
        ("kafka.toml", "127.0.0.1:9092", brokers.as_str()),
        // Its state beside the test's files, not in the checkout's `out/`.
        ("kafka.toml", "state = \"../../out/orders-medallion-kafka\"", "state = \".weir-kafka\""),
    ];
    let project = medallion(tmp.path(), &edits).join("kafka.toml");
    let out = ok(weir().arg("validate").arg(&project).output().unwrap());
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(said.contains("dataset silver (stream, kafka topic medallion-silver)"), "{said}");
    ok(weir().arg("run").arg(&project).arg("--flush").output().unwrap());
    let r = reference(&events);
    check_against_reference(&project, &r);
    let bronze = read_topic(&brokers, "medallion-bronze", |m| m.len() >= r.bronze.len(), Duration::from_secs(60));
    assert_eq!(bronze.len(), r.bronze.len(), "bronze's rows, in its topic, each once");
}

/// `weir query` answers from a table while its project runs, without stopping it (Kafka
/// Streams' interactive queries). The medallion's bronze reads a topic here, so the project
/// never ends on its own; its per-user table, on the embedded log, is queried until it holds
/// every user's count, and the project is still running then. The orders are in event-time
/// order, so none is late whatever the batches, and the reference is exact.
#[test]
fn a_table_is_queried_while_its_project_runs() {
    use crate::common::medallion::*;
    let cluster = MockCluster::new(1).unwrap();
    cluster.create_topic("orders", 1, 1).unwrap();
    let brokers = cluster.bootstrap_servers();
    let dir = tempfile::tempdir().unwrap();
    let events = orders(dir.path(), 5_000, 13);
    let mut lines: Vec<String> = std::fs::read_to_string(&events).unwrap().lines().map(str::to_string).collect();
    lines.sort_by_key(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()["order_ts"].as_i64().unwrap());
    std::fs::write(&events, lines.join("\n") + "\n").unwrap();
    produce_lines(&brokers, "orders", 1, &events, true);
    let want = reference(&events).user_orders;
    assert!(want.len() > 100, "many users");
    let source = kafka_source(&brokers, "orders", 1_000);
    let project = medallion(dir.path(), &[("bronze.toml", "type = \"replay\"\npath = \"orders.jsonl\"", &source)]);

    // Its log goes to a file: a pipe nobody reads while it runs could fill and stall it.
    let log = dir.path().join("run.log");
    let mut child = weir()
        .arg("run")
        .arg(&project)
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        // Before the flow's first commit the table may not exist yet: `query` then exits 1.
        let out = weir().arg("query").arg(&project).arg("user_orders").output().unwrap();
        let got: std::collections::BTreeMap<String, u64> = String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(|l| {
                let v: serde_json::Value = serde_json::from_str(l).unwrap();
                (v["user_id"].as_str().unwrap().to_string(), v["orders"].as_u64().unwrap())
            })
            .collect();
        if got == want {
            break;
        }
        if let Some(status) = child.try_wait().unwrap() {
            panic!("the project stopped on its own ({status}):\n{}", std::fs::read_to_string(&log).unwrap());
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the table never held every count: {} of {} users",
            got.len(),
            want.len()
        );
    }
    let (user, n) = want.iter().next().unwrap();
    let row = ok(weir().arg("query").arg(&project).args(["user_orders", user]).output().unwrap());
    let row: serde_json::Value = serde_json::from_slice(&row.stdout).unwrap();
    assert_eq!(row["orders"].as_u64(), Some(*n));
    assert!(child.try_wait().unwrap().is_none(), "the project still runs after the queries");

    ok(std::process::Command::new("kill").args(["-TERM", &child.id().to_string()]).output().unwrap());
    let status = child.wait().unwrap();
    assert!(status.success(), "SIGTERM exits 0, got {status}:\n{}", std::fs::read_to_string(&log).unwrap());
}

/// A full refresh of a Kafka-backed silver, after silver's logic changed: the topics keep their
/// records (Weir deletes none), silver and gold begin after the old ones and hold what the new
/// logic gives, through `weir query` and through the flows that read them; bronze's topic and
/// checkpoint are as they were.
#[test]
fn a_full_refresh_of_kafka_backed_datasets_begins_them_after_their_old_records() {
    use crate::common::medallion::*;
    let cluster = MockCluster::new(1).unwrap();
    let brokers = cluster.bootstrap_servers();
    let dir = tempfile::tempdir().unwrap();
    let events = dirty_orders(dir.path(), 10_000, 4);
    let project = kafka_medallion(dir.path(), &cluster);
    ok(weir().arg("run").arg(&project).arg("--flush").output().unwrap());
    let r = reference(&events);
    check_against_reference(&project, &r);
    let identity = |flow: &str| identity(&project, flow);
    let bronze_identity = identity("bronze");

    drop_pending_in_silver(&project);
    let out = ok(weir().arg("run").arg(&project).args(["--flush", "--full-refresh", "silver"]).output().unwrap());
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(said.contains("reset error_rate, silver, user_orders"), "{said}");
    let new = without_pending(reference(&events));
    assert!(new.silver.len() < r.silver.len(), "the change drops orders");
    check_against_reference(&project, &new);
    assert_eq!(identity("bronze"), bronze_identity, "bronze's checkpoint untouched");

    // Every record is still in the topics: bronze's once, silver's old rows and then the new.
    let all = |topic: &str, n: usize| read_topic(&brokers, topic, |m| m.len() >= n, Duration::from_secs(60)).len();
    assert_eq!(all("medallion-bronze", r.bronze.len()), r.bronze.len(), "bronze was not written again");
    let both = r.silver.len() + new.silver.len();
    assert_eq!(all("medallion-silver", both), both, "silver's old records stay, the new follow");
    let bases: serde_json::Value =
        serde_json::from_slice(&std::fs::read(project.join(".weir/bases.json")).unwrap()).unwrap();
    let names: Vec<&String> = bases.as_object().unwrap().keys().collect();
    assert_eq!(names, ["error_rate", "silver", "user_orders"]);
    assert_eq!(bases["silver"]["topic"], "medallion-silver");

    // A second run adds nothing, and a refresh of bronze now begins everything again.
    ok(weir().arg("run").arg(&project).arg("--flush").output().unwrap());
    check_against_reference(&project, &new);
    ok(weir().arg("run").arg(&project).args(["--flush", "--full-refresh", "bronze"]).output().unwrap());
    check_against_reference(&project, &new);
    assert_ne!(identity("bronze"), bronze_identity, "bronze's checkpoint was reset");
}

/// Progress in Spark's shape: each batch names the checkpoint (`id`, the same across runs) and
/// the run (`runId`, new at each start), and gives its source's start, end and latest offsets
/// per partition, with the lag between them, and its events' earliest and latest event time.
#[test]
fn progress_gives_offsets_lag_event_times_and_ids_in_spark_s_shape() {
    let cluster = MockCluster::new(1).unwrap();
    cluster.create_topic("orders", 2, 1).unwrap();
    cluster.create_topic("windows", 2, 1).unwrap();
    let brokers = cluster.bootstrap_servers();
    let dir = tempfile::tempdir().unwrap();
    let events = orders(dir.path(), 20_000, 4);
    let p = to_kafka(dir.path(), &brokers, "checkpoint");
    let batches = |out: std::process::Output| -> Vec<serde_json::Value> {
        let out = ok(out);
        String::from_utf8_lossy(&out.stderr)
            .lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .filter(|v| v.get("batchId").is_some())
            .collect()
    };
    // Line i of the file goes to partition i % 2; each production adds as many again.
    let lines = produce_lines(&brokers, "orders", 2, &events, true) as i64;
    let per_partition = |produced: i64, partition: i64| produced / 2 + (produced % 2) * i64::from(partition == 0);
    let check = |run: &[serde_json::Value], produced: i64| {
        let mut rows = 0;
        for (i, b) in run.iter().enumerate() {
            assert_eq!((&b["id"], &b["runId"]), (&run[0]["id"], &run[0]["runId"]), "one checkpoint, one run");
            let s = &b["sources"][0];
            assert_eq!(s["description"], "kafka orders");
            if i > 0 {
                assert_eq!(s["startOffset"], run[i - 1]["sources"][0]["endOffset"], "batches follow on");
            }
            for end in s["endOffset"]["partitions"].as_array().unwrap() {
                let partition = end["partition"].as_i64().unwrap();
                let latest = s["latestOffset"]["partitions"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .find(|l| l["partition"] == end["partition"])
                    .unwrap()["offset"]
                    .as_i64()
                    .unwrap();
                assert_eq!(latest, per_partition(produced, partition), "the latest offset is the topic's end");
                let lag = s["lag"][format!("orders/{partition}")].as_i64();
                assert_eq!(lag, Some(latest - end["offset"].as_i64().unwrap()), "batch {i}: {s}");
            }
            rows += s["numInputRows"].as_i64().unwrap();
            if b["numEvents"].as_u64() > Some(0) {
                let t = &b["eventTime"];
                assert!(t["min"].as_str().unwrap() <= t["max"].as_str().unwrap(), "{t}");
            }
            assert!(b["inputRowsPerSecond"].as_f64().is_some() && b["stateBytes"].as_u64().is_some());
        }
        let last = &run[run.len() - 1]["sources"][0]["lag"];
        assert!(last.as_object().unwrap().values().all(|l| l == 0), "read to the end: {last}");
        rows
    };
    let first = batches(weir().arg("run").arg(&p).arg("--progress-json").output().unwrap());
    assert!(first.len() > 2, "several batches");
    assert_eq!(check(&first, lines), lines, "every record in one batch");

    // The same checkpoint again, with as many records more: the same id, a new run id, and
    // reading from where the first run ended.
    produce_lines(&brokers, "orders", 2, &events, true);
    let second = batches(weir().arg("run").arg(&p).arg("--progress-json").output().unwrap());
    assert_eq!(second[0]["id"], first[0]["id"]);
    assert_ne!(second[0]["runId"], first[0]["runId"]);
    assert_eq!(second[0]["sources"][0]["startOffset"], first[first.len() - 1]["sources"][0]["endOffset"]);
    assert_eq!(check(&second, 2 * lines), lines);

    // weir inspect --json: the checkpoint, its last commit, and the last batch's record as
    // --progress-json printed it.
    let out = ok(weir().arg("inspect").arg(dir.path().join("checkpoint")).arg("--json").output().unwrap());
    let inspected: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let last = &second[second.len() - 1];
    assert_eq!(&inspected["lastProgress"], last);
    assert_eq!(inspected["id"], first[0]["id"]);
    assert_eq!(inspected["lastCommit"]["batchId"], last["batchId"]);
    assert_eq!(inspected["nextBatch"].as_u64(), last["batchId"].as_u64().map(|b| b + 1));
    assert_eq!(inspected["position"], last["sources"][0]["endOffset"]);
    assert!(inspected["lastCommit"]["ageMs"].as_i64() >= Some(0));
}

/// A tenant's pipeline on `weir serve` from the embedded broker (the mock cluster) into one of
/// its topics through the transactional Kafka sink, under the tenant's transactional id: every
/// window once.
#[test]
fn a_tenant_s_pipeline_on_weir_serve_reads_and_writes_the_embedded_broker() {
    use crate::common::serve::*;
    let cluster = MockCluster::new(1).unwrap();
    cluster.create_topic("orders", 2, 1).unwrap();
    cluster.create_topic("windows", 2, 1).unwrap();
    let brokers = cluster.bootstrap_servers();
    let dir = tempfile::tempdir().unwrap();
    let events = orders(dir.path(), 20_000, 14);
    produce_lines(&brokers, "orders", 2, &events, true);
    let want = {
        let (kept, _) = kept_orders(&events);
        sliding_reference(&kept, 60_000, 60_000)
    };
    let (admin_path, admin) = admin_file(dir.path());
    let s = Server::start(&dir.path().join("data"), &admin_path, &["--allow-network", &brokers]);
    let acme = tenant(&s, &admin, "acme");
    upload_plugins(&s, &acme);
    let text = orders_pipeline("to-kafka", "unused", 2_000);
    let text = text.split("[sink]").next().unwrap().replace(
        "type = \"replay\"\npath = \"unused\"\nmax_offsets_per_trigger = 2000",
        &kafka_source(&brokers, "orders", 2_000),
    ) + &format!("[sink]\ntype = \"kafka\"\ntopic = \"windows\"\nkafka.bootstrap.servers = \"{brokers}\"\n");
    s.expect(201, "PUT", "/v1/pipelines/to-kafka", Some(&acme), Some(text.as_bytes()));
    let done = s.wait_for(&acme, "to-kafka", &["finished", "failed"]);
    assert_eq!(done["state"], "finished", "{done}");
    let out = read_topic(&brokers, "windows", |o| o.len() >= want.len(), Duration::from_secs(30));
    let rows: Vec<_> = out.iter().map(|o| o.value.clone()).collect();
    assert_eq!(windows_of(&rows), want, "every window once");
    // Someone else's transactional id is not the tenant's to take.
    let theirs =
        text.replace("topic = \"windows\"\n", "topic = \"windows\"\nkafka.transactional.id = \"weir-rival--x\"\n");
    let r = s.expect(400, "PUT", "/v1/pipelines/to-kafka", Some(&acme), Some(theirs.as_bytes()));
    assert_eq!(r["field"], "sink.kafka.transactional.id", "{r}");
    s.kill();
}
