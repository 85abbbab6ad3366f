//! Syncs to disk running on threads of their own while the pipeline works on: a plan's fsync and
//! the state's write-ahead-log sync overlap the batch instead of delaying it. The driver waits for
//! them just before the sink sees the next rows (`mod.rs` says why that is enough).

use std::path::PathBuf;

use super::CheckpointError;

/// Syncs running on threads of their own while the pipeline works on.
#[derive(Default)]
pub(crate) struct Syncs(Vec<(PathBuf, std::io::Result<std::thread::JoinHandle<std::io::Result<()>>>)>);

impl Syncs {
    /// Starts `sync` of `path` (named in its error). A thread that cannot start is an error at
    /// [`Syncs::wait`].
    pub(crate) fn spawn(&mut self, path: PathBuf, sync: impl FnOnce() -> std::io::Result<()> + Send + 'static) {
        self.0.push((path, std::thread::Builder::new().name("weir-sync".into()).spawn(sync)));
    }

    /// Syncs started and not yet waited for.
    pub(crate) fn pending(&self) -> usize {
        self.0.len()
    }

    /// Waits until everything started is on disk.
    pub(crate) fn wait(&mut self) -> Result<(), CheckpointError> {
        for (path, thread) in self.0.drain(..) {
            let done = thread.and_then(|h| h.join().unwrap_or_else(|_| Err(std::io::Error::other("sync panicked"))));
            done.map_err(|e| CheckpointError::file(path, format!("cannot sync to disk: {e}")))?;
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
