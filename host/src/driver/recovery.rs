//! Where a run starts. The state store's record of the last committed batch says where the
//! source stands, what the watermark was, how long the side outputs are and which batch is next;
//! a batch planned but never committed is re-run with its plan; the operator opens over the
//! restored state, converting state another build of its plugin wrote.
//!
//! The state commit is the point of no return: a crash after it and before the commits log
//! entry leaves only that entry to write, which recovery does.

use super::RunError;
use crate::checkpoint::{CheckpointDir, CheckpointError, Committed, Planned, StateMeta, Syncs, now_ms};
use crate::operator::Operator;
use crate::pipeline::Pipeline;
use crate::state::StateStore;

pub(super) struct Recovered {
    /// The record of the last committed batch (`None`: nothing committed yet).
    pub meta: Option<StateMeta>,
    pub next_batch: u64,
    /// The next batch's plan, if it was planned before the crash: it re-runs as planned.
    pub rerun: Option<Planned>,
}

/// What the checkpoint depends on: the source and the operator. A checkpoint written under
/// another fingerprint is refused rather than silently reinterpreted.
pub(super) fn fingerprint(p: &Pipeline) -> String {
    let window = p.windowed.as_ref().map(|w| format!("{:?}/{:?}", w.window, w.output));
    format!("source={} window={}", p.source.kind.identity(), window.unwrap_or_else(|| "none".into()))
}

pub(super) fn recover(checkpoint: &CheckpointDir, state: &StateStore) -> Result<Recovered, RunError> {
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
    let rerun = checkpoint.planned(next_batch)?;
    Ok(Recovered { meta, next_batch, rerun })
}

/// Opens the operator over the restored state and returns the state version to record. A
/// conversion of the state to the plugin's version commits at once, with the record of the new
/// version, so a crash leaves either the old state or the new one.
pub(super) fn open_operator(
    op: &mut dyn Operator,
    state: &mut StateStore,
    recovered: &Recovered,
    checkpoint: &CheckpointDir,
    name: &str,
) -> Result<Option<u32>, RunError> {
    // A checkpoint from before versioning holds version 1, every SDK build's default.
    let restored_version = recovered.meta.as_ref().map(|m| m.state_version.unwrap_or(1));
    let opened =
        op.open(state, restored_version).map_err(|e| CheckpointError::file(checkpoint.state_dir(), e.to_string()))?;
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
