//! The native Kafka sink: each row a message (the row's JSON as value), each message tagged with
//! its batch id in the `weir.batch` header.
//!
//! Transactional (the default for micro-batch triggers): an idempotent producer with a stable
//! `transactional.id` produces each batch in one transaction, so `read_committed` consumers see
//! a batch entirely or not at all. A batch can still be produced twice: once before a crash that
//! came between the transaction's commit and the checkpoint's, and once on the re-run. So on
//! start, after `init_transactions` has fenced (and aborted) any previous incarnation, the sink
//! reads the tail of every partition of its topic and skips the batches already there.
//!
//! Non-transactional (continuous mode, or brokers without transactions): an idempotent producer,
//! at-least-once, with the header to dedupe on. With micro-batches a batch counts as delivered
//! once every message is acknowledged. In continuous mode the acknowledgements are awaited only
//! before the position is committed ([`RowSink::sync`]): waiting for them after every record
//! would put a broker round trip in front of the next one.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError as RdError;
use rdkafka::message::{DeliveryResult, Header, Headers, Message, OwnedHeaders};
use rdkafka::producer::{BaseProducer, BaseRecord, Producer, ProducerContext};
use rdkafka::{ClientContext, Offset, TopicPartitionList};

use super::{RowSink, Rows, RowsExt, SinkError};
use crate::pipeline::KafkaSinkConfig;
use crate::source::kafka::{KafkaError, client_config, with_retry};

/// The header carrying a message's batch id (decimal).
pub const BATCH_HEADER: &str = "weir.batch";

/// How far back from each partition's end the start-up scan for delivered batches looks.
const SCAN_BACK: i64 = 10_000;
const CALL_TIMEOUT: Duration = Duration::from_secs(10);

/// Counts failed deliveries; the batch fails if any message did.
#[derive(Default)]
struct Deliveries {
    failed: AtomicU64,
    first_error: Mutex<Option<String>>,
}

impl ClientContext for Deliveries {}

impl ProducerContext for Deliveries {
    type DeliveryOpaque = ();

    fn delivery(&self, result: &DeliveryResult<'_>, _: ()) {
        if let Err((e, _)) = result {
            self.failed.fetch_add(1, Ordering::Relaxed);
            if let Ok(mut first) = self.first_error.lock() {
                first.get_or_insert_with(|| e.to_string());
            }
        }
    }
}

pub struct KafkaSink {
    producer: BaseProducer<Deliveries>,
    topic: String,
    transactional: bool,
    /// Wait for acknowledgements only in `sync` (continuous mode).
    lazy_acks: bool,
    /// The highest batch id already in the topic when the sink started.
    delivered: Option<u64>,
    stop: Arc<AtomicBool>,
}

impl KafkaSink {
    pub fn open(cfg: &KafkaSinkConfig, continuous: bool, stop: Arc<AtomicBool>) -> Result<Self, KafkaError> {
        let mut defaults = vec![("enable.idempotence", "true"), ("acks", "all")];
        if cfg.transactional {
            defaults.push(("transactional.id", &cfg.transactional_id));
        }
        if continuous {
            // Latency over batching: send at once rather than lingering for more rows.
            defaults.push(("linger.ms", "0"));
        }
        let producer: BaseProducer<Deliveries> = client_config(&defaults, &cfg.options)
            .create_with_context(Deliveries::default())
            .map_err(KafkaError::Config)?;
        if cfg.transactional {
            with_retry(&stop, "init_transactions", || producer.init_transactions(CALL_TIMEOUT))?;
        }
        let delivered = if cfg.transactional { last_batch_in(&cfg.topic, &cfg.options, &stop)? } else { None };
        if let Some(b) = delivered {
            tracing::info!("kafka sink: batches up to {b} are already in topic {}", cfg.topic);
        }
        Ok(Self {
            producer,
            topic: cfg.topic.clone(),
            transactional: cfg.transactional,
            lazy_acks: continuous && !cfg.transactional,
            delivered,
            stop,
        })
    }

    fn produce(&self, batch_id: u64, rows: &Rows) -> Result<(), RdError> {
        let id = batch_id.to_string();
        for row in rows.iter_rows() {
            let headers = OwnedHeaders::new().insert(Header { key: BATCH_HEADER, value: Some(id.as_str()) });
            let mut record = BaseRecord::<(), [u8]>::to(&self.topic).payload(row).headers(headers);
            loop {
                match self.producer.send(record) {
                    Ok(()) => break,
                    Err((RdError::MessageProduction(rdkafka::types::RDKafkaErrorCode::QueueFull), r)) => {
                        record = r;
                        self.producer.poll(Duration::from_millis(10));
                    }
                    Err((e, _)) => return Err(e),
                }
            }
        }
        Ok(())
    }

    fn deliver_once(&self, batch_id: u64, rows: &Rows) -> Result<(), RdError> {
        if !self.lazy_acks {
            self.producer.context().failed.store(0, Ordering::Relaxed);
        }
        if self.transactional {
            self.producer.begin_transaction()?;
            if let Err(e) = self.produce(batch_id, rows).and_then(|()| self.producer.commit_transaction(CALL_TIMEOUT)) {
                let _ = self.producer.abort_transaction(CALL_TIMEOUT);
                return Err(e);
            }
        } else {
            self.produce(batch_id, rows)?;
            if self.lazy_acks {
                self.producer.poll(Duration::ZERO);
                return Ok(());
            }
            self.flush()?;
        }
        self.check_failures(&format!("batch {batch_id}"))
    }

