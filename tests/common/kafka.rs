//! What the Kafka tests share, whatever their broker (Apache Kafka, `apache_kafka.rs`; tansu,
//! here; librdkafka's in-process mock cluster): producing the orders, reading a topic back with
//! `read_committed`, the pipelines into Kafka. tansu (a Kafka-protocol broker, a separate
//! process, data in SQLite on disk, killable and restartable) runs the scale-out suite until it
//! moves to Apache Kafka.
//!
//! What each can and cannot do: tansu keeps its data on disk and can be killed and restarted,
//! but has no transactions, and spins at 100% CPU on records with headers; the mock cluster has
//! transactions and headers but holds at most ~5 MiB per partition, and its `read_committed`
//! also returns aborted records.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use rdkafka::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::{Header, Headers, Message, OwnedHeaders};
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::{Offset, TopicPartitionList};

/// The tansu binary: `WEIR_TANSU`, which `cargo xtask test` sets to the build it installs (the
/// one place that names it, with the options it is built with).
pub fn tansu_bin() -> PathBuf {
    let p = PathBuf::from(std::env::var_os("WEIR_TANSU").expect(
        "WEIR_TANSU names the tansu broker: `cargo xtask test` installs it and sets it (or run `cargo xtask test` once \
         and point WEIR_TANSU at ~/.cache/weir-tools/tansu-*/bin/tansu)",
    ));
    assert!(p.exists(), "WEIR_TANSU={} does not exist", p.display());
    p
}

/// What tansu logs unless `WEIR_TEST_TANSU_LOG` says otherwise (its `RUST_LOG`): warnings, and
/// its group coordinator's decisions.
const TANSU_LOG: &str = "warn,tansu_broker::coordinator::group::administrator=info";

/// A tansu broker on a free loopback port, its data in `dir`.
pub struct Tansu {
    child: Option<Child>,
    dir: PathBuf,
    port: u16,
}

impl Tansu {
    pub fn start(dir: &Path) -> Self {
        std::fs::create_dir_all(dir).unwrap();
        let port = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let mut t = Tansu { child: None, dir: dir.to_path_buf(), port };
        t.spawn();
        t
    }

    pub fn brokers(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    fn url(&self) -> String {
        format!("tcp://127.0.0.1:{}", self.port)
    }

    fn spawn(&mut self) {
        let log = std::fs::OpenOptions::new().create(true).append(true).open(self.dir.join("tansu.log")).unwrap();
        let child = Command::new(tansu_bin())
            .args(["broker", "--listener-url", &self.url(), "--advertised-listener-url", &self.url()])
            .args(["--storage-engine", "sqlite://tansu.db"])
            .current_dir(&self.dir)
            // The coordinator's info lines (joins, evictions) are what `wait_log` watches for.
            .env("RUST_LOG", std::env::var("WEIR_TEST_TANSU_LOG").unwrap_or(TANSU_LOG.into()))
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("cannot start tansu");
        self.child = Some(child);
        self.wait_ready();
    }

    /// Waits until the broker answers a metadata request.
    fn wait_ready(&self) {
        let consumer: BaseConsumer = ClientConfig::new().set("bootstrap.servers", self.brokers()).create().unwrap();
        let deadline = Instant::now() + Duration::from_secs(60);
        while consumer.fetch_metadata(None, Duration::from_secs(1)).is_err() {
            assert!(Instant::now() < deadline, "tansu did not come up; see {}", self.dir.join("tansu.log").display());
        }
    }

    /// Waits until the broker's log has a line that `matches`; panics after `patience`.
    pub fn wait_log(&self, matches: impl Fn(&str) -> bool, patience: Duration) {
        let deadline = Instant::now() + patience;
        loop {
            let log = std::fs::read(self.dir.join("tansu.log")).unwrap_or_default();
            if String::from_utf8_lossy(&log).lines().any(&matches) {
                return;
            }
            assert!(Instant::now() < deadline, "tansu never logged it; see {}", self.dir.join("tansu.log").display());
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// SIGKILL: the broker goes away without a word, as a crashed one does.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Starts it again on the same port with the same data.
    pub fn restart(&mut self) {
        self.kill();
        self.spawn();
    }

    pub fn create_topic(&self, topic: &str, partitions: u32) {
        let out = Command::new(tansu_bin())
            .args(["topic", "create", "--broker", &self.url(), "--partitions", &partitions.to_string(), topic])
            .current_dir(&self.dir)
            .output()
            .unwrap();
        assert!(out.status.success(), "tansu topic create: {}", String::from_utf8_lossy(&out.stderr));
    }
}

impl Drop for Tansu {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Produces every order line of `file` to `topic`, line `i` to partition `i % partitions`, so
/// each partition's event times advance together, as on a topic keyed evenly. Each record has
/// the user id as key and `order_ts` as timestamp; with `headers`, also a `producer: weir-test`
/// header (tansu 0.6.0 spins at 100% CPU on records with headers, so only the mock gets them).
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
    produce_markers(brokers, 2);
    let markers = |o: &[Out]| o.iter().filter(|r| r.value["marker"] == true).count() == 2;
    let mut all = read_topic(brokers, "windows", markers, Duration::from_secs(30));
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
    use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
    let p: BaseProducer = rdkafka::ClientConfig::new().set("bootstrap.servers", brokers).create().unwrap();
    for part in 0..partitions {
        p.send(BaseRecord::<(), str>::to("windows").payload("{\"marker\":true}").partition(part))
            .map_err(|(e, _)| e)
            .unwrap();
    }
    p.flush(Duration::from_secs(10)).unwrap();
}
