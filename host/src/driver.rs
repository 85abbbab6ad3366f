//! The trigger loop. Per batch: plan and read (source; the plan goes to the offsets log) →
//! parse → transform → judge lateness and accumulate (window, aggregate) → advance the watermark
//! → emit → deliver (sink) → commit (state, then the commits log).
//!
//! Exactly-once rests on three facts: a batch is a pure function of its plan and the state it
//! starts from (same records, same watermark, same idleness, same batch id, so the same rows);
//! the sink dedupes on the batch id; and the state, the source position, the watermark and the
//! side-output lengths are committed in one atomic write after the sink accepted the batch. A
//! crash anywhere re-runs the planned, uncommitted batch from the last checkpoint.
//!
//! Continuous mode (stateless pipelines) skips the plan: records go through as they arrive and
//! the position is committed every `checkpoint_interval`, so a crash re-delivers at most that
//! interval's records (at-least-once).

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crate::aggregate::{AggregateError, WindowOperator};
use crate::checkpoint::{CheckpointDir, CheckpointError, Committed, Metadata, Planned, StateMeta, Syncs, now_ms};
use crate::emit::EmitError;
use crate::isolate::{isolate, sleep_unless, slice_events};
use crate::parse::{Ingest, IngestError, Ingested, Parsed};
use crate::pipeline::{FailurePolicy, LatePolicy, Pipeline, SinkConfig, SourceKind, Trigger, Windowed};
use crate::plugin::metrics::Snapshot;
use crate::plugin::{AggregateFns, Aggregator, ParseFns, Parser, PluginError, RecordError, Runtime, Sink, Transformer};
use crate::progress::{BatchProgress, Durations, Progress, Summary};
use crate::side_output::{DeadLetter, LateEvent, SideOutput, SideOutputError};
use crate::sink::{KafkaSink, LineSink, RowSink, Rows, SinkError, WasmSink};
use crate::source::{KafkaError, Limit, Offsets, Source, SourceBatch, SourceError};
use crate::state::{StateError, StateStore};
use crate::watermark::{self, PartitionId, Watermark};

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
    #[error(transparent)]
    Checkpoint(#[from] CheckpointError),
}

impl From<IngestError> for RunError {
    fn from(e: IngestError) -> Self {
        match e {
            IngestError::Source(e) => RunError::Source(e),
            IngestError::Plugin(e) => RunError::Plugin(e),
        }
    }
}

impl RunError {
    /// The run was asked to stop (SIGTERM) while waiting: not a failure.
    fn is_stop(&self) -> bool {
        matches!(
            self,
            RunError::Source(SourceError::Kafka(KafkaError::Stopped))
                | RunError::Sink(SinkError::Kafka(KafkaError::Stopped))
                | RunError::Plugin(PluginError::Stopped { .. })
        )
    }
}

/// Where rows go: the pipeline's `[sink]` (or the console without one), a writer, or a sink
/// of the caller's (`weir demo`'s console).
pub enum Output {
    Pipeline,
    Lines(Box<dyn Write + Send>),
    Sink(Box<dyn RowSink + Send>),
}

/// How to run a pipeline; `weir test` overrides the source, the sink and the checkpoint.
pub struct RunOptions {
    pub output: Output,
    pub checkpoint: PathBuf,
    pub dead_letters: Option<PathBuf>,
    pub progress: Progress,
    /// Raised (by SIGTERM or Ctrl-C) to end the run after the current batch, or to abandon a
    /// batch that is waiting for a broker. Either way the run returns normally.
    pub stop: Arc<AtomicBool>,
    /// Benchmark baseline: parse and aggregate with [`crate::native`] (the orders parser and
    /// error-rate aggregator as host code) instead of the pipeline's plugins.
    pub native: bool,
    /// Sync the checkpoint at every batch: always, except to measure what durability costs
    /// (`weir bench --no-fsync`).
    pub fsync: bool,
}

fn fingerprint(p: &Pipeline) -> String {
    let window = p.windowed.as_ref().map(|w| format!("{:?}/{:?}", w.window, w.output));
    format!("source={} window={}", p.source.kind.identity(), window.unwrap_or_else(|| "none".into()))
}

struct WindowStage {
    op: Box<dyn WindowOperator>,
    agg: Box<dyn AggregateFns>,
    watermark: Watermark,
    cfg: Windowed,
}

