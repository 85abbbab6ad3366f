//! An append: records encoded into chunks, written through the log's write batch or, for a
//! large append of a stream, into a sorted file RocksDB takes in whole; then the new end and the
//! writer's delivery mark.
//!
//! Invariant: the end and the mark are written last, in one synced write, after every chunk of
//! the append is in (the write batch they share, or the ingested file), so the end never covers
//! a missing record and a re-delivered batch is either wholly in the log or not at all.

use rocksdb::{IngestExternalFileOptions, SstFileWriter, WriteBatch, WriteOptions};

use super::{Appended, CHUNK_BYTES, END, INGEST_FILE, Log, LogError, MARK, RECORD_HEAD, ROW, prefixed, record_key};

impl Log {
    /// Appends `records` (key, value, timestamp; an empty value is a tombstone) as batch
    /// `batch` of `writer`, unless that writer already appended it. `bytes`: about how many
    /// bytes of keys and values they hold (the write is sized for it once, not grown by copies).
    pub fn append<'r>(
        &self,
        writer: &str,
        batch: u64,
        bytes: usize,
        records: impl IntoIterator<Item = (&'r [u8], &'r [u8], i64)>,
    ) -> Result<Appended, LogError> {
        // One appender at a time: the end is read and moved under the lock.
        let mut tail = self.tail();
        if self.delivered(writer)?.is_some_and(|last| batch <= last) {
            return Ok(Appended::Again);
        }
        self.drop_orphans(tail.end)?;
        let first = tail.end;
        let mut end = first;
        let records = records.into_iter();
        let heads = records.size_hint().0 * RECORD_HEAD;
        let ingest = !self.table && bytes + heads >= tail.ingest_bytes;
        let mut file = if ingest { Some(self.sorted_file()?) } else { None };
        // Chunks, their RocksDB keys and a table's rows: twice the bytes at most.
        let mut wb = WriteBatch::with_capacity_bytes(match (self.table, ingest) {
            (_, true) => 4096,
            (true, false) => 2 * (bytes + heads) + 4096,
            (false, false) => bytes + heads + 4096,
        });
        // One chunk's buffer for the whole append (the batch copies each chunk in).
        let mut chunk = std::mem::take(&mut tail.chunk);
        chunk.clear();
        chunk.reserve(CHUNK_BYTES.min(bytes + heads) + RECORD_HEAD);
        let mut chunk_first = end;
        for (key, row, timestamp) in records {
            let key_len = u32::try_from(key.len()).map_err(|_| self.corrupt("a key over 4 GiB".into()))?;
            let row_len = u32::try_from(row.len()).map_err(|_| self.corrupt("a row over 4 GiB".into()))?;
            if chunk.len() >= CHUNK_BYTES {
                self.put_chunk(&mut wb, file.as_mut(), chunk_first, &chunk)?;
                chunk.clear();
                chunk_first = end;
            }
            chunk.extend_from_slice(&timestamp.to_be_bytes());
            chunk.extend_from_slice(&key_len.to_be_bytes());
            chunk.extend_from_slice(&row_len.to_be_bytes());
            chunk.extend_from_slice(key);
            chunk.extend_from_slice(row);
            if self.table {
                let k = prefixed(ROW, key);
                if row.is_empty() { wb.delete(k) } else { wb.put(k, row) }
            }
            end += 1;
        }
        if !chunk.is_empty() {
            self.put_chunk(&mut wb, file.as_mut(), chunk_first, &chunk)?;
        }
        // Not kept after a record far larger than a chunk.
        if chunk.capacity() <= 2 * CHUNK_BYTES {
            tail.chunk = chunk;
        }
        // A file with no chunk cannot be finished (an append of nothing sized as large).
        if let Some(mut file) = file.filter(|_| end > first) {
            file.finish().map_err(|e| self.err(e))?;
            let mut ingest = IngestExternalFileOptions::default();
            ingest.set_move_files(true);
            self.db.ingest_external_file_opts(&ingest, vec![self.path.join(INGEST_FILE)]).map_err(|e| self.err(e))?;
        }
        wb.put(END, end.to_be_bytes());
        wb.put(prefixed(MARK, writer.as_bytes()), batch.to_be_bytes());
        let mut opts = WriteOptions::default();
        opts.set_sync(true);
        self.db.write_opt(wb, &opts).map_err(|e| self.err(e))?;
        tail.end = end;
        drop(tail);
        self.grew.notify_all();
        Ok(Appended::Written { first, end })
    }

    /// A fresh sorted file for an append's chunks. A file of that name is removed first, not
    /// truncated by the writer: after an ingest that moved it, the name may still be a hard
    /// link to one of the log's own files.
    fn sorted_file(&self) -> Result<SstFileWriter<'_>, LogError> {
        let path = self.path.join(INGEST_FILE);
        match std::fs::remove_file(&path) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(LogError::Io { path, source: e }),
        }
        let file = SstFileWriter::create(&self.opts);
        file.open(&path).map_err(|e| self.err(e))?;
        Ok(file)
    }

    /// One chunk into the append's sorted file, or its write batch.
    fn put_chunk(
        &self,
        wb: &mut WriteBatch,
        file: Option<&mut SstFileWriter<'_>>,
        first: u64,
        chunk: &[u8],
    ) -> Result<(), LogError> {
        match file {
            Some(f) => f.put(record_key(first), chunk).map_err(|e| self.err(e)),
            None => {
                wb.put(record_key(first), chunk);
                Ok(())
            }
        }
    }
}
