//! The embedded log: one dataset's records, durable and replayable by offset, so a project runs
//! with no broker. A flow appends a batch's rows; a downstream flow reads them from the offset its
//! checkpoint recorded, and re-reading up to a recorded end yields the same records again.
//!
//! It lives in RocksDB, which Weir already carries for state, rather than a file format of our
//! own: records are stored in chunks of consecutive offsets (up to 64 KiB), each a value under
//! `r` + its first offset (8 bytes, big-endian, so keys sort by offset), and RocksDB's
//! write-ahead log and sorted files are the segments. That buys what a log needs and a
//! hand-written one gets wrong: an append is made whole by one atomic, checksummed write, so a
//! kill -9 in the middle of one leaves a torn tail that recovery truncates at the last whole
//! append (never a half-read record); retention drops a range of offsets in one delete and
//! compaction frees the files.
//!
//! Invariants:
//! - A small append writes its records, the new end and its writer's delivery mark in one write
//!   batch, synced before it returns: the end never covers a missing record, and a delivery is
//!   in the log entirely or not at all.
//! - Each writer (a flow's checkpoint identity) appends its batches in increasing batch ids; a
//!   batch id at or below its mark is a re-delivery after a crash and is skipped, which makes a
//!   flow's output to a dataset exactly-once.
//! - A large append of a stream's records is written once: its chunks go into a sorted file
//!   that RocksDB takes in whole (an ingest, no write-ahead log or memtable copy), and only then
//!   are the end and the mark written, synced. A crash between the two leaves chunks at or past
//!   the end, which no reader reaches (reads stop at the end) and the next append (or opening
//!   the log) deletes first, so the re-run append finds no stale chunk among its own.
//! - A table dataset also keeps, in the same write, each key's latest row (`k` + key), deleted
//!   by a tombstone: the materialized view that `weir query` reads.
//!
//! The files: `log/append.rs` writes an append, `log/read.rs` reads records back; this one
//! opens the log, keeps its ends and its writers, and applies retention.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex, OnceLock, Weak};
use std::time::Duration;

use rocksdb::{DB, Options, WriteBatch, WriteOptions};

mod append;
mod read;

#[derive(Debug, thiserror::Error)]
pub enum LogError {
    #[error("dataset log {}", path.display())]
    Db { path: PathBuf, source: rocksdb::Error },
    #[error("dataset log {}: {what}", path.display())]
    Corrupt { path: PathBuf, what: String },
    #[error(
        "dataset log {}: offsets {from}..{start} were deleted by retention before this reader got to them; \
         lengthen the dataset's retention, or reset the reader (weir run --full-refresh)",
        path.display()
    )]
    Trimmed { path: PathBuf, from: u64, start: u64 },
    #[error("dataset log {}", path.display())]
    Io { path: PathBuf, source: std::io::Error },
}

/// Key of the next offset to append at.
const END: &[u8] = b"e";
/// Key of the first offset retention kept.
const START: &[u8] = b"s";
/// Prefix of a record, followed by its offset.
const RECORD: u8 = b'r';
/// Prefix of a writer's delivery mark, followed by its identity.
const MARK: u8 = b'd';
/// Prefix of a table's row, followed by its key.
const ROW: u8 = b'k';

/// Bytes of records one chunk holds before the next begins: an append of a large batch is a
/// few dozen values of this size, not one value per record (each a key in RocksDB's memtable
/// and index), nor a few huge ones. A value is at least one block of a sorted file, and an
/// ingest reads its file's first and last block to learn its key range: two chunks read back
/// per append, which large chunks make a visible share of the appending thread.
const CHUNK_BYTES: usize = 64 << 10;
/// Bytes (of keys, values and heads) from which a stream's append is ingested as a sorted
/// file rather than written through the write-ahead log and memtable, which copy every chunk
/// twice more before it is in a file. Below it, the file, its sync and the manifest update
/// would cost more than the copies (a continuous flow appends a few rows at a time), and a
/// long stream would pile up small files. A dataset's `append_file_bytes` overrides it.
pub const INGEST_BYTES: usize = 4 << 20;
/// The sorted file an append builds in the log's directory, moved into RocksDB by the ingest
/// (one appender at a time, so one name).
const INGEST_FILE: &str = "append.sst";
/// A record's head in its chunk: timestamp (8), key length (4), value length (4).
const RECORD_HEAD: usize = 16;

