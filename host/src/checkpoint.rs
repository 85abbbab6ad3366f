//! The checkpoint directory: what a pipeline has done, so that a restart (after `kill -9`, at any
//! point) continues exactly where the last committed batch left off.
//!
//! ```text
//! CHECKPOINT/
//!   metadata        which pipeline wrote it (refused if another one opens it)
//!   offsets/N       batch N's planned source range and idleness, written before it runs
//!   state/          RocksDB: window state + the last committed batch, one atomic write per batch
//!   commits/N       batch N done: written after the sink accepted it and the state committed
//! ```
//!
//! Recovery reads the state's record of the last committed batch B; if `offsets/B+1` exists, that
//! batch was planned but never committed, and is re-run with the same range, id and idleness, so
//! it yields the same rows, which the sink dedupes on the batch id. Each file is written to a
//! temporary name and renamed, so a crash leaves either the old file or the new one.
//! The logs keep the last [`RETAIN`] batches.
//!
//! Durability against a machine crash (fsync of a plan, of the state's write-ahead log) runs
//! beside the work in [`Syncs`]: batch N's rows reach the sink only once its plan and the state
//! of every batch before it are on disk. Until then nothing outside Weir has seen batch N, so a
//! plan or state write that a power cut loses is one that nobody depended on. A `kill -9` loses
//! neither: both are in the page cache the moment they are written.

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::source::Offsets;
use crate::watermark::{self, PartitionId};

/// How many batches the offsets and commits logs keep.
pub const RETAIN: u64 = 100;

/// A checkpoint file that cannot be used: which file, and why.
#[derive(Debug, thiserror::Error)]
#[error("checkpoint file {}: {message}", path.display())]
pub struct CheckpointError {
    pub path: PathBuf,
    pub message: String,
}

/// Syncs running on threads of their own while the pipeline works on.
#[derive(Default)]
pub struct Syncs(Vec<(PathBuf, std::io::Result<std::thread::JoinHandle<std::io::Result<()>>>)>);

impl Syncs {
    /// Starts `sync` of `path` (named in its error). A thread that cannot start is an error at
    /// [`Syncs::wait`].
    pub fn spawn(&mut self, path: PathBuf, sync: impl FnOnce() -> std::io::Result<()> + Send + 'static) {
        self.0.push((path, std::thread::Builder::new().name("weir-sync".into()).spawn(sync)));
    }

    /// Waits until everything started is on disk.
    pub fn wait(&mut self) -> Result<(), CheckpointError> {
        for (path, thread) in self.0.drain(..) {
            let done = thread.and_then(|h| h.join().unwrap_or_else(|_| Err(std::io::Error::other("sync panicked"))));
            done.map_err(|e| CheckpointError { path, message: format!("cannot sync to disk: {e}") })?;
        }
        Ok(())
    }
}

/// Syncs never outlive their owner: a sync thread holds the state's database open, and a
/// pipeline reopened in the same process (a test, `weir bench --restart`) must find it closed.
impl Drop for Syncs {
    fn drop(&mut self) {
        for (_, thread) in self.0.drain(..) {
            if let Ok(h) = thread {
                let _ = h.join();
            }
        }
    }
}

/// `metadata`: who owns this checkpoint.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Metadata {
    pub pipeline: String,
    /// What the state depends on: the source and the windowing. A checkpoint written under
    /// another fingerprint is refused rather than silently reinterpreted.
    pub fingerprint: String,
}

/// `offsets/N`: a batch as planned.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Planned {
    pub batch_id: u64,
    pub start: Offsets,
    pub end: Offsets,
    /// Partitions judged idle when the batch was planned (see `watermark`).
    #[serde(default)]
    pub idle: Vec<PartitionId>,
    /// End of bounded input: the batch flushes every window.
    #[serde(default)]
    pub flush: bool,
    pub planned_at_ms: i64,
}

/// `commits/N`: a batch done.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Committed {
    pub batch_id: u64,
    pub watermark: Option<i64>,
    /// `None` when recovery wrote the entry (the batch's state was committed, its entry lost).
    pub rows_out: Option<usize>,
    pub committed_at_ms: i64,
}

