//! The Kafka source (rdkafka), speaking nothing but the Kafka protocol.
//!
//! The checkpoint, not the consumer group, decides what is read: partitions are assigned
//! explicitly at the checkpoint's offsets, and a batch is planned as an end offset per partition
//! (at most the broker's high watermark, at most an equal share of `max_offsets_per_trigger`),
//! so a batch re-run after a crash reads the same records. Group offsets are committed after each
//! batch for lag monitoring only.
//!
//! Each partition is read from a queue of its own (librdkafka's partition queues), and only
//! while the plan needs it: records past a partition's planned end stay in the client's queue
//! for the next batch. So a batch never waits behind another partition's backlog (one queue for
//! all of them delivered whole fetches in turn: the first batch of a 31-partition backlog polled
//! 387,000 records to find one of each partition), and back-pressure is the client's own: it
//! stops fetching a partition whose queue holds [`PARTITION_PREFETCH_KB`]. A reader with nothing
//! to read sleeps on a [`Bell`] the queues ring.
//!
//! Broker calls are retried as `crate::kafka` says: with backoff, as long as it takes, until a
//! stop request.
//!
//! The files: `read.rs` moves records from the queues into a batch; this one assigns the
//! partitions and plans each batch's ends.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use std::collections::VecDeque;

use rdkafka::consumer::base_consumer::PartitionQueue;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer, DefaultConsumerContext};
use rdkafka::error::KafkaError as RdError;
use rdkafka::message::OwnedMessage;
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::{ClientConfig, Offset, TopicPartitionList};
use serde::{Deserialize, Serialize};

mod bell;
mod closing;
mod read;
mod source;

use bell::Bell;
use closing::Closing;

use super::{Limit, SourceBatch};
use crate::kafka::{CALL_TIMEOUT, KafkaError, client_config, with_retry};
use crate::pipeline::{KafkaSourceConfig, StartingOffsets};

/// A partition and the next offset to read in it: what the offsets log records.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TopicOffset {
    pub topic: String,
    pub partition: i32,
    pub offset: i64,
}

/// How long a reader with nothing to read sleeps before it looks again (a record arriving
/// wakes it sooner); also how often a stop request is noticed.
const POLL: Duration = Duration::from_millis(100);
/// Records a batch makes room for up front, at most (a plan may span more offsets).
const PLAN_ROOM_MAX: usize = 1 << 20;
/// The client's prefetch per partition (`queued.max.messages.kbytes`, which applies per
/// partition once partitions have queues of their own): about 7,000 orders, more than a
/// batch's share of any partition, and 64 MiB over 64 partitions. `kafka.*` options override it.
const PARTITION_PREFETCH_KB: &str = "1024";
/// How long a planned batch may wait for its records, with nothing arriving, before the wait
/// is logged (and logged again as often): planned records are on the broker, so a silence this
/// long means the broker is unreachable, which the client does not report through `poll`.
const STALL_WARN: Duration = Duration::from_secs(5);
struct Part {
    stream: u16,
    partition: i32,
    next: i64,
    queue: PartitionQueue<DefaultConsumerContext>,
    /// Records polled at or past the planned end: the first after offsets without records
    /// (transaction markers, compaction), or ones the shared queue had from before the split.
    held: VecDeque<OwnedMessage>,
}

pub struct KafkaSource {
    /// Always `Some` but in `drop`, which closes it off this thread (see [`closing`]); the
    /// partition queues hold the other references, and `drop` lets them go first.
    consumer: Closing<Arc<BaseConsumer>>,
    /// Rung by every queue of the consumer's.
    bell: Arc<Bell>,
    /// The bell's generation when the queues were last looked at.
    looked: u64,
    /// The partition `poll_available` starts from next.
    turn: usize,
    topics: Vec<String>,
    /// Sorted by (stream, partition).
    parts: Vec<Part>,
    /// Bounded triggers: the high watermarks when the run started.
    bound: Option<Vec<i64>>,
    /// The high watermarks the broker gave last, per partition (-1: not asked yet).
    highs: Vec<i64>,
    stop: Arc<AtomicBool>,
    last_error_log: Option<Instant>,
    /// A batch the pipeline gave back, to read the next one into ([`super::Source::recycle`]).
    pub(super) spare: Option<SourceBatch>,
}