/// One record, as read.
#[cfg(test)]
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogRecord {
    pub offset: u64,
    /// Milliseconds since the epoch: the row's event time, as the writer gave it.
    pub timestamp: i64,
    pub key: Vec<u8>,
    /// Empty: a tombstone for `key`.
    pub value: Vec<u8>,
}

/// What an append did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Appended {
    /// Written at offsets `first..end`.
    Written { first: u64, end: u64 },
    /// The writer had already appended this batch: nothing written.
    Again,
}

/// Where the log begins and ends, and how many writers of this process may still append.
struct Tail {
    start: u64,
    end: u64,
    writers: usize,
    /// The appender's chunk buffer, kept between appends: a fresh one's pages would be
    /// faulted in, zeroed, every batch.
    chunk: Vec<u8>,
    /// Appends of a stream with at least this many bytes are ingested as sorted files.
    ingest_bytes: usize,
}

impl Tail {
    fn new(start: u64, end: u64) -> Self {
        Tail { start, end, writers: 0, chunk: Vec::new(), ingest_bytes: INGEST_BYTES }
    }
}

pub struct Log {
    db: DB,
    /// The options the log was opened with, which an append's sorted file is written with.
    opts: Options,
    path: PathBuf,
    table: bool,
    tail: Mutex<Tail>,
    grew: Condvar,
}

/// The logs this process has open, by path: RocksDB lets one handle at a time write a
/// directory, so every flow of a project that reads or writes a dataset shares it (and readers
/// wake when a writer appends).
fn open_logs() -> &'static Mutex<HashMap<PathBuf, Weak<Log>>> {
    static LOGS: OnceLock<Mutex<HashMap<PathBuf, Weak<Log>>>> = OnceLock::new();
    LOGS.get_or_init(Default::default)
}

/// Whether files in `dir` (created if missing) can be opened with O_DIRECT.
fn direct_io_works(dir: &Path) -> bool {
    use std::os::unix::fs::OpenOptionsExt;
    if std::fs::create_dir_all(dir).is_err() {
        return false;
    }
    let probe = dir.join(".direct-io-probe");
    let works = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .custom_flags(libc::O_DIRECT)
        .open(&probe)
        .is_ok();
    let _ = std::fs::remove_file(&probe);
    works
}

impl Log {
    /// Opens (creating) the log at `path`, or returns the handle this process already has.
    /// `table`: keep each key's latest row too.
    pub fn open(path: &Path, table: bool) -> Result<Arc<Log>, LogError> {
        let path = std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
        let mut logs = open_logs().lock().unwrap_or_else(|p| p.into_inner());
        if let Some(log) = logs.get(&path).and_then(Weak::upgrade) {
            return Ok(log);
        }
        let mut opts = Options::default();
        opts.create_if_missing(true);
        // Rows are read back far more often than they sit on disk long: compressing every flush
        // costs more CPU, even with LZ4, than the space saves.
        opts.set_compression_type(rocksdb::DBCompressionType::None);
        // Flushed and compacted files are written once and read back through RocksDB's own
        // block cache, so copying them through the page cache too only costs system time (a
        // large share of a project's); but tmpfs and some overlay file systems refuse O_DIRECT,
        // where RocksDB's flushes would then fail, so only where a probe shows it works.
        opts.set_use_direct_io_for_flush_and_compaction(direct_io_works(&path));
        let db = DB::open(&opts, &path).map_err(|e| LogError::Db { path: path.clone(), source: e })?;
        let log = Arc::new(Self::over(db, opts, path.clone(), table)?);
        log.drop_orphans(log.end())?;
        logs.retain(|_, l| l.strong_count() > 0);
        logs.insert(path, Arc::downgrade(&log));
        Ok(log)
    }

