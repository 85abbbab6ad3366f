//! Reading: records moved from the partitions' queues (and the consumer's shared queue) into a
//! batch, up to a plan's end per partition or, in continuous mode, as they arrive.
//!
//! Invariant: a partition's next offset moves only past records put in the batch, or past
//! offsets the client shows hold none; the first record at or past a planned end is held for
//! the next batch, so a batch read to a recorded end holds exactly the records below it.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use rdkafka::Offset;
use rdkafka::consumer::Consumer;
use rdkafka::message::{BorrowedMessage, Headers, Message, OwnedMessage};

use super::{KafkaSource, PLAN_ROOM_MAX, POLL, Part, STALL_WARN};
use crate::kafka::KafkaError;
use crate::source::{MAX_BATCH_BYTES, Position, SourceBatch};

impl KafkaSource {
    /// Reads what has arrived, up to `max` records, waiting at most `wait` for the first one:
    /// continuous mode, which has no planned ends. Each call starts from the next partition,
    /// so none waits behind a busy one.
    pub fn poll_available(&mut self, max: usize, wait: Duration) -> Result<SourceBatch, KafkaError> {
        let mut batch = SourceBatch::default();
        let deadline = Instant::now() + wait;
        let n = self.parts.len();
        loop {
            self.looked = self.bell.seen();
            self.serve_shared(None, &mut batch)?;
            for k in 0..n {
                self.take((self.turn + k) % n, i64::MAX, max, &mut batch)?;
            }
            self.turn = (self.turn + 1) % n.max(1);
            let left = deadline.saturating_duration_since(Instant::now());
            if !batch.is_empty() || left.is_zero() {
                return Ok(batch);
            }
            self.check_stop()?;
            self.bell.wait(self.looked, left.min(POLL));
        }
    }

    pub(super) fn read_to(&mut self, ends: &[i64]) -> Result<SourceBatch, KafkaError> {
        // Room for the whole plan (offsets without records only leave some unused), so the
        // columns do not grow, and copy, record by record.
        let planned: i64 = self.parts.iter().zip(ends).map(|(p, &end)| (end - p.next).max(0)).sum();
        let mut batch =
            SourceBatch::with_capacity(usize::try_from(planned).unwrap_or(0).min(PLAN_ROOM_MAX), &mut self.spare);
        let mut heard = Instant::now();
        loop {
            self.looked = self.bell.seen();
            let before = batch.len();
            self.serve_shared(Some(ends), &mut batch)?;
            for (i, &end) in ends.iter().enumerate() {
                self.take(i, end, usize::MAX, &mut batch)?;
            }
            let mut open = self.parts.iter().zip(ends).filter(|(p, end)| p.next < **end).count();
            // Past the byte cap the batch ends where each partition stands: its recorded end
            // says so, and a re-run reads exactly that.
            if open == 0 || batch.bytes() >= MAX_BATCH_BYTES {
                return Ok(batch);
            }
            self.check_stop()?;
            if batch.len() > before {
                heard = Instant::now();
                continue;
            }
            if self.bell.wait(self.looked, POLL) {
                continue;
            }
            // Offsets without records (transaction markers, compaction) are skipped by the
            // client: its position tells where a partition really stands.
            open -= self.settle_by_position(ends)?;
            if open > 0 && heard.elapsed() >= STALL_WARN {
                tracing::warn!(
                    "kafka: no records for {:?} while {open} partitions have planned records to read \
                     (broker unavailable?); the client keeps retrying",
                    heard.elapsed()
                );
                heard = Instant::now();
            }
            if open == 0 {
                return Ok(batch);
            }
        }
    }

