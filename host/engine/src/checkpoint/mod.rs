//! The checkpoint directory: what a pipeline has done, so that a restart (after `kill -9`, at any
//! point) continues exactly where the last committed batch left off.
//!
//! ```text
//! CHECKPOINT/
//!   lock            held (flock) by the process running the pipeline; holds its pid
//!   metadata        the checkpoint's identity and which pipeline owns it (another is refused)
//!   offsets/N       batch N's planned source range and idleness, written before it runs
//!   state/          RocksDB: operator state + the last committed batch, one atomic write per batch
//!   commits/N       batch N done: written after the sink accepted it and the state committed
//! ```
//!
//! Recovery reads the state's record of the last committed batch B; if `offsets/B+1` exists, that
//! batch was planned but never committed, and is re-run with the same range, id and idleness, so
//! it yields the same rows, which the sink dedupes on (checkpoint identity, batch id). Each file
//! is written to a temporary name and renamed, so a crash leaves either the old file or the new
//! one. The logs keep the last [`RETAIN`] batches.
//!
//! A checkpoint is claimed (its `metadata` written, with a new identity) only once a run has
//! started cleanly: a start that fails on a typo leaves nothing that would refuse the fixed
//! pipeline.
//!
//! Durability against a machine crash (fsync of a plan, of the state's write-ahead log) runs
//! beside the work in [`Syncs`]: batch N's rows reach the sink only once its plan and the state
//! of every batch before it are on disk. Until then nothing outside Weir has seen batch N, so a
//! plan or state write that a power cut loses is one that nobody depended on. A batch without
//! rows does not wait: its syncs are waited for by the next batch that has rows (side outputs
//! need none of this: their committed lengths are in the state, and a restart cuts them back).
//! A `kill -9` loses neither: both are in the page cache the moment they are written.

mod syncs;

use std::fs;
use std::io::{Read, Seek, Write};
use std::path::{Path, PathBuf};

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

pub use syncs::Syncs;

use crate::source::Offsets;
use crate::watermark::{self, PartitionId};

/// How many batches the offsets and commits logs keep.
pub const RETAIN: u64 = 100;

#[derive(Debug, thiserror::Error)]
pub enum CheckpointError {
    /// A checkpoint file that cannot be used: which file, and why.
    #[error("checkpoint file {}: {message}", path.display())]
    File { path: PathBuf, message: String },
    /// The checkpoint belongs to another pipeline (or another source or windowing).
    #[error("checkpoint {}: {message}", dir.display())]
    Foreign { dir: PathBuf, message: String },
    /// Another process is running a pipeline on it.
    #[error(
        "checkpoint {} is in use by {holder}; two runs on one checkpoint would corrupt it. Stop the other \
         one, or give this run another checkpoint.location",
        dir.display()
    )]
    Locked { dir: PathBuf, holder: String },
    /// A group's task was claimed by a newer owner (`host/scale/src/ledger/`): this run no longer owns
    /// it and must write nothing more.
    #[error("task {task}: fenced: owner epoch {epoch} was superseded by epoch {newer}, which another process claimed")]
    Fenced { task: String, epoch: u64, newer: u64 },
    /// The record kept outside this machine could not be read or written.
    #[error("task {task}: its checkpoint record: {source}")]
    Ledger {
        task: String,
        #[source]
        source: Box<crate::kafka::KafkaError>,
    },
}

/// Where a run's checkpoint is recorded beyond its directory, which then is only the working
/// copy: a group's task (`host/scale/src/ledger/`) writes its plans and commits to Kafka, so the
/// process that is assigned the task next continues from them.
pub trait Ledger: Send {
    /// Records batch `plan` before it runs. Fails with [`CheckpointError::Fenced`] if another
    /// owner has claimed the task since: then nothing of this batch may be delivered.
    fn plan(&mut self, plan: &Planned) -> Result<(), CheckpointError>;
    /// Records a committed batch: the state's record of it (`meta`), before the local commit
    /// (micro-batches) or after it (continuous mode, at-least-once either way). `state` holds
    /// the batch's changes, still staged (micro-batches), for a ledger that records state too.
    /// It may return before the record has it, once the record's newest commit is this
    /// directory's: the next [`Ledger::plan`] or [`Ledger::sync`] waits for it, so the local
    /// state is at most one commit ahead of the record.
    fn commit(&mut self, meta: &[u8], state: &crate::state::StateStore) -> Result<(), CheckpointError>;
    /// Waits until the record has everything written so far.
    fn sync(&mut self) -> Result<(), CheckpointError>;
}

