//! Operator state in RocksDB on disk.
//!
//! Changes are staged in memory and reach RocksDB in one atomic write together with the
//! checkpoint record of the batch they bring the state to, so the store always reflects a whole
//! number of batches: after a crash it is exactly the state as of the last checkpointed batch,
//! and the batches after it re-run from there (their plans say what they read). Staging lasts
//! from one checkpoint to the next (today one batch).
//!
//! Within a batch the failure policy needs to undo a failed call's changes. A savepoint taken
//! with nothing staged (the usual case: the batch's first call) costs nothing, and rolling back
//! to it empties the stage. Otherwise a savepoint starts a journal of what each change replaced,
//! and a rollback plays it backwards. Outside a savepoint nothing is journaled.
//!
//! Every operator keys its entries under its own scope (the first bytes, `operator::Scope`),
//! ordered so that range scans answer its questions (panes by time, a key's sessions, a key's
//! timers by time); the checkpoint record is the key [`META`] outside every scope.

use std::collections::BTreeMap;
use std::ops::Bound;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rocksdb::{DB, Options, WriteBatch, WriteOptions};

/// Where a commit's write-ahead-log sync runs, behind the batch: the checkpoint's worker
/// (`checkpoint::Syncs`) in a pipeline. The state says what must reach the disk; it does not
/// decide where that work runs, so it needs nothing of the checkpoint.
pub trait SyncLater {
    /// Runs `sync` (about the file at `path`) before the next batch's rows reach the sink.
    fn spawn(&mut self, path: PathBuf, sync: Box<dyn FnOnce() -> std::io::Result<()> + Send>);
}

#[derive(Debug, thiserror::Error)]
pub enum StateError {
    #[error("state store {}", path.display())]
    Db { path: PathBuf, source: rocksdb::Error },
}

pub struct StateStore {
    /// Shared with the thread that syncs its write-ahead log.
    db: Arc<DB>,
    path: PathBuf,
    staged: BTreeMap<Vec<u8>, Option<Vec<u8>>>,
    /// While a savepoint is open: each change, with what it replaced.
    journal: Option<Vec<Undo>>,
    /// A savepoint was taken with nothing staged and not released: rolling back to it empties
    /// the stage.
    from_empty: bool,
    /// Commits are synced. Off only to measure what that costs.
    fsync: bool,
}

const META: &[u8] = b"m";

/// One journaled change: the key, and its staged entry before the change (`None`: it had none).
type Undo = (Vec<u8>, Option<Option<Vec<u8>>>);

/// Where the journal stood (`None`: nothing was staged): [`StateStore::rollback`] undoes what
/// came after.
#[derive(Debug, Clone, Copy)]
pub struct Savepoint(Option<usize>);

/// A key and its value.
pub type Entry = (Vec<u8>, Vec<u8>);

impl StateStore {
    pub fn open(path: &Path) -> Result<Self, StateError> {
        let mut opts = Options::default();
        opts.create_if_missing(true);
        opts.set_compression_type(rocksdb::DBCompressionType::Lz4);
        // Every batch writes its changes through the memtable; a smaller one is a shallower skip
        // list to insert into, which operators dominated by writes (sessions per user) gain from
        // against RocksDB's default; smaller still gains little. Panes write a few keys a batch.
        opts.set_write_buffer_size(16 << 20);
        // Operators look up keys that are mostly absent (a new dedup key, a user without a
        // session): a bloom filter answers those without reading a block.
        let mut table = rocksdb::BlockBasedOptions::default();
        table.set_bloom_filter(10.0, false);
        opts.set_block_based_table_factory(&table);
        let db = DB::open(&opts, path).map_err(|e| StateError::Db { path: path.to_path_buf(), source: e })?;
        Ok(Self::over(db, path))
    }

    fn over(db: DB, path: &Path) -> Self {
        Self {
            db: Arc::new(db),
            path: path.to_path_buf(),
            staged: BTreeMap::new(),
            journal: None,
            from_empty: false,
            fsync: true,
        }
    }

    /// Opens a store another process may be writing, to look at it (`weir inspect`).
    pub fn open_read_only(path: &Path) -> Result<Self, StateError> {
        let db = DB::open_for_read_only(&Options::default(), path, false)
            .map_err(|e| StateError::Db { path: path.to_path_buf(), source: e })?;
        Ok(Self::over(db, path))
    }

    fn err(&self, e: rocksdb::Error) -> StateError {
        StateError::Db { path: self.path.clone(), source: e }
    }

    pub fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>, StateError> {
        match self.staged.get(key) {
            Some(v) => Ok(v.clone()),
            None => self.db.get(key).map_err(|e| self.err(e)),
        }
    }

    /// Commits are no longer synced: a machine crash may lose them (benchmarks only).
    pub fn without_fsync(mut self) -> Self {
        self.fsync = false;
        self
    }