impl KafkaSource {
    /// Assigns every partition of the configured topics (or the listed partitions), at the
    /// checkpoint's offsets where it has them and at the configured start elsewhere.
    pub fn open(cfg: &KafkaSourceConfig, at: &[TopicOffset], stop: Arc<AtomicBool>) -> Result<Self, KafkaError> {
        let bell = Arc::new(Bell::default());
        let mut consumer: BaseConsumer = consumer_config(cfg).create().map_err(KafkaError::Config)?;
        let ring = bell.clone();
        consumer.set_nonempty_callback(move || ring.ring());
        let consumer = Closing(Some(Arc::new(consumer)));

        let mut wanted: Vec<(u16, i32)> = Vec::new();
        for (stream, topic) in cfg.topics.iter().enumerate() {
            let stream = stream as u16;
            match &cfg.partitions {
                Some(list) => wanted.extend(list.iter().filter(|(t, _)| t == topic).map(|&(_, p)| (stream, p))),
                None => {
                    let md = with_retry(&stop, &format!("metadata of topic {topic}"), || {
                        consumer.fetch_metadata(Some(topic), CALL_TIMEOUT)
                    })?;
                    let t = md.topics().iter().find(|t| t.name() == topic);
                    let parts = match t {
                        Some(t) if t.error().is_none() && !t.partitions().is_empty() => t.partitions(),
                        Some(t) => {
                            let message = match t.error() {
                                Some(e) => format!("{:?}", RDKafkaErrorCode::from(e)),
                                None => "has no partitions".into(),
                            };
                            return Err(KafkaError::Topic { topic: topic.clone(), message });
                        }
                        None => {
                            return Err(KafkaError::Topic { topic: topic.clone(), message: "does not exist".into() });
                        }
                    };
                    wanted.extend(parts.iter().map(|p| (stream, p.id())));
                }
            }
        }
        wanted.sort_unstable();
        wanted.dedup();

        let mut starts = Vec::with_capacity(wanted.len());
        let mut tpl = TopicPartitionList::new();
        for (stream, partition) in wanted {
            let topic = &cfg.topics[stream as usize];
            let saved = at.iter().find(|o| &o.topic == topic && o.partition == partition).map(|o| o.offset);
            let next = match saved {
                Some(o) => o,
                None => start_offset(&consumer, &stop, topic, partition, &cfg.starting)?,
            };
            tpl.add_partition_offset(topic, partition, Offset::Offset(next))
                .map_err(|e| KafkaError::Call { what: "assign".into(), source: e })?;
            starts.push((stream, partition, next));
        }
        consumer.assign(&tpl).map_err(|e| KafkaError::Call { what: "assign".into(), source: e })?;
        // Split right after `assign` (which undoes earlier splits). Anything fetched before a
        // split is in the shared queue, which every read drains first, so offsets stay in order.
        let mut parts = Vec::with_capacity(starts.len());
        for (stream, partition, next) in starts {
            let topic = &cfg.topics[stream as usize];
            let mut queue = consumer.split_partition_queue(topic, partition).ok_or_else(|| KafkaError::Topic {
                topic: topic.clone(),
                message: format!("partition {partition} has no queue"),
            })?;
            let ring = bell.clone();
            queue.set_nonempty_callback(move || ring.ring());
            parts.push(Part { stream, partition, next, queue, held: VecDeque::new() });
        }
        tracing::info!(partitions = parts.len(), "kafka source assigned {}", describe(&cfg.topics, &parts));
        let highs = vec![-1; parts.len()];
        Ok(Self {
            consumer,
            bell,
            looked: 0,
            turn: 0,
            topics: cfg.topics.clone(),
            parts,
            bound: None,
            highs,
            stop,
            last_error_log: None,
            spare: None,
        })
    }

    pub fn topics(&self) -> &[String] {
        &self.topics
    }

