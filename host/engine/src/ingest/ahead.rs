//! Batches read and parsed ahead of the trigger loop. One thread owns the source and reads the
//! batches the loop asks for, in the order asked; `parse.parallelism` threads, each with its own
//! parser instance, parse them side by side; the loop takes them back in the order asked. So
//! while the loop aggregates, delivers and commits batch N, batches N+1, N+2, ... are being read
//! and parsed, and both cores of a small machine stay busy.
//!
//! Reading stays in order (a source reads forward), and which records a batch holds is fixed
//! when it is read; the loop plans each batch as it takes it, before its rows can reach the sink,
//! so a re-run after a crash reads the same range however far ahead the threads had got.
//!
//! When the loop is done it drops its handle: the threads end once what they are doing returns
//! (a read waiting for a broker ends at the run's stop flag).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, Sender, channel};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Instant;

use super::{Ingest, IngestError, Ingested, Parsed, parse_timed};
use crate::checkpoint::Planned;
use crate::plugin::PluginError;
use crate::source::{Limit, Offsets, SourceBatch};

/// What the loop asks the reading thread for.
pub enum Ask {
    /// The next batch, at most `limit`.
    Read(Limit),
    /// Exactly a planned batch's range again: its re-run after a crash.
    Again(Planned),
}

enum ToReader {
    Ask(Ask),
    /// The pipeline has committed up to here (the source tells the outside world: Kafka's group
    /// offsets, for lag monitoring).
    Committed(Offsets),
    /// A batch the loop is done with: its columns take the next one.
    Recycle(SourceBatch),
}

/// A batch read, to be parsed.
struct Job {
    seq: u64,
    start: Offsets,
    end: Offsets,
    latest: Option<Offsets>,
    batch: Option<SourceBatch>,
    read_ms: f64,
}

type Done = (u64, Result<Ingested, IngestError>);

/// The loop's handle on the threads.
pub struct Ahead {
    to_reader: Sender<ToReader>,
    done: Receiver<Done>,
    /// Batches parsed before the ones asked for earlier.
    waiting: BTreeMap<u64, Result<Ingested, IngestError>>,
    /// Asks made so far; the next one's number.
    asked: u64,
    /// The next batch to hand the loop, by ask number.
    taken: u64,
    /// Raised when the handle goes: the threads take no more work.
    quit: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
}

