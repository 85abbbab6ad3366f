//! Records of one partition that arrived past its planned end, held for the next batch.
//!
//! They are kept in columns, the way a batch keeps its records, so holding one costs a copy and
//! no allocation: with many partitions and a small share of `max_offsets_per_trigger` each,
//! most records of a fetch wait here for a few batches. Offsets only grow: the records are
//! taken in the order they came.

use std::collections::VecDeque;

use rdkafka::message::{Headers, Message};

use crate::source::{Position, SourceBatch};

#[derive(Default)]
pub(super) struct Early {
    values: Vec<u8>,
    /// End of each record's value in `values`, then of its key in `keys`.
    value_ends: Vec<usize>,
    keys: Vec<u8>,
    key_ends: Vec<usize>,
    timestamps: Vec<i64>,
    offsets: Vec<i64>,
    /// (record, name, value), by record.
    headers: VecDeque<(usize, String, Vec<u8>)>,
    /// Records already taken from the front.
    taken: usize,
}

impl Early {
    pub(super) fn len(&self) -> usize {
        self.offsets.len() - self.taken
    }

    pub(super) fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The offset of the first record held.
    pub(super) fn first_offset(&self) -> Option<i64> {
        self.offsets.get(self.taken).copied()
    }

    pub(super) fn hold<M: Message>(&mut self, m: &M) {
        let i = self.offsets.len();
        if let Some(hs) = m.headers() {
            self.headers.extend(hs.iter().map(|h| (i, h.key.to_string(), h.value.unwrap_or_default().to_vec())));
        }
        self.values.extend_from_slice(m.payload().unwrap_or_default());
        self.value_ends.push(self.values.len());
        self.keys.extend_from_slice(m.key().unwrap_or_default());
        self.key_ends.push(self.keys.len());
        self.timestamps.push(m.timestamp().to_millis().unwrap_or(-1));
        self.offsets.push(m.offset());
    }

    /// Moves the first record into `batch` (as from `stream`, `partition`); returns its offset.
    pub(super) fn take_into(&mut self, batch: &mut SourceBatch, stream: u16, partition: i32) -> Option<i64> {
        let i = self.taken;
        let offset = *self.offsets.get(i)?;
        let span = |ends: &[usize]| if i == 0 { 0 } else { ends[i - 1] }..ends[i];
        let mut headers = Vec::new();
        while self.headers.front().is_some_and(|h| h.0 == i) {
            if let Some((_, name, value)) = self.headers.pop_front() {
                headers.push((name, value));
            }
        }
        let position = Position { stream, partition, offset, line: 0 };
        let (value, key) = (&self.values[span(&self.value_ends)], &self.keys[span(&self.key_ends)]);
        batch.push(value, key, self.timestamps[i], position, headers);
        self.taken += 1;
        if self.taken * 2 >= self.offsets.len() && self.taken >= COMPACT_AFTER.min(self.offsets.len()) {
            self.compact();
        }
        Some(offset)
    }

    /// Drops the records taken, keeping the columns' room. Done once they are at least half of
    /// what is held, so each record is moved at most once on average, however records come and
    /// go.
    fn compact(&mut self) {
        let n = self.taken;
        let (v, k) = (self.value_ends[n - 1], self.key_ends[n - 1]);
        self.values.drain(..v);
        self.keys.drain(..k);
        self.value_ends.drain(..n);
        self.key_ends.drain(..n);
        self.value_ends.iter_mut().for_each(|e| *e -= v);
        self.key_ends.iter_mut().for_each(|e| *e -= k);
        self.timestamps.drain(..n);
        self.offsets.drain(..n);
        self.headers.iter_mut().for_each(|h| h.0 -= n);
        self.taken = 0;
    }
}

/// Records taken before the columns are compacted (unless all are taken: then at once, which
/// costs nothing).
const COMPACT_AFTER: usize = 4_096;
