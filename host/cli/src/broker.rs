//! The broker of `weir demo` and `weir bench --latency / --kafka`: librdkafka's mock cluster,
//! in-process on a loopback port, so that none of them needs a service installed; or, for the
//! measurements, a broker the user runs (`--brokers`, [`BenchBroker::External`]), on topics of
//! the run's own so that nothing left from an earlier run is read.
//!
//! What it holds is bounded: each partition keeps [`MOCK_PARTITION_BYTES`] of record batches
//! (and at most 100,000 of them) and deletes its oldest batches past that, read or not. A run
//! that must lose no record therefore gets topics with partitions enough to hold everything it
//! produces ([`Embedded::topic_for`]), or is refused with the bound it would break; a producer
//! that fills the partitions one after the other ([`partition_of`]) keeps the broker's work per
//! fetch small, since it finds a record batch by a walk over its partition's batches, and skips
//! partitions with nothing new.

use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use rdkafka::ClientConfig;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::mocking::MockCluster;
use rdkafka::producer::DefaultProducerContext;

use crate::exit;
use crate::pipeline::{SinkConfig, SourceKind};

/// Bytes of record batches the mock keeps per partition (librdkafka's `rdkafka_mock.c`).
const MOCK_PARTITION_BYTES: u64 = 5 << 20;
/// Partitions a topic may get.
const MAX_PARTITIONS: u64 = 256;
/// Partitions of a measured input topic on a broker the user runs: what the peers'
/// comparison on one broker uses (`host/benches/peers/KAFKA.md`).
pub(super) const EXTERNAL_PARTITIONS: i32 = 6;
/// How long a broker the user runs may take to create a topic and list it in its metadata.
const EXTERNAL_TOPIC_PATIENCE: Duration = Duration::from_secs(30);

/// Bytes an order takes in the broker at most, sent alone (`linger.ms` of a millisecond at a
/// low rate): the order with a send time (~110 bytes), its record framing and a batch header.
pub(super) const ALONE: u64 = 256;
/// The same, sent in large batches: the order and its framing.
pub(super) const BATCHED: u64 = 128;

/// Orders one partition holds, at `record_bytes` each, with a fifth of its bytes to spare.
pub(super) fn per_partition(record_bytes: u64) -> u64 {
    MOCK_PARTITION_BYTES * 4 / 5 / record_bytes
}

/// The partition order `n` goes to when partitions are filled one after the other.
pub(super) fn partition_of(n: u64, record_bytes: u64, partitions: i32) -> i32 {
    (n / per_partition(record_bytes)).min(partitions.max(1) as u64 - 1) as i32
}

pub(super) struct Embedded {
    cluster: MockCluster<'static, DefaultProducerContext>,
    pub brokers: String,
}

impl Embedded {
    pub(super) fn start() -> Result<Self> {
        let cluster = MockCluster::new(1).context("cannot start the embedded broker")?;
        let brokers = cluster.bootstrap_servers();
        Ok(Self { cluster, brokers })
    }

    /// Creates `topic` with partitions enough to keep `orders` orders of `record_bytes` whole;
    /// returns how many. Refused past [`MAX_PARTITIONS`], naming `what` asked for the orders.
    pub(super) fn topic_for(&self, topic: &str, orders: u64, record_bytes: u64, what: &str) -> Result<i32> {
        let each = per_partition(record_bytes);
        let partitions = orders.div_ceil(each).max(1);
        if partitions > MAX_PARTITIONS {
            return Err(exit::Usage(format!(
                "{what} makes {orders} orders; the embedded broker keeps at most {} without deleting unread \
                 ones: ask for fewer",
                MAX_PARTITIONS * each
            ))
            .into());
        }
        self.topic(topic, partitions as i32)?;
        Ok(partitions as i32)
    }

    /// Creates `topic` with `partitions`, for records that may be deleted once read.
    pub(super) fn topic(&self, topic: &str, partitions: i32) -> Result<()> {
        self.cluster.create_topic(topic, partitions, 1).with_context(|| format!("cannot create topic {topic}"))
    }
}

fn set_brokers(options: &mut Vec<(String, String)>, brokers: &str) {
    options.retain(|(k, _)| k != "bootstrap.servers");
    options.push(("bootstrap.servers".into(), brokers.into()));
}

/// Where a measurement's topics live.
pub(super) enum BenchBroker {
    Embedded(Embedded),
    /// A broker the user runs, at `brokers`; the run's topics are named `prefix` + the
    /// pipeline's, and deleted when it ends.
    External {
        brokers: String,
        prefix: String,
        made: std::cell::RefCell<Vec<String>>,
    },
}