    /// Starts (or continues) journaling changes, so that [`StateStore::rollback`] can undo
    /// what comes after this point. Savepoints nest: each rolls back to where it was taken.
    pub fn savepoint(&mut self) -> Savepoint {
        if self.journal.is_none() && self.staged.is_empty() {
            self.from_empty = true;
            return Savepoint(None);
        }
        Savepoint(Some(self.journal.get_or_insert_with(Vec::new).len()))
    }

    /// Undoes the changes made since `savepoint`.
    pub fn rollback(&mut self, savepoint: Savepoint) {
        let Some(at) = savepoint.0 else {
            if self.from_empty {
                self.staged.clear();
                self.journal = None;
            }
            return;
        };
        let Some(journal) = self.journal.as_mut() else { return };
        for (key, before) in journal.drain(at..).rev() {
            match before {
                Some(v) => self.staged.insert(key, v),
                None => self.staged.remove(&key),
            };
        }
    }

    /// Keeps what was done since the outermost savepoint and stops journaling.
    pub fn release(&mut self) {
        self.journal = None;
        self.from_empty = false;
    }

    pub fn put(&mut self, key: Vec<u8>, value: Vec<u8>) {
        self.stage(key, Some(value));
    }

    pub fn delete(&mut self, key: Vec<u8>) {
        self.stage(key, None);
    }

    fn stage(&mut self, key: Vec<u8>, value: Option<Vec<u8>>) {
        match self.journal.as_mut() {
            Some(journal) => {
                let before = self.staged.insert(key.clone(), value);
                journal.push((key, before));
            }
            None => {
                self.staged.insert(key, value);
            }
        }
    }

    /// Entries with `from <= key < to`, staged changes applied, in key order.
    pub fn range(&self, from: &[u8], to: &[u8]) -> Result<Vec<Entry>, StateError> {
        Ok(self.ranges(&[(from.to_vec(), to.to_vec())])?.pop().unwrap_or_default())
    }

    /// [`StateStore::range`] for many ranges with one RocksDB iterator: seeking is several times
    /// cheaper than opening an iterator, and sessions look up every key of a batch.
    pub fn ranges(&self, ranges: &[(Vec<u8>, Vec<u8>)]) -> Result<Vec<Vec<Entry>>, StateError> {
        let mut it = self.db.raw_iterator();
        let mut out = Vec::with_capacity(ranges.len());
        for (from, to) in ranges {
            let mut found: BTreeMap<Vec<u8>, Vec<u8>> = BTreeMap::new();
            it.seek(from);
            while let (Some(k), Some(v)) = (it.key(), it.value()) {
                if k >= to.as_slice() {
                    break;
                }
                found.insert(k.to_vec(), v.to_vec());
                it.next();
            }
            it.status().map_err(|e| self.err(e))?;
            for (k, v) in
                self.staged.range::<[u8], _>((Bound::Included(from.as_slice()), Bound::Excluded(to.as_slice())))
            {
                match v {
                    Some(v) => found.insert(k.clone(), v.clone()),
                    None => found.remove(k),
                };
            }
            out.push(found.into_iter().collect());
        }
        Ok(out)
    }

    /// The last entry with `from <= key < to`, staged changes applied: a walk back from `to`
    /// that stops at the first live entry, never a read of the whole range.
    pub fn last_in_range(&self, from: &[u8], to: &[u8]) -> Result<Option<Entry>, StateError> {
        if from >= to {
            return Ok(None);
        }
        let mut it = self.db.raw_iterator();
        it.seek_for_prev(to);
        if it.key() == Some(to) {
            it.prev();
        }
        let mut staged = self.staged.range::<[u8], _>((Bound::Included(from), Bound::Excluded(to))).rev().peekable();
        loop {
            let committed = it.key().filter(|k| *k >= from);
            let staged_first = match (staged.peek(), committed) {
                (None, None) => {
                    it.status().map_err(|e| self.err(e))?;
                    return Ok(None);
                }
                (None, Some(_)) => false,
                (Some(_), None) => true,
                (Some((sk, _)), Some(c)) => sk.as_slice() >= c,
            };
            if !staged_first {
                let (k, v) = (committed.unwrap_or_default(), it.value().unwrap_or_default());
                return Ok(Some((k.to_vec(), v.to_vec())));
            }
            if let Some((k, v)) = staged.next() {
                // A staged change to a committed key stands for it: step over the committed one.
                if committed == Some(k.as_slice()) {
                    it.prev();
                }
                if let Some(v) = v {
                    return Ok(Some((k.clone(), v.clone())));
                }
            }
        }
    }

