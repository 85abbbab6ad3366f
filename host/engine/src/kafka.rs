//! The Kafka client settings and error handling that the Kafka source (`source/kafka/`), the
//! Kafka sink (`sink/kafka.rs`) and `weir record` share: one place that builds a librdkafka
//! configuration from a pipeline's `kafka.*` options, and one retry loop for broker calls; and
//! [`AckedProducer`], which a group's shuffle and changelog write through.
//!
//! A broker that cannot be reached is retried with backoff and a log line per attempt, as long
//! as it takes; a stop request (SIGTERM) ends the wait. Errors that retrying cannot fix (a topic
//! that does not exist, an authorisation failure, a bad option) fail at once.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rdkafka::ClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::error::KafkaError as RdError;
use rdkafka::message::DeliveryResult;
use rdkafka::producer::{BaseProducer, BaseRecord, Producer, ProducerContext};
use rdkafka::types::RDKafkaErrorCode;

use crate::retry::{GaveUp, Retry};

/// How long a metadata, offset or watermark request waits before it counts as failed (and is
/// retried).
pub const CALL_TIMEOUT: Duration = Duration::from_secs(5);

/// How long producing a batch (a flush, a transaction's commit) may take before it counts as
/// failed.
pub const FLUSH_TIMEOUT: Duration = Duration::from_secs(10);

/// Broker calls are retried for as long as it takes, waiting 100 ms, then twice as long each
/// time, up to 10 s.
const BROKER_RETRY: Retry =
    Retry { retries: None, first_wait: Duration::from_millis(100), max_wait: Duration::from_secs(10) };

#[derive(Debug, thiserror::Error)]
pub enum KafkaError {
    #[error("kafka client configuration: {0}")]
    Config(#[source] RdError),
    #[error("topic `{topic}`: {message}")]
    Topic { topic: String, message: String },
    #[error(
        "an offset to read is no longer on the broker (deleted by retention?), reading {at}: records were lost \
         between the checkpoint and now; start a new checkpoint to skip them"
    )]
    DataLoss { at: String },
    #[error("kafka: {what}: {source}")]
    Call { what: String, source: RdError },
    #[error("stopped while waiting for the broker")]
    Stopped,
}

/// A client configuration from the pipeline's `kafka.*` options over Weir's defaults.
pub fn client_config(defaults: &[(&str, &str)], options: &[(String, String)]) -> ClientConfig {
    let mut c = ClientConfig::new();
    for (k, v) in defaults {
        c.set(*k, *v);
    }
    for (k, v) in options {
        c.set(k, v);
    }
    c
}

/// The options that say how to reach the brokers (address, TLS, SASL), and `debug` (what the
/// client logs), without the rest: what a helper client (the sink's start-up scan, a group's
/// records) needs of a pipeline's options.
pub fn connection_options(options: &[(String, String)]) -> Vec<(String, String)> {
    options
        .iter()
        .filter(|(k, _)| {
            k == "bootstrap.servers" || k == "debug" || ["security.", "sasl.", "ssl."].iter().any(|p| k.starts_with(p))
        })
        .cloned()
        .collect()
}

/// Retries a broker call until it succeeds, the error is one retrying cannot fix, or `stop` is
/// raised.
pub fn with_retry<T>(stop: &AtomicBool, what: &str, call: impl FnMut() -> Result<T, RdError>) -> Result<T, KafkaError> {
    BROKER_RETRY.run(stop, &format!("kafka: {what} (broker unavailable?)"), call, retriable).map_err(|e| match e {
        GaveUp::Stopped(_) => KafkaError::Stopped,
        GaveUp::Failed(source) => KafkaError::Call { what: what.to_string(), source },
    })
}

fn retriable(e: &RdError) -> bool {
    !matches!(
        e.rdkafka_error_code(),
        Some(
            RDKafkaErrorCode::UnknownTopicOrPartition
                | RDKafkaErrorCode::UnknownTopic
                | RDKafkaErrorCode::TopicAuthorizationFailed
                | RDKafkaErrorCode::GroupAuthorizationFailed
                | RDKafkaErrorCode::InvalidConfig
        )
    )
}

/// How often a thread waiting for acknowledgements serves the producer's delivery reports.
///
/// It sleeps in between rather than passing a timeout to rdkafka's `poll`: that poll returns
/// only once its whole timeout is over, even after the report it waited for was served, and it
/// spins through the timeout's last millisecond (its waits are whole milliseconds), so a short
/// timeout is a busy loop. A group's tasks each wait for two or three acknowledgements per
/// batch; spinning through them would cost more CPU than the batch's own work.
pub const ACK_POLL: Duration = Duration::from_millis(1);

