//! Reading the log back: records decoded from their chunks where RocksDB holds them, in offset
//! order, never copied out.
//!
//! Invariant: a read returns every record from where it starts up to the end it asks for (at
//! most the log's end), or an error: a gap in the offsets or a malformed chunk is corruption,
//! and a start before the log's start is [`LogError::Trimmed`], never a silent skip.

use super::{Log, LogError, RECORD_HEAD, record_key, record_offset};

#[cfg(test)]
use super::LogRecord;

impl Log {
    /// Records from `from` up to (not including) `until`, at most `max` of them, in offset order,
    /// copied out (the tests' view; the engine reads with [`Log::read_with`]).
    #[cfg(test)]
    pub fn read(&self, from: u64, until: u64, max: usize) -> Result<Vec<LogRecord>, LogError> {
        let mut out = Vec::new();
        self.read_with(from, until, max, |offset, timestamp, key, value| {
            out.push(LogRecord { offset, timestamp, key: key.to_vec(), value: value.to_vec() })
        })?;
        Ok(out)
    }

    /// The records from `from` up to (not including) `until`, at most `max` of them, in offset
    /// order, each (offset, timestamp, key, value) handed to `f` as it is decoded, without
    /// copying it; returns how many there were.
    pub fn read_with(
        &self,
        from: u64,
        until: u64,
        max: usize,
        mut f: impl FnMut(u64, i64, &[u8], &[u8]),
    ) -> Result<usize, LogError> {
        let start = self.start();
        if from < start {
            return Err(LogError::Trimmed { path: self.path.clone(), from, start });
        }
        let until = until.min(self.end());
        let want = (until.saturating_sub(from) as usize).min(max);
        if want == 0 {
            return Ok(0);
        }
        // One raw iterator, from the chunk that holds `from` (the last one starting at or before
        // it) forward: each chunk is decoded where RocksDB holds it, never copied out (a chunk
        // is 64 KiB, and a read of a few thousand records may start mid-chunk).
        let mut it = self.db.raw_iterator();
        it.seek_for_prev(record_key(from));
        if !it.valid() || it.key().and_then(record_offset).is_none() {
            it.seek(record_key(from));
        }
        let mut n = 0;
        let mut next = from;
        while let (Some(k), Some(v)) = (it.key(), it.value()) {
            let Some(chunk_first) = record_offset(k) else { break };
            if chunk_first > next {
                return Err(self.corrupt(format!("records {next}..{chunk_first} are missing")));
            }
            for (offset, r) in (chunk_first..).zip(ChunkIter::new(v)) {
                let (timestamp, key, value) =
                    r.ok_or_else(|| self.corrupt(format!("the chunk at {chunk_first} is malformed")))?;
                if offset >= next {
                    f(offset, timestamp, key, value);
                    n += 1;
                    next = offset + 1;
                    if n == want {
                        return Ok(n);
                    }
                }
            }
            it.next();
        }
        it.status().map_err(|e| self.err(e))?;
        Err(self.corrupt(format!("records {next}..{} are missing", from + want as u64)))
    }
}

/// A run of consecutive records stored as one value under its first offset: each record its
/// head (timestamp, key length, value length, big-endian) then its key and value.
/// A chunk's records in order; `None` for bytes that are not a whole record.
struct ChunkIter<'a> {
    rest: &'a [u8],
}

impl<'a> ChunkIter<'a> {
    fn new(bytes: &'a [u8]) -> Self {
        Self { rest: bytes }
    }
}

impl<'a> Iterator for ChunkIter<'a> {
    type Item = Option<(i64, &'a [u8], &'a [u8])>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.rest.is_empty() {
            return None;
        }
        let record = (|| {
            let head = self.rest.get(..RECORD_HEAD)?;
            let timestamp = i64::from_be_bytes(head[..8].try_into().ok()?);
            let key_len = u32::from_be_bytes(head[8..12].try_into().ok()?) as usize;
            let value_len = u32::from_be_bytes(head[12..16].try_into().ok()?) as usize;
            let body = self.rest.get(RECORD_HEAD..RECORD_HEAD.checked_add(key_len)?.checked_add(value_len)?)?;
            let (key, value) = body.split_at(key_len);
            self.rest = &self.rest[RECORD_HEAD + key_len + value_len..];
            Some((timestamp, key, value))
        })();
        if record.is_none() {
            self.rest = &[];
        }
        Some(record)
    }
}