impl CheckpointError {
    pub fn file(path: impl Into<PathBuf>, message: impl Into<String>) -> Self {
        CheckpointError::File { path: path.into(), message: message.into() }
    }
}

/// `metadata`: who owns this checkpoint.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Metadata {
    /// The checkpoint's identity: a UUID (version 7, so later checkpoints sort after earlier
    /// ones) made when it was claimed. Exactly-once sinks key their dedupe on it with the batch
    /// id, so a replay into a fresh checkpoint is never mistaken for a re-delivery.
    /// Checkpoints from before identities get one when next opened.
    #[serde(default)]
    pub id: String,
    pub pipeline: String,
    /// What the state depends on: the source and the operator. A checkpoint written under
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
    /// End of bounded input, and the run flushes: the batch advances the operator to its
    /// horizon, emitting every open window.
    #[serde(default)]
    pub flush: bool,
    pub planned_at_ms: i64,
    /// Where the operator's side inputs (a join's table) end for this batch (`None`: it has
    /// none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub side: Option<Offsets>,
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
    /// The operator plugin's state encoding version the state was written with.
    #[serde(default)]
    pub state_version: Option<u32>,
    /// The watermark a flush at the end of an earlier run advanced the operator to (its
    /// horizon): every window that flush emitted is final under it. Lateness and emission use
    /// the greater of this and the real watermark; the real one stays in `watermark`.
    #[serde(default)]
    pub flushed_to: Option<i64>,
    /// Violations of each expectation, counted since the checkpoint began.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub expectations: std::collections::BTreeMap<String, u64>,
    /// Records read and rows delivered since the checkpoint began: what `weir graph` shows on
    /// a project's flow (0 in a record written before these were kept).
    #[serde(default)]
    pub records_in: u64,
    #[serde(default)]
    pub rows_out: u64,
}

pub struct CheckpointDir {
    dir: PathBuf,
    /// Plans are synced before their batch's rows leave. Off only to measure what that costs.
    fsync: bool,
    /// The lock on `lock`, held while the value lives (`None`: read-only, `weir inspect`).
    _lock: Option<fs::File>,
}

impl CheckpointDir {
    /// Takes the checkpoint at `dir` (creating the directory if needed) for this process, and
    /// returns it with its metadata, if it was ever claimed. Refused while another process holds
    /// it; the error names that process.
    pub fn lock(dir: &Path) -> Result<(Self, Option<Metadata>), CheckpointError> {
        fs::create_dir_all(dir).map_err(|e| io_err(dir, e))?;
        let path = dir.join("lock");
        let mut file =
            crate::own_files::open(&path, fs::OpenOptions::new().read(true).write(true).create(true).truncate(false))
                .map_err(|e| io_err(&path, e))?;
        match file.try_lock() {
            Ok(()) => {}
            Err(fs::TryLockError::WouldBlock) => {
                let mut pid = String::new();
                let _ = file.read_to_string(&mut pid);
                let holder = match pid.trim() {
                    "" => "another process".to_string(),
                    pid => format!("process {pid}"),
                };
                return Err(CheckpointError::Locked { dir: dir.to_path_buf(), holder });
            }
            Err(fs::TryLockError::Error(e)) => return Err(io_err(&path, e)),
        }
        // Who holds it, for the error another process gets. The lock itself is the flock, which
        // the kernel drops when this process ends however it ends.
        file.set_len(0)
            .and_then(|()| file.rewind())
            .and_then(|()| write!(file, "{}", std::process::id()))
            .map_err(|e| io_err(&path, e))?;
        let meta = read_json::<Metadata>(&dir.join("metadata"))?;
        Ok((Self { dir: dir.to_path_buf(), fsync: true, _lock: Some(file) }, meta))
    }

    /// Refuses a checkpoint another pipeline (or another source or operator) wrote; returns the
    /// checkpoint's identity, a new one if it was never claimed.
    pub fn check(
        &self,
        found: Option<&Metadata>,
        pipeline: &str,
        fingerprint: &str,
    ) -> Result<String, CheckpointError> {
        match found {
            Some(m) if m.fingerprint != fingerprint => Err(CheckpointError::Foreign {
                dir: self.dir.clone(),
                message: format!(
                    "was written by pipeline `{}` ({}); this is `{pipeline}` ({fingerprint}). Set another \
                     checkpoint.location, or delete the directory to start over",
                    m.pipeline, m.fingerprint
                ),
            }),
            Some(m) if !m.id.is_empty() => Ok(m.id.clone()),
            _ => Ok(uuid::Uuid::now_v7().to_string()),
        }
    }

