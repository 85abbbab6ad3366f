//! The shuffle between a two-stage group's stages: where partials go and how they travel.
//!
//! A stage-1 task (one per input partition, its *lane*) folds each batch into partial
//! accumulators per (window, key) (`aggregate/partials.rs`) and writes them to the group's
//! repartition topic, every partial to the partition its key routes to ([`route`]), in messages
//! of at most [`MESSAGE_BYTES`] (`sink/repartition.rs`). Every partition gets at least one
//! message per stage-1 batch, even without partials: each message carries the batch's largest
//! event time, which is how the watermark crosses the shuffle. The stage-2 task of a partition
//! (`source/repartition.rs`) merges what it reads into its state.
//!
//! A message is named by (lane, batch id, part): a re-run stage-1 batch writes the same
//! partials in the same messages under the same names, which is what lets stage 2 skip a
//! replay. `task` is the stage-1 task's identity (a new one restarts its batch ids), `epoch` its
//! owner's, for fencing an older one.
//!
//! Wire format 1, integers little-endian:
//! `WRS1` lane (u32) task (u128) epoch (u64) batch (u64) part (u32) parts (u32)
//! max-event-time (i64) count (u32), then `count` partials: start (i64) end (i64) key-length (u32) key
//! accumulator-length (u32) accumulator. `MESSAGE_BYTES` is part of the format: a build that
//! cut messages elsewhere would re-run a batch into other parts.

use crate::bytes::ByteReader;
use std::hash::Hasher;

/// The first bytes of every message: Weir's repartition shuffle, format 1.
const MAGIC: &[u8; 4] = b"WRS1";

/// Bytes of a message before its partials.
const HEADER_BYTES: usize = 4 + 4 + 16 + 8 + 8 + 4 + 4 + 8 + 4;

/// Bytes of a partial beyond its key and accumulator.
const PARTIAL_OVERHEAD: usize = 8 + 8 + 4 + 4;

/// The most bytes of partials one message carries (a single larger partial travels alone):
/// well inside the 1 MB that brokers accept by default (`message.max.bytes`).
pub const MESSAGE_BYTES: usize = 512 << 10;

/// No event time: a batch without events.
pub const NO_TIME: i64 = i64::MIN;

/// The group's repartition topic.
pub fn repartition_topic(group: &str) -> String {
    format!("weir.{group}.repartition")
}

/// The group's changelog topic: stage-2 state, one partition per stage-2 task.
pub fn changelog_topic(group: &str) -> String {
    format!("weir.{group}.changelog")
}

/// A message's name and what it says of its batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    /// The stage-1 task: its input partition.
    pub lane: u32,
    /// The stage-1 task's identity (its checkpoint's UUID).
    pub task: u128,
    /// Its owner's epoch when it wrote the message.
    pub epoch: u64,
    pub batch: u64,
    /// This message's index among the batch's messages to this partition, and their number.
    pub part: u32,
    pub parts: u32,
    /// The largest event time of the batch's events ([`NO_TIME`]: none).
    pub max_time: i64,
}

/// One partial accumulator: a window's (or a session's) `[start, end)` and group key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Partial<'a> {
    pub start: i64,
    pub end: i64,
    pub key: &'a [u8],
    pub acc: &'a [u8],
}

impl Partial<'_> {
    fn bytes(&self) -> usize {
        PARTIAL_OVERHEAD + self.key.len() + self.acc.len()
    }
}

/// The repartition partition of a partial, out of `partitions`: its key's, so that every
/// partial of a key meets in one stage-2 task. Without a key, a tumbling window's own (`by_window`;
/// the global window's partials spread over the partitions window by window); other windows
/// without a key (sliding: a window merges several panes; sessions) all go to one partition.
/// FNV-1a: the same on every machine and every build, which routing must be.
pub fn route(key: &[u8], start: i64, by_window: bool, partitions: u32) -> u32 {
    let mut h = fnv::FnvHasher::default();
    if key.is_empty() && by_window {
        h.write(&start.to_le_bytes());
    } else {
        h.write(key);
    }
    (h.finish() % u64::from(partitions.max(1))) as u32
}

