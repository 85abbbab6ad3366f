//! One task of a group: the pipeline over one input partition, on this process for as long as
//! the group assigns it here.
//!
//! On assignment the task claims its checkpoint record (`ledger.rs`) with a new epoch, and
//! makes its local checkpoint directory say what the record says: the last committed batch's
//! state record and the plans after it. Then the ordinary driver runs it, writing every plan and
//! commit to the record too. So wherever the task ran before, it continues exactly there, and a
//! batch planned by the previous owner re-runs as planned.
//!
//! The local directory is kept when it already is where the record is (the common restart on
//! the same machine): its side outputs then continue exactly. Dead letters stay on the machine
//! that set them aside, one file per task (`docs/scale-out.md`).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use super::ledger::{Fold, KafkaLedger};
use crate::checkpoint::{CheckpointDir, CheckpointError, Metadata, StateMeta, Syncs};
use crate::driver::{self, Flush, Output, RunError, RunOptions, Stages};
use crate::pipeline::{Pipeline, SinkConfig, SourceKind};
use crate::plugin::Runtime;
use crate::progress::{Progress, Summary};
use crate::state::StateStore;

/// What a task needs besides its partition.
pub(super) struct TaskContext {
    pub pipeline: Pipeline,
    pub runtime: Arc<Runtime>,
    /// The process's checkpoint directory: each task's working copy is `tasks/PARTITION` in it.
    pub checkpoint: PathBuf,
    pub ledger_topic: String,
    /// Who this process is, in the claims it writes.
    pub owner: String,
    pub progress_json: bool,
    /// The process's roll-up, which every task's progress feeds.
    pub rollup: Arc<super::rollup::Rollup>,
}

/// The task's name in logs and progress: `PIPELINE[TOPIC-PARTITION]`.
pub(super) fn name(pipeline: &Pipeline, topic: &str, partition: i32) -> String {
    format!("{}[{topic}-{partition}]", pipeline.name)
}

/// Runs task `partition` until `stop` is raised (its partition revoked, or the process
/// stopping) or it is fenced.
pub(super) fn run(cx: &TaskContext, topic: &str, partition: i32, stop: Arc<AtomicBool>) -> Result<Summary, RunError> {
    let task = name(&cx.pipeline, topic, partition);
    let pipeline = for_partition(&cx.pipeline, topic, partition);
    let SourceKind::Kafka(source) = &pipeline.source.kind else {
        unreachable!("Pipeline::in_group admits Kafka sources only")
    };
    let stages = Stages::wasm(&pipeline, &cx.runtime, Output::Pipeline, &stop)?;
    let mut ledger = KafkaLedger::claim(&source.options, &cx.ledger_topic, partition, &task, &cx.owner, stop.clone())?;
    let dir = cx.checkpoint.join("tasks").join(partition.to_string());
    let fingerprint = driver::fingerprint(&pipeline, stages.operator.as_ref());
    let meta = Metadata { id: ledger.identity().to_string(), pipeline: pipeline.name.clone(), fingerprint };
    let (kept, side) = make_local(&dir, &meta, ledger.restored())?;
    ledger.set_side(side);
    tracing::info!(
        epoch = ledger.epoch(),
        batch = ledger.restored().next_batch(),
        "task {task}: claimed{}",
        if kept { "" } else { "; its local checkpoint rebuilt from the group's record" }
    );
    let opts = RunOptions {
        checkpoint: dir.clone(),
        dead_letters: Some(dead_letters(&pipeline, &dir, partition)),
        progress: Progress::new(&task, cx.progress_json, Some(Duration::from_secs(2))).tap(cx.rollup.tap(&task)),
        stop,
        fsync: true,
        flush: Flush::AsConfigured { default: false },
        own_share: true,
        ledger: Some(Box::new(ledger)),
    };
    let ran = driver::run(&pipeline, stages, opts);
    cx.rollup.release(&task);
    ran
}

/// The pipeline restricted to one partition. Its Kafka sink's transactions (where the broker
/// has them) get an id per task, so a task's new owner fences the old one at the broker too.
fn for_partition(p: &Pipeline, topic: &str, partition: i32) -> Pipeline {
    let mut p = p.clone();
    if let SourceKind::Kafka(k) = &mut p.source.kind {
        k.partitions = Some(vec![(topic.to_string(), partition)]);
        // The group's own offsets are the members'; the tasks commit theirs for lag apart.
        k.group_id = format!("{}.tasks", p.group.as_deref().unwrap_or(&k.group_id));
    }
    if let Some(SinkConfig::Kafka(s)) = &mut p.sink {
        s.transactional_id = format!("{}-{topic}-{partition}", s.transactional_id);
    }
    p
}

/// A task's dead letters: the pipeline's `dead_letter.path` with the partition before its
/// extension, else `dead-letters.jsonl` in the task's directory.
fn dead_letters(p: &Pipeline, dir: &Path, partition: i32) -> PathBuf {
    match &p.dead_letter {
        None => dir.join("dead-letters.jsonl"),
        Some(path) => {
            let stem = path.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
            let ext = path.extension().map(|e| format!(".{}", e.to_string_lossy())).unwrap_or_default();
            path.with_file_name(format!("{stem}-{partition}{ext}"))
        }
    }
}

