//! Sources: where raw records come from, and where each one was (its position), so that a batch
//! can be re-read exactly after a crash and a bad record can be traced to its origin.
//!
//! A source reads forward in batches and can say where it stands as [`Offsets`], the value the
//! checkpoint's offsets log records for each batch. Reading up to a recorded end again
//! ([`Source::read_until`]) yields exactly the records the batch had the first time: that is how a
//! planned batch without a commit is re-run after a crash.

pub mod kafka;
pub mod log;
pub mod repartition;
pub mod replay;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use serde::{Deserialize, Serialize};

use crate::pipeline::{SourceConfig, SourceKind};
use crate::plugin::{Header, RawBatch};

pub use kafka::TopicOffset;
pub use replay::ReplayPosition;

use crate::dataset::log::LogError;
use crate::kafka::KafkaError;

#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    #[error(transparent)]
    Replay(#[from] replay::ReplayError),
    #[error(transparent)]
    Kafka(#[from] KafkaError),
    #[error(transparent)]
    Log(#[from] LogError),
    #[error(
        "source.dataset = \"{0}\" reads a project's dataset: run the project (weir run DIR, where DIR has a weir.toml \
         listing this flow)"
    )]
    NoProject(String),
    #[error("the checkpoint's offsets are for a {found} source, this pipeline reads {expected}")]
    WrongOffsets { expected: &'static str, found: &'static str },
    /// A group's shuffle holds what its stages cannot have written (`repartition.rs`).
    #[error("{0}")]
    Shuffle(String),
}

/// Bytes of record values one batch may hold (a source stops a batch there): well inside the
/// 32-bit offsets of a batch's columns, whatever `max_offsets_per_trigger` or `once` asks.
pub const MAX_BATCH_BYTES: usize = 1 << 30;

/// Bytes one record may have. A longer one is a dead letter, with its first KiB.
pub const MAX_RECORD_BYTES: usize = 64 << 20;

/// Where one record came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Position {
    /// The source's stream: the index of the record's topic in the source's topic list (0 for
    /// a file).
    pub stream: u16,
    pub partition: i32,
    pub offset: i64,
    /// 1-based line in a recorded-events file; 0 for Kafka.
    pub line: u64,
}

/// A record the source itself could not decode (a broken envelope line).
#[derive(Debug, Clone)]
pub struct BadRecord {
    pub position: Position,
    pub error: String,
    pub raw: Vec<u8>,
}

/// One batch of raw records with their positions.
#[derive(Debug, Default)]
pub struct SourceBatch {
    pub records: RawBatch,
    pub positions: Vec<Position>,
    pub bad: Vec<BadRecord>,
    /// Event time the source read beside its records: a stream (by [`Position`]'s stream and
    /// partition) and the largest event time it reported, `watermark::NONE` for none. A group's
    /// stage-1 tasks report theirs through the shuffle (`repartition.rs`), with or without
    /// partials; every other source has none.
    pub lanes: Vec<(crate::watermark::PartitionId, i64)>,
}

impl SourceBatch {
    /// Records in the batch (not counting ones the source could not decode).
    pub fn len(&self) -> usize {
        self.positions.len()
    }

    /// Bytes of the records' values and keys: what [`MAX_BATCH_BYTES`] caps.
    pub fn bytes(&self) -> usize {
        self.records.values.len() + self.records.keys.len()
    }

    /// No records, no undecodable lines and no event time: nothing for a batch to do.
    pub fn is_empty(&self) -> bool {
        self.positions.is_empty() && self.bad.is_empty() && self.lanes.is_empty()
    }

    /// Room for `n` records of ~128 bytes, so a batch's columns do not grow record by record;
    /// in `spare`'s columns, if the pipeline gave one back ([`Source::recycle`]): a batch's
    /// columns are megabytes, allocated afresh every few milliseconds otherwise, and each fresh
    /// allocation faults its pages in zeroed.
    pub(super) fn with_capacity(n: usize, spare: &mut Option<SourceBatch>) -> Self {
        let mut b = match spare.take() {
            Some(mut b) => {
                b.clear();
                b
            }
            None => Self::default(),
        };
        let r = &mut b.records;
        r.values.reserve(n * 128);
        r.value_ends.reserve(n);
        r.key_ends.reserve(n);
        r.timestamps.reserve(n);
        r.partitions.reserve(n);
        r.offsets.reserve(n);
        b.positions.reserve(n);
        b
    }