    pub fn offsets(&self) -> Vec<TopicOffset> {
        self.parts
            .iter()
            .map(|p| TopicOffset {
                topic: self.topics[p.stream as usize].clone(),
                partition: p.partition,
                offset: p.next,
            })
            .collect()
    }

    /// Each partition's high watermark as the broker gave it last, never behind what was read:
    /// the latest offsets for progress, without a round trip (a figure from earlier can only be
    /// lower, so a lag from it errs low, by what arrived since the last look).
    pub fn latest(&self) -> Vec<TopicOffset> {
        self.parts
            .iter()
            .zip(&self.highs)
            .map(|(p, &high)| TopicOffset {
                topic: self.topics[p.stream as usize].clone(),
                partition: p.partition,
                offset: high.max(p.next),
            })
            .collect()
    }

    /// Plans a batch (an end offset per partition) and reads it.
    pub fn next_batch(&mut self, limit: Limit) -> Result<Option<SourceBatch>, KafkaError> {
        let share = limit.records.div_ceil(self.parts.len().max(1)).max(1) as i64;
        let caps = match (limit.bounded, &self.bound) {
            (false, _) => self.high_watermarks(share)?,
            (true, Some(b)) => b.clone(),
            (true, None) => {
                let highs = self.high_watermarks(i64::MAX)?;
                self.bound = Some(highs.clone());
                highs
            }
        };
        let ends: Vec<i64> =
            self.parts.iter().zip(&caps).map(|(p, &cap)| cap.min(p.next.saturating_add(share)).max(p.next)).collect();
        if self.parts.iter().zip(&ends).all(|(p, &e)| e <= p.next) {
            if limit.bounded {
                return Ok(None);
            }
            // Nothing new: wait a little for a record rather than spin on the broker.
            self.wait_for_any();
            return Ok(Some(SourceBatch::default()));
        }
        self.read_to(&ends).map(Some)
    }

    /// Everything the broker has now, without waiting for more: a side input's read.
    pub fn read_available(&mut self) -> Result<SourceBatch, KafkaError> {
        let highs = self.high_watermarks(i64::MAX)?;
        let ends: Vec<i64> = self.parts.iter().zip(&highs).map(|(p, &high)| high.max(p.next)).collect();
        self.read_to(&ends)
    }

    /// Reads exactly up to a recorded batch end.
    pub fn read_until(&mut self, end: &[TopicOffset]) -> Result<SourceBatch, KafkaError> {
        let ends: Vec<i64> = self
            .parts
            .iter()
            .map(|p| {
                let topic = &self.topics[p.stream as usize];
                end.iter().find(|o| &o.topic == topic && o.partition == p.partition).map_or(p.next, |o| o.offset)
            })
            .collect();
        self.read_to(&ends)
    }

    pub fn commit_group_offsets(&mut self, at: &[TopicOffset]) {
        let mut tpl = TopicPartitionList::new();
        for o in at {
            if tpl.add_partition_offset(&o.topic, o.partition, Offset::Offset(o.offset)).is_err() {
                return;
            }
        }
        if let Err(e) = self.consumer.commit(&tpl, CommitMode::Async) {
            tracing::debug!("kafka: group offsets not committed (lag monitoring only): {e}");
        }
    }

    /// Each partition's high watermark, as far as a batch of `share` records per partition
    /// needs it: the broker is asked again only for partitions that would read past what it
    /// said last time (a round trip each: asked per batch and partition, they would hold a
    /// backlog to a fraction of its speed). A figure from earlier can only be lower, and a
    /// lower end only makes a smaller batch. A bounded run asks for every partition once.
    fn high_watermarks(&mut self, share: i64) -> Result<Vec<i64>, KafkaError> {
        for (p, known) in self.parts.iter().zip(self.highs.iter_mut()) {
            if p.next.saturating_add(share) <= *known {
                continue;
            }
            let topic = &self.topics[p.stream as usize];
            let (_, high) = with_retry(&self.stop, &format!("high watermark of {topic}/{}", p.partition), || {
                self.consumer.fetch_watermarks(topic, p.partition, CALL_TIMEOUT)
            })?;
            *known = high;
        }
        Ok(self.highs.clone())
    }