impl BenchBroker {
    /// The broker at `brokers` if given, else the embedded one.
    pub(super) fn start(brokers: Option<&str>) -> Result<Self> {
        Ok(match brokers {
            None => BenchBroker::Embedded(Embedded::start()?),
            Some(b) => {
                let since =
                    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis());
                let prefix = format!("weir-bench-{}-{since}.", std::process::id());
                BenchBroker::External { brokers: b.to_string(), prefix, made: Default::default() }
            }
        })
    }

    pub(super) fn is_embedded(&self) -> bool {
        matches!(self, BenchBroker::Embedded(_))
    }

    pub(super) fn brokers(&self) -> &str {
        match self {
            BenchBroker::Embedded(e) => &e.brokers,
            BenchBroker::External { brokers, .. } => brokers,
        }
    }

    /// Points the pipeline's Kafka source and sink (if any) at this broker, on this run's
    /// topics; returns the source's topics and the sink's topic.
    pub(super) fn point(
        &self,
        source: &mut SourceKind,
        mut sink: Option<&mut SinkConfig>,
    ) -> Result<(Vec<String>, Option<String>)> {
        if let BenchBroker::External { prefix, .. } = self {
            if let SourceKind::Kafka(src) = &mut *source {
                src.topics = src.topics.iter().map(|t| format!("{prefix}{t}")).collect();
            }
            if let Some(SinkConfig::Kafka(k)) = sink.as_deref_mut() {
                k.topic = format!("{prefix}{}", k.topic);
            }
        }
        let SourceKind::Kafka(src) = source else { bail!("the pipeline must read Kafka (its [source] type)") };
        set_brokers(&mut src.options, self.brokers());
        let output = match sink {
            Some(SinkConfig::Kafka(k)) => {
                set_brokers(&mut k.options, self.brokers());
                Some(k.topic.clone())
            }
            _ => None,
        };
        Ok((src.topics.clone(), output))
    }

    /// The input topic for `orders` orders of `record_bytes`: on the embedded broker with
    /// partitions enough to keep them all ([`Embedded::topic_for`]), on another with
    /// [`EXTERNAL_PARTITIONS`]. Returns its partitions.
    pub(super) fn topic_for(&self, topic: &str, orders: u64, record_bytes: u64, what: &str) -> Result<i32> {
        match self {
            BenchBroker::Embedded(e) => e.topic_for(topic, orders, record_bytes, what),
            BenchBroker::External { .. } => {
                self.topic(topic, EXTERNAL_PARTITIONS)?;
                Ok(EXTERNAL_PARTITIONS)
            }
        }
    }

    /// Creates `topic` with `partitions`.
    pub(super) fn topic(&self, topic: &str, partitions: i32) -> Result<()> {
        match self {
            BenchBroker::Embedded(e) => e.topic(topic, partitions),
            BenchBroker::External { brokers, made, .. } => {
                create_external(brokers, topic, partitions)?;
                made.borrow_mut().push(topic.to_string());
                Ok(())
            }
        }
    }

    /// The partition of order `n` of a topic of `partitions`: filled one after the other on the
    /// embedded broker ([`partition_of`]), round robin on another, as a keyless producer would.
    pub(super) fn partition(&self, n: u64, record_bytes: u64, partitions: i32) -> i32 {
        match self {
            BenchBroker::Embedded(_) => partition_of(n, record_bytes, partitions),
            BenchBroker::External { .. } => (n % partitions.max(1) as u64) as i32,
        }
    }
}

/// The run's topics go when it ends, whatever the broker keeps by default.
impl Drop for BenchBroker {
    fn drop(&mut self) {
        if let BenchBroker::External { brokers, made, .. } = self {
            let topics = made.take();
            if let (Ok(admin), Ok(rt)) =
                (admin(brokers), tokio::runtime::Builder::new_current_thread().enable_all().build())
            {
                let names: Vec<&str> = topics.iter().map(String::as_str).collect();
                let _ = rt.block_on(admin.delete_topics(&names, &AdminOptions::new()));
            }
        }
    }
}

fn admin(brokers: &str) -> Result<AdminClient<DefaultClientContext>> {
    ClientConfig::new().set("bootstrap.servers", brokers).create().context("cannot create an admin client")
}

/// Creates `topic` on the broker at `brokers` and waits until its metadata lists it.
fn create_external(brokers: &str, topic: &str, partitions: i32) -> Result<()> {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().context("cannot start a runtime")?;
    let new = NewTopic::new(topic, partitions, TopicReplication::Fixed(-1));
    let opts = AdminOptions::new().request_timeout(Some(EXTERNAL_TOPIC_PATIENCE));
    let results = rt
        .block_on(admin(brokers)?.create_topics([&new], &opts))
        .with_context(|| format!("cannot create topic {topic} on {brokers}"))?;
    for r in results {
        if let Err((t, code)) = r {
            bail!("cannot create topic {t} on {brokers}: {code}");
        }
    }
    let consumer: BaseConsumer =
        ClientConfig::new().set("bootstrap.servers", brokers).create().context("cannot create a client")?;
    let deadline = Instant::now() + EXTERNAL_TOPIC_PATIENCE;
    loop {
        let listed = consumer
            .fetch_metadata(Some(topic), Duration::from_secs(5))
            .map(|md| md.topics().first().map_or(0, |t| t.partitions().len()))
            .unwrap_or(0);
        if listed == partitions as usize {
            return Ok(());
        }
        if Instant::now() >= deadline {
            bail!(
                "topic {topic} was created on {brokers} but its metadata did not list it within {EXTERNAL_TOPIC_PATIENCE:?}"
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}
