//! The native Kafka sink: each row a message (the row's JSON as value), each message tagged with
//! its delivery: the checkpoint's identity in the `weir.checkpoint` header and the batch id in
//! `weir.batch`. A message's key is its row's key (the operator's: `sink/mod.rs`), or the row's
//! field `sink.key`; a tombstone is a message with a key and no value, which a compacted topic
//! keeps only until it has dropped the key's earlier values.
//!
//! Transactional (the default for micro-batch triggers): an idempotent producer with a stable
//! `transactional.id` produces each batch in one transaction, so `read_committed` consumers see
//! a batch entirely or not at all. A batch can still be produced twice: once before a crash that
//! came between the transaction's commit and the checkpoint's, and once on the re-run. So before
//! its first delivery, after `init_transactions` has fenced (and aborted) any previous
//! incarnation, the sink reads the tail of every partition of its topic and skips the batches of
//! *its own checkpoint* already there. Messages of other checkpoints (a replay from a fresh
//! checkpoint, another pipeline sharing the topic) are other rows and never make it skip.
//!
//! Writing a project's Kafka-backed dataset, each message's timestamp is its row's event time
//! (`Rows::times`), so a flow reading the dataset gets it back; other sinks leave the timestamp
//! to the producer (a topic's time-based retention would drop historical event times at once).
//!
//! Non-transactional (continuous mode, or brokers without transactions): an idempotent producer,
//! at-least-once, with the header to dedupe on. With micro-batches a batch counts as delivered
//! once every message is acknowledged. In continuous mode nothing waits for acknowledgements
//! on the way: waiting after every record would put a broker round trip in front of the next.
//! Messages are numbered as they are sent instead, and a [`RowSink::barrier`] waits, off the
//! record path, until every message numbered before it is acknowledged; only then is the source
//! position committed.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError as RdError;
use rdkafka::message::{DeliveryResult, Header, Headers, Message, OwnedHeaders};
use rdkafka::producer::{BaseProducer, BaseRecord, Producer, ProducerContext};
use rdkafka::{ClientConfig, ClientContext, Offset, TopicPartitionList};

use super::{Barrier, Delivery, RowSink, Rows, SinkError};
use crate::kafka::{ACK_POLL, CALL_TIMEOUT, FLUSH_TIMEOUT, KafkaError, client_config, connection_options, with_retry};
use crate::pipeline::KafkaSinkConfig;
use weir_types::keys::KeyField;

/// The header carrying a message's batch id (decimal).
pub const BATCH_HEADER: &str = "weir.batch";

/// The header carrying the identity of the checkpoint that planned the message's batch.
pub const CHECKPOINT_HEADER: &str = "weir.checkpoint";

/// How far back from each partition's end the start-up scan for delivered batches looks.
const SCAN_BACK: i64 = 10_000;

/// How long the start-up scan may take before it gives up (and warns that the last batch may be
/// written twice).
const SCAN_TIMEOUT: Duration = Duration::from_secs(30);

/// Counts failed deliveries (the batch fails if any message did), and which messages are
/// acknowledged, by the number each was sent with.
#[derive(Default)]
struct Deliveries {
    failed: AtomicU64,
    first_error: Mutex<Option<String>>,
    acked: Mutex<Acked>,
}

/// Acknowledged messages: every number below `through`, and those in `ahead` (acknowledged
/// before an earlier one, from another partition).
#[derive(Default)]
struct Acked {
    through: u64,
    ahead: BTreeSet<u64>,
}

impl Acked {
    fn ack(&mut self, n: u64) {
        if n != self.through {
            self.ahead.insert(n);
            return;
        }
        self.through += 1;
        while self.ahead.remove(&self.through) {
            self.through += 1;
        }
    }
}

impl Deliveries {
    fn acked_through(&self) -> u64 {
        self.acked.lock().map_or(0, |a| a.through)
    }

    fn check_failures(&self, what: &str) -> Result<(), RdError> {
        let failed = self.failed.load(Ordering::Relaxed);
        if failed > 0 {
            let first = self.first_error.lock().ok().and_then(|mut f| f.take()).unwrap_or_default();
            tracing::warn!("kafka sink: {failed} messages of {what} failed: {first}");
            return Err(RdError::MessageProduction(rdkafka::types::RDKafkaErrorCode::Fail));
        }
        Ok(())
    }
}

impl ClientContext for Deliveries {}

impl ProducerContext for Deliveries {
    /// The message's number.
    type DeliveryOpaque = usize;