struct Run {
    name: String,
    state_version: Option<u32>,
    runtime: Arc<Runtime>,
    checkpoint: CheckpointDir,
    failure: FailurePolicy,
    stop: Arc<AtomicBool>,
    /// The source's stream names (files, topics), for dead letters and late events.
    streams: Vec<String>,
    transforms: Vec<Transformer>,
    window: Option<WindowStage>,
    sink: Box<dyn RowSink>,
    state: StateStore,
    /// Plan and state syncs in flight: waited for before the next rows reach the sink.
    syncs: Syncs,
    dead: SideOutput,
    late: Option<SideOutput>,
}

/// Runs `pipeline` until its input ends (bounded triggers) or `opts.stop` is raised, and
/// returns the totals.
pub fn run(pipeline: &Pipeline, runtime: &Arc<Runtime>, opts: RunOptions) -> Result<Summary, RunError> {
    let started = Instant::now();
    let _running = runtime.enter_pipeline();
    let meta = Metadata { pipeline: pipeline.name.clone(), fingerprint: fingerprint(pipeline) };
    let mut checkpoint = CheckpointDir::open(&opts.checkpoint, &meta)?;
    let mut state = StateStore::open(&checkpoint.state_dir())?;
    if !opts.fsync {
        (checkpoint, state) = (checkpoint.without_fsync(), state.without_fsync());
    }
    let restored: Option<StateMeta> = match state.meta()? {
        None => None,
        Some(bytes) => Some(serde_json::from_slice(&bytes).map_err(|e| CheckpointError {
            path: checkpoint.state_dir(),
            message: format!("unreadable record of the last committed batch: {e}"),
        })?),
    };
    let mut batch_id = restored.as_ref().map_or(0, |m| m.next_batch);
    // The state commit is the point of no return; a crash before the commits log entry leaves
    // only that entry to write.
    if let Some(last) = batch_id.checked_sub(1)
        && checkpoint.committed(last)?.is_none()
    {
        let watermark = restored.as_ref().map(|m| m.watermark.current);
        checkpoint.commit(&Committed { batch_id: last, watermark, rows_out: None, committed_at_ms: now_ms() })?;
    }
    let mut rerun = checkpoint.planned(batch_id)?;

    let dead_path = opts.dead_letters.clone().or_else(|| pipeline.dead_letter.clone());
    let dead_path = dead_path.unwrap_or_else(|| opts.checkpoint.join("dead-letters.jsonl"));
    let dead = SideOutput::open(&dead_path, restored.as_ref().map_or(0, |m| m.dead_letters_len))?;

    let mut aggregator = match &pipeline.windowed {
        Some(w) => Some(Aggregator::new(runtime, w.aggregate.clone())?),
        None => None,
    };
    let state_version = aggregator.as_mut().map(Aggregator::state_version).transpose()?;
    if let (Some(agg), Some(w), Some(to), Some(m)) =
        (aggregator.as_mut(), &pipeline.windowed, state_version, restored.as_ref())
    {
        // Checkpoints from before versioning hold version 1, every SDK build's default.
        let from = m.state_version.unwrap_or(1);
        if from != to {
            let migrated = crate::aggregate::migrate_state(&mut state, agg, from).map_err(|e| CheckpointError {
                path: checkpoint.state_dir(),
                message: format!(
                    "holds accumulators of state version {from}; the plugin {} declares state version {to} and \
                     cannot migrate them ({e}). Run the build that wrote them, or start a new checkpoint",
                    w.aggregate.component.display()
                ),
            })?;
            let meta = StateMeta { state_version: Some(to), ..m.clone() };
            let bytes = serde_json::to_vec(&meta).map_err(|e| CheckpointError {
                path: checkpoint.state_dir(),
                message: format!("cannot encode the batch record: {e}"),
            })?;
            let mut syncs = Syncs::default();
            state.commit(&bytes, &mut syncs)?;
            syncs.wait()?;
            tracing::info!("{}: migrated {migrated} accumulators from state version {from} to {to}", pipeline.name);
        }
    }
    let window = match (&pipeline.windowed, aggregator) {
        (Some(w), Some(agg)) => {
            let mut watermark = Watermark::new(w.time.delay_ms, w.time.idle_timeout);
            if let Some(m) = &restored {
                watermark.restore(&m.watermark, Instant::now());
            }
            let agg: Box<dyn AggregateFns> =
                if opts.native { Box::new(crate::native::ErrorRate) } else { Box::new(agg) };
            Some(WindowStage {
                op: crate::aggregate::operator(w.window, w.time.allowed_lateness_ms),
                agg,
                watermark,
                cfg: w.clone(),
            })
        }
        _ => None,
    };
    let late = match window.as_ref().map(|w| &w.cfg.time) {
        Some(t) if t.late == LatePolicy::SideOutput => {
            let path = t.late_path.clone().unwrap_or_else(|| opts.checkpoint.join("late.jsonl"));
            Some(SideOutput::open(&path, restored.as_ref().map_or(0, |m| m.late_len))?)
        }
        _ => None,
    };
    let continuous = matches!(pipeline.trigger, Trigger::Continuous { .. });
    let sink: Box<dyn RowSink> = match (opts.output, &pipeline.sink) {
        (Output::Lines(w), _) => Box::new(LineSink(w)),
        (Output::Sink(s), _) => s,
        (Output::Pipeline, Some(SinkConfig::Wasm(spec))) => Box::new(WasmSink(Sink::new(runtime, spec.clone())?)),
        (Output::Pipeline, Some(SinkConfig::Kafka(k))) => {
            Box::new(KafkaSink::open(k, continuous, opts.stop.clone()).map_err(SinkError::Kafka)?)
        }
        (Output::Pipeline, None) => Box::new(LineSink(Box::new(std::io::stdout()))),
    };
    let source = Source::open(&pipeline.source, restored.as_ref().map(|m| &m.source), opts.stop.clone())?;
    let streams = source.stream_names();
    let mut ingest = Ingest {
        source,
        failure: pipeline.failure,
        stop: opts.stop.clone(),
        parsers: (0..pipeline.parse_parallelism)
            .map(|_| -> Result<Box<dyn ParseFns>, PluginError> {
                if opts.native {
                    let config: serde_json::Value =
                        serde_json::from_str(&pipeline.parse.config_json).unwrap_or_default();
                    let key_by_user = config["key_by_user"] == true;
                    Ok(Box::new(crate::native::Orders { key_by_user }))
                } else {
                    Ok(Box::new(Parser::new(runtime, pipeline.parse.clone())?))
                }
            })
            .collect::<Result<_, _>>()?,
    };
    let mut run = Run {
        name: pipeline.name.clone(),
        state_version,
        runtime: runtime.clone(),
        checkpoint,
        failure: pipeline.failure,
        stop: opts.stop.clone(),
        streams,
        transforms: pipeline
            .transforms
            .iter()
            .map(|t| Transformer::new(runtime, t.clone()))
            .collect::<Result<_, _>>()?,
        window,
        sink,
        state,
        syncs: Syncs::default(),
        dead,
        late,
    };
    if restored.is_some() {
        let again = if rerun.is_some() { " (re-running its last planned batch)" } else { "" };
        tracing::info!(batch = batch_id, "resuming {} from its checkpoint{again}", pipeline.name);
    }
    let mut progress = opts.progress;
    let stop = opts.stop;
    let result = match pipeline.trigger {
        Trigger::Continuous { checkpoint_interval } => run.continuous(
            &mut ingest,
            &mut batch_id,
            pipeline.source.max_offsets_per_trigger,
            checkpoint_interval,
            &stop,
            &mut progress,
        ),
        _ => run.micro_batches(&mut ingest, pipeline, &mut batch_id, &mut rerun, &stop, &mut progress),
    };
    match result {
        Err(e) if e.is_stop() => {
            tracing::info!(
                "{}: stopped while waiting; a planned batch that was not committed re-runs on restart",
                pipeline.name
            )
        }
        other => other?,
    }
    let watermark = run.window.as_ref().map(|w| w.watermark.current());
    Ok(progress.finish(started.elapsed(), watermark, run.plugin_metrics()))
}

