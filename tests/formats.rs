//! Avro through a schema registry, end to end, on Apache Kafka and Apicurio Registry (both
//! started here on loopback): orders written by Confluent's own Python serializer are decoded by
//! the standard library's `avro_parser.wasm`, counted in windows and written back as Avro that
//! Confluent's deserializer reads; bad records (unknown ids, corrupt bytes, a wrong magic byte)
//! go to the dead letters with their schema id; the output is the same through repeated
//! `kill -9`; a registry that goes down mid-run is waited for, or stops the run naming it, and
//! loses no record; incompatible schemas are refused before a run.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use rdkafka::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Message;
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::{Offset, TopicPartitionList};

use crate::common::apache_kafka::ApacheKafka;
use crate::common::registry::Registry;
use crate::common::*;

const PARTITIONS: u32 = 2;

/// The value that ends a partition for [`read_raw`]: not Avro (no magic byte 0).
const END: &[u8] = b"weir-test-end";

fn python() -> PathBuf {
    std::env::var_os("WEIR_PYTHON").map_or_else(|| "python3".into(), PathBuf::from)
}

fn formats(file: &str) -> PathBuf {
    root().join("tests").join("formats").join(file)
}

/// Runs `tests/formats/confluent.py` (Confluent's client) with `args`; its standard output.
fn confluent(args: &[&str]) -> String {
    let out = Command::new(python()).arg(formats("confluent.py")).args(args).output().unwrap();
    assert!(out.status.success(), "confluent.py {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

/// Produces every order of `events` as Avro with Confluent's serializer (registering
/// `order.avsc` under `orders-value`).
fn produce_orders(broker: &ApacheKafka, registry: &Registry, events: &Path) -> usize {
    let said = confluent(&[
        "produce-avro",
        "--brokers",
        &broker.brokers(),
        "--registry",
        &registry.url(),
        "--topic",
        "orders",
        "--schema",
        formats("order.avsc").to_str().unwrap(),
        "--input",
        events.to_str().unwrap(),
    ]);
    said.trim().parse().unwrap()
}

/// Produces each of `values` as it is, to partition 0 of `topic`.
fn produce_raw(brokers: &str, topic: &str, values: &[Vec<u8>]) {
    let p: BaseProducer = ClientConfig::new().set("bootstrap.servers", brokers).create().unwrap();
    for v in values {
        p.send(BaseRecord::<(), [u8]>::to(topic).payload(v).partition(0)).map_err(|(e, _)| e).unwrap();
    }
    p.flush(Duration::from_secs(30)).unwrap();
}

/// Every committed value of `topic` (with `read_committed`), partition by partition, up to an
/// [`END`] marker produced at the end of each partition now.
fn read_raw(brokers: &str, topic: &str) -> Vec<(Option<Vec<u8>>, Vec<u8>)> {
    let p: BaseProducer = ClientConfig::new().set("bootstrap.servers", brokers).create().unwrap();
    for part in 0..PARTITIONS as i32 {
        p.send(BaseRecord::<(), [u8]>::to(topic).payload(END).partition(part)).map_err(|(e, _)| e).unwrap();
    }
    p.flush(Duration::from_secs(30)).unwrap();
    let c: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .set("group.id", "weir-formats-reader")
        .set("isolation.level", "read_committed")
        .set("fetch.wait.max.ms", "5")
        .create()
        .unwrap();
    let mut tpl = TopicPartitionList::new();
    for part in 0..PARTITIONS as i32 {
        tpl.add_partition_offset(topic, part, Offset::Beginning).unwrap();
    }
    c.assign(&tpl).unwrap();
    let (mut out, mut ended) = (Vec::new(), 0);
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    while ended < PARTITIONS {
        assert!(std::time::Instant::now() < deadline, "{topic}: {ended} partitions read to their end in 120 s");
        if let Some(m) = c.poll(Duration::from_millis(100)) {
            let m = m.unwrap();
            match m.payload() {
                Some(v) if v == END => ended += 1,
                v => out.push((m.key().map(<[u8]>::to_vec), v.unwrap_or_default().to_vec())),
            }
        }
    }
    out
}

/// `values` decoded by Confluent's deserializer (each writer's schema fetched by its id).
fn decode(registry: &Registry, dir: &Path, topic: &str, values: &[Vec<u8>]) -> Vec<serde_json::Value> {
    let file = dir.join(format!("{topic}.hex"));
    let hex: Vec<String> = values.iter().map(|v| v.iter().map(|b| format!("{b:02x}")).collect()).collect();
    std::fs::write(&file, hex.join("\n") + "\n").unwrap();
    let text =
        confluent(&["decode-avro", "--registry", &registry.url(), "--topic", topic, "--input", file.to_str().unwrap()]);
    json_lines(&text)
}

/// The orders pipeline on Avro: the standard Avro parser, 1-second windows of the error-rate
/// aggregator, written to `out` as Avro with `window.avsc`; its checkpoint and dead letters in
/// `dir`. `extra` goes in `[registry]`.
fn avro_pipeline(dir: &Path, brokers: &str, registry: &str, out: &str, extra: &str) -> PathBuf {
    std::fs::create_dir_all(dir).unwrap();
    let text = format!(
        r#"
name = "orders-avro"
[source]
type = "kafka"
topics = ["orders"]
max_offsets_per_trigger = 2000
kafka.bootstrap.servers = "{brokers}"
[trigger]
mode = "available-now"
[parse]
plugin = "{parser}"
config = {{ time_field = "order_ts" }}
grants.registry = true
[registry]
url = "{registry}"
{extra}
[watermark]
delay = "10 minutes"
flush_at_end = true
[window]
type = "tumbling"
size = "1 second"
[aggregate]
plugin = "{agg}"
[sink]
type = "kafka"
topic = "{out}"
kafka.bootstrap.servers = "{brokers}"
format = "avro"
schema = "{schema}"
[checkpoint]
location = "{checkpoint}"
[dead_letter]
path = "{dead}"
"#,
        parser = component("avro_parser").display(),
        agg = component("error_rate").display(),
        schema = formats("window.avsc").display(),
        checkpoint = dir.join("checkpoint").display(),
        dead = dir.join("dead-letters.jsonl").display(),
    );
    let p = dir.join("pipeline.toml");
    std::fs::write(&p, text).unwrap();
    p
}

fn dead_letters(dir: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(dir.join("dead-letters.jsonl")).map(|t| json_lines(&t)).unwrap_or_default()
}

/// Big-endian schema id after the magic byte.
fn framed(id: u32, payload: &[u8]) -> Vec<u8> {
    let mut v = vec![0];
    v.extend_from_slice(&id.to_be_bytes());
    v.extend_from_slice(payload);
    v
}

fn subject_id(registry: &Registry, subject: &str, version: u32) -> u32 {
    let (status, body) = registry.get(&format!("/subjects/{subject}/versions/{version}"));
    assert_eq!(status, 200, "{body}");
    serde_json::from_str::<serde_json::Value>(&body).unwrap()["id"].as_u64().unwrap() as u32
}

/// The worked example of `docs/formats.md`, with bad records among the good, then the same
/// through repeated `kill -9`.
#[test]
fn avro_orders_from_confluent_s_serializer_become_windows_that_confluent_s_deserializer_reads() {
    let dir = tempfile::tempdir().unwrap();
    let broker = ApacheKafka::start(&dir.path().join("kafka"));
    let registry = Registry::start(&dir.path().join("registry"));
    for topic in ["orders", "windows", "windows-killed"] {
        broker.create_topic(topic, PARTITIONS);
    }
    let events = orders(dir.path(), 20_000, 47);
    assert_eq!(produce_orders(&broker, &registry, &events), 20_000);
    let id = subject_id(&registry, "orders-value", 1);
    // Bad records: an id the registry does not have, a record cut short, JSON (magic byte `{`).
    let bad = [framed(999, &[2]), framed(id, &[2]), br#"{"order_id":1}"#.to_vec()];
    produce_raw(&broker.brokers(), "orders", &bad);
    let (kept, _) = kept_orders(&events);
    let want = sliding_reference(&kept, 1_000, 1_000);
    assert!(want.len() >= 40, "windows enough to lose or repeat some: {}", want.len());

    let straight = dir.path().join("straight");
    let p = avro_pipeline(&straight, &broker.brokers(), &registry.url(), "windows", "");
    let out = ok(weir().env("WEIR_LOG", "warn,weir_schema=info").arg("run").arg(&p).output().unwrap());
    // Each schema id is fetched once by the process, whatever its batches and parsers.
    let said = String::from_utf8_lossy(&out.stderr);
    assert_eq!(said.matches(&format!("fetched schema id {id} ")).count(), 1, "{said}");
    assert_eq!(said.matches("schema id 999 is not in the registry").count(), 1, "{said}");
    let written = read_raw(&broker.brokers(), "windows");
    assert!(written.iter().all(|(_, v)| v[0] == 0), "every value is framed");
    let values: Vec<Vec<u8>> = written.into_iter().map(|(_, v)| v).collect();
    let rows = decode(&registry, dir.path(), "windows", &values);
    assert_eq!(windows_of(&rows), want, "the windows, read back by Confluent's deserializer");
    let dead = dead_letters(&straight);
    let errors: Vec<&str> = dead.iter().map(|d| d["error"].as_str().unwrap()).collect();
    assert_eq!(dead.len(), 3, "{errors:?}");
    assert!(errors.iter().any(|e| e.contains("schema id 999: not in the schema registry")), "{errors:?}");
    assert!(errors.iter().any(|e| e.contains(&format!("schema id {id}: the bytes do not decode"))), "{errors:?}");
    assert!(errors.iter().any(|e| e.contains("magic byte 0x7b")), "{errors:?}");
    assert!(dead.iter().all(|d| d["stage"] == "parse" && d["offset"].as_i64().is_some()), "{dead:?}");
    // The sink registered its schema under the topic's subject.
    let (status, _) = registry.get("/subjects/windows-value/versions/1");
    assert_eq!(status, 200);

    let killed = dir.path().join("killed");
    let p = avro_pipeline(&killed, &broker.brokers(), &registry.url(), "windows-killed", "");
    let kills = kill_repeatedly(&p, 12);
    assert!(kills >= 8, "only {kills} kills landed");
    let values: Vec<Vec<u8>> = read_raw(&broker.brokers(), "windows-killed").into_iter().map(|(_, v)| v).collect();
    let again = decode(&registry, dir.path(), "windows-killed", &values);
    assert_eq!(windows_of(&again), want, "no window lost, none twice, through {kills} kills");
    assert_eq!(dead_letters(&killed).len(), 3, "each bad record dead-lettered once");
}

/// Waits for a line of `child`'s standard error that `wanted` accepts; every line read goes to
/// `log`. Panics if the process ends first.
fn wait_for_line(lines: &mut impl Iterator<Item = String>, log: &mut String, mut wanted: impl FnMut(&str) -> bool) {
    for line in lines.by_ref() {
        log.push_str(&line);
        log.push('\n');
        if wanted(&line) {
            return;
        }
    }
    panic!("the run ended before the line awaited:\n{log}");
}

/// Rows out, summed over the run's progress lines until `n`.
fn wait_for_rows(lines: &mut impl Iterator<Item = String>, log: &mut String, n: u64) {
    let mut rows = 0;
    wait_for_line(lines, log, |l| {
        if let Ok(v) = serde_json::from_str::<serde_json::Value>(l) {
            rows += v["numRowsOut"].as_u64().unwrap_or(0);
        }
        rows >= n
    });
}

fn spawn(p: &Path) -> Child {
    weir().arg("run").arg(p).arg("--progress-json").stdout(Stdio::null()).stderr(Stdio::piped()).spawn().unwrap()
}

/// A stateless pipeline from Avro orders to JSON lines in `dir/rows`, running until stopped.
fn passthrough(dir: &Path, brokers: &str, registry: &str, retry_for: &str) -> PathBuf {
    let rows = dir.join("rows");
    std::fs::create_dir_all(&rows).unwrap();
    let text = format!(
        r#"
name = "orders-avro-rows"
[source]
type = "kafka"
topics = ["orders"]
kafka.bootstrap.servers = "{brokers}"
kafka.fetch.wait.max.ms = 10
[trigger]
mode = "processing-time"
interval = "50ms"
[parse]
plugin = "{parser}"
config = {{ time_field = "order_ts" }}
grants.registry = true
[registry]
url = "{registry}"
retry_for = "{retry_for}"
{sink}
[checkpoint]
location = "{checkpoint}"
[dead_letter]
path = "{dead}"
"#,
        parser = component("avro_parser").display(),
        sink = file_sink(&rows),
        checkpoint = dir.join("checkpoint").display(),
        dead = dir.join("dead-letters.jsonl").display(),
    );
    let p = dir.join(format!("pipeline-{retry_for}.toml"));
    std::fs::write(&p, text).unwrap();
    p
}

/// `n` orders encoded with `schema` (Avro JSON text), framed with `id`.
fn encoded_orders(schema: &str, id: u32, from: u64, n: u64) -> Vec<Vec<u8>> {
    let s = weir_schema::avro::parse(schema, &[]).unwrap();
    let enc = weir_schema::avro::Encoder::new(s, vec![]);
    (from..from + n)
        .map(|i| {
            let row = format!(
                r#"{{"order_id":{i},"user_id":7,"status":"OK","amount":1.5,"order_ts":{},"channel":"app"}}"#,
                1_700_000_000_000 + i as i64
            );
            let mut v = Vec::new();
            weir_schema::wire::frame(id, &mut v);
            enc.encode(row.as_bytes(), &mut v).unwrap();
            v
        })
        .collect()
}

/// The registry goes down while records with a schema id Weir has not seen arrive: the run
/// waits for it and goes on when it is back; with a short `retry_for` it stops, naming the
/// registry, and a restart reads everything. No record is lost or dead-lettered.
#[test]
fn a_registry_that_goes_down_mid_run_is_waited_for_or_stops_the_run_losing_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let broker = ApacheKafka::start(&dir.path().join("kafka"));
    let mut registry = Registry::start(&dir.path().join("registry"));
    broker.create_topic("orders", 1);
    let v1 = std::fs::read_to_string(formats("order.avsc")).unwrap();
    let v2 = v1.replace(
        r#"{"name": "order_ts""#,
        r#"{"name": "channel", "type": "string", "default": "web"}, {"name": "order_ts""#,
    );
    let v3 = v2.replace(r#""default": "web""#, r#""default": "store""#);
    let id1 = registry.register("orders-value", "AVRO", &v1);
    let id2 = registry.register("orders-value", "AVRO", &v2);
    let id3 = registry.register("orders-value", "AVRO", &v3);
    produce_raw(&broker.brokers(), "orders", &encoded_orders(&v1, id1, 0, 100));

    let run = dir.path().join("run");
    let p = passthrough(&run, &broker.brokers(), &registry.url(), "5 minutes");
    let mut child = spawn(&p);
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines().map_while(Result::ok);
    let mut log = String::new();
    wait_for_rows(&mut lines, &mut log, 100);

    registry.stop();
    produce_raw(&broker.brokers(), "orders", &encoded_orders(&v2, id2, 100, 50));
    wait_for_line(&mut lines, &mut log, |l| l.contains("retrying") && l.contains(&registry.url()));
    registry.restart();
    wait_for_rows(&mut lines, &mut log, 50);
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    log.extend(lines.map(|l| l + "\n"));
    assert!(child.wait().unwrap().success(), "{log}");

    // Down again, with a short patience: the run stops, naming the registry.
    registry.stop();
    produce_raw(&broker.brokers(), "orders", &encoded_orders(&v3, id3, 150, 10));
    let short = passthrough(&run, &broker.brokers(), &registry.url(), "1s");
    let out = weir().arg("run").arg(&short).output().unwrap();
    let said = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "a failure to run, not a bad file: {said}");
    assert!(said.contains(&format!("schema registry {} cannot be reached", registry.url())), "{said}");
    registry.restart();
    let mut child = spawn(&p);
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines().map_while(Result::ok);
    wait_for_rows(&mut lines, &mut log, 10);
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    assert!(child.wait().unwrap().success());

    let rows = sink_rows(&run.join("rows"));
    let mut ids: Vec<u64> = rows.iter().map(|r| r["order_id"].as_u64().unwrap()).collect();
    ids.sort();
    assert_eq!(ids, (0..160).collect::<Vec<_>>(), "every record once");
    assert!(rows.iter().all(|r| r.get("channel").is_some() == (r["order_id"].as_u64().unwrap() >= 100)));
    assert!(dead_letters(&run).is_empty(), "no record failed for the registry's absence");
}

/// Schemas that break their subject's rules are refused before a run, naming the field and
/// the rule: a sink schema under `BACKWARD`, and a reader schema that cannot read a version.
#[test]
fn incompatible_schemas_are_refused_before_a_run_naming_the_field_and_the_rule() {
    let dir = tempfile::tempdir().unwrap();
    let broker = ApacheKafka::start(&dir.path().join("kafka"));
    let registry = Registry::start(&dir.path().join("registry"));
    broker.create_topic("orders", PARTITIONS);
    let window = std::fs::read_to_string(formats("window.avsc")).unwrap();
    registry.set_compatibility("windows-value", "BACKWARD");
    registry.register("windows-value", "AVRO", &window);
    // A new field without a default: the new schema cannot read the old data.
    let v2 = window.replace(r#"{"name": "count""#, r#"{"name": "region", "type": "string"}, {"name": "count""#);
    assert_ne!(v2, window);
    let run = dir.path().join("sink");
    let p = avro_pipeline(&run, &broker.brokers(), &registry.url(), "windows", "");
    let schema = run.join("window-v2.avsc");
    std::fs::write(&schema, &v2).unwrap();
    let text = std::fs::read_to_string(&p)
        .unwrap()
        .replace(&formats("window.avsc").display().to_string(), &schema.display().to_string());
    std::fs::write(&p, text).unwrap();
    for cmd in ["validate", "run"] {
        let out = weir().arg(cmd).arg(&p).output().unwrap();
        let said = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "weir {cmd}: {said}");
        assert!(said.contains("`region`") && said.contains("BACKWARD") && said.contains("windows-value"), "{said}");
    }
    assert!(!run.join("checkpoint").join("commits").exists(), "nothing ran");

    // A reader schema pinned to a version that cannot read an older one.
    let order = std::fs::read_to_string(formats("order.avsc")).unwrap();
    registry.register("orders-value", "AVRO", &order);
    let reader =
        order.replace(r#"{"name": "order_ts""#, r#"{"name": "region", "type": "string"}, {"name": "order_ts""#);
    registry.register("orders-value", "AVRO", &reader);
    let p = avro_pipeline(&dir.path().join("reader"), &broker.brokers(), &registry.url(), "windows", "");
    let text = std::fs::read_to_string(&p).unwrap().replace(
        "time_field = \"order_ts\"",
        "time_field = \"order_ts\", reader_subject = \"orders-value\", reader_version = 2",
    );
    std::fs::write(&p, text).unwrap();
    let out = weir().arg("validate").arg(&p).output().unwrap();
    let said = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{said}");
    assert!(said.contains("`region`") && said.contains("version 1"), "{said}");

    deploying_on_serve_checks_the_same(dir.path(), &broker, &registry, &v2);
}

/// A tenant's deploy on `weir serve` is refused as `weir validate` refuses: the sink's schema
/// under its subject's level; and the registry's secrets must be the tenant's own files, its
/// address on the allow-list.
fn deploying_on_serve_checks_the_same(dir: &Path, broker: &ApacheKafka, registry: &Registry, v2: &str) {
    use crate::common::serve::{Server, admin_file, tenant};
    let (admin_path, admin) = admin_file(dir);
    let authority = registry.url().trim_start_matches("http://").split('/').next().unwrap().to_string();
    let s = Server::start(
        &dir.join("serve"),
        &admin_path,
        &["--allow-network", &authority, "--allow-network", &broker.brokers()],
    );
    let acme = tenant(&s, &admin, "acme");
    for (name, file) in [("avro-parser", "avro_parser"), ("error-rate", "error_rate")] {
        s.expect(
            201,
            "PUT",
            &format!("/v1/plugins/{name}"),
            Some(&acme),
            Some(&std::fs::read(component(file)).unwrap()),
        );
    }
    s.expect(201, "PUT", "/v1/files/window-v2.avsc", Some(&acme), Some(v2.as_bytes()));
    let text = format!(
        r#"name = "avro"
[source]
type = "kafka"
topics = ["orders"]
kafka.bootstrap.servers = "{brokers}"
[parse]
plugin = "avro-parser"
config = {{ time_field = "order_ts" }}
grants.registry = true
[registry]
url = "{url}"
[watermark]
delay = "10 minutes"
[window]
type = "tumbling"
size = "1 minute"
[aggregate]
plugin = "error-rate"
[sink]
type = "kafka"
topic = "windows"
kafka.bootstrap.servers = "{brokers}"
format = "avro"
schema = "window-v2.avsc"
"#,
        brokers = broker.brokers(),
        url = registry.url(),
    );
    let r = s.expect(400, "PUT", "/v1/pipelines/avro", Some(&acme), Some(text.as_bytes()));
    assert_eq!(r["field"], "sink.schema", "{r}");
    let said = r["error"].as_str().unwrap();
    assert!(said.contains("`region`") && said.contains("BACKWARD"), "{r}");
    let secret = text.replace("[registry]\n", "[registry]\ncredentials_file = \"/etc/hostname\"\n");
    let r = s.expect(400, "PUT", "/v1/pipelines/avro", Some(&acme), Some(secret.as_bytes()));
    assert_eq!(r["field"], "registry.credentials_file", "{r}");
    let elsewhere = text.replace(&authority, "127.0.0.1:1");
    let r = s.expect(400, "PUT", "/v1/pipelines/avro", Some(&acme), Some(elsewhere.as_bytes()));
    assert_eq!(r["field"], "registry.url", "{r}");
}