/// The messages of one batch to one partition: `partials` cut into messages of at most
/// [`MESSAGE_BYTES`], at least one. `header`'s `part` and `parts` are set here.
pub fn encode(header: Header, partials: &[Partial]) -> Vec<Vec<u8>> {
    let mut cuts = vec![0usize];
    let mut bytes = 0;
    for (i, p) in partials.iter().enumerate() {
        if bytes > 0 && bytes + p.bytes() > MESSAGE_BYTES {
            cuts.push(i);
            bytes = 0;
        }
        bytes += p.bytes();
    }
    cuts.push(partials.len());
    let parts = (cuts.len() - 1) as u32;
    cuts.windows(2)
        .enumerate()
        .map(|(j, w)| {
            let chunk = &partials[w[0]..w[1]];
            let size = HEADER_BYTES + chunk.iter().map(Partial::bytes).sum::<usize>();
            let mut m = Vec::with_capacity(size);
            m.extend_from_slice(MAGIC);
            m.extend_from_slice(&header.lane.to_le_bytes());
            m.extend_from_slice(&header.task.to_le_bytes());
            m.extend_from_slice(&header.epoch.to_le_bytes());
            m.extend_from_slice(&header.batch.to_le_bytes());
            m.extend_from_slice(&(j as u32).to_le_bytes());
            m.extend_from_slice(&parts.to_le_bytes());
            m.extend_from_slice(&header.max_time.to_le_bytes());
            m.extend_from_slice(&(chunk.len() as u32).to_le_bytes());
            for p in chunk {
                m.extend_from_slice(&p.start.to_le_bytes());
                m.extend_from_slice(&p.end.to_le_bytes());
                m.extend_from_slice(&(p.key.len() as u32).to_le_bytes());
                m.extend_from_slice(p.key);
                m.extend_from_slice(&(p.acc.len() as u32).to_le_bytes());
                m.extend_from_slice(p.acc);
            }
            m
        })
        .collect()
}

/// A message's header and partials; an error says what is wrong and where.
pub fn decode(m: &[u8]) -> Result<(Header, Vec<Partial<'_>>), String> {
    let mut r = ByteReader::new(m);
    if r.take(4)? != MAGIC {
        return Err("not a Weir repartition message (format 1)".into());
    }
    let header = Header {
        lane: r.u32_le()?,
        task: u128::from_le_bytes(r.array()?),
        epoch: r.u64_le()?,
        batch: r.u64_le()?,
        part: r.u32_le()?,
        parts: r.u32_le()?,
        max_time: r.i64_le()?,
    };
    if header.part >= header.parts {
        return Err(format!("part {} of {}", header.part, header.parts));
    }
    let count = r.u32_le()? as usize;
    // Each partial takes at least its fixed bytes: a count past that is a lie, not a size to
    // make room for.
    let mut partials = Vec::with_capacity(count.min(m.len() / PARTIAL_OVERHEAD));
    for _ in 0..count {
        let start = r.i64_le()?;
        let end = r.i64_le()?;
        let n = r.u32_le()? as usize;
        let key = r.take(n)?;
        let n = r.u32_le()? as usize;
        partials.push(Partial { start, end, key, acc: r.take(n)? });
    }
    if r.at() != m.len() {
        return Err(format!("{} bytes after the last partial", m.len() - r.at()));
    }
    Ok((header, partials))
}

/// A stage-1 partial as a row, from the operator that makes it to the sink that ships it (its
/// key and start are the row's key and time): the end, then the accumulator. The same bytes are
/// a stage-2 event's row (`aggregate/merged.rs` reads them). An empty row is no partial: it
/// carries the batch's largest event time, as its time.
pub fn partial_row(end: i64, acc: &[u8]) -> Vec<u8> {
    let mut row = Vec::with_capacity(8 + acc.len());
    row.extend_from_slice(&end.to_le_bytes());
    row.extend_from_slice(acc);
    row
}