    /// Moves partition `i`'s records below `end` into `batch`, without waiting, until the
    /// partition reaches `end`, its queue is empty, or the batch holds `max` records or reaches
    /// its byte cap. The first record at or past `end` is held for the next batch, so nothing is
    /// polled past it.
    fn take(&mut self, i: usize, end: i64, max: usize, batch: &mut SourceBatch) -> Result<(), KafkaError> {
        let Part { stream, next, queue, held, .. } = &mut self.parts[i];
        let mut failed = None;
        while *next < end && batch.len() < max && batch.bytes() < MAX_BATCH_BYTES {
            if let Some(h) = held.front() {
                if h.offset() >= end {
                    *next = end;
                    break;
                }
                push_message(batch, *stream, h);
                *next = h.offset() + 1;
                held.pop_front();
                continue;
            }
            match queue.poll(Duration::ZERO) {
                None => break,
                Some(Err(e)) => {
                    failed = Some(e);
                    break;
                }
                Some(Ok(m)) => accept(*stream, next, held, end, m, batch),
            }
        }
        match failed {
            Some(e) => self.consumer_error(e),
            None => Ok(()),
        }
    }

    /// Serves the consumer's shared queue: its events and errors, and any record fetched before
    /// the partitions were split (it comes before all of its partition's own queue).
    fn serve_shared(&mut self, ends: Option<&[i64]>, batch: &mut SourceBatch) -> Result<(), KafkaError> {
        loop {
            let m = match self.consumer.poll(Duration::ZERO) {
                None => return Ok(()),
                Some(Err(e)) => {
                    self.consumer_error(e)?;
                    continue;
                }
                Some(Ok(m)) => m,
            };
            let Some(i) = self.part_of(m.topic(), m.partition()) else { continue };
            let end = ends.map_or(i64::MAX, |e| e[i]);
            let Part { stream, next, held, .. } = &mut self.parts[i];
            if held.is_empty() {
                accept(*stream, next, held, end, m, batch);
            } else if m.offset() >= *next {
                held.push_back(m.detach());
            }
        }
    }

    /// Which of the assigned partitions a message is from.
    fn part_of(&self, topic: &str, partition: i32) -> Option<usize> {
        let stream = self.topics.iter().position(|t| t == topic)? as u16;
        self.parts.binary_search_by_key(&(stream, partition), |p| (p.stream, p.partition)).ok()
    }

    fn settle_by_position(&mut self, ends: &[i64]) -> Result<usize, KafkaError> {
        let positions = match self.consumer.position() {
            Ok(p) => p,
            Err(_) => return Ok(0),
        };
        let mut settled = 0;
        for (i, p) in self.parts.iter_mut().enumerate() {
            if p.next >= ends[i] || !p.held.is_empty() {
                continue;
            }
            let topic = &self.topics[p.stream as usize];
            if let Some(Offset::Offset(at)) = positions.find_partition(topic, p.partition).map(|e| e.offset())
                && at >= ends[i]
            {
                p.next = ends[i];
                settled += 1;
            }
        }
        Ok(settled)
    }
}

/// A record polled from partition `stream`'s queue while it reads towards `end`: into the batch
/// if below `end` (a record below `next` is a redelivery and dropped), else held.
fn accept(
    stream: u16,
    next: &mut i64,
    held: &mut VecDeque<OwnedMessage>,
    end: i64,
    m: BorrowedMessage<'_>,
    batch: &mut SourceBatch,
) {
    let offset = m.offset();
    if offset < *next {
        return;
    }
    if offset >= end {
        held.push_back(m.detach());
        *next = end.max(*next);
    } else {
        push_message(batch, stream, &m);
        *next = offset + 1;
    }
}

fn push_message<M: Message>(batch: &mut SourceBatch, stream: u16, m: &M) {
    let headers = m.headers().into_iter().flat_map(|hs| {
        hs.iter().map(|h| (h.key.to_string(), h.value.unwrap_or_default().to_vec())).collect::<Vec<_>>()
    });
    let pos = Position { stream, partition: m.partition(), offset: m.offset(), line: 0 };
    let ts = m.timestamp().to_millis().unwrap_or(-1);
    batch.push(m.payload().unwrap_or_default(), m.key().unwrap_or_default(), ts, pos, headers);
}
