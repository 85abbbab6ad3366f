//! The Kafka source as a [`Source`]: the engine's view of [`KafkaSource`], whose own methods
//! (`offsets`, `next_batch`, `read_until`, …) speak in partitions and broker errors, which
//! `weir record` and a project's reader also use directly.

use std::time::Duration;

use super::KafkaSource;
use crate::kafka::KafkaError;
use crate::source::{Limit, Offsets, Source, SourceBatch, SourceError};

impl Source for KafkaSource {
    fn offsets(&self) -> Offsets {
        Offsets::Kafka { partitions: KafkaSource::offsets(self) }
    }

    fn next_batch(&mut self, limit: Limit) -> Result<Option<SourceBatch>, SourceError> {
        Ok(KafkaSource::next_batch(self, limit)?)
    }

    fn read_until(&mut self, end: &Offsets) -> Result<SourceBatch, SourceError> {
        match end {
            Offsets::Kafka { partitions } => Ok(KafkaSource::read_until(self, partitions)?),
            found => Err(found.mismatch("kafka")),
        }
    }

    fn description(&self) -> String {
        format!("kafka {}", self.topics().join(", "))
    }

    fn stream_names(&self) -> Vec<String> {
        self.topics().to_vec()
    }

    fn read_available(&mut self, _to_the_end: bool) -> Result<SourceBatch, SourceError> {
        Ok(KafkaSource::read_available(self)?)
    }

    /// Never ends: a stop request while waiting gives an empty batch, so the caller commits
    /// what went through before it stops.
    fn poll(&mut self, max: usize, wait: Duration) -> Result<Option<SourceBatch>, SourceError> {
        match self.poll_available(max, wait) {
            Ok(b) => Ok(Some(b)),
            Err(KafkaError::Stopped) => Ok(Some(SourceBatch::default())),
            Err(e) => Err(e.into()),
        }
    }

    fn recycle(&mut self, batch: SourceBatch) {
        self.spare = Some(batch);
    }

    fn committed(&mut self, at: &Offsets) {
        if let Offsets::Kafka { partitions } = at {
            self.commit_group_offsets(partitions);
        }
    }

    fn latest(&self) -> Option<Offsets> {
        Some(Offsets::Kafka { partitions: KafkaSource::latest(self) })
    }
}
