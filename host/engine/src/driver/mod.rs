//! The trigger loop. Per batch: plan and read (source; the plan goes to the offsets log) →
//! parse → transform → the operator (lateness, state, emission as the watermark moves) →
//! deliver (sink) → commit (state, then the commits log).
//!
//! Exactly-once rests on three facts: a batch is a pure function of its plan and the state it
//! starts from (same records, same watermark, same idleness, same batch id, so the same rows);
//! the sink dedupes on the delivery (the checkpoint's identity and the batch id); and the state,
//! the source position, the watermark and the side-output lengths are committed in one atomic
//! write after the sink accepted the batch. A crash anywhere re-runs the planned, uncommitted
//! batch from the last checkpoint.
//!
//! Continuous mode (stateless pipelines) skips the plan: records go through as they arrive and
//! the position is committed every `checkpoint_interval`, so a crash re-delivers at most that
//! interval's records (at-least-once).
//!
//! The files: `stages.rs` builds what a run is made of, `recovery.rs` finds where it starts,
//! `batch.rs` runs micro-batches, `continuous.rs` continuous mode; this one wires them up.

mod batch;
mod continuous;
mod recovery;
mod stages;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Instant;

pub use recovery::{fingerprint, keep_neighbours_clear};
pub use stages::{Output, Stages, sink};

