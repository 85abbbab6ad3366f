//! The micro-batch loop. Per batch: read (source) → parse → transform → judge lateness and
//! accumulate (window, aggregate) → advance the watermark → emit → deliver (sink) → checkpoint.
//!
//! Exactly-once rests on three facts: a batch is a pure function of the checkpoint it starts
//! from (same records, same watermark, same batch id, so the same rows); the sink dedupes on the
//! batch id; and the state, the source position, the watermark and the side-output lengths are
//! committed in one atomic write after the sink accepted the batch. A crash anywhere re-runs the
//! uncommitted batch from the last checkpoint.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use serde::{Deserialize, Serialize};

use crate::aggregate::{AggregateError, WindowOperator};
use crate::emit::EmitError;
use crate::pipeline::{LatePolicy, Pipeline, Trigger, Windowed};
use crate::plugin::{Aggregator, EventBatch, Parser, PluginError, RecordError, Runtime, Sink, Transformer};
use crate::progress::{BatchProgress, Durations, Progress, Summary};
use crate::side_output::{DeadLetter, LateEvent, SideOutput, SideOutputError};
use crate::sink::{LineSink, RowSink, Rows, SinkError, WasmSink};
use crate::source::{ReplayPosition, ReplaySource, SourceBatch, SourceError};
use crate::state::{StateError, StateStore};
use crate::watermark::{self, Watermark};