    /// Opens a log another process may be appending to, to read what it had when opened
    /// (`weir query`, `weir graph`).
    pub fn open_read_only(path: &Path) -> Result<Log, LogError> {
        let opts = Options::default();
        let db = DB::open_for_read_only(&opts, path, false)
            .map_err(|e| LogError::Db { path: path.to_path_buf(), source: e })?;
        Self::over(db, opts, path.to_path_buf(), false)
    }

    fn over(db: DB, opts: Options, path: PathBuf, table: bool) -> Result<Log, LogError> {
        let mut log = Log { db, opts, path, table, tail: Mutex::new(Tail::new(0, 0)), grew: Condvar::new() };
        let start = log.counter(START)?;
        let end = log.counter(END)?;
        if start > end {
            return Err(log.corrupt(format!("starts at {start}, after its end {end}")));
        }
        log.tail = Mutex::new(Tail::new(start, end));
        Ok(log)
    }

    /// Deletes chunks at or past `end`, which an ingest whose append did not finish left (a
    /// kill, or an error after the ingest): one seek when there are none, as there almost
    /// always are not.
    fn drop_orphans(&self, end: u64) -> Result<(), LogError> {
        let from = record_key(end);
        let mut it = self.db.raw_iterator();
        it.seek(from);
        it.status().map_err(|e| self.err(e))?;
        if it.key().is_some_and(|k| k.first() == Some(&RECORD)) {
            let mut wb = WriteBatch::default();
            wb.delete_range(&from[..], &[RECORD + 1][..]);
            let mut opts = WriteOptions::default();
            opts.set_sync(true);
            self.db.write_opt(wb, &opts).map_err(|e| self.err(e))?;
        }
        Ok(())
    }

    fn err(&self, e: rocksdb::Error) -> LogError {
        LogError::Db { path: self.path.clone(), source: e }
    }

    fn corrupt(&self, what: String) -> LogError {
        LogError::Corrupt { path: self.path.clone(), what }
    }

    fn counter(&self, key: &[u8]) -> Result<u64, LogError> {
        match self.db.get(key).map_err(|e| self.err(e))? {
            None => Ok(0),
            Some(v) => {
                let b: [u8; 8] =
                    v.as_slice().try_into().map_err(|_| self.corrupt(format!("a counter of {} bytes", v.len())))?;
                Ok(u64::from_be_bytes(b))
            }
        }
    }