impl Run {
    fn micro_batches(
        &mut self,
        ingest: &mut Ingest,
        pipeline: &Pipeline,
        batch_id: &mut u64,
        rerun: &mut Option<Planned>,
        stop: &AtomicBool,
        progress: &mut Progress,
    ) -> Result<(), RunError> {
        let mut next_start = Instant::now();
        let bounded = matches!(pipeline.trigger, Trigger::Once | Trigger::AvailableNow)
            || matches!(pipeline.source.kind, SourceKind::Replay { .. });
        let limit = |id: u64| Limit {
            records: match pipeline.trigger {
                Trigger::Once => usize::MAX,
                _ => batch_size(id, pipeline.source.max_offsets_per_trigger),
            },
            bounded,
        };
        // A processing-time trigger reads when it fires; the others read the next batch while
        // the current one runs.
        let read_ahead = !matches!(pipeline.trigger, Trigger::ProcessingTime { .. });
        let mut ahead: Option<Ingested> = None;
        while !stop.load(Ordering::Relaxed) {
            if let Trigger::ProcessingTime { interval } = pipeline.trigger {
                let now = Instant::now();
                if next_start > now {
                    sleep_unless(stop, next_start - now);
                }
                next_start = Instant::now() + interval;
            }
            let t0 = Instant::now();
            let mut plan_time = Duration::ZERO;
            let (ingested, plan) = match rerun.take() {
                Some(plan) => (ingest.again(&plan)?, plan),
                None => {
                    let mut ingested = match ahead.take() {
                        Some(i) => i,
                        None => ingest.next(limit(*batch_id))?,
                    };
                    let flush = match &ingested.batch {
                        Some(b) if b.is_empty() => continue,
                        Some(_) => false,
                        None => {
                            let flush = self
                                .window
                                .as_ref()
                                .is_some_and(|w| w.cfg.time.flush_at_end && w.watermark.current() != i64::MAX);
                            if !flush {
                                break;
                            }
                            ingested.batch = Some(SourceBatch::default());
                            true
                        }
                    };
                    let idle = self.window.as_ref().map(|w| w.watermark.idle(Instant::now())).unwrap_or_default();
                    let plan = Planned {
                        batch_id: *batch_id,
                        start: ingested.start.clone(),
                        end: ingested.end.clone(),
                        idle,
                        flush,
                        planned_at_ms: now_ms(),
                    };
                    let t = Instant::now();
                    self.checkpoint.plan(&plan, &mut self.syncs)?;
                    plan_time = t.elapsed();
                    (ingested, plan)
                }
            };
            let waited = t0.elapsed() - plan_time;
            let Ingested { batch, parsed, read_ms, parse_ms, .. } = ingested;
            let batch = batch.unwrap_or_default();
            let next = limit(*batch_id + 1);
            let (done, prefetched) = std::thread::scope(|s| {
                let reader = (read_ahead && !plan.flush).then(|| s.spawn(|| ingest.next(next)));
                let done = self.run_batch(*batch_id, &batch, parsed, &plan);
                let prefetched = reader.map(|r| {
                    r.join().unwrap_or_else(|_| Err(PluginError::Engine("the reading thread panicked".into()).into()))
                });
                (done, prefetched)
            });
            let mut report = done?;
            ingest.source.committed(&plan.end);
            report.durations.read_ms = read_ms;
            report.durations.parse_ms = parse_ms;
            report.durations.read_wait_ms = waited.as_secs_f64() * 1e3;
            report.durations.plan_ms = plan_time.as_secs_f64() * 1e3;
            report.durations.total_ms = t0.elapsed().as_secs_f64() * 1e3;
            report.plugins = self.plugin_metrics();
            progress.batch(&report);
            *batch_id += 1;
            // The next batch's read failing (or stopped) is that batch's business: this one is
            // committed and counted.
            ahead = prefetched.transpose()?;
        }
        Ok(self.syncs.wait()?)
    }

