//! The open sessions' record in the state store (state format 3): a log of changes. A batch
//! that changes its open sessions appends one entry listing the changes (a put for each session
//! that is new or grew, a delete for each that left or was absorbed), and replaying the entries
//! in order rebuilds the open sessions. When the log has grown to [`REWRITE_FACTOR`] times the
//! open sessions' size, it is rewritten as a snapshot of them (entries of at most
//! [`ENTRY_BYTES`]) in the same atomic write that deletes every entry before it. So writing costs
//! a small multiple of what changed, and reopening a small multiple of what is open.
//!
//! Why a log: with a session per user, a RocksDB entry per session cost a memtable insert (a
//! skip-list walk of key comparisons) for every session at every batch that touched it, a large
//! share of the operator's time; one entry per batch is one insert, however many sessions changed.
//!
//! Keys: `Scope::SessionLog.log_key(seq)`, the scope's byte + sequence number (8 bytes,
//! big-endian, so byte order is replay order). An entry is a list of changes:
//! `1` key-length (u32) key start end accumulator-length (u32) accumulator (put), or
//! `2` key-length key start (delete); integers big-endian.

use crate::bytes::ByteReader;

/// The most bytes a snapshot writes to one entry.
pub(super) const ENTRY_BYTES: usize = 1 << 20;

/// The log is rewritten as a snapshot once it holds this many times the open sessions' bytes...
pub(super) const REWRITE_FACTOR: usize = 2;

/// ...and at least this many bytes, so that a small state is not rewritten at every batch. Small:
/// the factor already bounds what rewriting costs (each byte of a change is written at most
/// about `1 + 1 / (REWRITE_FACTOR - 1)` times), and a short log is a quick start.
pub(super) const REWRITE_MIN_BYTES: usize = 64 << 10;

/// Bytes of a put beyond its key and accumulator.
pub(super) const PUT_OVERHEAD: usize = 1 + 4 + 8 + 8 + 4;

const PUT: u8 = 1;
const DELETE: u8 = 2;

/// One change, as an entry holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Change<'a> {
    Put { key: &'a [u8], start: i64, end: i64, acc: &'a [u8] },
    Delete { key: &'a [u8], start: i64 },
}

/// Appends a put to `entry`.
pub(super) fn put(entry: &mut Vec<u8>, key: &[u8], start: i64, end: i64, acc: &[u8]) {
    entry.push(PUT);
    entry.extend_from_slice(&(key.len() as u32).to_be_bytes());
    entry.extend_from_slice(key);
    entry.extend_from_slice(&start.to_be_bytes());
    entry.extend_from_slice(&end.to_be_bytes());
    entry.extend_from_slice(&(acc.len() as u32).to_be_bytes());
    entry.extend_from_slice(acc);
}

/// Appends a delete to `entry`.
pub(super) fn delete(entry: &mut Vec<u8>, key: &[u8], start: i64) {
    entry.push(DELETE);
    entry.extend_from_slice(&(key.len() as u32).to_be_bytes());
    entry.extend_from_slice(key);
    entry.extend_from_slice(&start.to_be_bytes());
}

/// The changes of an entry, in order; an error names what is wrong and where.
pub(super) fn decode(entry: &[u8]) -> Result<Vec<Change<'_>>, String> {
    let mut r = ByteReader::new(entry);
    let mut out = Vec::new();
    while r.at() < entry.len() {
        let at = r.at();
        let op = r.take(1)?[0];
        let len = r.u32_be()? as usize;
        let key = r.take(len)?;
        let start = r.i64_be()?;
        out.push(match op {
            PUT => {
                let end = r.i64_be()?;
                let n = r.u32_be()? as usize;
                Change::Put { key, start, end, acc: r.take(n)? }
            }
            DELETE => Change::Delete { key, start },
            other => return Err(format!("unknown change {other} at byte {at}")),
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Whatever is written decodes to the same changes; any cut of it is refused or decodes
        /// to a prefix of them, never to something else.
        #[test]
        fn changes_round_trip_and_cuts_never_decode_to_something_else(
            changes in proptest::collection::vec(
                (any::<bool>(), proptest::collection::vec(any::<u8>(), 0..6), any::<i64>(), any::<i64>(),
                 proptest::collection::vec(any::<u8>(), 0..9)),
                0..8),
            cut in any::<proptest::sample::Index>(),
        ) {
            let mut entry = Vec::new();
            for (is_put, key, start, end, acc) in &changes {
                if *is_put { put(&mut entry, key, *start, *end, acc) } else { delete(&mut entry, key, *start) }
            }
            let want: Vec<Change> = changes.iter().map(|(is_put, key, start, end, acc)| if *is_put {
                Change::Put { key, start: *start, end: *end, acc }
            } else {
                Change::Delete { key, start: *start }
            }).collect();
            prop_assert_eq!(decode(&entry).unwrap(), want.clone());
            if !entry.is_empty() {
                let short = &entry[..cut.index(entry.len())];
                if let Ok(got) = decode(short) {
                    prop_assert!(want.starts_with(&got));
                }
            }
        }

        /// Arbitrary bytes are an error or some changes, never a panic.
        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
            let _ = decode(&bytes);
        }
    }
}