    /// Writes the staged changes and `meta` (the batch's checkpoint record) in one atomic write,
    /// and starts syncing it to disk in `syncs` (see [`crate::checkpoint`]).
    pub fn commit(&mut self, meta: &[u8], syncs: &mut dyn SyncLater) -> Result<(), StateError> {
        self.journal = None;
        self.from_empty = false;
        let batch = write_batch(std::mem::take(&mut self.staged), meta);
        self.db.write_opt(batch, &WriteOptions::default()).map_err(|e| self.err(e))?;
        if self.fsync {
            let db = self.db.clone();
            syncs.spawn(self.path.clone(), Box::new(move || db.flush_wal(true).map_err(std::io::Error::other)));
        }
        Ok(())
    }

    /// [`StateStore::commit`] as a job to run elsewhere, synced before it returns: continuous
    /// mode commits off the record path. The store shows the staged changes only once the job
    /// has run, so nothing may read them before (continuous pipelines stage none).
    pub fn commit_later(&mut self, meta: Vec<u8>) -> impl FnOnce() -> Result<(), StateError> + Send + 'static {
        self.journal = None;
        self.from_empty = false;
        let staged = std::mem::take(&mut self.staged);
        let (db, path, fsync) = (self.db.clone(), self.path.clone(), self.fsync);
        move || {
            let err = |e| StateError::Db { path: path.clone(), source: e };
            db.write_opt(write_batch(staged, &meta), &WriteOptions::default()).map_err(err)?;
            if fsync {
                db.flush_wal(true).map_err(err)?;
            }
            Ok(())
        }
    }

    /// The changes staged since the last commit, in key order (`None`: a delete): what a group's
    /// stage-2 task writes to its changelog (`scale/changelog.rs`).
    pub fn staged(&self) -> impl Iterator<Item = (&[u8], Option<&[u8]>)> {
        self.staged.iter().map(|(k, v)| (k.as_slice(), v.as_deref()))
    }

    /// The committed values of `keys`, ignoring what is staged: a changelog record's
    /// before-image.
    pub fn committed_values(&self, keys: &[&[u8]]) -> Result<Vec<Option<Vec<u8>>>, StateError> {
        self.db.multi_get(keys).into_iter().map(|r| r.map_err(|e| self.err(e))).collect()
    }

    /// Every committed entry but the checkpoint record, in key order: a group's stage-2 task
    /// writes them to its changelog when it claims the task.
    pub fn entries(&self) -> Result<Vec<Entry>, StateError> {
        let mut it = self.db.raw_iterator();
        it.seek_to_first();
        let mut out = Vec::new();
        while let (Some(k), Some(v)) = (it.key(), it.value()) {
            if k != META {
                out.push((k.to_vec(), v.to_vec()));
            }
            it.next();
        }
        it.status().map_err(|e| self.err(e))?;
        Ok(out)
    }

    /// The checkpoint record of the last committed batch.
    pub fn meta(&self) -> Result<Option<Vec<u8>>, StateError> {
        self.db.get(META).map_err(|e| self.err(e))
    }

    /// Bytes of live data on disk and in memtables (estimated by RocksDB), for progress reports.
    pub fn estimated_bytes(&self) -> u64 {
        ["rocksdb.estimate-live-data-size", "rocksdb.cur-size-all-mem-tables"]
            .iter()
            .map(|p| self.db.property_int_value(*p).ok().flatten().unwrap_or(0))
            .sum()
    }

    /// Keys in the store (estimated by RocksDB), for progress reports.
    pub fn estimated_keys(&self) -> u64 {
        self.db.property_int_value("rocksdb.estimate-num-keys").ok().flatten().unwrap_or(0)
    }
}

/// Staged changes and the checkpoint record as one atomic write.
fn write_batch(staged: BTreeMap<Vec<u8>, Option<Vec<u8>>>, meta: &[u8]) -> WriteBatch {
    let mut batch = WriteBatch::default();
    for (k, v) in staged {
        match v {
            Some(v) => batch.put(k, v),
            None => batch.delete(k),
        }
    }
    batch.put(META, meta);
    batch
}

/// Big-endian with the sign bit flipped, so byte order is numeric order.
pub fn time_key(t: i64) -> [u8; 8] {
    ((t as u64) ^ (1 << 63)).to_be_bytes()
}

