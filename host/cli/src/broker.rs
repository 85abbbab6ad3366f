//! The embedded broker of `weir demo` and `weir bench --latency / --kafka`: librdkafka's mock
//! cluster, in-process on a loopback port, so that none of them needs a service installed.
//!
//! What it holds is bounded: each partition keeps [`MOCK_PARTITION_BYTES`] of record batches
//! (and at most 100,000 of them) and deletes its oldest batches past that, read or not. A run
//! that must lose no record therefore gets topics with partitions enough to hold everything it
//! produces ([`Embedded::topic_for`]), or is refused with the bound it would break; a producer
//! that fills the partitions one after the other ([`partition_of`]) keeps the broker's work per
//! fetch small, since it finds a record batch by a walk over its partition's batches, and skips
//! partitions with nothing new.

use anyhow::{Context, Result, bail};
use rdkafka::mocking::MockCluster;
use rdkafka::producer::DefaultProducerContext;

use crate::exit;
use crate::pipeline::{SinkConfig, SourceKind};

/// Bytes of record batches the mock keeps per partition (librdkafka's `rdkafka_mock.c`).
const MOCK_PARTITION_BYTES: u64 = 5 << 20;
/// Partitions a topic may get.
const MAX_PARTITIONS: u64 = 256;

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

    /// Points the pipeline's Kafka source and sink (if any) at this broker; returns the
    /// source's topics and the sink's topic.
    pub(super) fn point(
        &self,
        source: &mut SourceKind,
        sink: Option<&mut SinkConfig>,
    ) -> Result<(Vec<String>, Option<String>)> {
        let SourceKind::Kafka(src) = source else { bail!("the pipeline must read Kafka (its [source] type)") };
        set_brokers(&mut src.options, &self.brokers);
        let output = match sink {
            Some(SinkConfig::Kafka(k)) => {
                set_brokers(&mut k.options, &self.brokers);
                Some(k.topic.clone())
            }
            _ => None,
        };
        Ok((src.topics.clone(), output))
    }
}

fn set_brokers(options: &mut Vec<(String, String)>, brokers: &str) {
    options.retain(|(k, _)| k != "bootstrap.servers");
    options.push(("bootstrap.servers".into(), brokers.into()));
}
