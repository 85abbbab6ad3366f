//! What the Kafka tests share, whatever their broker (Apache Kafka, `apache_kafka.rs`;
//! librdkafka's in-process mock cluster): producing the orders, reading a topic back with
//! `read_committed`, the pipelines into Kafka.
//!
//! The mock cluster has transactions and headers but holds at most ~5 MiB per partition, and its
//! `read_committed` also returns aborted records: it tests Weir's own logic; what Weir promises
//! about Kafka is shown on Apache Kafka.

use std::path::Path;
use std::time::{Duration, Instant};

use rdkafka::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::{Header, Headers, Message, OwnedHeaders};
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::{Offset, TopicPartitionList};

/// Produces every order line of `file` to `topic`, line `i` to partition `i % partitions`, so
/// each partition's event times advance together, as on a topic keyed evenly. Each record has
/// the user id as key and `order_ts` as timestamp; with `headers`, also a `producer: weir-test`
/// header.
pub fn produce_lines(brokers: &str, topic: &str, partitions: i32, file: &Path, headers: bool) -> usize {
    let producer: BaseProducer = ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .set("enable.idempotence", "true")
        .set("linger.ms", "20")
        .create()
        .unwrap();
    let text = std::fs::read_to_string(file).unwrap();
    let mut n = 0;
    for (i, line) in text.lines().enumerate() {
        let order: serde_json::Value = serde_json::from_str(line).unwrap();
        let key = order["user_id"].to_string();
        let mut record = BaseRecord::to(topic)
            .payload(line)
            .key(&key)
            .partition(i as i32 % partitions)
            .timestamp(order["order_ts"].as_i64().unwrap());
        if headers {
            record = record.headers(OwnedHeaders::new().insert(Header { key: "producer", value: Some("weir-test") }));
        }
        loop {
            match producer.send(record) {
                Ok(()) => break,
                Err((_, r)) => {
                    record = r;
                    producer.poll(Duration::from_millis(5));
                }
            }
        }
        n += 1;
    }
    producer.flush(Duration::from_secs(60)).unwrap();
    n
}

/// A record read back from an output topic.
pub struct Out {
    /// The row; `null` for a tombstone (no value).
    pub value: serde_json::Value,
    pub key: Option<String>,
    pub batch: Option<u64>,
    pub checkpoint: Option<String>,
}

/// Reads `topic`'s partition `partition` from the start until `done` says so, with
/// `read_committed`; panics after `timeout`.
pub fn read_topic(brokers: &str, topic: &str, done: impl Fn(&[Out]) -> bool, timeout: Duration) -> Vec<Out> {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .set("group.id", "weir-test-reader")
        .set("isolation.level", "read_committed")
        .set("fetch.wait.max.ms", "5")
        .create()
        .unwrap();
    let md = consumer.fetch_metadata(Some(topic), Duration::from_secs(5)).unwrap();
    let mut tpl = TopicPartitionList::new();
    for p in md.topics()[0].partitions() {
        tpl.add_partition_offset(topic, p.id(), Offset::Beginning).unwrap();
    }
    consumer.assign(&tpl).unwrap();
    let deadline = Instant::now() + timeout;
    let mut out = Vec::new();
    while !done(&out) {
        assert!(Instant::now() < deadline, "{topic}: only {} records after {timeout:?}", out.len());
        if let Some(Ok(m)) = consumer.poll(Duration::from_millis(50)) {
            let value = m.payload().map_or(serde_json::Value::Null, |p| serde_json::from_slice(p).unwrap());
            let key = m.key().map(|k| String::from_utf8(k.to_vec()).unwrap());
            let header = |name: &str| {
                let hs = m.headers()?;
                hs.iter().find(|h| h.key == name).and_then(|h| Some(std::str::from_utf8(h.value?).ok()?.to_string()))
            };
            let batch = header("weir.batch").and_then(|b| b.parse().ok());
            out.push(Out { value, key, batch, checkpoint: header("weir.checkpoint") });
        }
    }
    out
}