/// Waits until everything `producer` was given is acknowledged (or failed: its delivery report
/// says which), at most [`FLUSH_TIMEOUT`]. Not rdkafka's `flush`, whose poll loop sleeps out
/// 100 ms slices even after the last acknowledgement has arrived: a group's task writes its
/// record two or three times per batch, and each write would wait out such a slice.
pub fn flush<C: ProducerContext>(producer: &BaseProducer<C>) -> Result<(), RdError> {
    let deadline = std::time::Instant::now() + FLUSH_TIMEOUT;
    loop {
        producer.poll(Duration::ZERO);
        if producer.in_flight_count() == 0 {
            return Ok(());
        }
        if std::time::Instant::now() >= deadline {
            return Err(RdError::Flush(RDKafkaErrorCode::OperationTimedOut));
        }
        std::thread::sleep(ACK_POLL);
    }
}

/// A message for [`AckedProducer::write_all`]: its partition, key and value (`None`: a
/// tombstone).
pub struct Outgoing<'a> {
    pub partition: i32,
    pub key: Option<&'a [u8]>,
    pub value: Option<&'a [u8]>,
}

/// Failed deliveries since the last write, and the first one's error.
#[derive(Default)]
struct Failures {
    failed: AtomicU64,
    first: Mutex<Option<String>>,
}

impl ClientContext for Failures {}

impl ProducerContext for Failures {
    type DeliveryOpaque = ();

    fn delivery(&self, result: &DeliveryResult<'_>, _: ()) {
        if let Err((e, _)) = result {
            self.failed.fetch_add(1, Ordering::Relaxed);
            if let Ok(mut first) = self.first.lock() {
                first.get_or_insert_with(|| e.to_string());
            }
        }
    }
}

/// An idempotent producer (acks from every in-sync replica) that writes a set of messages and
/// returns once the broker has every one of them; if any failed, it writes the whole set again.
/// For writes that a reader dedupes or that land on keys (a group's shuffle and changelog), so
/// a second copy is harmless and a missing one is not.
pub struct AckedProducer {
    producer: BaseProducer<Failures>,
    stop: Arc<AtomicBool>,
}

impl AckedProducer {
    /// A producer over the connection `options` of a pipeline's source.
    pub fn new(options: &[(String, String)], stop: Arc<AtomicBool>) -> Result<Self, KafkaError> {
        let defaults =
            [("enable.idempotence", "true"), ("acks", "all"), ("linger.ms", "1"), ("compression.type", "lz4")];
        let producer = client_config(&defaults, &connection_options(options))
            .create_with_context(Failures::default())
            .map_err(KafkaError::Config)?;
        Ok(Self { producer, stop })
    }

    /// Writes `messages` to `topic` and waits until every one is acknowledged (`what` names the
    /// write in logs and errors).
    pub fn write_all(&self, topic: &str, messages: &[Outgoing], what: &str) -> Result<(), KafkaError> {
        loop {
            let ctx = self.producer.context();
            ctx.failed.store(0, Ordering::Relaxed);
            for m in messages {
                let mut record = BaseRecord::<[u8], [u8]>::to(topic).partition(m.partition);
                if let Some(k) = m.key {
                    record = record.key(k);
                }
                if let Some(v) = m.value {
                    record = record.payload(v);
                }
                let mut record = Some(record);
                while let Some(r) = record.take() {
                    match self.producer.send(r) {
                        Ok(()) => {}
                        Err((RdError::MessageProduction(RDKafkaErrorCode::QueueFull), r)) => {
                            self.producer.poll(Duration::from_millis(10));
                            if self.stop.load(Ordering::Relaxed) {
                                return Err(KafkaError::Stopped);
                            }
                            record = Some(r);
                        }
                        Err((e, _)) => return Err(KafkaError::Call { what: what.to_string(), source: e }),
                    }
                }
            }
            with_retry(&self.stop, what, || flush(&self.producer))?;
            let failed = ctx.failed.load(Ordering::Relaxed);
            if failed == 0 {
                return Ok(());
            }
            let first = ctx.first.lock().ok().and_then(|mut f| f.take()).unwrap_or_default();
            tracing::warn!(
                "kafka: {what}: {failed} of {} messages failed ({first}); writing them all again",
                messages.len()
            );
            if self.stop.load(Ordering::Relaxed) {
                return Err(KafkaError::Stopped);
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}