use crate::checkpoint::{CheckpointDir, CheckpointError, Ledger, Syncs};
use crate::ingest::IngestError;
use crate::kafka::KafkaError;
use crate::operator::{Operator, OperatorError};
use crate::pipeline::{FailurePolicy, Pipeline, Trigger};
use crate::plugin::metrics::Snapshot;
use crate::plugin::{PluginError, Runtime, TransformFns};
use crate::progress::{Progress, Summary};
use crate::side_output::{DeadLetters, LateEvents, SideOutputError};
use crate::sink::{RowSink, Rows, SinkError};
use crate::source::SourceError;
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
    Operator(#[from] OperatorError),
    #[error(transparent)]
    Sink(#[from] SinkError),
    #[error(transparent)]
    SideOutput(#[from] SideOutputError),
    #[error(transparent)]
    Checkpoint(#[from] CheckpointError),
    #[error(transparent)]
    Schema(#[from] Box<crate::schemas::SchemaError>),
    #[error(
        "expectation {name} ({rule}) failed, and on_violation = \"fail\" stops the flow: {position} holds the row {row}"
    )]
    Expectation { name: String, rule: String, position: String, row: String },
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
    pub fn is_stop(&self) -> bool {
        matches!(
            self,
            RunError::Source(SourceError::Kafka(KafkaError::Stopped))
                | RunError::Operator(OperatorError::Source(SourceError::Kafka(KafkaError::Stopped)))
                | RunError::Sink(SinkError::Kafka(KafkaError::Stopped))
                | RunError::Plugin(PluginError::Stopped { .. })
        ) || matches!(self, RunError::Checkpoint(CheckpointError::Ledger { source, .. }) if matches!(**source, KafkaError::Stopped))
    }

    /// Whether the error is in what the user wrote or pointed at (a pipeline that cannot start
    /// as written), rather than something that went wrong while running.
    pub fn is_config(&self) -> bool {
        match self {
            RunError::Plugin(e) => e.is_config(),
            RunError::Source(SourceError::Replay(_) | SourceError::WrongOffsets { .. } | SourceError::NoProject(_)) => {
                true
            }
            RunError::Sink(SinkError::NoProject(_)) => true,
            RunError::Sink(SinkError::Framed(e)) => e.is_config(),
            // A table that cannot take the rows (PostgreSQL, Iceberg): the pipeline file's key
            // and the fix.
            RunError::Sink(SinkError::Connector(weir_connectors::ConnectorError::Refused { .. })) => true,
            RunError::Schema(e) => e.is_config(),
            RunError::Operator(OperatorError::Source(SourceError::Replay(_))) => true,
            RunError::Source(SourceError::Kafka(KafkaError::Config(_) | KafkaError::Topic { .. })) => true,
            RunError::Checkpoint(CheckpointError::Foreign { .. }) => true,
            _ => false,
        }
    }
}

/// Whether a run that reaches the end of bounded input emits every open window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flush {
    /// As the pipeline file's `watermark.flush_at_end` says, and `default` if it says nothing.
    AsConfigured { default: bool },
    /// Whatever the file says (`weir run --flush`).
    Always,
}

/// How to run a pipeline, beside its stages.
pub struct RunOptions {
    pub checkpoint: PathBuf,
    pub dead_letters: Option<PathBuf>,
    pub progress: Progress,
    /// Raised (by SIGTERM or Ctrl-C) to end the run after the current batch, or to abandon a
    /// batch that is waiting for a broker. Either way the run returns normally.
    pub stop: Arc<AtomicBool>,
    /// Sync the checkpoint at every batch: always, except to measure what durability costs
    /// (`weir bench --no-fsync`).
    pub fsync: bool,
    pub flush: Flush,
    /// The run is a tenant of its Wasm runtime of its own, sharing the CPU fairly with the
    /// others (`host/sandbox/src/sandbox.rs`); false for a project's flows, which count as one tenant
    /// (the project enters the runtime once for them all).
    pub own_share: bool,
    /// Where plans and commits are recorded beyond the checkpoint directory: a group's task
    /// (`host/scale/src/ledger/`); `None` for a run the directory alone records.
    pub ledger: Option<Box<dyn Ledger>>,
}

/// A run in progress: what the batch loops work with.
struct Run {
    name: String,
    /// The checkpoint's identity: with the batch id, what the sink dedupes on.
    identity: String,
    checkpoint: CheckpointDir,
    state: StateStore,
    /// Plan and state syncs in flight: waited for before the next rows reach the sink.
    syncs: Syncs,
    failure: FailurePolicy,
    stop: Arc<AtomicBool>,
    transforms: Vec<Box<dyn TransformFns>>,
    expect: Vec<crate::expect::ExpectStage>,
    /// Violations of each expectation since the checkpoint began, committed with each batch.
    violations: BTreeMap<String, u64>,
    /// Records read since the checkpoint began, committed with each batch.
    records_in: u64,
    /// Rows delivered since the checkpoint began, committed with each batch.
    rows_out: u64,
    operator: Box<dyn Operator>,
    /// The operator plugin's state version, recorded with every commit.
    state_version: Option<u32>,
    /// Event time, for pipelines with `[watermark]`.
    time: Option<Watermark>,
    /// Where a flush at the end of an earlier run advanced the operator to.
    flushed_to: Option<i64>,
    /// Whether this run flushes at the end of bounded input.
    flushes: bool,
    /// A parser's deletions go on to the sink as tombstones (`Pipeline::deletions`); else they
    /// are dead letters as they leave the parser.
    deletions: bool,
    sink: Box<dyn RowSink>,
    dead: DeadLetters,
    late: Option<LateEvents>,
    runtime: Option<Arc<Runtime>>,
    ledger: Option<Box<dyn Ledger>>,
    /// The last batch's rows, once delivered: their columns take the next batch's. A fresh set
    /// would grow by doubling to a batch's megabytes every batch, into pages the kernel has to
    /// fault in and zero.
    spare_rows: Rows,
}

/// Runs `pipeline` with `stages` until its input ends (bounded triggers) or `opts.stop` is
/// raised, and returns the totals.
pub fn run(pipeline: &Pipeline, stages: Stages, mut opts: RunOptions) -> Result<Summary, RunError> {
    let started = Instant::now();
    let _running = stages.runtime.as_ref().filter(|_| opts.own_share).map(|r| r.enter_pipeline());
    crate::schemas::check_readers(pipeline, None).map_err(Box::new)?;
    let (mut run, mut ingest, recovered) = recovery::start(pipeline, stages, &mut opts)?;
    let mut progress = opts.progress;
    progress.identify(&run.identity, &opts.checkpoint);
    let mut batch_id = recovered.next_batch;
    let result = match pipeline.trigger {
        Trigger::Continuous { checkpoint_interval } => run.continuous(
            &mut ingest,
            &mut batch_id,
            pipeline.source.max_offsets_per_trigger,
            checkpoint_interval,
            &mut progress,
        ),
        _ => run.micro_batches(ingest, pipeline, &mut batch_id, recovered.reruns, &mut progress),
    };
    let ended = match result {
        Err(e) if e.is_stop() => {
            tracing::info!(
                "{}: stopped while waiting; a planned batch that was not committed re-runs on restart",
                pipeline.name
            );
            false
        }
        other => other?,
    };
    if ended
        && !run.flushes
        && let Some(h) = run.operator.horizon(&run.state)?
    {
        tracing::info!(
            "{}: input ended with windows still open; they are emitted when later input moves the watermark \
             past them (up to {}), or by a run with --flush",
            pipeline.name,
            crate::progress::show_time(h)
        );
    }
    let watermark = run.time.as_ref().map(Watermark::current);
    let mut summary = progress.finish(started.elapsed(), watermark, run.plugin_metrics());
    summary.interrupted = pipeline.bounded() && !ended;
    Ok(summary)
}

impl Run {
    fn plugin_metrics(&self) -> BTreeMap<String, Snapshot> {
        match &self.runtime {
            Some(r) => r.metrics().pipeline(&self.name).into_iter().collect(),
            None => BTreeMap::new(),
        }
    }

    /// The watermark in force for lateness and emission: the real one, or the horizon an earlier
    /// flush advanced the operator to, whichever is later.
    fn in_force(&self) -> i64 {
        let real = self.time.as_ref().map_or(watermark::NONE, Watermark::current);
        real.max(self.flushed_to.unwrap_or(watermark::NONE))
    }
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
