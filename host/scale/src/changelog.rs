//! A stage-2 task's state in Kafka: the group's changelog topic, compacted, one partition per
//! stage-2 task. The local RocksDB is the working copy; whoever is assigned the task next
//! restores it from here (`task.rs`), on any machine.
//!
//! **What is written.** Each batch, before the checkpoint record's commit (`ledger/`), the
//! batch's staged state changes: one record per changed state key, with the batch id, the new
//! value (none: deleted) and the value it had before the batch (its before-image). The key's
//! deletion becomes a tombstone with the next batch's records, once the batch that deleted it is
//! committed.
//!
//! **Why before-images.** Compaction keeps the newest record of a key. A batch that crashed
//! before its commit may already have written its records, and compaction may then have dropped
//! the committed value they replace. A reader knows from the checkpoint record which batches are
//! committed: for a record of a later batch it takes the before-image, which is exactly the
//! committed value, since only the batch after the last committed one can have run.
//!
//! **Why the owner's epoch is in every key.** A zombie (an owner that lost the task and has not
//! noticed) may still write its last batch's records after the new owner has written newer
//! ones; with keys of their own, compaction can never let a zombie's record replace the new
//! owner's. So a record's key is the writer's epoch and the state key, and the checkpoint record
//! says which epoch's records are the state. A new owner reads the state of that epoch, writes
//! it whole under its own ([`Changelog::snapshot`]), has the checkpoint record say so, and only
//! then tombstones every other epoch's records, so a crash anywhere leaves a readable state.
//!
//! Record key: epoch (u64, big-endian) then the state key. Value, integers little-endian:
//! batch (u64), a flags byte (1: a new value follows, 2: a before-image follows), then each
//! present value as length (u32) and bytes.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Message;
use rdkafka::{Offset, TopicPartitionList};

use crate::checkpoint::CheckpointError;
use crate::kafka::{AckedProducer, CALL_TIMEOUT, KafkaError, Outgoing, client_config, connection_options, with_retry};
use crate::state::StateStore;

const NEW: u8 = 1;
const OLD: u8 = 2;

/// How long a read of the changelog waits with nothing arriving before it logs that it is still
/// waiting (and again as often).
const READ_WARN: Duration = Duration::from_secs(10);

/// Records per write at most, when a snapshot is written: the producer's queue holds them.
const SNAPSHOT_CHUNK: usize = 10_000;

/// A record's value, decoded.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Change {
    batch: u64,
    new: Option<Vec<u8>>,
    old: Option<Vec<u8>>,
}

fn encode(batch: u64, new: Option<&[u8]>, old: Option<&[u8]>) -> Vec<u8> {
    let mut v = Vec::with_capacity(9 + new.map_or(0, |n| 4 + n.len()) + old.map_or(0, |o| 4 + o.len()));
    v.extend_from_slice(&batch.to_le_bytes());
    v.push(if new.is_some() { NEW } else { 0 } | if old.is_some() { OLD } else { 0 });
    for value in [new, old].into_iter().flatten() {
        v.extend_from_slice(&(value.len() as u32).to_le_bytes());
        v.extend_from_slice(value);
    }
    v
}

fn decode(v: &[u8]) -> Result<Change, String> {
    let (batch, rest) = v.split_first_chunk::<8>().ok_or("shorter than a batch id")?;
    let (&flags, mut rest) = rest.split_first().ok_or("no flags")?;
    if flags & !(NEW | OLD) != 0 {
        return Err(format!("unknown flags {flags}"));
    }
    let mut value = |present: bool| -> Result<Option<Vec<u8>>, String> {
        if !present {
            return Ok(None);
        }
        let (len, after) = rest.split_first_chunk::<4>().ok_or("cut short in a length")?;
        let len = u32::from_le_bytes(*len) as usize;
        let bytes = after.get(..len).ok_or("cut short in a value")?;
        rest = &after[len..];
        Ok(Some(bytes.to_vec()))
    };
    let new = value(flags & NEW != 0)?;
    let old = value(flags & OLD != 0)?;
    if !rest.is_empty() {
        return Err(format!("{} bytes after the values", rest.len()));
    }
    Ok(Change { batch: u64::from_le_bytes(*batch), new, old })
}

fn record_key(epoch: u64, key: &[u8]) -> Vec<u8> {
    let mut k = Vec::with_capacity(8 + key.len());
    k.extend_from_slice(&epoch.to_be_bytes());
    k.extend_from_slice(key);
    k
}

/// What a read of the changelog found.
#[derive(Debug, Default)]
pub(super) struct Restored {
    /// The state as of the committed batch: key → value.
    pub entries: BTreeMap<Vec<u8>, Vec<u8>>,
    /// Keys of every record read: tombstoned once the reader's snapshot, under its own epoch,
    /// is the state.
    pub stale: Vec<Vec<u8>>,
    /// Records read, and their bytes (keys and values).
    pub records: u64,
    pub bytes: u64,
}

