//! Stage 2's source in a two-stage group (`docs/scale-out.md`): one partition of the group's
//! repartition topic, read through the Kafka source, each message (`shuffle.rs`) opened
//! into its partials. A partial becomes a record whose value is its end and accumulator, whose
//! key is its group key and whose timestamp is its start: the rows the window operators take
//! over partials (`aggregate/merged.rs`), as a dataset's rows become events without a parser.
//!
//! **Replays are skipped here.** A stage-1 batch that re-runs writes its messages again, under
//! the same (lane, batch, part). Where this source stands is the Kafka offset *and*, per lane,
//! the last message it took ([`Seen`]); a message at or before it is a replay and is dropped,
//! as is one of an older stage-1 owner (epoch) once a newer one has written, and one of an
//! older incarnation of the stage-1 task (its identity). That position is the batch's plan and
//! is committed with the state, atomically, so "applied" and "skipped" never disagree with the
//! state after a crash. A message after a gap (a later part before an earlier one) is skipped
//! too: it only happens when a delivery failed, and the batch is then written again whole.
//!
//! **Event time per lane.** Each record's position names its lane as its stream (lane + 1;
//! stream 0 is the topic itself, for messages that name no lane), so the watermark is kept per
//! stage-1 task, and every message tells the batch its lane's largest event time
//! ([`SourceBatch::lanes`]), records or not. The watermark waits for every lane
//! ([`RepartitionSource::expected`]): stage-1 tasks start at different times, and one that has
//! not written yet may hold the earliest events.

use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use serde::{Deserialize, Serialize};

use super::kafka::{KafkaSource, TopicOffset};
use super::{BadRecord, Limit, Offsets, Position, Source, SourceBatch, SourceError};
use crate::columns;
use crate::kafka::KafkaError;
use crate::pipeline::RepartitionConfig;
use crate::shuffle::{self, Header, partial_row};
use crate::watermark::PartitionId;

/// The last message taken from a lane.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Seen {
    pub lane: u32,
    /// The stage-1 task's identity (its checkpoint's UUID, version 7: a newer incarnation sorts
    /// after an older one).
    pub task: String,
    pub epoch: u64,
    pub batch: u64,
    /// The part expected next, and the batch's parts.
    pub next_part: u32,
    pub parts: u32,
}

/// Per lane, the last message taken, by lane (a list: a position is JSON, whose map keys are
/// strings).
pub type Lanes = Vec<Seen>;

fn seen(lanes: &Lanes, lane: u32) -> Option<&Seen> {
    lanes.binary_search_by_key(&lane, |s| s.lane).ok().map(|i| &lanes[i])
}

fn set_seen(lanes: &mut Lanes, s: Seen) {
    match lanes.binary_search_by_key(&s.lane, |x| x.lane) {
        Ok(i) => lanes[i] = s,
        Err(i) => lanes.insert(i, s),
    }
}

/// What to do with a message.
#[derive(Debug, PartialEq, Eq)]
enum Admit {
    Take,
    /// A replay, an older owner's or incarnation's, or past a gap: dropped.
    Skip(&'static str),
}

pub struct RepartitionSource {
    inner: KafkaSource,
    /// The stage-1 tasks: the input topic's partitions.
    lanes: u32,
    /// This task's partition of the repartition topic.
    partition: i32,
    seen: Lanes,
}

impl RepartitionSource {
    pub fn open(
        cfg: &RepartitionConfig,
        at: Option<(&[TopicOffset], &Lanes)>,
        stop: Arc<AtomicBool>,
    ) -> Result<Self, KafkaError> {
        let partition = match cfg.kafka.partitions.as_deref() {
            Some([(_, p)]) => *p,
            _ => return Err(KafkaError::Topic { topic: cfg.kafka.topics.join(","), message: "one partition".into() }),
        };
        let inner = KafkaSource::open(&cfg.kafka, at.map_or(&[], |a| a.0), stop)?;
        Ok(Self { inner, lanes: cfg.lanes, partition, seen: at.map(|a| a.1.clone()).unwrap_or_default() })
    }

    fn lane(&self, lane: u32) -> PartitionId {
        (u16::try_from(lane + 1).unwrap_or(u16::MAX), self.partition)
    }