/// The state store's record of the last committed batch, written atomically with the state.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StateMeta {
    pub next_batch: u64,
    pub source: Offsets,
    pub watermark: watermark::Saved,
    pub dead_letters_len: u64,
    pub late_len: u64,
    /// The aggregator's accumulator encoding version the state was written with.
    #[serde(default)]
    pub state_version: Option<u32>,
}

pub struct CheckpointDir {
    dir: PathBuf,
    /// Plans are synced before their batch's rows leave. Off only to measure what that costs.
    fsync: bool,
}

impl CheckpointDir {
    /// Opens (creating if needed) the checkpoint at `dir` for `meta`'s pipeline; refuses one
    /// written by another pipeline or for another source or windowing.
    pub fn open(dir: &Path, meta: &Metadata) -> Result<Self, CheckpointError> {
        let this = Self { dir: dir.to_path_buf(), fsync: true };
        for sub in ["offsets", "commits"] {
            let d = dir.join(sub);
            fs::create_dir_all(&d).map_err(|e| io_err(&d, e))?;
        }
        let path = dir.join("metadata");
        match read_json::<Metadata>(&path)? {
            None => write_json(&path, meta, true)?,
            Some(found) if found.fingerprint == meta.fingerprint => {}
            Some(found) => {
                return Err(CheckpointError {
                    path,
                    message: format!(
                        "was written by pipeline `{}` ({}); this is `{}` ({}). Set another checkpoint.location, \
                         or delete the directory to start over",
                        found.pipeline, found.fingerprint, meta.pipeline, meta.fingerprint
                    ),
                });
            }
        }
        Ok(this)
    }

    /// Opens an existing checkpoint without claiming it (`weir inspect`).
    pub fn existing(dir: &Path) -> Result<(Self, Metadata), CheckpointError> {
        let path = dir.join("metadata");
        let meta = read_json::<Metadata>(&path)?
            .ok_or_else(|| CheckpointError { path, message: "missing: not a Weir checkpoint directory".into() })?;
        Ok((Self { dir: dir.to_path_buf(), fsync: true }, meta))
    }

    /// Plans are no longer synced: a machine crash may lose them (benchmarks only).
    pub fn without_fsync(mut self) -> Self {
        self.fsync = false;
        self
    }

    pub fn state_dir(&self) -> PathBuf {
        self.dir.join("state")
    }

    pub fn path(&self) -> &Path {
        &self.dir
    }

    /// Durable before the batch's rows reach the sink (`syncs`): once a sink may have seen the
    /// batch, a re-run must read exactly the same range.
    pub fn plan(&self, p: &Planned, syncs: &mut Syncs) -> Result<(), CheckpointError> {
        let path = self.entry("offsets", p.batch_id);
        write_json(&path, p, false)?;
        if self.fsync {
            syncs.spawn(path.clone(), move || {
                fs::File::open(&path)?.sync_all()?;
                path.parent().map_or(Ok(()), |dir| fs::File::open(dir)?.sync_all())
            });
        }
        Ok(())
    }

    pub fn planned(&self, batch_id: u64) -> Result<Option<Planned>, CheckpointError> {
        read_json(&self.entry("offsets", batch_id))
    }

    /// Records batch `c.batch_id` as done and forgets batches older than [`RETAIN`]. Not synced:
    /// the state's synced record of the batch is the truth, and recovery rewrites a lost entry.
    pub fn commit(&self, c: &Committed) -> Result<(), CheckpointError> {
        write_json(&self.entry("commits", c.batch_id), c, false)?;
        if let Some(old) = c.batch_id.checked_sub(RETAIN) {
            for sub in ["offsets", "commits"] {
                // Best effort: a leftover old entry is harmless, and is removed next time.
                let _ = fs::remove_file(self.entry(sub, old));
            }
        }
        Ok(())
    }

    pub fn committed(&self, batch_id: u64) -> Result<Option<Committed>, CheckpointError> {
        read_json(&self.entry("commits", batch_id))
    }

