//! The orders pipeline from Apache Kafka (a KRaft broker on loopback, its data on disk):
//! exactly-once under repeated `kill -9` of `weir`, a broker restart mid-run, SIGTERM, `weir
//! inspect`, `weir record` feeding `weir test`, and a tenant's Kafka pipeline on `weir serve`.
//!
//! Every run is compared with the reference result (the oracle's rule for late events) and,
//! where batches are involved, with an uninterrupted run row for row.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Stdio};

use crate::common::apache_kafka::ApacheKafka;
use crate::common::kafka::*;
use crate::common::*;

const PARTITIONS: u32 = 4;

/// The reference: 1-minute windows of the events a 10-minute watermark keeps.
fn reference(events: &Path) -> Windows {
    let (kept, _) = kept_orders(events);
    sliding_reference(&kept, 60_000, 60_000)
}

/// The orders pipeline over `topic`, writing windows with the file sink into `dir/windows`.
fn kafka_pipeline(dir: &Path, brokers: &str, topic: &str, max: usize, trigger: &str) -> std::path::PathBuf {
    let extra =
        format!("{}[checkpoint]\nlocation = \"{}\"", file_sink(&dir.join("windows")), dir.join("checkpoint").display());
    std::fs::create_dir_all(dir.join("windows")).unwrap();
    let source = kafka_source(brokers, topic, max);
    // These runs are compared with every window of the input: they flush at its end.
    let p = pipeline(
        dir,
        Spec {
            window: TUMBLING,
            watermark: "flush_at_end = true",
            extra: &extra,
            source: &source,
            ..Default::default()
        },
    );
    let text = std::fs::read_to_string(&p).unwrap().replace("mode = \"available-now\"", trigger);
    std::fs::write(&p, text).unwrap();
    p
}

fn spawn_run(p: &Path) -> Child {
    weir().arg("run").arg(p).arg("--progress-json").stdout(Stdio::null()).stderr(Stdio::piped()).spawn().unwrap()
}

#[test]
fn kafka_orders_are_exactly_once_through_repeated_kill_9() {
    let dir = tempfile::tempdir().unwrap();
    let broker = ApacheKafka::start(&dir.path().join("kafka"));
    broker.create_topic("orders", PARTITIONS);
    let events = orders(dir.path(), 200_000, 21);
    assert_eq!(produce_lines(&broker.brokers(), "orders", PARTITIONS as i32, &events, false), 200_000);
    let want = reference(&events);

    // Uninterrupted.
    let straight = dir.path().join("straight");
    let p = kafka_pipeline(&straight, &broker.brokers(), "orders", 4_000, "mode = \"available-now\"");
    ok(weir().arg("run").arg(&p).output().unwrap());
    let expected = sink_rows(&straight.join("windows"));
    assert_eq!(windows_of(&expected), want, "uninterrupted run against the reference");

    // Killed with SIGKILL after a random number (0-2) of committed batches, again and again.
    let killed = dir.path().join("killed");
    let p = kafka_pipeline(&killed, &broker.brokers(), "orders", 4_000, "mode = \"available-now\"");
    let kills = kill_repeatedly(&p, 25);
    assert!(kills >= 20, "only {kills} kills landed");
    let rows = sink_rows(&killed.join("windows"));
    assert_eq!(windows_of(&rows), want, "no window lost, none duplicated");
    assert_eq!(rows, expected, "same rows in the same batches as the uninterrupted run");

    // The checkpoint tells where every partition stands.
    let out = ok(weir().arg("inspect").arg(killed.join("checkpoint")).output().unwrap());
    let text = String::from_utf8(out.stdout).unwrap();
    for part in 0..PARTITIONS {
        assert!(text.contains(&format!("orders/{part}@50000")), "partition {part} fully read:\n{text}");
    }
    assert!(!text.contains("pending"), "nothing left to re-run:\n{text}");
}