    fn delivery(&self, result: &DeliveryResult<'_>, n: usize) {
        if let Err((e, _)) = result {
            self.failed.fetch_add(1, Ordering::Relaxed);
            if let Ok(mut first) = self.first_error.lock() {
                first.get_or_insert_with(|| e.to_string());
            }
        }
        if let Ok(mut acked) = self.acked.lock() {
            acked.ack(n as u64);
        }
    }
}

pub struct KafkaSink {
    /// Shared with barriers, which poll it for acknowledgements on a thread of their own.
    producer: Arc<BaseProducer<Deliveries>>,
    /// Messages sent so far: the next one's number.
    sent: u64,
    topic: String,
    /// `sink.key`: the row field whose value keys each message, instead of the row's own key.
    key_field: Option<KeyField>,
    /// Stamp each message with its row's event time (a project's dataset).
    event_time_stamps: bool,
    /// Connection options, for the start-up scan's consumer.
    options: Vec<(String, String)>,
    transactional: bool,
    /// Wait for acknowledgements only at a barrier (continuous mode).
    lazy_acks: bool,
    /// Found by the scan before the first delivery: the checkpoint scanned for, and the highest
    /// batch id of it already in the topic.
    delivered: Option<(String, Option<u64>)>,
    stop: Arc<AtomicBool>,
}

impl KafkaSink {
    pub fn open(cfg: &KafkaSinkConfig, continuous: bool, stop: Arc<AtomicBool>) -> Result<Self, KafkaError> {
        let producer: BaseProducer<Deliveries> =
            producer_config(cfg, continuous).create_with_context(Deliveries::default()).map_err(KafkaError::Config)?;
        if cfg.transactional {
            with_retry(&stop, "init_transactions", || producer.init_transactions(FLUSH_TIMEOUT))?;
        }
        Ok(Self {
            producer: Arc::new(producer),
            sent: 0,
            topic: cfg.topic.clone(),
            key_field: cfg.key.as_deref().map(KeyField::new),
            event_time_stamps: cfg.event_time_stamps,
            options: connection_options(&cfg.options),
            transactional: cfg.transactional,
            lazy_acks: continuous && !cfg.transactional,
            delivered: None,
            stop,
        })
    }

    /// Whether `d` is already in the topic (transactional sinks only; the scan runs once, before
    /// the first delivery, when the checkpoint's identity is known).
    fn already_delivered(&mut self, d: &Delivery) -> Result<bool, KafkaError> {
        if !self.transactional {
            return Ok(false);
        }
        let known = matches!(&self.delivered, Some((cp, _)) if cp == d.checkpoint);
        if !known {
            let last = last_batch_in(&self.topic, d.checkpoint, &self.options, &self.stop)?;
            if let Some(b) = last {
                tracing::info!("kafka sink: batches up to {b} of this checkpoint are already in topic {}", self.topic);
            }
            self.delivered = Some((d.checkpoint.to_string(), last));
        }
        Ok(matches!(self.delivered, Some((_, Some(last))) if d.batch_id <= last))
    }