    /// Batch ids present in a log, ascending.
    pub fn ids(&self, log: &str) -> Result<Vec<u64>, CheckpointError> {
        let d = self.dir.join(log);
        let mut ids: Vec<u64> = fs::read_dir(&d)
            .map_err(|e| io_err(&d, e))?
            .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
            .collect();
        ids.sort_unstable();
        Ok(ids)
    }

    fn entry(&self, log: &str, batch_id: u64) -> PathBuf {
        self.dir.join(log).join(batch_id.to_string())
    }
}

pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

fn io_err(path: &Path, e: std::io::Error) -> CheckpointError {
    CheckpointError { path: path.to_path_buf(), message: e.to_string() }
}

fn read_json<T: DeserializeOwned>(path: &Path) -> Result<Option<T>, CheckpointError> {
    let bytes = match fs::read(path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io_err(path, e)),
    };
    serde_json::from_slice(&bytes).map(Some).map_err(|e| CheckpointError {
        path: path.to_path_buf(),
        message: format!("unreadable ({e}); it was not written by this version of Weir, or was damaged"),
    })
}

/// Write to a temporary name and rename over: all or nothing. `durable`: also sync the file and
/// its directory first, so the write survives a machine crash, not only a process crash.
fn write_json<T: Serialize>(path: &Path, value: &T, durable: bool) -> Result<(), CheckpointError> {
    let tmp = path.with_extension("tmp");
    let bytes = serde_json::to_vec_pretty(value).map_err(|e| io_err(path, std::io::Error::other(e)))?;
    let mut f = fs::File::create(&tmp).map_err(|e| io_err(&tmp, e))?;
    f.write_all(&bytes).map_err(|e| io_err(&tmp, e))?;
    if durable {
        f.sync_all().map_err(|e| io_err(&tmp, e))?;
    }
    fs::rename(&tmp, path).map_err(|e| io_err(path, e))?;
    if let Some(dir) = path.parent().filter(|_| durable) {
        fs::File::open(dir).and_then(|d| d.sync_all()).map_err(|e| io_err(dir, e))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::source::ReplayPosition;

    fn meta(fp: &str) -> Metadata {
        Metadata { pipeline: "p".into(), fingerprint: fp.into() }
    }

    #[test]
    fn logs_round_trip_and_old_entries_are_pruned() {
        let d = tempfile::tempdir().unwrap();
        let c = CheckpointDir::open(d.path(), &meta("a")).unwrap();
        for id in 0..=RETAIN + 1 {
            let at = Offsets::Replay(ReplayPosition { byte: id, line: id });
            let p = Planned {
                batch_id: id,
                start: at.clone(),
                end: at,
                idle: vec![(0, 1)],
                flush: false,
                planned_at_ms: 1,
            };
            c.plan(&p, &mut Syncs::default()).unwrap();
            assert_eq!(c.planned(id).unwrap(), Some(p));
            c.commit(&Committed { batch_id: id, watermark: None, rows_out: Some(0), committed_at_ms: 2 }).unwrap();
        }
        assert_eq!(c.ids("commits").unwrap(), (2..=RETAIN + 1).collect::<Vec<_>>());
        assert!(c.planned(1).unwrap().is_none());
    }

    #[test]
    fn another_pipelines_checkpoint_is_refused_and_damage_names_the_file() {
        let d = tempfile::tempdir().unwrap();
        CheckpointDir::open(d.path(), &meta("a")).unwrap();
        let e = CheckpointDir::open(d.path(), &meta("b")).err().unwrap().to_string();
        assert!(e.contains("metadata") && e.contains("another checkpoint.location"), "{e}");
        let c = CheckpointDir::open(d.path(), &meta("a")).unwrap();
        fs::write(d.path().join("offsets/7"), b"{\"batch_id\": 7, trunc").unwrap();
        let e = c.planned(7).unwrap_err().to_string();
        assert!(e.contains("offsets/7") && e.contains("unreadable"), "{e}");
    }
}