    /// Writes the metadata (synced) unless it says this already: called once the run has
    /// started cleanly, before its first batch.
    pub fn claim(&self, found: Option<&Metadata>, meta: &Metadata) -> Result<(), CheckpointError> {
        if found != Some(meta) {
            for sub in ["offsets", "commits"] {
                let d = self.dir.join(sub);
                fs::create_dir_all(&d).map_err(|e| io_err(&d, e))?;
            }
            write_json(&self.dir.join("metadata"), meta, true)?;
        }
        Ok(())
    }

    /// Removes the state and both logs, keeping the side outputs (a group's task, whose record
    /// elsewhere is newer: `scale/task.rs`). Each goes by a rename first, which is atomic, and
    /// is then deleted under its new name: a crash midway leaves a directory whole or out of
    /// the way, never a store with some of its files deleted, which RocksDB refuses to open.
    pub fn start_over(&self) -> Result<(), CheckpointError> {
        for sub in ["state", "offsets", "commits"] {
            let (d, gone) = (self.dir.join(sub), self.dir.join(format!("{sub}.gone")));
            remove_if_there(&gone)?;
            match fs::rename(&d, &gone) {
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => return Err(io_err(&d, e)),
                Ok(()) => remove_if_there(&gone)?,
            }
        }
        Ok(())
    }

    /// Removes every plan: a group's task takes its plans from its record, and a plan written
    /// here but never recorded there was never run (`scale/task.rs`).
    pub fn drop_plans(&self) -> Result<(), CheckpointError> {
        let d = self.dir.join("offsets");
        match fs::remove_dir_all(&d) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(io_err(&d, e)),
            _ => {}
        }
        fs::create_dir_all(&d).map_err(|e| io_err(&d, e))
    }

    /// Opens an existing checkpoint without taking it (`weir inspect`; safe while it runs).
    pub fn existing(dir: &Path) -> Result<(Self, Metadata), CheckpointError> {
        let path = dir.join("metadata");
        let meta = read_json::<Metadata>(&path)?
            .ok_or_else(|| CheckpointError::file(path, "missing: not a Weir checkpoint directory"))?;
        Ok((Self { dir: dir.to_path_buf(), fsync: true, _lock: None }, meta))
    }

    /// Plans are no longer synced: a machine crash may lose them (benchmarks only).
    pub fn without_fsync(mut self) -> Self {
        self.fsync = false;
        self
    }

    pub fn state_dir(&self) -> PathBuf {
        self.dir.join("state")
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
        record_commit(&self.dir, c)
    }

    /// [`CheckpointDir::commit`] as a job to run elsewhere, after the state's write.
    pub fn commit_later(&self, c: Committed) -> impl FnOnce() -> Result<(), CheckpointError> + Send + 'static {
        let dir = self.dir.clone();
        move || record_commit(&dir, &c)
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
        entry(&self.dir, log, batch_id)
    }
}

fn entry(dir: &Path, log: &str, batch_id: u64) -> PathBuf {
    dir.join(log).join(batch_id.to_string())
}

fn record_commit(dir: &Path, c: &Committed) -> Result<(), CheckpointError> {
    write_json(&entry(dir, "commits", c.batch_id), c, false)?;
    if let Some(old) = c.batch_id.checked_sub(RETAIN) {
        for sub in ["offsets", "commits"] {
            // Best effort: a leftover old entry is harmless, and is removed next time.
            let _ = fs::remove_file(entry(dir, sub, old));
        }
    }
    Ok(())
}

pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

fn io_err(path: &Path, e: std::io::Error) -> CheckpointError {
    CheckpointError::file(path, e.to_string())
}

fn read_json<T: DeserializeOwned>(path: &Path) -> Result<Option<T>, CheckpointError> {
    let bytes = match fs::read(path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io_err(path, e)),
    };
    serde_json::from_slice(&bytes).map(Some).map_err(|e| {
        CheckpointError::file(
            path,
            format!("unreadable ({e}); it was not written by this version of Weir, or was damaged"),
        )
    })
}