    fn produce(&mut self, d: &Delivery, rows: &Rows) -> Result<(), RdError> {
        let id = d.batch_id.to_string();
        for ((key, row), &time) in rows.iter().zip(&rows.times) {
            let headers = OwnedHeaders::new()
                .insert(Header { key: CHECKPOINT_HEADER, value: Some(d.checkpoint) })
                .insert(Header { key: BATCH_HEADER, value: Some(id.as_str()) });
            let n = self.sent as usize;
            let field_key;
            let key = match &self.key_field {
                Some(field) if !row.is_empty() => {
                    field_key = field.key(row).unwrap_or_default();
                    &field_key[..]
                }
                _ => key,
            };
            let mut record = BaseRecord::<[u8], [u8], usize>::with_opaque_to(&self.topic, n).headers(headers);
            if !key.is_empty() {
                record = record.key(key);
            }
            if !row.is_empty() {
                record = record.payload(row);
            }
            // Kafka has no time before the epoch: such a row keeps the producer's.
            if self.event_time_stamps && time >= 0 {
                record = record.timestamp(time);
            }
            loop {
                match self.producer.send(record) {
                    Ok(()) => {
                        self.sent += 1;
                        break;
                    }
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

    fn deliver_once(&mut self, d: &Delivery, rows: &Rows) -> Result<(), RdError> {
        if !self.lazy_acks {
            self.producer.context().failed.store(0, Ordering::Relaxed);
        }
        if self.transactional {
            self.producer.begin_transaction()?;
            if let Err(e) = self.produce(d, rows).and_then(|()| self.producer.commit_transaction(FLUSH_TIMEOUT)) {
                let _ = self.producer.abort_transaction(FLUSH_TIMEOUT);
                return Err(e);
            }
        } else {
            self.produce(d, rows)?;
            if self.lazy_acks {
                self.producer.poll(Duration::ZERO);
                return Ok(());
            }
            self.flush()?;
        }
        self.producer.context().check_failures(&format!("batch {}", d.batch_id))
    }
}

impl KafkaSink {
    /// Waits until every message sent so far is acknowledged.
    fn flush(&self) -> Result<(), RdError> {
        wait_for_acks(&self.producer, self.sent)
    }
}

/// Waits until messages `0..n` are all acknowledged. Not rdkafka's `flush`, whose poll loop
/// sleeps out 100 ms slices even after the last acknowledgement has arrived, and which waits
/// for messages sent after `n` as well.
fn wait_for_acks(producer: &BaseProducer<Deliveries>, n: u64) -> Result<(), RdError> {
    let deadline = Instant::now() + FLUSH_TIMEOUT;
    loop {
        producer.poll(Duration::ZERO);
        if producer.context().acked_through() >= n {
            return Ok(());
        }
        if Instant::now() >= deadline {
            return Err(RdError::Flush(rdkafka::types::RDKafkaErrorCode::OperationTimedOut));
        }
        std::thread::sleep(ACK_POLL);
    }
}

impl RowSink for KafkaSink {
    fn deliver(&mut self, d: &Delivery, rows: &Rows) -> Result<(), SinkError> {
        if rows.is_empty() || self.already_delivered(d)? {
            return Ok(());
        }
        let what = format!("deliver batch {} to topic {}", d.batch_id, self.topic);
        let stop = self.stop.clone();
        with_retry(&stop, &what, || self.deliver_once(d, rows))?;
        Ok(())
    }

    fn barrier(&mut self) -> Barrier {
        if !self.lazy_acks {
            return Box::new(|| Ok(()));
        }
        let (producer, sent, topic) = (self.producer.clone(), self.sent, self.topic.clone());
        Box::new(move || {
            wait_for_acks(&producer, sent)
                .and_then(|()| producer.context().check_failures("the rows since the last checkpoint"))
                .map_err(|e| KafkaError::Call { what: format!("deliver to topic {topic}"), source: e }.into())
        })
    }
}

/// The sink's producer settings: Weir's, then the pipeline's `kafka.*` options over them.
pub fn producer_config(cfg: &KafkaSinkConfig, continuous: bool) -> ClientConfig {
    let mut defaults = vec![("enable.idempotence", "true"), ("acks", "all")];
    if cfg.transactional {
        defaults.push(("transactional.id", &cfg.transactional_id));
    }
    if continuous {
        // Latency over batching: send at once rather than lingering for more rows.
        defaults.push(("linger.ms", "0"));
    }
    client_config(&defaults, &cfg.options)
}

/// The largest `weir.batch` of checkpoint `checkpoint` among the last committed messages of each
/// partition of `topic`.
fn last_batch_in(
    topic: &str,
    checkpoint: &str,
    conn: &[(String, String)],
    stop: &AtomicBool,
) -> Result<Option<u64>, KafkaError> {
    let consumer: BaseConsumer = client_config(
        &[
            ("group.id", "weir-sink-scan"),
            ("isolation.level", "read_committed"),
            ("enable.auto.commit", "false"),
            ("enable.partition.eof", "false"),
        ],
        conn,
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
    let deadline = Instant::now() + SCAN_TIMEOUT;
    while !ends.is_empty() && Instant::now() < deadline {
        match consumer.poll(Duration::from_millis(100)) {
            Some(Ok(m)) => {
                if let Some(hs) = m.headers() {
                    let header = |name: &str| hs.iter().find(|h| h.key == name).and_then(|h| h.value);
                    if header(CHECKPOINT_HEADER) == Some(checkpoint.as_bytes()) {
                        let id = header(BATCH_HEADER).and_then(|v| std::str::from_utf8(v).ok()?.parse().ok());
                        last = last.max(id);
                    }
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
            "kafka sink: could not read to the end of {topic} in {SCAN_TIMEOUT:?}; duplicates of the last batch are possible"
        );
    }
    Ok(last)
}
