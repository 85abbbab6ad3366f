//! Where a run starts. The state store's record of the last committed batch says where the
//! source stands, what the watermark was, how long the side outputs are and which batch is next;
//! a batch planned but never committed is re-run with its plan; the operator opens over the
//! restored state, converting state another build of its plugin wrote.
//!
//! The state commit is the point of no return: a crash after it and before the commits log
//! entry leaves only that entry to write, which recovery does.
//!
//! Start-up order matters: the checkpoint is locked and checked, the state, the operator, the
//! source and the side outputs are opened, and only then, once nothing can fail on what the user
//! wrote, is the checkpoint claimed. A run that fails to start leaves no metadata that would
//! refuse the fixed pipeline.

use std::path::{Path, PathBuf};
use std::time::Instant;

use super::{Flush, Run, RunError, RunOptions, Stages};
use crate::checkpoint::{CheckpointDir, CheckpointError, Committed, Metadata, Planned, StateMeta, Syncs, now_ms};
use crate::ingest::Ingest;
use crate::operator::Operator;
use crate::pipeline::{LatePolicy, Pipeline};
use crate::plugin::Own;
use crate::side_output::{DeadLetters, LateEvents, SideOutput};
use crate::state::StateStore;
use crate::watermark::Watermark;

pub(super) struct Recovered {
    /// The record of the last committed batch (`None`: nothing committed yet).
    pub meta: Option<StateMeta>,
    pub next_batch: u64,
    /// The plans of batches planned before the crash and not committed, in order from
    /// `next_batch`: they re-run as planned.
    pub reruns: std::collections::VecDeque<Planned>,
}

/// What the checkpoint depends on: the source and the operator (its own
/// [`Operator::fingerprint`]). A checkpoint written under another fingerprint is refused rather
/// than silently reinterpreted.
pub fn fingerprint(p: &Pipeline, operator: &dyn Operator) -> String {
    format!("source={} window={}", p.source.kind.identity(), operator.fingerprint())
}

/// Opens everything a run needs, from the checkpoint on; returns the run, its source and
/// parsers, and where recovery found it stands.
pub(super) fn start(
    pipeline: &Pipeline,
    stages: Stages,
    opts: &mut RunOptions,
) -> Result<(Run, Ingest, Recovered), RunError> {
    let time = pipeline.stateful.as_ref().map(|s| &s.time);
    let HostFiles { dead: dead_path, late: late_path } = host_files(pipeline, opts);
    let cache = stages.runtime.as_ref().and_then(|r| r.cache_dir().map(Path::to_path_buf));
    keep_grants_clear(pipeline, &opts.checkpoint, &dead_path, late_path.as_deref(), cache.as_deref())?;

    let (mut checkpoint, found) = CheckpointDir::lock(&opts.checkpoint)?;
    let fingerprint = fingerprint(pipeline, stages.operator.as_ref());
    let identity = checkpoint.check(found.as_ref(), &pipeline.name, &fingerprint)?;
    let mut state = StateStore::open(&checkpoint.state_dir())?;
    if !opts.fsync {
        (checkpoint, state) = (checkpoint.without_fsync(), state.without_fsync());
    }
    let recovered = recover(&checkpoint, &state)?;
    let Stages { parsers, transforms, expect, mut operator, sink, runtime } = stages;
    let in_group = opts.ledger.is_some();
    let state_version =
        open_operator(operator.as_mut(), &mut state, &recovered, &checkpoint, &pipeline.name, in_group)?;
    let restored = recovered.meta.as_ref();

    let source = crate::source::open(&pipeline.source, restored.map(|m| &m.source), opts.stop.clone())?;
    let streams = source.stream_names();
    let dead = SideOutput::open(&dead_path, restored.map_or(0, |m| m.dead_letters_len))?;
    let late = match &late_path {
        Some(path) => Some(SideOutput::open(path, restored.map_or(0, |m| m.late_len))?),
        None => None,
    };
    let watermark = time.map(|t| {
        let mut w = Watermark::new(t.delay_ms, t.idle_timeout);
        if let Some(m) = restored {
            w.restore(&m.watermark, Instant::now());
        }
        w.expect(&source.expected_streams(), Instant::now());
        w
    });
    let flushes = match opts.flush {
        Flush::Always => true,
        Flush::AsConfigured { default } => time.and_then(|t| t.flush_at_end).unwrap_or(default),
    };

    checkpoint
        .claim(found.as_ref(), &Metadata { id: identity.clone(), pipeline: pipeline.name.clone(), fingerprint })?;
    let ingest = Ingest { source, failure: pipeline.failure, stop: opts.stop.clone(), parsers };
    let run = Run {
        name: pipeline.name.clone(),
        identity,
        checkpoint,
        state,
        syncs: Syncs::default(),
        failure: pipeline.failure,
        stop: opts.stop.clone(),
        transforms,
        expect,
        violations: restored.map(|m| m.expectations.clone()).unwrap_or_default(),
        records_in: restored.map_or(0, |m| m.records_in),
        rows_out: restored.map_or(0, |m| m.rows_out),
        operator,
        state_version,
        time: watermark,
        flushed_to: restored.and_then(|m| m.flushed_to),
        flushes,
        deletions: pipeline.deletions,
        sink,
        dead: DeadLetters::new(dead, streams.clone()),
        late: late.map(|l| LateEvents::new(l, streams)),
        runtime,
        ledger: opts.ledger.take(),
        spare_rows: crate::sink::Rows::default(),
    };
    if restored.is_some() {
        let again = match recovered.reruns.len() {
            0 => String::new(),
            1 => " (re-running its last planned batch)".to_string(),
            n => format!(" (re-running its last {n} planned batches)"),
        };
        tracing::info!(batch = recovered.next_batch, "resuming {} from its checkpoint{again}", pipeline.name);
    }
    Ok((run, ingest, recovered))
}