/// Makes the local checkpoint at `dir` say what the group's record says; returns whether the
/// local state was kept (it already was at the record's batch, under the same identity), and
/// the directory's side-output id.
///
/// Side outputs (dead letters, late events) are this machine's files, cut back at recovery to
/// the lengths of the last commit. The record's lengths are this directory's only if its last
/// commit came from here (its `side` is this directory's id): then they are used as they are,
/// even when the record is a batch ahead of the local state (a crash between the record's
/// commit and the local one, in that order: `driver/batch.rs`). Otherwise the local state's
/// lengths are: the local state is never ahead of the record, so every batch whose side
/// outputs they count is one the record has too.
fn make_local(dir: &Path, meta: &Metadata, record: &Fold) -> Result<(bool, String), RunError> {
    let (checkpoint, found) = CheckpointDir::lock(dir)?;
    let side = side_id(dir)?;
    let mut state = StateStore::open(&checkpoint.state_dir())?;
    let local: Option<StateMeta> = match state.meta()? {
        Some(bytes) => serde_json::from_slice(&bytes).ok(),
        None => None,
    };
    let local_next = local.as_ref().map_or(0, |m| m.next_batch);
    let kept = found.as_ref().is_some_and(|f| f == meta) && local_next == record.next_batch();
    if !kept {
        drop(state);
        checkpoint.start_over()?;
        state = StateStore::open(&checkpoint.state_dir())?;
        if let Some(m) = &record.meta {
            let mut m: StateMeta = serde_json::from_value(m.clone()).map_err(|e| {
                CheckpointError::file(checkpoint.state_dir(), format!("the group's record of the task: {e}"))
            })?;
            if record.side.as_deref() != Some(side.as_str()) {
                m.dead_letters_len = local.as_ref().map_or(0, |l| l.dead_letters_len);
                m.late_len = local.as_ref().map_or(0, |l| l.late_len);
            }
            let bytes = serde_json::to_vec(&m)
                .map_err(|e| CheckpointError::file(checkpoint.state_dir(), format!("cannot encode: {e}")))?;
            let mut syncs = Syncs::default();
            state.commit(&bytes, &mut syncs)?;
            syncs.wait()?;
        }
    }
    checkpoint.claim(if kept { found.as_ref() } else { None }, meta)?;
    checkpoint.drop_plans()?;
    let mut syncs = Syncs::default();
    for plan in record.plans.values() {
        checkpoint.plan(plan, &mut syncs)?;
    }
    syncs.wait()?;
    Ok((kept, side))
}

/// The id of the local directory's side-output files (`side-id` in it), made at first use and
/// written whole (`own_files::replace`); one unreadable all the same is made again: a new id
/// only makes the next rebuild trust the local lengths, which is safe.
fn side_id(dir: &Path) -> Result<String, RunError> {
    let path = dir.join(SIDE_ID);
    if let Ok(text) = std::fs::read_to_string(&path)
        && uuid::Uuid::parse_str(text.trim()).is_ok()
    {
        return Ok(text.trim().to_string());
    }
    let id = uuid::Uuid::now_v7().to_string();
    crate::own_files::replace(&path, id.as_bytes(), true)
        .map_err(|e| CheckpointError::file(&path, format!("cannot write: {e}")))?;
    Ok(id)
}

/// The file in a task's directory that names its side-output files.
const SIDE_ID: &str = "side-id";

#[cfg(test)]
mod tests {
    use super::*;
    use crate::source::Offsets;

    fn record(next_batch: u64, dead_letters_len: u64, side: Option<String>) -> Fold {
        let meta = StateMeta {
            next_batch,
            source: Offsets::Log { next: next_batch },
            watermark: Default::default(),
            dead_letters_len,
            late_len: 0,
            state_version: None,
            flushed_to: None,
            expectations: Default::default(),
        };
        let mut f = Fold::default();
        f.meta = Some(serde_json::to_value(meta).unwrap());
        f.side = side;
        f
    }

    fn local(dir: &Path) -> StateMeta {
        let (checkpoint, _) = CheckpointDir::lock(dir).unwrap();
        let state = StateStore::open(&checkpoint.state_dir()).unwrap();
        serde_json::from_slice(&state.meta().unwrap().unwrap()).unwrap()
    }

    fn metadata() -> Metadata {
        Metadata { id: "task".into(), pipeline: "p".into(), fingerprint: "f".into() }
    }

    #[test]
    fn a_record_from_this_directory_keeps_its_side_output_lengths_and_another_does_not() {
        let dir = tempfile::tempdir().unwrap();
        // Committed elsewhere: this directory has none of those dead letters.
        let (kept, side) = make_local(dir.path(), &metadata(), &record(3, 10, None)).unwrap();
        assert!(!kept);
        assert_eq!((local(dir.path()).next_batch, local(dir.path()).dead_letters_len), (3, 0));
        // At the record's batch under the same identity: kept as it is.
        let (kept, again) = make_local(dir.path(), &metadata(), &record(3, 99, Some(side.clone()))).unwrap();
        assert!(kept);
        assert_eq!(again, side, "the directory keeps its side-output id");
        // The record a batch ahead, committed from here: its lengths count this directory's files.
        let (kept, _) = make_local(dir.path(), &metadata(), &record(4, 25, Some(side.clone()))).unwrap();
        assert!(!kept);
        assert_eq!((local(dir.path()).next_batch, local(dir.path()).dead_letters_len), (4, 25));
        // Then committed elsewhere again: the local lengths stand.
        let (_, _) = make_local(dir.path(), &metadata(), &record(9, 70, Some("other".into()))).unwrap();
        assert_eq!((local(dir.path()).next_batch, local(dir.path()).dead_letters_len), (9, 25));
    }
}