    fn clear(&mut self) {
        let r = &mut self.records;
        r.values.clear();
        r.value_ends.clear();
        r.keys.clear();
        r.key_ends.clear();
        r.timestamps.clear();
        r.partitions.clear();
        r.offsets.clear();
        r.headers.clear();
        self.positions.clear();
        self.bad.clear();
        self.lanes.clear();
    }

    /// Adds a record with its headers (name, value); one over [`MAX_RECORD_BYTES`] becomes a bad
    /// record instead, and so would one that did not fit the batch's columns (readers end a
    /// batch at [`MAX_BATCH_BYTES`], far below, so none does).
    fn push(
        &mut self,
        value: &[u8],
        key: &[u8],
        timestamp: i64,
        position: Position,
        headers: impl IntoIterator<Item = (String, Vec<u8>)>,
    ) {
        let r = &self.records;
        let fits = crate::columns::end_after(r.values.len(), value.len()).is_ok()
            && crate::columns::end_after(r.keys.len(), key.len()).is_ok();
        if value.len() + key.len() > MAX_RECORD_BYTES || !fits {
            let error = format!(
                "a record of {} bytes; records are at most {} MiB, batches at most {} MiB",
                value.len() + key.len(),
                MAX_RECORD_BYTES >> 20,
                MAX_BATCH_BYTES >> 20
            );
            self.bad.push(BadRecord { position, error, raw: value[..value.len().min(1 << 10)].to_vec() });
            return;
        }
        let index = self.len() as u32;
        self.records.headers.extend(headers.into_iter().map(|(name, value)| Header { index, name, value }));
        let r = &mut self.records;
        // Both fit: checked above.
        let pushed = crate::columns::push(&mut r.values, &mut r.value_ends, value)
            .and_then(|()| crate::columns::push(&mut r.keys, &mut r.key_ends, key));
        debug_assert!(pushed.is_ok());
        r.timestamps.push(timestamp);
        r.partitions.push(position.partition);
        r.offsets.push(position.offset);
        self.positions.push(position);
    }
}

/// Where a source stands: the start and the end of every batch in the offsets log.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "kebab-case")]
pub enum Offsets {
    /// The next unread byte and the lines read so far.
    Replay(ReplayPosition),
    /// The next offset to read in each partition.
    Kafka { partitions: Vec<TopicOffset> },
    /// The next offset to read in a dataset's embedded log.
    Log { next: u64 },
    /// A group's stage-2 task: the next offset in its repartition partition, and the last
    /// message taken from each stage-1 task (`repartition.rs`).
    Repartition { partitions: Vec<TopicOffset>, lanes: repartition::Lanes },
}

impl Offsets {
    /// How far `latest` is ahead of this position, per partition (`topic/partition`, or the
    /// dataset's `log`); records, never negative.
    pub fn lag(&self, latest: &Offsets) -> BTreeMap<String, u64> {
        match (self, latest) {
            (
                Offsets::Kafka { partitions: at } | Offsets::Repartition { partitions: at, .. },
                Offsets::Kafka { partitions: latest } | Offsets::Repartition { partitions: latest, .. },
            ) => at
                .iter()
                .map(|p| {
                    let high = latest
                        .iter()
                        .find(|l| l.topic == p.topic && l.partition == p.partition)
                        .map_or(p.offset, |l| l.offset);
                    (format!("{}/{}", p.topic, p.partition), high.saturating_sub(p.offset).max(0) as u64)
                })
                .collect(),
            (Offsets::Log { next }, Offsets::Log { next: end }) => {
                BTreeMap::from([("log".into(), end.saturating_sub(*next))])
            }
            _ => BTreeMap::new(),
        }
    }

    /// The error for being asked to read up to offsets of another kind of source.
    fn mismatch(&self, expected: &'static str) -> SourceError {
        SourceError::WrongOffsets { expected, found: self.kind() }
    }

    fn kind(&self) -> &'static str {
        match self {
            Offsets::Replay(_) => "replay",
            Offsets::Kafka { .. } => "kafka",
            Offsets::Log { .. } => "dataset",
            Offsets::Repartition { .. } => "repartition",
        }
    }
}

/// What a batch may read.
#[derive(Debug, Clone, Copy)]
pub struct Limit {
    /// At most this many records.
    pub records: usize,
    /// Stop at the end of what was available when the run started (triggers `once` and
    /// `available-now`); otherwise a batch takes what is there now and the stream never ends.
    pub bounded: bool,
}