/// The side outputs a run writes, besides its checkpoint.
struct HostFiles {
    dead: PathBuf,
    late: Option<PathBuf>,
}

fn host_files(pipeline: &Pipeline, opts: &RunOptions) -> HostFiles {
    let dead = opts.dead_letters.clone().or_else(|| pipeline.dead_letter.clone());
    let late = match pipeline.stateful.as_ref().map(|s| &s.time) {
        Some(t) if t.late == LatePolicy::SideOutput => {
            Some(t.late_path.clone().unwrap_or_else(|| opts.checkpoint.join("late.jsonl")))
        }
        _ => None,
    };
    HostFiles { dead: dead.unwrap_or_else(|| opts.checkpoint.join("dead-letters.jsonl")), late }
}

/// Pipelines that share a process are tenants side by side: no stage of one may be granted a
/// directory that reaches another's checkpoint or side outputs (any grant: they hold its
/// records), as [`keep_grants_clear`] holds each pipeline's stages clear of its own.
pub fn keep_neighbours_clear(runs: &[(&Pipeline, &RunOptions)]) -> Result<(), RunError> {
    for (i, (pipeline, _)) in runs.iter().enumerate() {
        for (other, opts) in runs.iter().enumerate().filter(|(j, _)| *j != i).map(|(_, r)| r) {
            let files = host_files(other, opts);
            let mut own = vec![
                Own { what: "another pipeline's checkpoint".into(), path: &opts.checkpoint, any_grant: true },
                // Any grant: another tenant's side outputs hold its records.
                Own { what: "another pipeline's dead-letter file".into(), path: &files.dead, any_grant: true },
            ];
            if let Some(path) = files.late.as_deref() {
                own.push(Own { what: "another pipeline's late-event file".into(), path, any_grant: true });
            }
            for stage in pipeline.stages() {
                stage.grants.keep_clear_of(&stage.name, &own)?;
            }
        }
    }
    Ok(())
}

