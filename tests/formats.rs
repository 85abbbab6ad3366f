//! Avro through a schema registry, end to end, on Apache Kafka and Apicurio Registry (both
//! started here on loopback): orders written by Confluent's own Python serializer are decoded by
//! the standard library's `avro_parser.wasm`, counted in windows and written back as Avro that
//! Confluent's deserializer reads; bad records (unknown ids, corrupt bytes, a wrong magic byte)
//! go to the dead letters with their schema id; the output is the same through repeated
//! `kill -9`; a registry that goes down mid-run is waited for, or stops the run naming it, and
//! loses no record; incompatible schemas are refused before a run.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use rdkafka::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Message;
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::{Offset, TopicPartitionList};

use crate::common::apache_kafka::ApacheKafka;
use crate::common::registry::Registry;
use crate::common::*;

mod avro_orders;
mod other_formats;
mod refusals;
mod registry_down;
mod types;

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