impl Ahead {
    /// Starts the threads over `ingest`'s source and parsers.
    pub fn start(ingest: Ingest) -> Result<Self, PluginError> {
        let Ingest { mut source, parsers, failure, stop } = ingest;
        let (to_reader, asks) = channel::<ToReader>();
        let (jobs_tx, jobs) = channel::<Job>();
        let (done_tx, done) = channel::<Done>();
        let jobs = Arc::new(Mutex::new(jobs));
        let quit = Arc::new(AtomicBool::new(false));
        let spawn = |name: String, f: Box<dyn FnOnce() + Send>| {
            std::thread::Builder::new()
                .name(name)
                .spawn(f)
                .map_err(|e| PluginError::Engine(format!("cannot start an ingest thread: {e}")))
        };
        let mut threads = Vec::new();
        let (reader_done, reader_quit) = (done_tx.clone(), quit.clone());
        threads.push(spawn(
            "weir-read".into(),
            Box::new(move || {
                let mut seq = 0;
                for message in asks {
                    if reader_quit.load(Ordering::Relaxed) {
                        return;
                    }
                    let ask = match message {
                        ToReader::Committed(at) => {
                            source.committed(&at);
                            continue;
                        }
                        ToReader::Recycle(batch) => {
                            source.recycle(batch);
                            continue;
                        }
                        ToReader::Ask(ask) => ask,
                    };
                    let t = Instant::now();
                    let start = source.offsets();
                    let read = match ask {
                        Ask::Read(limit) => source.next_batch(limit),
                        // A re-run reads up to where its plan ends. It starts where the source
                        // stands, which is its plan's start or past offsets that hold no records
                        // (transaction markers a batch that found nothing skipped).
                        Ask::Again(plan) => source.read_until(&plan.end).map(Some),
                    };
                    let job = read.map(|batch| Job {
                        seq,
                        start,
                        end: source.offsets(),
                        latest: source.latest(),
                        batch,
                        read_ms: t.elapsed().as_secs_f64() * 1e3,
                    });
                    let sent = match job {
                        Ok(job) => jobs_tx.send(job).is_ok(),
                        Err(e) => reader_done.send((seq, Err(e.into()))).is_ok(),
                    };
                    if !sent {
                        return;
                    }
                    seq += 1;
                }
            }),
        )?);
        for (i, mut parser) in parsers.into_iter().enumerate() {
            let (jobs, done, stop, quit) = (jobs.clone(), done_tx.clone(), stop.clone(), quit.clone());
            threads.push(spawn(
                format!("weir-parse-{i}"),
                Box::new(move || {
                    loop {
                        // The lock is held only to take a job, not while parsing it.
                        let job = match jobs.lock() {
                            Ok(rx) => rx.recv(),
                            Err(_) => return,
                        };
                        let Ok(Job { seq, start, end, latest, batch, read_ms }) = job else { return };
                        if quit.load(Ordering::Relaxed) {
                            return;
                        }
                        // A panic here is a bug in the host; it fails this batch (and so the run)
                        // instead of leaving the loop waiting for a batch that never comes.
                        let parsed = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| match &batch {
                            Some(b) => parse_timed(parser.as_mut(), b, &failure, &stop),
                            None => Ok((Parsed::nothing(), 0.0)),
                        }))
                        .unwrap_or_else(|_| Err(PluginError::Engine("a parse thread panicked".into())));
                        let ingested = parsed.map_err(IngestError::from).map(|(parsed, parse_ms)| Ingested {
                            start,
                            end,
                            latest,
                            batch,
                            parsed,
                            read_ms,
                            parse_ms,
                        });
                        if done.send((seq, ingested)).is_err() {
                            return;
                        }
                    }
                }),
            )?);
        }
        Ok(Self { to_reader, done, waiting: BTreeMap::new(), asked: 0, taken: 0, quit, threads })
    }

    /// Asks for a batch; it is read and parsed while the loop works, and handed back by
    /// [`Ahead::take`] after every batch asked for before it.
    pub fn ask(&mut self, ask: Ask) {
        // A send fails only once the reading thread is gone; `take` then says why.
        let _ = self.to_reader.send(ToReader::Ask(ask));
        self.asked += 1;
    }

    /// Batches asked for and not yet taken.
    pub fn outstanding(&self) -> u64 {
        self.asked - self.taken
    }

    /// The next batch asked for, waiting for it if need be.
    pub fn take(&mut self) -> Result<Ingested, IngestError> {
        let seq = self.taken;
        loop {
            if let Some(r) = self.waiting.remove(&seq) {
                self.taken += 1;
                return r;
            }
            match self.done.recv() {
                Ok((s, r)) => {
                    self.waiting.insert(s, r);
                }
                Err(_) => {
                    return Err(PluginError::Engine("the reading and parsing threads stopped".into()).into());
                }
            }
        }
    }

    /// Gives a batch's columns back to the reading thread, to read the next batch into.
    pub fn recycle(&self, batch: SourceBatch) {
        let _ = self.to_reader.send(ToReader::Recycle(batch));
    }

    /// Tells the source how far the pipeline has committed.
    pub fn committed(&self, at: &Offsets) {
        let _ = self.to_reader.send(ToReader::Committed(at.clone()));
    }

    /// Ends the threads and waits for them (a normal end of the run: each is at most finishing
    /// what it was doing). After a run that failed the handle is only dropped: a thread still
    /// waiting in a read ends when that read returns, at the latest at the run's stop flag.
    pub fn finish(mut self) {
        let threads = std::mem::take(&mut self.threads);
        drop(self);
        for t in threads {
            let _ = t.join();
        }
    }
}

impl Drop for Ahead {
    fn drop(&mut self) {
        self.quit.store(true, Ordering::Relaxed);
    }
}