/// Refuses a pipeline whose plugins are granted a directory that reaches the host's own files:
/// the checkpoint and the component cache (any grant), the side outputs (a writable one).
fn keep_grants_clear(
    pipeline: &Pipeline,
    checkpoint: &Path,
    dead: &Path,
    late: Option<&Path>,
    cache: Option<&Path>,
) -> Result<(), RunError> {
    let mut own = vec![
        Own { what: "the checkpoint".into(), path: checkpoint, any_grant: true },
        Own { what: "the dead-letter file".into(), path: dead, any_grant: false },
    ];
    if let Some(path) = late {
        own.push(Own { what: "the late-event file".into(), path, any_grant: false });
    }
    if let Some(path) = cache {
        own.push(Own { what: "the compiled-component cache".into(), path, any_grant: true });
    }
    for stage in pipeline.stages() {
        stage.grants.keep_clear_of(&stage.name, &own)?;
    }
    Ok(())
}

fn recover(checkpoint: &CheckpointDir, state: &StateStore) -> Result<Recovered, RunError> {
    let meta: Option<StateMeta> = match state.meta()? {
        None => None,
        Some(bytes) => Some(serde_json::from_slice(&bytes).map_err(|e| {
            CheckpointError::file(checkpoint.state_dir(), format!("unreadable record of the last committed batch: {e}"))
        })?),
    };
    let next_batch = meta.as_ref().map_or(0, |m| m.next_batch);
    if let Some(last) = next_batch.checked_sub(1)
        && checkpoint.committed(last)?.is_none()
    {
        let watermark = meta.as_ref().map(|m| m.watermark.current);
        checkpoint.commit(&Committed { batch_id: last, watermark, rows_out: None, committed_at_ms: now_ms() })?;
    }
    let mut reruns = std::collections::VecDeque::new();
    while let Some(plan) = checkpoint.planned(next_batch + reruns.len() as u64)? {
        reruns.push_back(plan);
    }
    Ok(Recovered { meta, next_batch, reruns })
}

/// Opens the operator over the restored state and returns the state version to record. A
/// conversion of the state to the plugin's version commits at once, with the record of the new
/// version, so a crash leaves either the old state or the new one. A group's task (`in_group`)
/// refuses one: its state's record is in the group's changelog, which a local conversion would
/// leave behind (`docs/scale-out.md`).
pub(super) fn open_operator(
    op: &mut dyn Operator,
    state: &mut StateStore,
    recovered: &Recovered,
    checkpoint: &CheckpointDir,
    name: &str,
    in_group: bool,
) -> Result<Option<u32>, RunError> {
    // A checkpoint from before versioning holds version 1, every SDK build's default.
    let restored_version = recovered.meta.as_ref().map(|m| m.state_version.unwrap_or(1));
    let opened =
        op.open(state, restored_version).map_err(|e| CheckpointError::file(checkpoint.state_dir(), e.to_string()))?;
    if let (Some(_), Some(from), true) = (opened.migrated, restored_version, in_group) {
        let to = opened.state_version.unwrap_or(from);
        return Err(CheckpointError::file(
            checkpoint.state_dir(),
            format!(
                "{name}: the group's state is of state version {from} and the plugin's of {to}; a group cannot \
                 migrate its state in place yet: run the build that wrote it, or start a new group"
            ),
        )
        .into());
    }
    if let (Some(n), Some(m), Some(from)) = (opened.migrated, &recovered.meta, restored_version) {
        let meta = StateMeta { state_version: opened.state_version, ..m.clone() };
        let bytes = serde_json::to_vec(&meta).map_err(|e| {
            CheckpointError::file(checkpoint.state_dir(), format!("cannot encode the batch record: {e}"))
        })?;
        let mut syncs = Syncs::default();
        state.commit(&bytes, &mut syncs)?;
        syncs.wait()?;
        let to = opened.state_version.unwrap_or(from);
        tracing::info!("{name}: migrated {n} accumulators from state version {from} to {to}");
    }
    Ok(opened.state_version)
}
