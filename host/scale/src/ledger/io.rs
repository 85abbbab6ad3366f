//! How a ledger writes its checkpoint partition and reads it back: records are sent in order,
//! confirmed as they land, and folded in the order the partition holds them (`mod.rs`'s
//! opening says why that fences).
//!
//! The invariant: the fold has applied the partition in offset order up to its `applied`
//! offset, and `sent` holds exactly the records this owner sent and has not folded yet, oldest
//! first. A record that failed is sent again with every record behind it, so the partition
//! holds them in the order they were sent.

use std::sync::Mutex;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use rdkafka::consumer::Consumer;
use rdkafka::message::{DeliveryResult, Message};
use rdkafka::producer::{BaseRecord, Producer, ProducerContext};
use rdkafka::{ClientContext, Offset};

use super::{Body, KafkaLedger, Record};
use crate::checkpoint::CheckpointError;
use crate::kafka::{KafkaError, flush, with_retry};

/// How long a read of the checkpoint partition waits with nothing arriving before it logs that
/// it is still waiting (and again as often).
const READ_WARN: Duration = Duration::from_secs(10);

/// Where the producer's deliveries landed, in the order they were reported: one partition's
/// deliveries are reported in the order its records were sent.
#[derive(Default)]
pub(super) struct Landed(Mutex<Vec<Result<i64, rdkafka::error::KafkaError>>>);

impl ClientContext for Landed {}
impl ProducerContext for Landed {
    type DeliveryOpaque = ();
    fn delivery(&self, result: &DeliveryResult<'_>, _: ()) {
        let r = match result {
            Ok(m) => Ok(m.offset()),
            Err((e, _)) => Err(e.clone()),
        };
        if let Ok(mut landed) = self.0.lock() {
            landed.push(r);
        }
    }
}

impl KafkaLedger {
    fn fail(&self, e: KafkaError) -> CheckpointError {
        CheckpointError::Ledger { task: self.task.clone(), source: Box::new(e) }
    }

    /// Sends `body` under this owner's epoch, to land after every record sent before it;
    /// [`Self::confirm`] waits for it.
    pub(super) fn send(&mut self, body: Body) -> Result<(), CheckpointError> {
        let record = Record { epoch: self.epoch, identity: self.identity.clone(), body };
        self.produce(&record)?;
        self.sent.push_back(record);
        Ok(())
    }

    fn produce(&self, record: &Record) -> Result<(), CheckpointError> {
        let value = serde_json::to_vec(record).map_err(|e| {
            CheckpointError::file(format!("{}:{}", self.topic, self.partition), format!("cannot encode: {e}"))
        })?;
        let key = record.key();
        let sent = self
            .producer
            .send(BaseRecord::<str, [u8]>::to(&self.topic).partition(self.partition).key(&key).payload(&value));
        sent.map_err(|(e, _)| {
            self.fail(KafkaError::Call { what: "writing a task's checkpoint record".into(), source: e })
        })
    }

    /// Waits until every record sent has landed and folds them in, in order (`mod.rs`'s
    /// opening says how); returns the last one's offset. A record that failed is sent again,
    /// with every record sent after it, so they land in the order they were sent.
    pub(super) fn confirm(&mut self) -> Result<Option<i64>, CheckpointError> {
        let mut last = None;
        while !self.sent.is_empty() {
            let flushed = with_retry(&self.stop, "writing a task's checkpoint record", || flush(&self.producer));
            flushed.map_err(|e| self.fail(e))?;
            let landed = match self.producer.context().0.lock() {
                Ok(mut landed) => std::mem::take(&mut *landed),
                Err(_) => Vec::new(),
            };
            if landed.len() < self.sent.len() {
                return Err(self.fail(KafkaError::Stopped));
            }
            for result in landed {
                let Some(record) = self.sent.pop_front() else { break };
                match result {
                    Ok(offset) => {
                        if self.fold.applied.map_or(offset == 0, |a| offset == a + 1) {
                            self.fold.apply(offset, record);
                        } else {
                            self.read_to(offset)?;
                        }
                        last = Some(offset);
                    }
                    Err(e) => {
                        tracing::warn!("task {}: writing its checkpoint record: {e}; retrying", self.task);
                        self.sent.push_front(record);
                        break;
                    }
                }
            }
            if !self.sent.is_empty() {
                if self.stop.load(Ordering::Relaxed) {
                    return Err(self.fail(KafkaError::Stopped));
                }
                std::thread::sleep(Duration::from_millis(100));
                // Whatever was reported after the failure is written again behind it.
                if let Ok(mut landed) = self.producer.context().0.lock() {
                    landed.clear();
                }
                for record in &self.sent {
                    self.produce(record)?;
                }
            }
        }
        self.drain();
        Ok(last)
    }

    /// Folds what the reader has already fetched, without waiting: records of this owner's,
    /// already folded, are skipped; anyone else's are seen before the next plan, and the
    /// reader's queue stays short.
    fn drain(&mut self) {
        while let Some(Ok(m)) = self.consumer.poll(Duration::ZERO) {
            if self.fold.applied.is_some_and(|a| m.offset() <= a) {
                continue; // Folded already: most often this owner's own record, not parsed again.
            }
            if let Some(Ok(r)) = m.payload().map(serde_json::from_slice::<Record>) {
                self.fold.apply(m.offset(), r);
            }
        }
    }

    /// Folds the partition up to offset `to` (inclusive).
    pub(super) fn read_to(&mut self, to: i64) -> Result<(), CheckpointError> {
        if to < 0 {
            return Ok(()); // An empty partition: a task never run.
        }
        let mut since = Instant::now();
        while self.fold.applied.is_none_or(|a| a < to) {
            if self.stop.load(Ordering::Relaxed) {
                return Err(self.fail(KafkaError::Stopped));
            }
            match self.consumer.poll(Duration::from_millis(100)) {
                Some(Ok(m)) => {
                    since = Instant::now();
                    let Some(payload) = m.payload() else { continue };
                    match serde_json::from_slice::<Record>(payload) {
                        Ok(r) => self.fold.apply(m.offset(), r),
                        Err(e) => tracing::warn!(
                            "task {}: checkpoint record at {}:{}@{} is not Weir's ({e}); skipped",
                            self.task,
                            self.topic,
                            self.partition,
                            m.offset()
                        ),
                    }
                }
                Some(Err(e)) => tracing::warn!("task {}: reading its checkpoint record: {e}", self.task),
                None => {
                    // Compaction may have removed the offsets up to `to`.
                    if let Ok(pos) = self.consumer.position()
                        && let Some(p) = pos.find_partition(&self.topic, self.partition)
                        && let Offset::Offset(next) = p.offset()
                        && next > to
                    {
                        return Ok(());
                    }
                    if since.elapsed() >= READ_WARN {
                        tracing::warn!(
                            "task {}: still reading its checkpoint record up to offset {to} (broker unavailable?)",
                            self.task
                        );
                        since = Instant::now();
                    }
                }
            }
        }
        Ok(())
    }
}