#[test]
fn a_broker_restart_mid_run_is_waited_out_and_loses_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let mut broker = ApacheKafka::start(&dir.path().join("kafka"));
    broker.create_topic("orders", PARTITIONS);
    let events = orders(dir.path(), 60_000, 5);
    produce_lines(&broker.brokers(), "orders", PARTITIONS as i32, &events, false);

    let p = kafka_pipeline(dir.path(), &broker.brokers(), "orders", 1_000, "mode = \"available-now\"");
    // A small prefetch, so that the run still needs the broker when it is killed (the client
    // would otherwise hold the whole topic by then).
    let text = std::fs::read_to_string(&p).unwrap();
    std::fs::write(
        &p,
        text.replace(
            "kafka.fetch.wait.max.ms = 10",
            "kafka.fetch.wait.max.ms = 10\nkafka.queued.max.messages.kbytes = 64",
        ),
    )
    .unwrap();
    let mut child = weir()
        .arg("run")
        .arg(&p)
        .arg("--progress-json")
        .env("WEIR_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    // After the third batch, the broker dies; `weir` must say it is retrying; then it returns.
    let mut batches = 0;
    while batches < 3 {
        let line = lines.next().expect("weir ended early").unwrap();
        batches += line.starts_with('{') as usize;
    }
    broker.kill();
    let mut log = String::new();
    loop {
        let Some(line) = lines.next() else { panic!("weir ended without noticing the broker was gone:\n{log}") };
        let line = line.unwrap();
        log.push_str(&line);
        log.push('\n');
        if line.contains("retrying") || line.contains("keeps retrying") {
            break;
        }
    }
    broker.restart();
    for line in lines {
        let line = line.unwrap();
        if !line.starts_with('{') {
            log.push_str(&line);
            log.push('\n');
        }
    }
    let status = child.wait().unwrap();
    assert!(status.success(), "weir run failed after the broker came back: {status}\n{log}");
    assert_eq!(windows_of(&sink_rows(&dir.path().join("windows"))), reference(&events));
}

#[test]
fn sigterm_commits_and_exits_zero_and_the_run_resumes_from_there() {
    let dir = tempfile::tempdir().unwrap();
    let broker = ApacheKafka::start(&dir.path().join("kafka"));
    broker.create_topic("orders", PARTITIONS);
    let events = orders(dir.path(), 40_000, 8);
    produce_lines(&broker.brokers(), "orders", PARTITIONS as i32, &events, false);

    // A never-ending trigger: only a signal stops it.
    let p = kafka_pipeline(dir.path(), &broker.brokers(), "orders", 1_000, "mode = \"processing-time\"");
    let mut child = spawn_run(&p);
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let mut batches = 0;
    while batches < 5 {
        batches += lines.next().expect("weir ended early").unwrap().starts_with('{') as usize;
    }
    let pid = child.id().to_string();
    ok(std::process::Command::new("kill").args(["-TERM", &pid]).output().unwrap());
    let rest: Vec<String> = lines.map(|l| l.unwrap()).collect();
    let status = child.wait().unwrap();
    assert!(status.success(), "SIGTERM must exit 0, got {status}:\n{}", rest.join("\n"));

    let out = ok(weir().arg("inspect").arg(dir.path().join("checkpoint")).output().unwrap());
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("committed  batches 0..="), "{text}");

    // Finish what is there; the result is the whole input's, once.
    let text = std::fs::read_to_string(&p).unwrap().replace("mode = \"processing-time\"", "mode = \"available-now\"");
    std::fs::write(&p, text).unwrap();
    ok(weir().arg("run").arg(&p).output().unwrap());
    assert_eq!(windows_of(&sink_rows(&dir.path().join("windows"))), reference(&events));
}