#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error(transparent)]
    Plugin(#[from] PluginError),
    #[error(transparent)]
    Source(#[from] SourceError),
    #[error(transparent)]
    State(#[from] StateError),
    #[error(transparent)]
    Aggregate(#[from] AggregateError),
    #[error(transparent)]
    Emit(#[from] EmitError),
    #[error(transparent)]
    Sink(#[from] SinkError),
    #[error(transparent)]
    SideOutput(#[from] SideOutputError),
    #[error("checkpoint {}: {message}", dir.display())]
    Checkpoint { dir: PathBuf, message: String },
}

/// Where rows go: the pipeline's `[sink]` (or the console without one), or a writer.
pub enum Output {
    Pipeline,
    Lines(Box<dyn Write>),
}

/// How to run a pipeline; `weir test` overrides the source, the sink and the checkpoint.
pub struct RunOptions {
    pub output: Output,
    pub checkpoint: PathBuf,
    pub dead_letters: Option<PathBuf>,
    pub progress: Progress,
}

/// What a checkpoint records after each committed batch.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Checkpoint {
    /// What the state was computed by; a checkpoint of another pipeline is refused.
    fingerprint: String,
    next_batch: u64,
    source: ReplayPosition,
    watermark: watermark::Saved,
    dead_letters_len: u64,
    late_len: u64,
}

fn fingerprint(p: &Pipeline) -> String {
    let window = p.windowed.as_ref().map(|w| format!("{:?}/{:?}", w.window, w.output));
    format!("source={} window={}", p.source.path.display(), window.unwrap_or_else(|| "none".into()))
}

struct WindowStage {
    op: Box<dyn WindowOperator>,
    agg: Aggregator,
    watermark: Watermark,
    cfg: Windowed,
}

struct Run {
    checkpoint: PathBuf,
    /// Written into every checkpoint record; fixed for the run.
    fingerprint: String,
    source: ReplaySource,
    source_name: String,
    parser: Parser,
    transforms: Vec<Transformer>,
    window: Option<WindowStage>,
    sink: Box<dyn RowSink>,
    state: StateStore,
    dead: SideOutput,
    late: Option<SideOutput>,
}

/// Runs `pipeline` until its input ends (a replay is bounded) and returns the totals.
pub fn run(pipeline: &Pipeline, runtime: &Arc<Runtime>, opts: RunOptions) -> Result<Summary, RunError> {
    let started = Instant::now();
    let state = StateStore::open(&opts.checkpoint.join("state"))?;
    let cp_err = |message: String| RunError::Checkpoint { dir: opts.checkpoint.clone(), message };
    let fp = fingerprint(pipeline);
    let restored: Option<Checkpoint> = match state.meta()? {
        None => None,
        Some(bytes) => {
            let cp: Checkpoint =
                serde_json::from_slice(&bytes).map_err(|e| cp_err(format!("unreadable checkpoint record: {e}")))?;
            if cp.fingerprint != fp {
                return Err(cp_err(format!(
                    "was written by another pipeline ({}); this one is {fp}. Use a new checkpoint.location",
                    cp.fingerprint
                )));
            }
            Some(cp)
        }
    };
    let cp = restored.clone().unwrap_or(Checkpoint {
        fingerprint: fp.clone(),
        next_batch: 0,
        source: ReplayPosition::default(),
        watermark: watermark::Saved { current: watermark::NONE, partitions: Vec::new() },
        dead_letters_len: 0,
        late_len: 0,
    });

    let dead_path = opts.dead_letters.clone().or_else(|| pipeline.dead_letter.clone());
    let dead_path = dead_path.unwrap_or_else(|| opts.checkpoint.join("dead-letters.jsonl"));
    let dead = SideOutput::open(&dead_path, cp.dead_letters_len)?;

    let window = match &pipeline.windowed {
        None => None,
        Some(w) => {
            let mut watermark = Watermark::new(w.time.delay_ms, w.time.idle_timeout);
            watermark.restore(&cp.watermark, Instant::now());
            Some(WindowStage {
                op: crate::aggregate::operator(w.window, w.time.allowed_lateness_ms),
                agg: Aggregator::new(runtime, w.aggregate.clone())?,
                watermark,
                cfg: w.clone(),
            })
        }
    };
    let late = match window.as_ref().map(|w| &w.cfg.time) {
        Some(t) if t.late == LatePolicy::SideOutput => {
            let path = t.late_path.clone().unwrap_or_else(|| opts.checkpoint.join("late.jsonl"));
            Some(SideOutput::open(&path, cp.late_len)?)
        }
        _ => None,
    };
    let sink: Box<dyn RowSink> = match (opts.output, &pipeline.sink) {
        (Output::Lines(w), _) => Box::new(LineSink(w)),
        (Output::Pipeline, Some(spec)) => Box::new(WasmSink(Sink::new(runtime, spec.clone())?)),
        (Output::Pipeline, None) => Box::new(LineSink(Box::new(std::io::stdout()))),
    };
    let source = ReplaySource::open(&pipeline.source.path, pipeline.source.format, cp.source)?;
    let mut run = Run {
        checkpoint: opts.checkpoint.clone(),
        fingerprint: fp,
        source_name: source.path().display().to_string(),
        source,
        parser: Parser::new(runtime, pipeline.parse.clone())?,
        transforms: pipeline
            .transforms
            .iter()
            .map(|t| Transformer::new(runtime, t.clone()))
            .collect::<Result<_, _>>()?,
        window,
        sink,
        state,
        dead,
        late,
    };
    if restored.is_some() {
        tracing::info!(batch = cp.next_batch, "resuming {} from its checkpoint", pipeline.name);
    }
    let mut progress = opts.progress;
    let mut batch_id = cp.next_batch;
    let mut next_start = Instant::now();
    loop {
        if let Trigger::ProcessingTime { interval } = pipeline.trigger {
            let now = Instant::now();
            if next_start > now {
                std::thread::sleep(next_start - now);
            }
            next_start = Instant::now() + interval;
        }
        let limit = match pipeline.trigger {
            Trigger::Once => usize::MAX,
            _ => batch_size(batch_id, pipeline.source.max_offsets_per_trigger),
        };
        let t0 = Instant::now();
        let batch = run.source.next_batch(limit)?;
        let read = t0.elapsed();
        let end_of_input = batch.is_empty();
        let flush = end_of_input
            && run.window.as_ref().is_some_and(|w| w.cfg.time.flush_at_end && w.watermark.current() != i64::MAX);
        if end_of_input && !flush {
            break;
        }
        let mut report = run.batch(batch_id, batch, flush)?;
        report.durations.read_ms = read.as_secs_f64() * 1e3;
        report.durations.total_ms = t0.elapsed().as_secs_f64() * 1e3;
        progress.batch(&report);
        batch_id += 1;
    }
    Ok(progress.finish(started.elapsed(), run.window.as_ref().map(|w| w.watermark.current())))
}

impl Run {
    fn batch(&mut self, batch_id: u64, batch: SourceBatch, flush: bool) -> Result<BatchProgress, RunError> {
        let mut report = BatchProgress { batch_id, input_rows: batch.len() + batch.bad.len(), ..Default::default() };
        let mut d = Durations::default();

        for bad in &batch.bad {
            self.dead.write(&DeadLetter {
                batch_id,
                stage: "source",
                kind: "malformed",
                error: &bad.error,
                source: &self.source_name,
                partition: bad.position.partition,
                offset: bad.position.offset,
                line: bad.position.line,
                value: String::from_utf8_lossy(&bad.raw).into_owned(),
            })?;
        }
        report.dead_letters += batch.bad.len();

        let t = Instant::now();
        let out = if !batch.positions.is_empty() { Some(self.parser.parse(&batch.records)?) } else { None };
        d.parse_ms = ms(t);
        let mut events = match out {
            Some(out) => {
                report.dead_letters += self.dead_letters(batch_id, "parse", &batch, &out.errors, None)?;
                out.events
            }
            None => EventBatch::default(),
        };

        let t = Instant::now();
        for i in 0..self.transforms.len() {
            if events.times.is_empty() {
                break;
            }
            let out = self.transforms[i].transform(&events)?;
            let stage = format!("transform[{i}]");
            report.dead_letters += self.dead_letters(batch_id, &stage, &batch, &out.errors, Some(&events.origins))?;
            // Keep origins pointing at source records, whatever the number of transforms.
            let mut next = out.events;
            for o in next.origins.iter_mut() {
                *o = events.origins[*o as usize];
            }
            events = next;
        }
        d.transform_ms = ms(t);
        report.events = events.times.len();

        let mut rows = Rows::default();
        if let Some(w) = self.window.as_mut() {
            let t = Instant::now();
            let in_force = w.watermark.current();
            let late = w.op.process(&events, in_force, &mut w.agg, &mut self.state)?;
            report.late_events = late.len();
            if let Some(side) = self.late.as_mut() {
                for &i in &late {
                    let i = i as usize;
                    let pos = batch.positions[events.origins[i] as usize];
                    let row = slice(&events.rows, &events.row_ends, i);
                    side.write(&LateEvent {
                        batch_id,
                        reason: "late: every window of this event had closed",
                        event_time: events.times[i],
                        watermark: in_force,
                        source: &self.source_name,
                        partition: pos.partition,
                        offset: pos.offset,
                        line: pos.line,
                        key: String::from_utf8_lossy(slice(&events.keys, &events.key_ends, i)).into_owned(),
                        row: serde_json::from_slice(row)
                            .unwrap_or_else(|_| serde_json::Value::String(String::from_utf8_lossy(row).into_owned())),
                    })?;
                }
            }
            d.aggregate_ms = ms(t);

            let t = Instant::now();
            let now = Instant::now();
            let mut maxes: BTreeMap<i32, i64> = BTreeMap::new();
            for pos in &batch.positions {
                maxes.entry(pos.partition).or_insert(watermark::NONE);
            }
            for (i, &time) in events.times.iter().enumerate() {
                let part = batch.positions[events.origins[i] as usize].partition;
                let m = maxes.entry(part).or_insert(watermark::NONE);
                *m = (*m).max(time);
            }
            for (part, max) in maxes {
                w.watermark.observe(part, max, now);
            }
            let advanced = if flush { w.watermark.flush() } else { w.watermark.advance(now) };
            let windows = w.op.emit(in_force, advanced, w.cfg.output, &mut w.agg, &mut self.state)?;
            report.windows_emitted = crate::emit::finish(&windows, &mut w.agg, &mut rows)?;
            report.watermark = Some(advanced);
            d.emit_ms = ms(t);
        } else {
            rows = Rows { rows: events.rows, row_ends: events.row_ends };
        }
        report.rows_out = rows.row_ends.len();

        let t = Instant::now();
        self.sink.deliver(batch_id, &rows)?;
        d.sink_ms = ms(t);

        let t = Instant::now();
        let cp = Checkpoint {
            fingerprint: self.fingerprint.clone(),
            next_batch: batch_id + 1,
            source: self.source.position(),
            watermark: self.window.as_ref().map(|w| w.watermark.save()).unwrap_or_default(),
            dead_letters_len: self.dead.flush()?,
            late_len: match self.late.as_mut() {
                Some(l) => l.flush()?,
                None => 0,
            },
        };
        let meta = serde_json::to_vec(&cp)
            .map_err(|e| RunError::Checkpoint { dir: self.checkpoint.clone(), message: e.to_string() })?;
        self.state.commit(&meta)?;
        d.commit_ms = ms(t);
        report.state_keys = self.state.estimated_keys();
        report.durations = d;
        Ok(report)
    }

    /// Writes a stage's record errors as dead letters. `origins` maps the stage's input index to
    /// a source record (`None`: the stage's input is the source batch itself).
    fn dead_letters(
        &mut self,
        batch_id: u64,
        stage: &str,
        batch: &SourceBatch,
        errors: &[RecordError],
        origins: Option<&[u32]>,
    ) -> Result<usize, RunError> {
        let r = &batch.records;
        for e in errors {
            let rec = origins.map_or(e.index, |o| o[e.index as usize]) as usize;
            let pos = batch.positions[rec];
            self.dead.write(&DeadLetter {
                batch_id,
                stage,
                kind: kind_name(e),
                error: &e.message,
                source: &self.source_name,
                partition: pos.partition,
                offset: pos.offset,
                line: pos.line,
                value: String::from_utf8_lossy(slice(&r.values, &r.value_ends, rec)).into_owned(),
            })?;
        }
        Ok(errors.len())
    }
}

/// Records in batch `batch_id`: batches start at [`FIRST_BATCH`] records and double up to `max`.
///
/// The first batch runs before any watermark exists, so nothing in it can be late; a small first
/// batch makes the watermark exist early, as it does on a stream that starts flowing, instead of
/// letting one large first batch accept events that are hours late. A function of the batch id
/// alone, so a batch re-run after a crash reads exactly the records it read before.
fn batch_size(batch_id: u64, max: usize) -> usize {
    FIRST_BATCH.checked_shl(batch_id.min(32) as u32).unwrap_or(usize::MAX).min(max)
}

const FIRST_BATCH: usize = 64;

fn kind_name(e: &RecordError) -> &'static str {
    use crate::plugin::RecordErrorKind as K;
    match e.kind {
        K::Malformed => "malformed",
        K::MissingField => "missing-field",
        K::InvalidValue => "invalid-value",
    }
}

fn slice<'a>(data: &'a [u8], ends: &[u32], i: usize) -> &'a [u8] {
    let start = if i == 0 { 0 } else { ends[i - 1] as usize };
    &data[start..ends[i] as usize]
}

fn ms(t: Instant) -> f64 {
    t.elapsed().as_secs_f64() * 1e3
}

/// A fresh checkpoint directory for one-off runs (`weir test`, `weir bench`).
pub fn scratch_checkpoint() -> std::io::Result<tempfile::TempDir> {
    tempfile::Builder::new().prefix("weir-").tempdir()
}

/// Where `weir run` keeps a pipeline's checkpoint when the file names none.
pub fn default_checkpoint(pipeline: &Pipeline, pipeline_file: &Path) -> PathBuf {
    pipeline
        .checkpoint
        .clone()
        .unwrap_or_else(|| pipeline_file.parent().unwrap_or(Path::new(".")).join(".weir").join(&pipeline.name))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batches_start_small_and_double_up_to_the_maximum() {
        let sizes: Vec<usize> = (0..10).map(|b| batch_size(b, 5_000)).collect();
        assert_eq!(sizes, vec![64, 128, 256, 512, 1024, 2048, 4096, 5000, 5000, 5000]);
        assert_eq!(batch_size(u64::MAX, 10), 10);
        assert_eq!(batch_size(0, 10), 10);
    }
}