/// A place records come from. Each source is a file beside this one that implements this trait,
/// and [`open`] is the one place that turns a pipeline's `[source]` into one: adding a source is
/// a new file and one arm there, never an edit to the driver. Only the methods whose answer
/// differs between sources lack a default.
pub trait Source: Send {
    /// Where the source stands: the end of what it has read.
    fn offsets(&self) -> Offsets;

    /// The next batch; `None` at the end of a bounded input. An unbounded source that has
    /// nothing new returns an empty batch after a short wait.
    fn next_batch(&mut self, limit: Limit) -> Result<Option<SourceBatch>, SourceError>;

    /// Reads exactly up to `end`, a batch's recorded end: the re-run of a planned batch. Offsets
    /// of another kind of source are [`SourceError::WrongOffsets`].
    fn read_until(&mut self, end: &Offsets) -> Result<SourceBatch, SourceError>;

    /// What the source reads, for progress (Spark's `description`).
    fn description(&self) -> String;

    /// Human names of the streams (`Position::stream` indexes them), for dead letters and
    /// late output.
    fn stream_names(&self) -> Vec<String>;

    /// Everything there is to read now, without waiting for more: how a side input (a join's
    /// table) is read when a batch is planned. A file's last line without its newline is read
    /// only when `to_the_end` (bounded input), as [`Source::next_batch`] does. A source that is
    /// never a side input has nothing to give.
    fn read_available(&mut self, _to_the_end: bool) -> Result<SourceBatch, SourceError> {
        Ok(SourceBatch::default())
    }

    /// Continuous mode's read: what has arrived, waiting up to `wait` for the first of it, at
    /// most `max` records; `None` at the end of a bounded input. A source without a way to wait
    /// for arrivals reads a bounded batch.
    fn poll(&mut self, max: usize, _wait: std::time::Duration) -> Result<Option<SourceBatch>, SourceError> {
        self.next_batch(Limit { records: max, bounded: true })
    }

    /// Takes back a batch the pipeline is done with, to read the next one into its columns. A
    /// source that builds its batches otherwise drops it.
    fn recycle(&mut self, _batch: SourceBatch) {}

    /// Tells the outside world how far the pipeline has committed (Kafka: the consumer group's
    /// offsets, for lag monitoring). Never read back: the checkpoint is the source of truth.
    fn committed(&mut self, _at: &Offsets) {}

    /// The latest position the source knows of, for progress: Kafka's high watermarks as last
    /// seen, a dataset's end; `None` for a file (read to its end, as Spark's file source).
    fn latest(&self) -> Option<Offsets> {
        None
    }

    /// Streams that hold the watermark back until they are heard from or idle: a group's
    /// stage-1 tasks, for its stage-2 task (`repartition.rs`); none for other sources.
    fn expected_streams(&self) -> Vec<crate::watermark::PartitionId> {
        Vec::new()
    }
}

/// Opens the source a pipeline names, at `at` (a checkpoint's offsets) or at its configured
/// start.
pub fn open(cfg: &SourceConfig, at: Option<&Offsets>, stop: Arc<AtomicBool>) -> Result<Box<dyn Source>, SourceError> {
    Ok(match (&cfg.kind, at) {
        (SourceKind::Replay { path, format }, None) => {
            Box::new(replay::ReplaySource::open(path, *format, ReplayPosition::default())?)
        }
        (SourceKind::Replay { path, format }, Some(Offsets::Replay(p))) => {
            Box::new(replay::ReplaySource::open(path, *format, *p)?)
        }
        (SourceKind::Kafka(k), None) => Box::new(kafka::KafkaSource::open(k, &[], stop)?),
        (SourceKind::Kafka(k), Some(Offsets::Kafka { partitions })) => {
            Box::new(kafka::KafkaSource::open(k, partitions, stop)?)
        }
        (SourceKind::Repartition(r), None) => Box::new(repartition::RepartitionSource::open(r, None, stop)?),
        (SourceKind::Repartition(r), Some(Offsets::Repartition { partitions, lanes })) => {
            Box::new(repartition::RepartitionSource::open(r, Some((partitions, lanes)), stop)?)
        }
        (SourceKind::Dataset(d), at) => {
            let (Some(dir), next) = (&d.log, at) else { return Err(SourceError::NoProject(d.name.clone())) };
            let next = match next {
                None => 0,
                Some(Offsets::Log { next }) => *next,
                Some(found) => return Err(SourceError::WrongOffsets { expected: "dataset", found: found.kind() }),
            };
            Box::new(log::LogSource::open(d, dir, next)?)
        }
        (kind, Some(found)) => return Err(SourceError::WrongOffsets { expected: kind.name(), found: found.kind() }),
    })
}