    /// The partials of `raw`'s messages that are not replays, as records; messages that are
    /// not Weir's go to the dead letters.
    fn open_messages(&mut self, raw: SourceBatch) -> Result<SourceBatch, SourceError> {
        let mut out = SourceBatch { bad: raw.bad, ..SourceBatch::default() };
        for (i, value) in columns::items(&raw.records.values, &raw.records.value_ends).enumerate() {
            let at = raw.positions[i];
            let topic_position = Position { stream: 0, ..at };
            let (header, partials) = match shuffle::decode(value) {
                Ok(m) => m,
                Err(e) => {
                    out.bad.push(bad(topic_position, format!("not a repartition message: {e}"), value));
                    continue;
                }
            };
            if header.lane >= self.lanes {
                let why = format!("from input partition {}, but the input has {} partitions", header.lane, self.lanes);
                out.bad.push(bad(topic_position, why, value));
                continue;
            }
            let task = uuid::Uuid::from_u128(header.task).to_string();
            match admit(seen(&self.seen, header.lane), &task, &header)? {
                Admit::Skip(why) => {
                    tracing::debug!(lane = header.lane, batch = header.batch, part = header.part, "skipped: {why}");
                    continue;
                }
                Admit::Take => {}
            }
            let taken = Seen {
                lane: header.lane,
                task,
                epoch: header.epoch,
                batch: header.batch,
                next_part: header.part + 1,
                parts: header.parts,
            };
            set_seen(&mut self.seen, taken);
            let lane = self.lane(header.lane);
            out.lanes.push((lane, header.max_time));
            let position = Position { stream: lane.0, partition: self.partition, offset: at.offset, line: 0 };
            for p in partials {
                out.push(&partial_row(p.end, p.acc), p.key, p.start, position, std::iter::empty());
            }
        }
        self.inner.spare = Some(raw_spare(raw.records, raw.positions));
        Ok(out)
    }
}

impl Source for RepartitionSource {
    fn offsets(&self) -> Offsets {
        Offsets::Repartition { partitions: self.inner.offsets(), lanes: self.seen.clone() }
    }

    fn next_batch(&mut self, limit: Limit) -> Result<Option<SourceBatch>, SourceError> {
        match self.inner.next_batch(limit)? {
            None => Ok(None),
            Some(raw) => self.open_messages(raw).map(Some),
        }
    }

    fn read_until(&mut self, end: &Offsets) -> Result<SourceBatch, SourceError> {
        let Offsets::Repartition { partitions, lanes } = end else { return Err(end.mismatch("repartition")) };
        let raw = self.inner.read_until(partitions)?;
        let batch = self.open_messages(raw)?;
        if &self.seen != lanes {
            return Err(SourceError::Shuffle(format!(
                "repartition partition {}: reading a planned batch again took other messages than its plan \
                 recorded (the topic changed under the group)",
                self.partition
            )));
        }
        Ok(batch)
    }

    fn description(&self) -> String {
        format!("repartition {}", self.inner.topics().join(", "))
    }

    /// The streams a position may name: the topic, then one per lane.
    fn stream_names(&self) -> Vec<String> {
        let topic = self.inner.topics().first().cloned().unwrap_or_default();
        std::iter::once(topic.clone())
            .chain((0..self.lanes).map(|l| format!("{topic} (from input partition {l})")))
            .collect()
    }

    // Its batches are built from the Kafka source's, whose columns it gives back; a side input
    // it never is: `read_available` and `recycle` keep their defaults.

    fn committed(&mut self, at: &Offsets) {
        if let Offsets::Repartition { partitions, .. } = at {
            self.inner.commit_group_offsets(partitions);
        }
    }

    fn latest(&self) -> Option<Offsets> {
        Some(Offsets::Kafka { partitions: self.inner.latest() })
    }

    /// Every lane, as the watermark knows it: it waits for each until it is heard from or idle.
    fn expected_streams(&self) -> Vec<PartitionId> {
        (0..self.lanes).map(|l| self.lane(l)).collect()
    }
}

/// The raw batch's columns, given back to the Kafka source to read the next batch into.
fn raw_spare(records: crate::plugin::RawBatch, positions: Vec<Position>) -> SourceBatch {
    SourceBatch { records, positions, bad: Vec::new(), lanes: Vec::new() }
}

fn bad(position: Position, error: String, raw: &[u8]) -> BadRecord {
    BadRecord { position, error, raw: raw[..raw.len().min(1 << 10)].to_vec() }
}

/// Whether to take a message, given the last one taken from its lane.
fn admit(last: Option<&Seen>, task: &str, h: &Header) -> Result<Admit, SourceError> {
    let Some(s) = last.filter(|s| s.task.as_str() == task) else {
        return Ok(match last {
            // An older incarnation of the stage-1 task (a checkpoint started over): gone for good.
            Some(s) if task < s.task.as_str() => Admit::Skip("an older incarnation of the stage-1 task"),
            // The lane's first message, or a new incarnation's: it starts at a batch's first part.
            _ if h.part == 0 => Admit::Take,
            _ => Admit::Skip("a later part before the first"),
        });
    };
    if h.epoch < s.epoch {
        return Ok(Admit::Skip("an older owner's, after a newer one wrote"));
    }
    if (h.batch, h.part) < (s.batch, s.next_part) {
        return Ok(Admit::Skip("a replay"));
    }
    if h.batch == s.batch && h.part == s.next_part {
        if h.parts != s.parts {
            return Err(SourceError::Shuffle(format!(
                "repartition: batch {} of input partition {} came in {} parts, then in {}: stage-1 tasks of \
                 different Weir builds wrote it",
                h.batch, h.lane, s.parts, h.parts
            )));
        }
        return Ok(Admit::Take);
    }
    if h.batch > s.batch && h.part == 0 {
        if s.next_part < s.parts {
            tracing::warn!(
                "repartition: input partition {}'s batch {} was taken in {} of its {} parts before batch {} began",
                h.lane,
                s.batch,
                s.next_part,
                s.parts,
                h.batch
            );
        }
        return Ok(Admit::Take);
    }
    Ok(Admit::Skip("a later part before an earlier one"))
}

#[cfg(test)]
mod tests {
    use super::*;

