//! Continuous mode (stateless pipelines): what has arrived goes through at once, with no plan;
//! the position is committed on an interval, on SIGTERM and at the end of bounded input, after
//! the sink has made everything before it durable. A crash re-delivers what came after the last
//! commit: at-least-once (docs/semantics.md).

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use super::{Run, RunError, ms};
use crate::ingest::Ingest;
use crate::progress::{BatchProgress, Progress};
use crate::source::{Limit, Source, SourceBatch, SourceError};

/// How long one poll waits for the first record before the loop looks at the clock again.
const POLL_WAIT: Duration = Duration::from_millis(50);

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
        let mut since = BatchProgress { batch_id: *batch_id, ..Default::default() };
        let mut last_commit = Instant::now();
        let mut ended = false;
        while !stop.load(Ordering::Relaxed) && !ended {
            let t0 = Instant::now();
            let batch = match &mut ingest.source {
                Source::Kafka(k) => k.poll_available(max, POLL_WAIT).map_err(SourceError::from)?,
                other => match other.next_batch(Limit { records: max, bounded: true })? {
                    Some(b) => b,
                    None => {
                        ended = true;
                        SourceBatch::default()
                    }
                },
            };
            if !batch.is_empty() {
                let parsed = ingest.parse(&batch)?;
                let (rows, report) = self.process(*batch_id, &batch, parsed, false, &[])?;
                self.deliver(*batch_id, &rows)?;
                *batch_id += 1;
                since.input_rows += report.input_rows;
                since.events += report.events;
                since.dead_letters += report.dead_letters;
                since.rows_out += report.rows_out;
                since.durations.total_ms += ms(t0);
            }
            if last_commit.elapsed() >= interval || ended || stop.load(Ordering::Relaxed) {
                if since.input_rows > 0 {
                    self.sink.sync()?;
                    let last = *batch_id - 1;
                    let at = ingest.source.offsets();
                    self.commit(last, at.clone(), &since)?;
                    self.syncs.wait()?;
                    ingest.source.committed(&at);
                    since.batch_id = last;
                    since.plugins = self.plugin_metrics();
                    progress.batch(&since);
                }
                since = BatchProgress { batch_id: *batch_id, ..Default::default() };
                last_commit = Instant::now();
            }
        }
        Ok(ended)
    }
}