#[test]
fn a_recorded_topic_replays_to_the_same_windows_with_weir_test() {
    let dir = tempfile::tempdir().unwrap();
    let broker = ApacheKafka::start(&dir.path().join("kafka"));
    broker.create_topic("orders", PARTITIONS);
    let events = orders(dir.path(), 30_000, 3);
    produce_lines(&broker.brokers(), "orders", PARTITIONS as i32, &events, false);

    let recorded = dir.path().join("recorded.jsonl");
    ok(weir()
        .args(["record", "--brokers", &broker.brokers(), "--topic", "orders", "--out"])
        .arg(&recorded)
        .output()
        .unwrap());
    let lines = json_lines(&std::fs::read_to_string(&recorded).unwrap());
    assert_eq!(lines.len(), 30_000);
    for l in &lines {
        let order: serde_json::Value = serde_json::from_str(l["value"].as_str().unwrap()).unwrap();
        assert_eq!(l["key"], order["user_id"].to_string(), "key: {l}");
        assert_eq!(l["timestamp"], order["order_ts"], "timestamp: {l}");
    }
    // Each partition's offsets are complete and in order.
    for part in 0..PARTITIONS as i64 {
        let offsets: Vec<i64> =
            lines.iter().filter(|l| l["partition"] == part).map(|l| l["offset"].as_i64().unwrap()).collect();
        assert_eq!(offsets, (0..offsets.len() as i64).collect::<Vec<_>>(), "partition {part}");
    }

    let p = pipeline(dir.path(), Spec { window: TUMBLING, ..Default::default() });
    assert_eq!(windows_of(&weir_test(&p, &recorded)), reference(&events));

    // Starting by timestamp: each partition from its first record at or after the time.
    let from = lines[lines.len() / 2]["timestamp"].as_i64().unwrap();
    let mut want = 0;
    for part in 0..PARTITIONS as i64 {
        let ts: Vec<i64> =
            lines.iter().filter(|l| l["partition"] == part).map(|l| l["timestamp"].as_i64().unwrap()).collect();
        want += ts.len() - ts.iter().position(|&t| t >= from).unwrap_or(ts.len());
    }
    let out = ok(weir()
        .args(["record", "--brokers", &broker.brokers(), "--topic", "orders", "--from", &from.to_string()])
        .output()
        .unwrap());
    assert_eq!(json_lines(&String::from_utf8(out.stdout).unwrap()).len(), want);
}

/// `weir serve` with a tenant's pipeline reading the broker: the broker on the service's
/// allow-list, the Kafka source in the tenant's file, the oracle's windows out; a broker off the
/// allow-list is refused, naming the key.
#[test]
fn a_tenant_s_pipeline_on_weir_serve_reads_kafka_to_the_reference_windows() {
    use crate::common::serve::*;
    let dir = tempfile::tempdir().unwrap();
    let broker = ApacheKafka::start(&dir.path().join("kafka"));
    broker.create_topic("orders", PARTITIONS);
    let events = orders(dir.path(), 50_000, 23);
    assert_eq!(produce_lines(&broker.brokers(), "orders", PARTITIONS as i32, &events, false), 50_000);
    let (admin_path, admin) = admin_file(dir.path());
    let brokers = broker.brokers();
    let s = Server::start(&dir.path().join("data"), &admin_path, &["--allow-network", &brokers]);
    let acme = tenant(&s, &admin, "acme");
    upload_plugins(&s, &acme);
    let source = kafka_source(&brokers, "orders", 4_000);
    let text = orders_pipeline("from-kafka", "unused", 4_000)
        .replace("type = \"replay\"\npath = \"unused\"\nmax_offsets_per_trigger = 4000", &source);
    let off_list = text.replace(&brokers, "127.0.0.1:1");
    let r = s.expect(400, "PUT", "/v1/pipelines/from-kafka", Some(&acme), Some(off_list.as_bytes()));
    assert_eq!(r["field"], "source.kafka.bootstrap.servers", "{r}");
    s.expect(201, "PUT", "/v1/pipelines/from-kafka", Some(&acme), Some(text.as_bytes()));
    let done = s.wait_for(&acme, "from-kafka", &["finished", "failed"]);
    assert_eq!(done["state"], "finished", "{done}");
    let lag: u64 =
        done["progress"]["sources"][0]["lag"].as_object().map_or(0, |l| l.values().filter_map(|v| v.as_u64()).sum());
    assert_eq!(lag, 0, "all read: {done}");
    assert_eq!(windows_of(&output_rows(&s, &acme, "from-kafka")), reference(&events));
    s.kill();
}