    const TASK: &str = "0190a000-0000-7000-8000-000000000001";

    fn header(epoch: u64, batch: u64, part: u32, parts: u32) -> Header {
        Header { lane: 0, task: 0, epoch, batch, part, parts, max_time: 0 }
    }

    /// Feeds messages (epoch, batch, part, parts) in order; returns which were taken.
    fn feed(msgs: &[(u64, u64, u32, u32)]) -> Vec<bool> {
        let mut seen: Option<Seen> = None;
        msgs.iter()
            .map(|&(e, b, p, n)| {
                let h = header(e, b, p, n);
                let take = admit(seen.as_ref(), TASK, &h).unwrap() == Admit::Take;
                if take {
                    seen = Some(Seen { lane: 0, task: TASK.into(), epoch: e, batch: b, next_part: p + 1, parts: n });
                }
                take
            })
            .collect()
    }

    #[test]
    fn a_re_run_batch_is_taken_once_whichever_attempt_comes_first() {
        // Batch 0 in three parts; the first attempt died after two, the re-run writes all three.
        let taken = feed(&[(1, 0, 0, 3), (1, 0, 1, 3), (2, 0, 0, 3), (2, 0, 1, 3), (2, 0, 2, 3), (2, 1, 0, 1)]);
        assert_eq!(taken, vec![true, true, false, false, true, true]);
    }

    #[test]
    fn an_older_owner_after_a_newer_one_and_parts_after_a_gap_are_skipped() {
        // The zombie (epoch 1) writes batch 4 after the new owner (2) wrote batches 4 and 5.
        assert_eq!(feed(&[(2, 4, 0, 1), (2, 5, 0, 1), (1, 4, 0, 1), (1, 6, 0, 1)]), vec![true, true, false, false]);
        // Part 1 before part 0 (a failed delivery): skipped, then the batch whole again.
        assert_eq!(feed(&[(1, 0, 1, 2), (1, 0, 0, 2), (1, 0, 1, 2)]), vec![false, true, true]);
        assert_eq!(feed(&[(1, 0, 0, 1), (1, 1, 1, 2), (1, 1, 0, 2), (1, 1, 1, 2)]), vec![true, false, true, true]);
    }

    /// A position travels as JSON, through `serde_json::Value` too (the group's record).
    #[test]
    fn a_position_round_trips_through_json() {
        let mut lanes = Lanes::new();
        for lane in [3, 0, 5] {
            set_seen(&mut lanes, Seen { lane, task: TASK.into(), epoch: 2, batch: 7, next_part: 1, parts: 1 });
        }
        assert_eq!(lanes.iter().map(|s| s.lane).collect::<Vec<_>>(), vec![0, 3, 5]);
        assert_eq!(seen(&lanes, 3).map(|s| s.batch), Some(7));
        let at = super::super::Offsets::Repartition {
            partitions: vec![TopicOffset { topic: "t".into(), partition: 1, offset: 9 }],
            lanes,
        };
        let value = serde_json::to_value(&at).unwrap();
        assert_eq!(serde_json::from_value::<super::super::Offsets>(value).unwrap(), at);
    }

    #[test]
    fn a_batch_whose_parts_change_is_refused() {
        let seen = Seen { lane: 0, task: TASK.into(), epoch: 1, batch: 3, next_part: 1, parts: 2 };
        assert!(admit(Some(&seen), TASK, &header(1, 3, 1, 3)).is_err());
    }

    #[test]
    fn a_new_incarnation_starts_the_lane_over_and_an_old_one_is_gone() {
        let seen = Seen { lane: 0, task: TASK.into(), epoch: 9, batch: 100, next_part: 1, parts: 1 };
        let newer = "0190a000-0000-7000-8000-000000000002";
        let older = "0190a000-0000-7000-8000-000000000000";
        assert_eq!(admit(Some(&seen), newer, &header(1, 0, 0, 1)).unwrap(), Admit::Take);
        assert_ne!(admit(Some(&seen), older, &header(1, 0, 0, 1)).unwrap(), Admit::Take);
    }
}