    /// Sleeps until a queue gets something since the last look, at most [`POLL`].
    fn wait_for_any(&mut self) {
        self.bell.wait(self.looked, POLL);
        self.looked = self.bell.seen();
    }

    /// A fetch error: data loss is fatal; anything else (a broker gone) is logged at most once
    /// a second and waited out, since the client reconnects by itself.
    fn consumer_error(&mut self, e: RdError) -> Result<(), KafkaError> {
        if let RdError::MessageConsumption(RDKafkaErrorCode::AutoOffsetReset | RDKafkaErrorCode::OffsetOutOfRange) = e {
            return Err(KafkaError::DataLoss { at: describe(&self.topics, &self.parts) });
        }
        if self.last_error_log.is_none_or(|t| t.elapsed() >= Duration::from_secs(1)) {
            tracing::warn!("kafka: {e}; the client keeps retrying");
            self.last_error_log = Some(Instant::now());
        }
        Ok(())
    }

    fn check_stop(&self) -> Result<(), KafkaError> {
        if self.stop.load(Ordering::Relaxed) { Err(KafkaError::Stopped) } else { Ok(()) }
    }
}

impl Drop for KafkaSource {
    fn drop(&mut self) {
        // The partition queues first: the consumer's last reference must be the one `Closing`
        // drops off this thread.
        self.parts.clear();
    }
}

/// The source's consumer settings: Weir's, then the pipeline's `kafka.*` options over them.
pub fn consumer_config(cfg: &KafkaSourceConfig) -> ClientConfig {
    client_config(
        &[
            ("group.id", &cfg.group_id),
            ("enable.auto.commit", "false"),
            ("enable.auto.offset.store", "false"),
            ("enable.partition.eof", "false"),
            // Never skip silently: a checkpointed offset that is gone is data loss.
            ("auto.offset.reset", "error"),
            // Bound the client's prefetch (librdkafka's default is 64 MiB per partition).
            ("queued.max.messages.kbytes", PARTITION_PREFETCH_KB),
            // Once the prefetch is full, fetch again soon after the pipeline has taken from it;
            // librdkafka's default waits a whole second, during which a pipeline that caught up
            // has nothing to read, and a backlog drains at a fraction of its speed.
            ("fetch.queue.backoff.ms", "5"),
        ],
        &cfg.options,
    )
}

fn start_offset(
    consumer: &BaseConsumer,
    stop: &AtomicBool,
    topic: &str,
    partition: i32,
    start: &StartingOffsets,
) -> Result<i64, KafkaError> {
    let (low, high) = with_retry(stop, &format!("watermarks of {topic}/{partition}"), || {
        consumer.fetch_watermarks(topic, partition, CALL_TIMEOUT)
    })?;
    match start {
        StartingOffsets::Earliest => Ok(low),
        StartingOffsets::Latest => Ok(high),
        // Past the end, the offsets are not this topic's (it was deleted and created again
        // since): from its earliest.
        StartingOffsets::Offsets(at) => Ok(match at.iter().find(|(p, _)| *p == partition) {
            Some(&(_, o)) if o <= high => o.max(low),
            _ => low,
        }),
        StartingOffsets::Timestamp(ms) => {
            let mut tpl = TopicPartitionList::new();
            tpl.add_partition_offset(topic, partition, Offset::Offset(*ms))
                .map_err(|e| KafkaError::Call { what: "offsets_for_times".into(), source: e })?;
            let found = with_retry(stop, &format!("offset for time {ms} in {topic}/{partition}"), || {
                consumer.offsets_for_times(tpl.clone(), CALL_TIMEOUT)
            })?;
            // No record at or after the time: start at the end.
            Ok(match found.find_partition(topic, partition).map(|e| e.offset()) {
                Some(Offset::Offset(o)) => o,
                _ => high,
            })
        }
    }
}

fn describe(topics: &[String], parts: &[Part]) -> String {
    parts
        .iter()
        .map(|p| format!("{}/{}@{}", topics[p.stream as usize], p.partition, p.next))
        .collect::<Vec<_>>()
        .join(", ")
}