/// A stage-2 task's changelog partition, open for one owner epoch.
pub(super) struct Changelog {
    topic: String,
    partition: i32,
    epoch: u64,
    producer: AckedProducer,
    /// Keys the last written batch deleted: their records become tombstones with the next
    /// write, when that batch is committed.
    deleted: Vec<Vec<u8>>,
    /// Records of earlier epochs, tombstoned once this epoch's snapshot is the state.
    stale: Vec<Vec<u8>>,
}

impl Changelog {
    pub(super) fn new(producer: AckedProducer, topic: &str, partition: i32, epoch: u64) -> Self {
        Self { topic: topic.to_string(), partition, epoch, producer, deleted: Vec::new(), stale: Vec::new() }
    }

    /// Writes batch `batch`'s staged changes in `state`, each with its before-image, and the
    /// tombstones of what the batch before deleted; returns once the broker has them all.
    pub(super) fn write(&mut self, batch: u64, state: &StateStore) -> Result<(), CheckpointError> {
        let staged: Vec<(&[u8], Option<&[u8]>)> = state.staged().collect();
        let keys: Vec<&[u8]> = staged.iter().map(|(k, _)| *k).collect();
        let before = state
            .committed_values(&keys)
            .map_err(|e| CheckpointError::file(format!("{}-{}", self.topic, self.partition), e.to_string()))?;
        let tombstones: Vec<Vec<u8>> = self.deleted.iter().map(|k| record_key(self.epoch, k)).collect();
        let records: Vec<(Vec<u8>, Vec<u8>)> = staged
            .iter()
            .zip(&before)
            .map(|((k, new), old)| (record_key(self.epoch, k), encode(batch, *new, old.as_deref())))
            .collect();
        let mut out: Vec<Outgoing> =
            tombstones.iter().map(|k| Outgoing { partition: self.partition, key: Some(k), value: None }).collect();
        out.extend(records.iter().map(|(k, v)| Outgoing { partition: self.partition, key: Some(k), value: Some(v) }));
        if !out.is_empty() {
            let what = format!("writing batch {batch}'s state to the changelog {}:{}", self.topic, self.partition);
            self.producer.write_all(&self.topic, &out, &what).map_err(|e| self.fail(e))?;
        }
        self.deleted = staged.iter().filter(|(_, new)| new.is_none()).map(|(k, _)| k.to_vec()).collect();
        Ok(())
    }

    /// Writes `entries` as the state under this owner's epoch, as of the committed batch
    /// before `next_batch`.
    pub(super) fn snapshot(&mut self, entries: &[(Vec<u8>, Vec<u8>)], next_batch: u64) -> Result<(), CheckpointError> {
        let batch = next_batch.saturating_sub(1);
        for chunk in entries.chunks(SNAPSHOT_CHUNK) {
            let records: Vec<(Vec<u8>, Vec<u8>)> =
                chunk.iter().map(|(k, v)| (record_key(self.epoch, k), encode(batch, Some(v), None))).collect();
            let out: Vec<Outgoing> = records
                .iter()
                .map(|(k, v)| Outgoing { partition: self.partition, key: Some(k), value: Some(v) })
                .collect();
            let what = format!("writing the state to the changelog {}:{}", self.topic, self.partition);
            self.producer.write_all(&self.topic, &out, &what).map_err(|e| self.fail(e))?;
        }
        Ok(())
    }

    /// Keeps `keys` (what [`Restored::stale`] lists) to tombstone once this epoch's snapshot is
    /// the state ([`Changelog::tombstone_stale`]).
    pub(super) fn tombstone_later(&mut self, keys: Vec<Vec<u8>>) {
        self.stale = keys;
    }

    /// Tombstones the records of earlier epochs: called once the checkpoint record says this
    /// epoch's are the state. A crash before leaves them for the next owner, who reads them as
    /// stale too.
    pub(super) fn tombstone_stale(&mut self) -> Result<(), CheckpointError> {
        let keys = std::mem::take(&mut self.stale);
        for chunk in keys.chunks(SNAPSHOT_CHUNK) {
            let out: Vec<Outgoing> =
                chunk.iter().map(|k| Outgoing { partition: self.partition, key: Some(k), value: None }).collect();
            let what = format!("tombstoning old records of the changelog {}:{}", self.topic, self.partition);
            self.producer.write_all(&self.topic, &out, &what).map_err(|e| self.fail(e))?;
        }
        Ok(())
    }

