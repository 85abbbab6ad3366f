//! Continuous mode (stateless pipelines): what has arrived goes through at once, with no plan;
//! the position is committed on an interval, on SIGTERM and at the end of bounded input, after
//! the sink has made everything before it durable. A crash re-delivers what came after the last
//! commit: at-least-once (docs/semantics.md).
//!
//! A commit runs off the record path, on a thread of its own: the sink's barrier (its
//! acknowledgements), then the state's write of the position, synced, then the commits log.
//! Records keep flowing meanwhile; one commit is in flight at a time, and the source hears of
//! it (for the group offsets) once it is done.
//!
//! **Delivery ids never repeat.** With no plan, a delivery re-made after a crash holds other
//! records than the one first made under its batch id, so a sink that dedupes on the delivery
//! (the file sink, any idempotent plugin) would drop them. So a run starts its ids
//! [`ID_GAP`] past the committed next id and records that start before delivering, and it
//! commits early, whatever the interval, before it has used half the gap after a commit: every
//! id a crashed run delivered lies below where the next run starts.

use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::{Run, RunError, ms};
use crate::checkpoint::CheckpointError;
use crate::ingest::Ingest;
use crate::progress::{BatchProgress, Progress};
use crate::source::{Offsets, SourceBatch};

/// How far past the committed next batch id a continuous run starts its delivery ids (see the
/// module's opening): far more than the batches of any commit interval, so the early commit
/// that keeps a run below half of it is never needed in practice.
const ID_GAP: u64 = 1 << 20;

/// How long one poll waits for the first record before the loop looks at the clock again (and
/// at a commit in flight).
const POLL_WAIT: Duration = Duration::from_millis(50);

/// A commit in flight. Dropping it waits for it: its thread holds the state store open.
struct Committing {
    thread: Option<JoinHandle<Result<(), RunError>>>,
    /// Where the commit leaves the source, and what it covers.
    done: Option<(Offsets, BatchProgress)>,
    /// The state's directory, to name in an error.
    dir: PathBuf,
    /// The state's record of the commit, for a group's ledger once it is on disk.
    meta: Vec<u8>,
}

impl Committing {
    fn is_finished(&self) -> bool {
        self.thread.as_ref().is_none_or(JoinHandle::is_finished)
    }

    fn wait(mut self) -> Result<Option<(Offsets, BatchProgress)>, RunError> {
        if let Some(t) = self.thread.take() {
            let panicked = || Err(CheckpointError::file(&self.dir, "the commit thread panicked".to_string()).into());
            t.join().unwrap_or_else(|_| panicked())?;
        }
        Ok(self.done.take())
    }
}

impl Drop for Committing {
    fn drop(&mut self) {
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Run {
    /// Runs until the input ends (returns `true`) or a stop is asked for (`false`).
    pub(super) fn continuous(
        &mut self,
        ingest: &mut Ingest,
        batch_id: &mut u64,
        max: usize,
        interval: Duration,
        progress: &mut Progress,
    ) -> Result<bool, RunError> {
        let stop = self.stop.clone();
        // Reserve the run's ids: the start id, recorded (position unchanged) before any
        // delivery uses it, so a crash before the first commit still moves the next run past
        // every id this one used.
        *batch_id += ID_GAP;
        let mut reserve = self.start_commit(*batch_id - 1, ingest.source.offsets(), BatchProgress::default())?;
        let meta = std::mem::take(&mut reserve.meta);
        reserve.wait()?;
        if let Some(ledger) = self.ledger.as_mut() {
            // Continuous mode delivers without plans: the record must have this id before
            // any delivery uses the ids after it.
            ledger.commit(&meta, &self.state)?;
            ledger.sync()?;
        }
        // The next id the last commit recorded: ids stay below it plus half the gap.
        let mut committed_next = *batch_id;
        let mut since = BatchProgress { batch_id: *batch_id, ..Default::default() };
        let mut committing: Option<Committing> = None;
        let mut last_commit = Instant::now();
        let mut ended = false;
        loop {
            let stopping = stop.load(Ordering::Relaxed);
            if !stopping && !ended {
                let t0 = Instant::now();
                // A stop request while the source waits gives an empty batch: what went through
                // is committed below.
                let batch = ingest.source.poll(max, POLL_WAIT)?.unwrap_or_else(|| {
                    ended = true;
                    SourceBatch::default()
                });
                if !batch.is_empty() {
                    let parsed = ingest.parse(&batch)?;
                    let (rows, report) = self.process(*batch_id, &batch, parsed, false, &[])?;
                    since.dead_letters += self.deliver(*batch_id, &rows)?;
                    self.spare_rows = rows;
                    *batch_id += 1;
                    since.input_rows += report.input_rows;
                    since.events += report.events;
                    since.dead_letters += report.dead_letters;
                    since.rows_out += report.rows_out;
                    since.event_times = crate::progress::EventTimes::merge(since.event_times, report.event_times);
                    since.state_bytes = report.state_bytes;
                    since.durations.total_ms += ms(t0);
                }
            }
            let finishing = stopping || ended || stop.load(Ordering::Relaxed);
            if committing.as_ref().is_some_and(|c| finishing || c.is_finished())
                && let Some(done) = committing.take()
            {
                self.committed(done, ingest, progress)?;
            }
            let gap_used = *batch_id - committed_next >= ID_GAP / 2;
            if gap_used && let Some(done) = committing.take() {
                self.committed(done, ingest, progress)?;
            }
            if committing.is_none() && (last_commit.elapsed() >= interval || finishing || gap_used) {
                if since.input_rows > 0 {
                    let next = BatchProgress { batch_id: *batch_id, ..Default::default() };
                    let at = ingest.source.offsets();
                    committing = Some(self.start_commit(*batch_id - 1, at, std::mem::replace(&mut since, next))?);
                    committed_next = *batch_id;
                }
                last_commit = Instant::now();
            }
            if finishing && committing.is_none() {
                return Ok(ended);
            }
        }
    }

    /// Starts committing everything up to batch `last`, whose end is `at`.
    fn start_commit(&mut self, last: u64, at: Offsets, mut since: BatchProgress) -> Result<Committing, RunError> {
        let barrier = self.sink.barrier();
        let (meta, entry) = self.records(last, at.clone(), &since)?;
        let recorded = if self.ledger.is_some() { meta.clone() } else { Vec::new() };
        let state = self.state.commit_later(meta);
        let log = self.checkpoint.commit_later(entry);
        let thread = std::thread::Builder::new()
            .name("weir-commit".into())
            .spawn(move || -> Result<(), RunError> {
                barrier()?;
                state()?;
                log()?;
                Ok(())
            })
            .map_err(|e| {
                CheckpointError::file(self.checkpoint.state_dir(), format!("cannot start the commit thread: {e}"))
            })?;
        since.batch_id = last;
        Ok(Committing {
            thread: Some(thread),
            done: Some((at, since)),
            dir: self.checkpoint.state_dir(),
            meta: recorded,
        })
    }

    /// A commit is done: the source hears of it, and so does the progress report.
    fn committed(&mut self, mut c: Committing, ingest: &mut Ingest, progress: &mut Progress) -> Result<(), RunError> {
        let meta = std::mem::take(&mut c.meta);
        let Some((at, mut since)) = c.wait()? else { return Ok(()) };
        if let Some(ledger) = self.ledger.as_mut() {
            ledger.commit(&meta, &self.state)?;
            ledger.sync()?;
        }
        ingest.source.committed(&at);
        since.plugins = self.plugin_metrics();
        progress.batch(&since);
        Ok(())
    }
}