/// Write to a temporary name and rename over: all or nothing. `durable`: also sync the file and
/// its directory first, so the write survives a machine crash, not only a process crash.
fn write_json<T: Serialize>(path: &Path, value: &T, durable: bool) -> Result<(), CheckpointError> {
    let bytes = serde_json::to_vec_pretty(value).map_err(|e| io_err(path, std::io::Error::other(e)))?;
    crate::own_files::replace(path, &bytes, durable).map_err(|e| io_err(path, e))
}

/// Deletes the directory `d` and everything in it, if it is there.
fn remove_if_there(d: &Path) -> Result<(), CheckpointError> {
    match fs::remove_dir_all(d) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(io_err(d, e)),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::source::ReplayPosition;

    /// Locks, checks and claims a checkpoint for pipeline `p` with fingerprint `fp`.
    fn open(dir: &Path, fp: &str) -> Result<(CheckpointDir, Metadata), CheckpointError> {
        let (c, found) = CheckpointDir::lock(dir)?;
        let id = c.check(found.as_ref(), "p", fp)?;
        let meta = Metadata { id, pipeline: "p".into(), fingerprint: fp.into() };
        c.claim(found.as_ref(), &meta)?;
        Ok((c, meta))
    }

    /// A start over leaves no state and no logs, keeps the side outputs, and clears what a
    /// crash in an earlier one left under the other name.
    #[test]
    fn a_start_over_removes_state_and_logs_and_what_an_interrupted_one_left() {
        let d = tempfile::tempdir().unwrap();
        let (c, _) = open(d.path(), "a").unwrap();
        std::fs::create_dir_all(c.state_dir()).unwrap();
        std::fs::write(c.state_dir().join("CURRENT"), "MANIFEST-000005\n").unwrap();
        std::fs::create_dir_all(d.path().join("state.gone")).unwrap();
        std::fs::write(d.path().join("dead-letters.jsonl"), "{}\n").unwrap();
        c.start_over().unwrap();
        for gone in ["state", "offsets", "commits", "state.gone", "offsets.gone", "commits.gone"] {
            assert!(!d.path().join(gone).exists(), "{gone}");
        }
        assert!(d.path().join("dead-letters.jsonl").exists());
    }

    #[test]
    fn logs_round_trip_and_old_entries_are_pruned() {
        let d = tempfile::tempdir().unwrap();
        let (c, _) = open(d.path(), "a").unwrap();
        for id in 0..=RETAIN + 1 {
            let at = Offsets::Replay(ReplayPosition { byte: id, line: id });
            let p = Planned {
                batch_id: id,
                start: at.clone(),
                end: at,
                idle: vec![(0, 1)],
                flush: false,
                planned_at_ms: 1,
                side: None,
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
        let (_, first) = open(d.path(), "a").unwrap();
        let e = open(d.path(), "b").err().unwrap().to_string();
        assert!(e.contains("pipeline `p` (a)") && e.contains("another checkpoint.location"), "{e}");
        let (c, again) = open(d.path(), "a").unwrap();
        assert_eq!(first.id, again.id, "the identity is kept for the checkpoint's life");
        fs::write(d.path().join("offsets/7"), b"{\"batch_id\": 7, trunc").unwrap();
        let e = c.planned(7).unwrap_err().to_string();
        assert!(e.contains("offsets/7") && e.contains("unreadable"), "{e}");
    }

    #[test]
    fn a_held_checkpoint_is_refused_naming_the_holder_and_free_once_it_is_let_go() {
        let d = tempfile::tempdir().unwrap();
        let (held, _) = open(d.path(), "a").unwrap();
        let e = CheckpointDir::lock(d.path()).err().unwrap().to_string();
        assert!(e.contains(&format!("process {}", std::process::id())) && e.contains("in use"), "{e}");
        drop(held);
        assert!(CheckpointDir::lock(d.path()).is_ok());
    }

    #[test]
    fn nothing_is_written_until_the_claim_and_identities_differ_between_checkpoints() {
        let d = tempfile::tempdir().unwrap();
        let (c, found) = CheckpointDir::lock(d.path()).unwrap();
        c.check(found.as_ref(), "p", "a").unwrap();
        drop(c);
        assert!(!d.path().join("metadata").exists(), "a start that stops before the claim leaves no metadata");
        let (_, a) = open(d.path(), "b").unwrap();
        let other = tempfile::tempdir().unwrap();
        let (_, b) = open(other.path(), "b").unwrap();
        assert_ne!(a.id, b.id);
        assert!(a.id < b.id, "later checkpoints sort after earlier ones");
    }
}