    fn tail(&self) -> std::sync::MutexGuard<'_, Tail> {
        self.tail.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Appends of at least `bytes` are ingested as sorted files (the dataset's
    /// `append_file_bytes`).
    pub fn append_files_from(&self, bytes: usize) {
        self.tail().ingest_bytes = bytes;
    }

    /// The next offset an append writes at: the number of records ever appended.
    pub fn end(&self) -> u64 {
        self.tail().end
    }

    /// The first offset still kept.
    pub fn start(&self) -> u64 {
        self.tail().start
    }

    /// The last batch id `writer` appended, if any.
    pub fn delivered(&self, writer: &str) -> Result<Option<u64>, LogError> {
        let key = prefixed(MARK, writer.as_bytes());
        match self.db.get(&key).map_err(|e| self.err(e))? {
            None => Ok(None),
            Some(v) => {
                let b: [u8; 8] = v.as_slice().try_into().map_err(|_| self.corrupt("a delivery mark".into()))?;
                Ok(Some(u64::from_be_bytes(b)))
            }
        }
    }

    /// The first offset of the chunk holding `offset`.
    fn chunk_at(&self, offset: u64) -> Result<u64, LogError> {
        let mut it = self.db.raw_iterator();
        it.seek_for_prev(record_key(offset));
        it.status().map_err(|e| self.err(e))?;
        Ok(it.key().and_then(record_offset).unwrap_or(offset))
    }

    /// Waits up to `timeout` for the log to grow past `offset`, or for its last writer to
    /// finish; returns its end and whether every writer has finished.
    pub fn wait_past(&self, offset: u64, timeout: Duration) -> (u64, bool) {
        let tail = self.tail();
        let (tail, _) = self
            .grew
            .wait_timeout_while(tail, timeout, |t| t.end <= offset && t.writers > 0)
            .unwrap_or_else(|p| p.into_inner());
        (tail.end, tail.writers == 0)
    }

    /// `n` more writers in this process will append (a project's flows that feed the dataset):
    /// until each has called [`Log::writer_done`], a reader that runs to the end of its input
    /// waits for more.
    pub fn expect_writers(&self, n: usize) {
        self.tail().writers += n;
    }

    /// A writer will append no more (its flow ended, however it ended).
    pub fn writer_done(&self) {
        let mut t = self.tail();
        t.writers = t.writers.saturating_sub(1);
        drop(t);
        self.grew.notify_all();
    }

    /// Drops the records before `offset` (retention). Readers still behind it get
    /// [`LogError::Trimmed`].
    pub fn trim_before(&self, offset: u64) -> Result<(), LogError> {
        let mut tail = self.tail();
        let offset = offset.min(tail.end);
        if offset <= tail.start {
            return Ok(());
        }
        // Whole chunks before the one holding `offset`; that one's records before it are past
        // the start, never read.
        let keep_from = self.chunk_at(offset)?;
        let mut wb = WriteBatch::default();
        wb.delete_range(record_key(0), record_key(keep_from));
        wb.put(START, offset.to_be_bytes());
        let mut opts = WriteOptions::default();
        opts.set_sync(true);
        self.db.write_opt(wb, &opts).map_err(|e| self.err(e))?;
        tail.start = offset;
        drop(tail);
        self.db.compact_range(Some(record_key(0)), Some(record_key(offset)));
        Ok(())
    }

    /// Drops the records stamped before `cutoff` (epoch ms) from the start of the log, up to the
    /// first that is not: time-based retention on the rows' event times, as Kafka's is on record
    /// timestamps. A record out of order keeps those after it (the log only loses a prefix).
    pub fn retain_since(&self, cutoff: i64) -> Result<(), LogError> {
        let (start, end) = {
            let t = self.tail();
            (t.start, t.end)
        };
        let mut keep = start;
        let mut done = false;
        // Chunk by chunk, so a long log is not read into memory.
        while !done && keep < end {
            let before = keep;
            self.read_with(keep, end, 4_096, |offset, timestamp, _, _| {
                if !done && timestamp < cutoff {
                    keep = offset + 1;
                } else {
                    done = true;
                }
            })?;
            if keep == before {
                break;
            }
        }
        self.trim_before(keep)
    }

    /// A table's current row for `key`.
    pub fn row(&self, key: &[u8]) -> Result<Option<Vec<u8>>, LogError> {
        self.db.get(prefixed(ROW, key)).map_err(|e| self.err(e))
    }

    /// A table's current rows, by key.
    pub fn rows(&self) -> Result<Vec<crate::state::Entry>, LogError> {
        let mut out = Vec::new();
        for item in self.db.prefix_iterator([ROW]) {
            let (k, v) = item.map_err(|e| self.err(e))?;
            let Some(key) = k.strip_prefix(&[ROW]) else { break };
            out.push((key.to_vec(), v.to_vec()));
        }
        Ok(out)
    }
}

fn prefixed(prefix: u8, rest: &[u8]) -> Vec<u8> {
    let mut k = Vec::with_capacity(1 + rest.len());
    k.push(prefix);
    k.extend_from_slice(rest);
    k
}

fn record_key(offset: u64) -> [u8; 9] {
    let mut k = [RECORD; 9];
    k[1..].copy_from_slice(&offset.to_be_bytes());
    k
}

fn record_offset(k: &[u8]) -> Option<u64> {
    match k {
        [RECORD, rest @ ..] => Some(u64::from_be_bytes(rest.try_into().ok()?)),
        _ => None,
    }
}

#[cfg(test)]
mod tests;