    fn check_failures(&self, what: &str) -> Result<(), RdError> {
        let ctx = self.producer.context();
        if ctx.failed.load(Ordering::Relaxed) > 0 {
            let first = ctx.first_error.lock().ok().and_then(|mut f| f.take()).unwrap_or_default();
            return Err(RdError::MessageProduction(rdkafka::types::RDKafkaErrorCode::Fail)).inspect_err(|_| {
                tracing::warn!("kafka sink: {} messages of {what} failed: {first}", ctx.failed.load(Ordering::Relaxed));
            });
        }
        Ok(())
    }
}

impl KafkaSink {
    /// Waits until every message is acknowledged. Not rdkafka's `flush`, whose poll loop
    /// sleeps out 100 ms slices even after the last acknowledgement has arrived.
    fn flush(&self) -> Result<(), RdError> {
        let deadline = Instant::now() + CALL_TIMEOUT;
        loop {
            self.producer.poll(Duration::ZERO);
            if self.producer.in_flight_count() == 0 {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(RdError::Flush(rdkafka::types::RDKafkaErrorCode::OperationTimedOut));
            }
            self.producer.poll(Duration::from_micros(200));
        }
    }
}

impl RowSink for KafkaSink {
    fn deliver(&mut self, batch_id: u64, rows: &Rows) -> Result<(), SinkError> {
        if rows.row_ends.is_empty() || self.delivered.is_some_and(|d| batch_id <= d) {
            return Ok(());
        }
        let what = format!("deliver batch {batch_id} to topic {}", self.topic);
        with_retry(&self.stop, &what, || self.deliver_once(batch_id, rows))?;
        Ok(())
    }

    fn sync(&mut self) -> Result<(), SinkError> {
        if self.lazy_acks {
            let failed = self.flush().and_then(|()| self.check_failures("the rows since the last checkpoint"));
            self.producer.context().failed.store(0, Ordering::Relaxed);
            failed.map_err(|e| KafkaError::Call { what: format!("deliver to topic {}", self.topic), source: e })?;
        }
        Ok(())
    }
}

/// The largest `weir.batch` among the last committed messages of each partition of `topic`.
fn last_batch_in(topic: &str, options: &[(String, String)], stop: &AtomicBool) -> Result<Option<u64>, KafkaError> {
    // Only connection options carry over from the producer's configuration.
    let conn: Vec<(String, String)> = options
        .iter()
        .filter(|(k, _)| k == "bootstrap.servers" || ["security.", "sasl.", "ssl."].iter().any(|p| k.starts_with(p)))
        .cloned()
        .collect();
    let consumer: BaseConsumer = client_config(
        &[
            ("group.id", "weir-sink-scan"),
            ("isolation.level", "read_committed"),
            ("enable.auto.commit", "false"),
            ("enable.partition.eof", "false"),
        ],
        &conn,
    )
    .create()
    .map_err(KafkaError::Config)?;
    let md =
        with_retry(stop, &format!("metadata of topic {topic}"), || consumer.fetch_metadata(Some(topic), CALL_TIMEOUT))?;
    let Some(t) = md.topics().iter().find(|t| t.name() == topic && t.error().is_none()) else { return Ok(None) };
    let mut tpl = TopicPartitionList::new();
    let mut ends: HashMap<i32, i64> = HashMap::new();
    for p in t.partitions() {
        let (low, high) = with_retry(stop, &format!("watermarks of {topic}/{}", p.id()), || {
            consumer.fetch_watermarks(topic, p.id(), CALL_TIMEOUT)
        })?;
        if high > low {
            let from = low.max(high - SCAN_BACK);
            tpl.add_partition_offset(topic, p.id(), Offset::Offset(from))
                .map_err(|e| KafkaError::Call { what: "scan".into(), source: e })?;
            ends.insert(p.id(), high);
        }
    }
    if ends.is_empty() {
        return Ok(None);
    }
    consumer.assign(&tpl).map_err(|e| KafkaError::Call { what: "scan".into(), source: e })?;
    let mut last: Option<u64> = None;
    let deadline = Instant::now() + Duration::from_secs(30);
    while !ends.is_empty() && Instant::now() < deadline {
        match consumer.poll(Duration::from_millis(100)) {
            Some(Ok(m)) => {
                if let Some(hs) = m.headers() {
                    let id = hs
                        .iter()
                        .find(|h| h.key == BATCH_HEADER)
                        .and_then(|h| std::str::from_utf8(h.value?).ok()?.parse().ok());
                    last = last.max(id);
                }
                if ends.get(&m.partition()).is_some_and(|&end| m.offset() + 1 >= end) {
                    ends.remove(&m.partition());
                }
            }
            Some(Err(e)) => tracing::warn!("kafka sink: scanning {topic}: {e}"),
            None => {
                // Past the last record (aborted data and markers are skipped): done.
                if let Ok(pos) = consumer.position() {
                    ends.retain(|&p, &mut end| {
                        !matches!(pos.find_partition(topic, p).map(|e| e.offset()), Some(Offset::Offset(o)) if o >= end)
                    });
                }
            }
        }
    }
    if !ends.is_empty() {
        tracing::warn!(
            "kafka sink: could not read to the end of {topic} in 30 s; duplicates of the last batch are possible"
        );
    }
    Ok(last)
}