/// The `[source]` body for a Kafka topic; brokers without early fetch answers get a short
/// fetch wait.
pub fn kafka_source(brokers: &str, topic: &str, max_offsets_per_trigger: usize) -> String {
    format!(
        "type = \"kafka\"\ntopics = [\"{topic}\"]\nmax_offsets_per_trigger = {max_offsets_per_trigger}\n\
         kafka.bootstrap.servers = \"{brokers}\"\nkafka.fetch.wait.max.ms = 10"
    )
}

/// The orders pipeline from the broker's `orders` topic into its `windows` topic through the
/// native transactional Kafka sink, its checkpoint under `dir` named by the caller, so that two
/// runs can be two checkpoint identities.
pub fn to_kafka(dir: &std::path::Path, brokers: &str, checkpoint: &str) -> std::path::PathBuf {
    let extra = format!(
        "[sink]\ntype = \"kafka\"\ntopic = \"windows\"\nkafka.bootstrap.servers = \"{brokers}\"\n\
         [checkpoint]\nlocation = \"{}\"",
        dir.join(checkpoint).display()
    );
    let source = kafka_source(brokers, "orders", 2_000);
    let flush = "flush_at_end = true";
    crate::common::pipeline(
        dir,
        crate::common::Spec {
            window: crate::common::TUMBLING,
            watermark: flush,
            extra: &extra,
            source: &source,
            ..Default::default()
        },
    )
}

/// Everything in the `windows` topic, up to a marker produced at the end of each partition now.
pub fn read_to_markers(brokers: &str) -> Vec<Out> {
    read_to_markers_in(brokers, "windows", 2)
}

/// Everything in `topic` (of `partitions` partitions) that a `read_committed` reader sees, up to
/// a marker produced at the end of each partition now.
pub fn read_to_markers_in(brokers: &str, topic: &str, partitions: i32) -> Vec<Out> {
    produce_markers_in(brokers, topic, partitions);
    let markers = |o: &[Out]| o.iter().filter(|r| r.value["marker"] == true).count() == partitions as usize;
    let mut all = read_topic(brokers, topic, markers, Duration::from_secs(60));
    all.retain(|o| o.value["marker"] != true);
    all
}

/// Output rows by the checkpoint that delivered them.
pub fn per_checkpoint(out: &[Out]) -> std::collections::BTreeMap<String, Vec<serde_json::Value>> {
    let mut by = std::collections::BTreeMap::<String, Vec<serde_json::Value>>::new();
    for o in out {
        let checkpoint = o.checkpoint.clone().expect("every message carries its checkpoint");
        by.entry(checkpoint).or_default().push(o.value.clone());
    }
    by
}

pub fn produce_markers(brokers: &str, partitions: i32) {
    produce_markers_in(brokers, "windows", partitions);
}

pub fn produce_markers_in(brokers: &str, topic: &str, partitions: i32) {
    use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
    let p: BaseProducer = rdkafka::ClientConfig::new().set("bootstrap.servers", brokers).create().unwrap();
    for part in 0..partitions {
        p.send(BaseRecord::<(), str>::to(topic).payload("{\"marker\":true}").partition(part))
            .map_err(|(e, _)| e)
            .unwrap();
    }
    p.flush(Duration::from_secs(10)).unwrap();
}

/// `plugins/orders-alerts/pipeline.toml` (continuous mode, `orders` to `orders-alerts`) on
/// `brokers`, reading from the earliest offset, with its checkpoint in `dir`: its path. The
/// caller makes both topics, as its broker does.
pub fn alerts_pipeline_on(brokers: &str, dir: &Path) -> std::path::PathBuf {
    let root = super::root();
    let text = std::fs::read_to_string(root.join("plugins/orders-alerts/pipeline.toml"))
        .unwrap()
        .replace("127.0.0.1:9092", brokers)
        .replace("starting_offsets = \"latest\"", "starting_offsets = \"earliest\"")
        .replace("../dist/", &format!("{}/", root.join("plugins/dist").display()))
        .replace("../../out/orders-alerts/checkpoint", &dir.join("checkpoint").display().to_string());
    let p = dir.join("alerts.toml");
    std::fs::write(&p, text).unwrap();
    p
}