    /// A planned batch, from its parsed events to its commit.
    fn run_batch(
        &mut self,
        batch_id: u64,
        batch: &SourceBatch,
        parsed: Parsed,
        plan: &Planned,
    ) -> Result<BatchProgress, RunError> {
        let (rows, mut report) = self.process(batch_id, batch, parsed, plan.flush, &plan.idle)?;
        let t = Instant::now();
        self.syncs.wait()?;
        report.durations.sync_wait_ms = ms(t);
        let t = Instant::now();
        self.deliver(batch_id, &rows)?;
        report.durations.sink_ms = ms(t);
        let t = Instant::now();
        self.commit(batch_id, plan.end.clone(), &report)?;
        report.durations.commit_ms = ms(t);
        Ok(report)
    }

    /// Continuous mode: what has arrived, at once; the position committed on an interval.
    fn continuous(
        &mut self,
        ingest: &mut Ingest,
        batch_id: &mut u64,
        max: usize,
        interval: Duration,
        stop: &AtomicBool,
        progress: &mut Progress,
    ) -> Result<(), RunError> {
        let mut since = BatchProgress { batch_id: *batch_id, ..Default::default() };
        let mut last_commit = Instant::now();
        let mut ended = false;
        while !stop.load(Ordering::Relaxed) && !ended {
            let t0 = Instant::now();
            let batch = match &mut ingest.source {
                Source::Kafka(k) => k.poll_available(max, Duration::from_millis(50)).map_err(SourceError::from)?,
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
        Ok(())
    }

    /// Delivers a batch; a sink plugin's failure is retried with backoff (delivery is
    /// idempotent per batch id), then stops the pipeline: rows cannot be set aside the way
    /// input records can.
    fn deliver(&mut self, batch_id: u64, rows: &Rows) -> Result<(), RunError> {
        let mut backoff = self.failure.backoff;
        let mut attempt = 0;
        loop {
            match self.sink.deliver(batch_id, rows) {
                Err(SinkError::Plugin(e))
                    if crate::isolate::isolatable(&e)
                        && attempt < self.failure.retries
                        && !self.stop.load(Ordering::Relaxed) =>
                {
                    tracing::warn!("{e}; delivering batch {batch_id} again in {backoff:?}");
                    sleep_unless(&self.stop, backoff);
                    backoff *= 2;
                    attempt += 1;
                }
                other => return Ok(other?),
            }
        }
    }

    fn plugin_metrics(&self) -> BTreeMap<String, Snapshot> {
        self.runtime.metrics().pipeline(&self.name).into_iter().collect()
    }

    /// Makes batch `batch_id` durable: side outputs, then the state with the source position
    /// (the point of no return), then the commits log. (The caller then tells the source, for
    /// the group offsets.)
    fn commit(&mut self, batch_id: u64, end: Offsets, report: &BatchProgress) -> Result<(), RunError> {
        let meta = StateMeta {
            next_batch: batch_id + 1,
            source: end,
            watermark: self.window.as_ref().map(|w| w.watermark.save()).unwrap_or_default(),
            dead_letters_len: self.dead.flush()?,
            late_len: match self.late.as_mut() {
                Some(l) => l.flush()?,
                None => 0,
            },
            state_version: self.state_version,
        };
        let bytes = serde_json::to_vec(&meta).map_err(|e| CheckpointError {
            path: self.checkpoint.state_dir(),
            message: format!("cannot encode the batch record: {e}"),
        })?;
        self.state.commit(&bytes, &mut self.syncs)?;
        self.checkpoint.commit(&Committed {
            batch_id,
            watermark: report.watermark,
            rows_out: Some(report.rows_out),
            committed_at_ms: now_ms(),
        })?;
        Ok(())
    }

    /// Everything between parsing and delivering: dead letters, transform, window, emit.
    fn process(
        &mut self,
        batch_id: u64,
        batch: &SourceBatch,
        parsed: Parsed,
        flush: bool,
        idle: &[PartitionId],
    ) -> Result<(Rows, BatchProgress), RunError> {
        let mut report = BatchProgress { batch_id, input_rows: batch.len() + batch.bad.len(), ..Default::default() };
        let mut d = Durations::default();

        for bad in &batch.bad {
            self.dead.write(&DeadLetter {
                batch_id,
                stage: "source",
                kind: "malformed",
                error: &bad.error,
                source: stream_name(&self.streams, bad.position.stream),
                partition: bad.position.partition,
                offset: bad.position.offset,
                line: bad.position.line,
                value: String::from_utf8_lossy(&bad.raw).into_owned(),
            })?;
        }
        report.dead_letters += batch.bad.len();

        let Parsed { out, failed } = parsed;
        report.dead_letters += self.dead_letters(batch_id, "parse", batch, &out.errors, None)?;
        report.dead_letters += self.plugin_failures(batch_id, "parse", batch, failed, None)?;
        let mut events = out.events;

        let t = Instant::now();
        for i in 0..self.transforms.len() {
            if events.times.is_empty() {
                break;
            }
            let (input, transform) = (&events, &mut self.transforms[i]);
            let (out, failed) = isolate(input.times.len(), &self.failure, &self.stop, |r| {
                if r.len() == input.times.len() {
                    transform.transform(input)
                } else {
                    transform.transform(&slice_events(input, r))
                }
            })?;
            let stage = format!("transform[{i}]");
            report.dead_letters += self.dead_letters(batch_id, &stage, batch, &out.errors, Some(&events.origins))?;
            report.dead_letters += self.plugin_failures(batch_id, &stage, batch, failed, Some(&events.origins))?;
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
        let mut aggregate_failures = Vec::new();
        if let Some(w) = self.window.as_mut() {
            let t = Instant::now();
            let in_force = w.watermark.current();
            // Under the failure policy, like parse and transform: a failed call leaves no trace
            // (its staged state changes are rolled back), so the parts that went through add up
            // to the batch without the events that failed alone.
            let (op, agg, state) = (&mut w.op, w.agg.as_mut(), &mut self.state);
            let (late, failed) = isolate(events.times.len(), &self.failure, &self.stop, |r| {
                let mark = (state.savepoint(), op.mark());
                let result = if r.len() == events.times.len() {
                    op.process(&events, in_force, agg, state)
                } else {
                    op.process(&slice_events(&events, r), in_force, agg, state)
                };
                if result.is_err() {
                    state.rollback(mark.0);
                    op.rollback(mark.1);
                }
                result
            })?;
            aggregate_failures = failed;
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
                        source: stream_name(&self.streams, pos.stream),
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
            let mut maxes: BTreeMap<PartitionId, i64> = BTreeMap::new();
            for pos in &batch.positions {
                maxes.entry((pos.stream, pos.partition)).or_insert(watermark::NONE);
            }
            for (i, &time) in events.times.iter().enumerate() {
                let pos = batch.positions[events.origins[i] as usize];
                let m = maxes.entry((pos.stream, pos.partition)).or_insert(watermark::NONE);
                *m = (*m).max(time);
            }
            for (part, max) in maxes {
                w.watermark.observe(part, max, now);
            }
            let advanced = if flush { w.watermark.flush() } else { w.watermark.advance(idle) };
            let windows = w.op.emit(in_force, advanced, w.cfg.output, w.agg.as_mut(), &mut self.state)?;
            report.windows_emitted = crate::emit::finish(&windows, w.agg.as_mut(), &mut rows)?;
            report.watermark = Some(advanced);
            d.emit_ms = ms(t);
        } else {
            rows = Rows { rows: events.rows, row_ends: events.row_ends };
        }
        report.dead_letters +=
            self.plugin_failures(batch_id, "aggregate", batch, aggregate_failures, Some(&events.origins))?;
        report.rows_out = rows.row_ends.len();
        report.state_keys = self.state.estimated_keys();
        report.durations = d;
        Ok((rows, report))
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
        let errors = errors.iter().map(|e| (e.index as usize, kind_name(e), e.message.clone()));
        self.write_dead_letters(batch_id, stage, batch, errors, origins)
    }

    /// Writes the records a plugin failed on (isolated by the failure policy) as dead letters.
    fn plugin_failures(
        &mut self,
        batch_id: u64,
        stage: &str,
        batch: &SourceBatch,
        failed: crate::isolate::Isolated<impl std::fmt::Display>,
        origins: Option<&[u32]>,
    ) -> Result<usize, RunError> {
        let failed = failed.into_iter().map(|(i, e)| (i, "plugin-failure", e.to_string()));
        self.write_dead_letters(batch_id, stage, batch, failed, origins)
    }

    fn write_dead_letters(
        &mut self,
        batch_id: u64,
        stage: &str,
        batch: &SourceBatch,
        errors: impl Iterator<Item = (usize, &'static str, String)>,
        origins: Option<&[u32]>,
    ) -> Result<usize, RunError> {
        let r = &batch.records;
        let mut n = 0;
        for (index, kind, message) in errors {
            let rec = origins.map_or(index, |o| o[index] as usize);
            let pos = batch.positions[rec];
            n += 1;
            self.dead.write(&DeadLetter {
                batch_id,
                stage,
                kind,
                error: &message,
                source: stream_name(&self.streams, pos.stream),
                partition: pos.partition,
                offset: pos.offset,
                line: pos.line,
                value: String::from_utf8_lossy(slice(&r.values, &r.value_ends, rec)).into_owned(),
            })?;
        }
        Ok(n)
    }
}

fn stream_name(streams: &[String], stream: u16) -> &str {
    streams.get(stream as usize).map_or("?", String::as_str)
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