pub fn time_from_key(b: &[u8]) -> i64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[..8]);
    (u64::from_be_bytes(a) ^ (1 << 63)) as i64
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Syncs at once, in place: what a test needs of [`SyncLater`].
    struct Now;

    impl SyncLater for Now {
        fn spawn(&mut self, _: PathBuf, sync: Box<dyn FnOnce() -> std::io::Result<()> + Send>) {
            sync().expect("the sync succeeds");
        }
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(64))]

        /// `last_in_range` is the last of `range`, whatever is committed, staged over it or
        /// deleted: a horizon found without reading the whole range.
        #[test]
        fn the_last_in_a_range_is_the_last_of_the_range(
            committed in proptest::collection::vec((0u8..12, 0u8..3), 0..20),
            staged in proptest::collection::vec((0u8..12, proptest::option::of(0u8..3)), 0..20),
            from in 0u8..12,
            to in 0u8..13,
        ) {
            proptest::prop_assume!(from <= to);
            let dir = tempfile::tempdir().unwrap();
            let mut s = StateStore::open(dir.path()).unwrap();
            for (k, v) in committed {
                s.put(vec![b'k', k], vec![v]);
            }
            s.commit(b"0", &mut Now).unwrap();
            for (k, v) in staged {
                match v {
                    Some(v) => s.put(vec![b'k', k], vec![v]),
                    None => s.delete(vec![b'k', k]),
                }
            }
            let (from, to) = (vec![b'k', from], vec![b'k', to]);
            proptest::prop_assert_eq!(s.last_in_range(&from, &to).unwrap(), s.range(&from, &to).unwrap().pop());
        }
    }

    #[test]
    fn time_keys_sort_numerically() {
        let ts = [i64::MIN, -5, -1, 0, 1, 60_000, i64::MAX];
        for w in ts.windows(2) {
            assert!(time_key(w[0]) < time_key(w[1]));
            assert_eq!(time_from_key(&time_key(w[0])), w[0]);
        }
    }

    #[test]
    fn a_rollback_undoes_exactly_what_came_after_its_savepoint() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = StateStore::open(dir.path()).unwrap();
        s.put(b"a".to_vec(), b"1".to_vec());
        let outer = s.savepoint();
        s.put(b"a".to_vec(), b"2".to_vec());
        s.put(b"b".to_vec(), b"1".to_vec());
        let inner = s.savepoint();
        s.delete(b"a".to_vec());
        s.put(b"c".to_vec(), b"1".to_vec());
        s.rollback(inner);
        assert_eq!(s.get(b"a").unwrap(), Some(b"2".to_vec()));
        assert_eq!(s.get(b"c").unwrap(), None);
        s.rollback(outer);
        assert_eq!(s.get(b"a").unwrap(), Some(b"1".to_vec()), "staged before the savepoint: kept");
        assert_eq!(s.get(b"b").unwrap(), None);
        s.release();
        s.put(b"d".to_vec(), b"1".to_vec());
        s.rollback(outer);
        assert_eq!(s.get(b"d").unwrap(), Some(b"1".to_vec()), "released: nothing to undo");
    }

    /// The batch's first call finds nothing staged: its savepoint journals nothing, and a rollback
    /// to it empties the stage, inner savepoints and all.
    #[test]
    fn a_savepoint_over_an_empty_stage_rolls_back_to_empty() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = StateStore::open(dir.path()).unwrap();
        let outer = s.savepoint();
        s.put(b"a".to_vec(), b"1".to_vec());
        let inner = s.savepoint();
        s.put(b"a".to_vec(), b"2".to_vec());
        s.rollback(inner);
        assert_eq!(s.get(b"a").unwrap(), Some(b"1".to_vec()));
        s.rollback(outer);
        assert_eq!(s.get(b"a").unwrap(), None);
        let again = s.savepoint();
        s.put(b"b".to_vec(), b"1".to_vec());
        s.release();
        s.rollback(again);
        assert_eq!(s.get(b"b").unwrap(), Some(b"1".to_vec()), "released: nothing to undo");
    }

    #[test]
    fn staged_changes_are_invisible_on_disk_until_commit() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = StateStore::open(dir.path()).unwrap();
        s.put(b"pa".to_vec(), b"1".to_vec());
        s.put(b"pb".to_vec(), b"2".to_vec());
        assert_eq!(s.get(b"pa").unwrap(), Some(b"1".to_vec()));
        drop(s); // a crash before commit
        let mut s = StateStore::open(dir.path()).unwrap();
        assert_eq!(s.get(b"pa").unwrap(), None);
        assert_eq!(s.meta().unwrap(), None);

        s.put(b"pa".to_vec(), b"1".to_vec());
        s.put(b"pb".to_vec(), b"2".to_vec());
        s.commit(b"batch 0", &mut Now).unwrap();
        s.delete(b"pa".to_vec());
        s.put(b"pc".to_vec(), b"3".to_vec());
        let keys: Vec<_> = s.range(b"p", b"q").unwrap().into_iter().map(|(k, _)| k).collect();
        assert_eq!(keys, vec![b"pb".to_vec(), b"pc".to_vec()]);
        drop(s);
        let s = StateStore::open(dir.path()).unwrap();
        assert_eq!(s.meta().unwrap(), Some(b"batch 0".to_vec()));
        assert_eq!(s.get(b"pa").unwrap(), Some(b"1".to_vec()));
    }
}