    fn fail(&self, e: KafkaError) -> CheckpointError {
        CheckpointError::Ledger { task: format!("{}-{}", self.topic, self.partition), source: Box::new(e) }
    }
}

/// Reads changelog partition `partition` to its end: the state epoch `valid`'s records say it
/// had after the batch before `next_batch` (none: an empty state), and every record's key.
pub(super) fn read(
    options: &[(String, String)],
    topic: &str,
    partition: i32,
    valid: Option<u64>,
    next_batch: u64,
    stop: &Arc<AtomicBool>,
) -> Result<Restored, CheckpointError> {
    let task = format!("{topic}-{partition}");
    let fail = |e: KafkaError| CheckpointError::Ledger { task: task.clone(), source: Box::new(e) };
    let consumer: BaseConsumer = client_config(
        &[("group.id", "weir-changelog"), ("enable.auto.commit", "false"), ("fetch.wait.max.ms", "10")],
        &connection_options(options),
    )
    .create()
    .map_err(|e| fail(KafkaError::Config(e)))?;
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition_offset(topic, partition, Offset::Beginning).map_err(|e| fail(KafkaError::Config(e)))?;
    consumer.assign(&tpl).map_err(|e| fail(KafkaError::Config(e)))?;
    let (_, high) =
        with_retry(stop, "reading a task's changelog", || consumer.fetch_watermarks(topic, partition, CALL_TIMEOUT))
            .map_err(&fail)?;
    // Per record key, the record at the highest offset: a fetch across compacted gaps may hand
    // back records twice, out of order (tansu does).
    let mut newest: BTreeMap<Vec<u8>, (i64, Option<Vec<u8>>)> = BTreeMap::new();
    let mut out = Restored::default();
    let mut since = Instant::now();
    let mut applied = -1i64;
    while applied < high - 1 {
        if stop.load(Ordering::Relaxed) {
            return Err(fail(KafkaError::Stopped));
        }
        match consumer.poll(Duration::from_millis(100)) {
            Some(Ok(m)) => {
                since = Instant::now();
                applied = applied.max(m.offset());
                let Some(key) = m.key() else { continue };
                out.records += 1;
                out.bytes += (key.len() + m.payload().map_or(0, <[u8]>::len)) as u64;
                let slot = newest.entry(key.to_vec()).or_insert((-1, None));
                if m.offset() > slot.0 {
                    *slot = (m.offset(), m.payload().map(<[u8]>::to_vec));
                }
            }
            Some(Err(e)) => tracing::warn!("reading the changelog {task}: {e}"),
            None => {
                // Compaction may have removed the offsets up to the end.
                if let Ok(pos) = consumer.position()
                    && let Some(p) = pos.find_partition(topic, partition)
                    && let Offset::Offset(next) = p.offset()
                    && next >= high
                {
                    break;
                }
                if since.elapsed() >= READ_WARN {
                    tracing::warn!("still reading the changelog {task} up to offset {high} (broker unavailable?)");
                    since = Instant::now();
                }
            }
        }
    }
    for (key, (_, value)) in newest {
        let Some(value) = value else { continue };
        // Every record there is now is stale once the reader's own epoch holds the state.
        out.stale.push(key.clone());
        let Some((epoch, state_key)) = key.split_first_chunk::<8>().map(|(e, k)| (u64::from_be_bytes(*e), k)) else {
            continue;
        };
        if Some(epoch) != valid {
            continue;
        }
        let change = decode(&value).map_err(|e| {
            CheckpointError::file(&task, format!("changelog record for state key {state_key:?} is damaged: {e}"))
        })?;
        let now = if change.batch < next_batch { change.new } else { change.old };
        if let Some(v) = now {
            out.entries.insert(state_key.to_vec(), v);
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn record_keys_put_the_epoch_first() {
        assert_eq!(record_key(2, b"pk"), [0, 0, 0, 0, 0, 0, 0, 2, b'p', b'k']);
    }

    proptest! {
        /// Values round-trip; any cut or stray byte is refused, never misread or a panic.
        #[test]
        fn values_round_trip_and_damage_is_refused(
            batch in any::<u64>(),
            new in proptest::option::of(proptest::collection::vec(any::<u8>(), 0..9)),
            old in proptest::option::of(proptest::collection::vec(any::<u8>(), 0..9)),
            cut in any::<proptest::sample::Index>(),
        ) {
            let v = encode(batch, new.as_deref(), old.as_deref());
            prop_assert_eq!(decode(&v).unwrap(), Change { batch, new: new.clone(), old: old.clone() });
            prop_assert!(decode(&v[..cut.index(v.len())]).is_err());
            let mut longer = v.clone();
            longer.push(0);
            prop_assert!(decode(&longer).is_err());
        }

        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..40)) {
            let _ = decode(&bytes);
        }
    }
}
