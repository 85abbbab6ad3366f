//! Checkpoint work that may run behind the batch: a plan's fsync, the state's write-ahead-log
//! sync, the commits log's entry. One worker thread per pipeline runs them in the order they were
//! given, while the loop works on; the driver waits for all of them just before the sink sees the
//! next rows (`mod.rs` says why that is enough).
//!
//! One long-lived worker rather than a thread per job: two thread starts per batch (a stack
//! mapped, faulted and unmapped each), with the commits log's create, write and rename, are a
//! large share of the loop's time when batches are small.

use std::path::PathBuf;
use std::sync::mpsc;
use std::thread::JoinHandle;

use super::CheckpointError;

/// A job and the file it is about (named in its error).
type Job = Box<dyn FnOnce() -> Result<(), CheckpointError> + Send>;

/// Checkpoint jobs running on a worker of their own while the pipeline works on.
#[derive(Default)]
pub struct Syncs {
    worker: Option<Worker>,
    /// Jobs given to the worker and not yet waited for.
    pending: usize,
    /// The first error of a job run in place (when the worker could not start), for
    /// [`Syncs::wait`].
    failed: Option<CheckpointError>,
}

struct Worker {
    jobs: mpsc::Sender<Job>,
    done: mpsc::Receiver<Result<(), CheckpointError>>,
    thread: JoinHandle<()>,
}

impl Worker {
    fn start() -> std::io::Result<Self> {
        let (jobs, inbox) = mpsc::channel::<Job>();
        let (report, done) = mpsc::channel();
        let thread = std::thread::Builder::new().name("weir-sync".into()).spawn(move || {
            for job in inbox {
                let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(job)).unwrap_or_else(|_| {
                    Err(CheckpointError::File { path: PathBuf::new(), message: "a checkpoint job panicked".into() })
                });
                if report.send(result).is_err() {
                    return;
                }
            }
        })?;
        Ok(Self { jobs, done, thread })
    }
}

impl Syncs {
    /// Queues `sync` of `path`, an fsync: its error names the file.
    pub fn spawn(&mut self, path: PathBuf, sync: impl FnOnce() -> std::io::Result<()> + Send + 'static) {
        self.run(move || sync().map_err(|e| CheckpointError::file(path, format!("cannot sync to disk: {e}"))));
    }

    /// Queues `job` behind the jobs given before it.
    pub fn run(&mut self, job: impl FnOnce() -> Result<(), CheckpointError> + Send + 'static) {
        if self.worker.is_none() {
            self.worker = Worker::start().ok();
        }
        let job: Job = Box::new(job);
        // A worker that cannot start (or has stopped): the job runs here and now, so nothing
        // is skipped and the order holds.
        let job = match &self.worker {
            Some(w) => match w.jobs.send(job) {
                Ok(()) => {
                    self.pending += 1;
                    return;
                }
                Err(mpsc::SendError(job)) => job,
            },
            None => job,
        };
        if let Err(e) = job() {
            self.failed.get_or_insert(e);
        }
    }

    /// Jobs given and not yet waited for.
    pub fn pending(&self) -> usize {
        self.pending
    }

    /// Waits until every job given has run (every sync is on disk); the first error, if any.
    pub fn wait(&mut self) -> Result<(), CheckpointError> {
        let mut first = self.failed.take().map_or(Ok(()), Err);
        let mut keep = |r: Result<(), CheckpointError>| {
            if first.is_ok() {
                first = r;
            }
        };
        if let Some(w) = &self.worker {
            for _ in 0..std::mem::take(&mut self.pending) {
                match w.done.recv() {
                    Ok(r) => keep(r),
                    Err(_) => {
                        keep(Err(CheckpointError::File {
                            path: PathBuf::new(),
                            message: "the checkpoint's sync thread stopped".into(),
                        }));
                        break;
                    }
                }
            }
        }
        first
    }
}

/// Jobs never outlive their owner: a sync holds the state's database open, and a pipeline
/// reopened in the same process (a test, `weir bench --restart`) must find it closed.
impl Drop for Syncs {
    fn drop(&mut self) {
        if let Some(Worker { jobs, done, thread }) = self.worker.take() {
            drop(jobs);
            drop(done);
            let _ = thread.join();
        }
    }
}

impl crate::state::SyncLater for Syncs {
    fn spawn(&mut self, path: PathBuf, sync: Box<dyn FnOnce() -> std::io::Result<()> + Send>) {
        Syncs::spawn(self, path, sync)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};

    #[test]
    fn jobs_run_in_order_and_wait_returns_the_first_error_after_all_ran() {
        let mut syncs = Syncs::default();
        let seen = Arc::new(Mutex::new(Vec::new()));
        for i in 0..5 {
            let seen = seen.clone();
            syncs.run(move || {
                seen.lock().unwrap().push(i);
                if i == 2 { Err(CheckpointError::file(PathBuf::from("two"), "failed")) } else { Ok(()) }
            });
        }
        assert_eq!(syncs.pending(), 5);
        let err = syncs.wait().unwrap_err();
        assert!(err.to_string().contains("two"), "{err}");
        assert_eq!(*seen.lock().unwrap(), vec![0, 1, 2, 3, 4]);
        assert_eq!(syncs.pending(), 0);
        syncs.spawn(PathBuf::from("f"), || Err(std::io::Error::other("disk gone")));
        let err = syncs.wait().unwrap_err().to_string();
        assert!(err.contains("cannot sync to disk: disk gone") && err.contains('f'), "{err}");
        assert!(syncs.wait().is_ok(), "nothing left");
    }

    #[test]
    fn a_panicking_job_is_an_error_and_the_worker_goes_on() {
        let mut syncs = Syncs::default();
        syncs.run(|| panic!("boom"));
        assert!(syncs.wait().is_err());
        syncs.run(|| Ok(()));
        assert!(syncs.wait().is_ok());
    }

    #[test]
    fn dropping_runs_what_was_given() {
        let ran = Arc::new(Mutex::new(false));
        let mut syncs = Syncs::default();
        let r = ran.clone();
        syncs.run(move || {
            *r.lock().unwrap() = true;
            Ok(())
        });
        drop(syncs);
        assert!(*ran.lock().unwrap());
    }
}