/// A partial row's end and accumulator (`None`: too short to be one).
pub fn split_row(row: &[u8]) -> Option<(i64, &[u8])> {
    let (end, acc) = row.split_first_chunk::<8>()?;
    Some((i64::from_le_bytes(*end), acc))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn header() -> Header {
        Header { lane: 3, task: 99, epoch: 7, batch: 42, part: 0, parts: 0, max_time: 1_000 }
    }

    #[test]
    fn a_batch_without_partials_is_one_message_that_carries_its_time() {
        let ms = encode(header(), &[]);
        assert_eq!(ms.len(), 1);
        let (h, ps) = decode(&ms[0]).unwrap();
        assert_eq!((h.lane, h.task, h.epoch, h.batch, h.part, h.parts, h.max_time), (3, 99, 7, 42, 0, 1, 1_000));
        assert!(ps.is_empty());
    }

    #[test]
    fn large_batches_are_cut_into_parts_of_at_most_the_message_size() {
        let acc = vec![7u8; 1000];
        let keys: Vec<Vec<u8>> = (0..2000u32).map(|i| i.to_le_bytes().to_vec()).collect();
        let partials: Vec<Partial> = keys.iter().map(|k| Partial { start: 1, end: 2, key: k, acc: &acc }).collect();
        let ms = encode(header(), &partials);
        assert!(ms.len() > 1);
        let mut back = Vec::new();
        for (j, m) in ms.iter().enumerate() {
            assert!(m.len() <= HEADER_BYTES + MESSAGE_BYTES, "part {j}: {} bytes", m.len());
            let (h, ps) = decode(m).unwrap();
            assert_eq!((h.part, h.parts), (j as u32, ms.len() as u32));
            back.extend(ps);
        }
        assert_eq!(back, partials);
    }

    #[test]
    fn routing_is_by_key_or_by_window_and_stays_in_range() {
        assert_eq!(route(b"u1", 0, true, 6), route(b"u1", 60_000, true, 6), "a key's partials meet");
        let windows: std::collections::BTreeSet<u32> = (0..60).map(|w| route(b"", w * 60_000, true, 6)).collect();
        assert!(windows.len() > 1, "the global window spreads window by window");
        assert_eq!(route(b"", 0, false, 6), route(b"", 60_000, false, 6), "sliding or sessions: one partition");
        // Fixed for good: a change would send a key's partials elsewhere after an upgrade.
        assert_eq!(route(b"user-42", 0, true, 1000), route(b"user-42", 0, true, 1000));
        assert_eq!(fnv_of(b""), 0xcbf2_9ce4_8422_2325);
    }

    fn fnv_of(b: &[u8]) -> u64 {
        let mut h = fnv::FnvHasher::default();
        h.write(b);
        h.finish()
    }

    #[test]
    fn rows_carry_the_end_then_the_accumulator() {
        let row = partial_row(-5, b"acc");
        assert_eq!(split_row(&row), Some((-5, &b"acc"[..])));
        assert_eq!(split_row(b"short"), None);
    }

    proptest! {
        /// What is encoded decodes to the same header and partials; a cut or a changed byte is
        /// refused or decodes to something well-formed, never a panic.
        #[test]
        fn messages_round_trip_and_damage_is_refused(
            partials in proptest::collection::vec(
                (any::<i64>(), any::<i64>(), proptest::collection::vec(any::<u8>(), 0..6),
                 proptest::collection::vec(any::<u8>(), 0..9)),
                0..8),
            lane in any::<u32>(), task in any::<u128>(), epoch in any::<u64>(), batch in any::<u64>(),
            max_time in any::<i64>(),
            cut in any::<proptest::sample::Index>(),
            flip in any::<(proptest::sample::Index, u8)>(),
        ) {
            let ps: Vec<Partial> = partials.iter()
                .map(|(start, end, key, acc)| Partial { start: *start, end: *end, key, acc })
                .collect();
            let h = Header { lane, task, epoch, batch, part: 0, parts: 0, max_time };
            let ms = encode(h, &ps);
            prop_assert_eq!(ms.len(), 1);
            let (got, back) = decode(&ms[0]).unwrap();
            prop_assert_eq!(got, Header { parts: 1, ..h });
            prop_assert_eq!(&back, &ps);
            let short = &ms[0][..cut.index(ms[0].len())];
            prop_assert!(decode(short).is_err(), "a cut message is refused");
            let mut bent = ms[0].clone();
            let i = flip.0.index(bent.len());
            bent[i] ^= flip.1;
            let _ = decode(&bent);
        }

        /// Arbitrary bytes are an error or a message, never a panic or a huge allocation.
        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..128)) {
            let mut m = MAGIC.to_vec();
            m.extend_from_slice(&bytes);
            let _ = decode(&m);
            let _ = decode(&bytes);
        }
    }
}
