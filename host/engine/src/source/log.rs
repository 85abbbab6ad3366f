//! The dataset source: a flow reading a dataset in the embedded log (`dataset/log.rs`). Its
//! position is the next offset, so resuming is a seek and re-reading up to a recorded end reads
//! the same records (the log only grows at its end). In a bounded project the source reads until
//! every flow that writes the dataset has finished and it has read all they wrote; a bounded
//! trigger (`once`, `available-now`) elsewhere reads up to the end the log had when the source
//! opened; otherwise it waits for appends.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use super::{Limit, MAX_BATCH_BYTES, Offsets, Position, Source, SourceBatch, SourceError};
use crate::dataset::log::{Log, LogError};
use crate::pipeline::DatasetRef;

/// How long an unbounded read waits for an append before it returns an empty batch (so the
/// trigger loop can see a stop request and idleness).
const WAIT: Duration = Duration::from_millis(100);

pub struct LogSource {
    log: Arc<Log>,
    /// The dataset's name, for dead letters.
    name: String,
    next: u64,
    /// Where a bounded trigger stops: the end when the source opened.
    end_at_open: u64,
    /// Read until the dataset's writers are done (a bounded project).
    until_closed: bool,
    spare: Option<SourceBatch>,
}

impl LogSource {
    pub fn open(d: &DatasetRef, dir: &Path, at: u64) -> Result<Self, LogError> {
        let log = Log::open(dir, d.table)?;
        let end_at_open = log.end();
        Ok(Self { log, name: d.name.clone(), next: at, end_at_open, until_closed: d.bounded, spare: None })
    }

    fn next_records(&mut self, limit: Limit) -> Result<Option<SourceBatch>, LogError> {
        let end = if self.until_closed {
            match self.log.wait_past(self.next, WAIT) {
                (end, true) if end <= self.next => return Ok(None),
                (end, _) => end,
            }
        } else if limit.bounded {
            if self.next >= self.end_at_open {
                return Ok(None);
            }
            self.end_at_open
        } else {
            self.log.wait_past(self.next, WAIT).0
        };
        self.read(end, limit.records).map(Some)
    }

    fn read(&mut self, end: u64, max: usize) -> Result<SourceBatch, LogError> {
        let n = end.saturating_sub(self.next).min(max as u64) as usize;
        let mut batch = SourceBatch::with_capacity(n.min(1 << 16), &mut self.spare);
        // A few thousand at a time, so a batch's bytes stay under the cap without reading far
        // past it.
        while self.next < end && batch.len() < max && batch.bytes() < MAX_BATCH_BYTES {
            let want = (max - batch.len()).min(4_096);
            let mut next = self.next;
            let read = self.log.read_with(self.next, end, want, |offset, timestamp, key, value| {
                let position = Position { stream: 0, partition: 0, offset: offset as i64, line: 0 };
                batch.push(value, key, timestamp, position, []);
                next = offset + 1;
            })?;
            self.next = next;
            if read == 0 {
                break;
            }
        }
        Ok(batch)
    }
}

impl Source for LogSource {
    fn offsets(&self) -> Offsets {
        Offsets::Log { next: self.next }
    }

    fn next_batch(&mut self, limit: Limit) -> Result<Option<SourceBatch>, SourceError> {
        Ok(self.next_records(limit)?)
    }

    /// Exactly up to `end`, a batch's recorded end.
    fn read_until(&mut self, end: &Offsets) -> Result<SourceBatch, SourceError> {
        match end {
            Offsets::Log { next } => Ok(self.read(*next, usize::MAX)?),
            found => Err(found.mismatch("dataset")),
        }
    }

    fn description(&self) -> String {
        format!("dataset {}", self.name)
    }

    fn stream_names(&self) -> Vec<String> {
        vec![self.name.clone()]
    }

    /// Everything there is now, without waiting.
    fn read_available(&mut self, _to_the_end: bool) -> Result<SourceBatch, SourceError> {
        Ok(self.read(self.log.end(), usize::MAX)?)
    }

    fn recycle(&mut self, batch: SourceBatch) {
        self.spare = Some(batch);
    }

    /// The log's end now.
    fn latest(&self) -> Option<Offsets> {
        Some(Offsets::Log { next: self.log.end() })
    }
}
