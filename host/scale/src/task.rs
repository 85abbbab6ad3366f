//! One task of a group: the pipeline over one input partition, on this process for as long as
//! the group assigns it here.
//!
//! On assignment the task claims its checkpoint record (`ledger/`) with a new epoch, and
//! makes its local checkpoint directory say what the record says: the last committed batch's
//! state record and the plans after it. Then the ordinary driver runs it, writing every plan and
//! commit to the record too. So wherever the task ran before, it continues exactly there, and a
//! batch planned by the previous owner re-runs as planned.
//!
//! The local directory is kept when it already is where the record is (the common restart on
//! the same machine): its side outputs then continue exactly. Dead letters stay on the machine
//! that set them aside, one file per task (`docs/scale-out.md`).
//!
//! In a two-stage group (`shuffle.rs`) a stage-1 task runs the pipeline up to partial
//! accumulators, which its sink writes to the repartition topic; a stage-2 task reads one
//! partition of that topic and merges the partials into its windows, and its state travels too:
//! on assignment it is restored from the changelog (unless the local copy is already there),
//! written whole under the new epoch, and from then on every batch's changes are written there
//! before the batch commits (`changelog.rs`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

use super::ledger::{Fold, KafkaLedger};
use super::{Layout, TaskId, changelog, shuffle};
use crate::checkpoint::{CheckpointDir, CheckpointError, Metadata, StateMeta, Syncs};
use crate::driver::{self, Flush, Output, RunError, RunOptions, Stages};
use crate::ingest::DatasetRows;
use crate::isolate::Policy;
use crate::kafka::AckedProducer;
use crate::pipeline::{
    KafkaSourceConfig, Keyed, Pipeline, RepartitionConfig, SinkConfig, SourceConfig, SourceKind, StartingOffsets,
    Windowed,
};
use crate::plugin::{Aggregator, Runtime};
use crate::progress::{Progress, Summary};
use crate::sink::RepartitionSink;
use crate::state::StateStore;
use crate::window::WindowSpec;

/// Messages of the repartition topic a stage-2 batch reads at most: each is a stage-1 batch's
/// partials for this partition (at most `shuffle::MESSAGE_BYTES`), so this bounds a batch at
/// 32 MiB of partials, and a backlog still drains dozens of stage-1 batches at a time.
const MERGE_MESSAGES_PER_BATCH: usize = 64;

/// What a task needs besides its id.
pub(super) struct TaskContext {
    pub pipeline: Pipeline,
    pub runtime: Arc<Runtime>,
    /// The process's checkpoint directory: each task's working copy is `tasks/PARTITION` (or
    /// `tasks/merge-PARTITION`, stage 2) in it.
    pub checkpoint: PathBuf,
    pub layout: Layout,
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

/// Runs task `id` until `stop` is raised (its partition revoked, or the process stopping) or
/// it is fenced.
pub(super) fn run(cx: &TaskContext, id: TaskId, stop: Arc<AtomicBool>) -> Result<Summary, RunError> {
    let (topic, partition) = cx.layout.source_of(id);
    let task = name(&cx.pipeline, topic, partition);
    let ran = match id {
        TaskId::Input(p) => run_input(cx, &task, p, &stop),
        TaskId::Merge(q) => run_merge(cx, &task, q, &stop),
    };
    cx.rollup.release(&task);
    ran
}

/// A task of the input: the whole pipeline over one input partition, or stage 1 of a
/// two-stage one (partials to the repartition topic).
fn run_input(cx: &TaskContext, task: &str, partition: i32, stop: &Arc<AtomicBool>) -> Result<Summary, RunError> {
    let topic = &cx.layout.input;
    let pipeline = for_partition(&cx.pipeline, topic, partition);
    let SourceKind::Kafka(source) = &pipeline.source.kind else {
        unreachable!("Pipeline::in_group admits Kafka sources only")
    };
    let stage_one = match (&cx.layout.shuffle, windowed(&pipeline)) {
        (Some(shuffle), Some(w)) => Some((shuffle, w)),
        _ => None,
    };
    let mut stages = match &stage_one {
        None => Stages::wasm(&pipeline, &cx.runtime, Output::Pipeline, stop)?,
        Some((_, w)) => {
            // The pipeline's stages up to its aggregator, which makes partials here.
            let mut s = Stages::wasm(&pipeline, &cx.runtime, Output::Lines(Box::new(std::io::sink())), stop)?;
            let agg = Box::new(Aggregator::new(&cx.runtime, w.aggregate.clone())?);
            s.operator = crate::aggregate::partials(w, agg);
            s
        }
    };
    let ledger_partition = cx.layout.ledger_partition(TaskId::Input(partition));
    let mut ledger =
        KafkaLedger::claim(&source.options, &cx.layout.ledger, ledger_partition, task, &cx.owner, stop.clone())?;
    if let Some(((shuffle, partitions), w)) = &stage_one {
        let producer = AckedProducer::new(&source.options, stop.clone()).map_err(crate::sink::SinkError::Kafka)?;
        let by_window = matches!(w.window, WindowSpec::Panes { size, slide, .. } if size == slide);
        stages.sink = Box::new(RepartitionSink::new(
            producer,
            shuffle.clone(),
            *partitions as u32,
            partition as u32,
            ledger.epoch(),
            by_window,
        ));
    }
    let dir = cx.checkpoint.join("tasks").join(partition.to_string());
    let fingerprint = driver::fingerprint(&pipeline, stages.operator.as_ref());
    let meta = Metadata { id: ledger.identity().to_string(), pipeline: pipeline.name.clone(), fingerprint };
    let (kept, side) = make_local(&dir, &meta, ledger.restored(), None)?;
    ledger.set_side(side);
    tracing::info!(
        epoch = ledger.epoch(),
        batch = ledger.restored().next_batch(),
        "task {task}: claimed{}",
        if kept { "" } else { "; its local checkpoint rebuilt from the group's record" }
    );
    let opts = options_for(cx, task, &pipeline, dir, &partition.to_string(), stop, ledger);
    driver::run(&pipeline, stages, opts)
}

/// A stage-2 task: one partition of the repartition topic, merged into windows. Its state is
/// restored from the changelog when the local copy is not the record's, then written whole
/// under this owner's epoch before anything runs (`changelog.rs` says why).
fn run_merge(cx: &TaskContext, task: &str, q: i32, stop: &Arc<AtomicBool>) -> Result<Summary, RunError> {
    let pipeline = merge_pipeline(&cx.pipeline, &cx.layout, q);
    let SourceKind::Repartition(source) = &pipeline.source.kind else { unreachable!("made just above") };
    let options = source.kafka.options.clone();
    let stages = merge_stages(&pipeline, &cx.runtime, stop)?;
    let ledger_partition = cx.layout.ledger_partition(TaskId::Merge(q));
    let mut ledger = KafkaLedger::claim(&options, &cx.layout.ledger, ledger_partition, task, &cx.owner, stop.clone())?;
    let started = Instant::now();
    let group = cx.pipeline.group.as_deref().unwrap_or_default();
    let changelog_topic = shuffle::changelog_topic(group);
    let (valid, next_batch) = (ledger.restored().changelog, ledger.restored().next_batch());
    let restored = changelog::read(&options, &changelog_topic, q, valid, next_batch, stop)?;
    let dir = cx.checkpoint.join("tasks").join(format!("merge-{q}"));
    let fingerprint = driver::fingerprint(&pipeline, stages.operator.as_ref());
    let meta = Metadata { id: ledger.identity().to_string(), pipeline: pipeline.name.clone(), fingerprint };
    let (kept, side) = make_local(&dir, &meta, ledger.restored(), Some(&restored.entries))?;
    ledger.set_side(side);
    let read_ms = started.elapsed().as_secs_f64() * 1e3;
    // This owner's epoch holds the state from here on: its snapshot, then the record says so,
    // then the records of every epoch before are tombstoned.
    let entries = {
        let (checkpoint, _) = CheckpointDir::lock(&dir)?;
        StateStore::open(&checkpoint.state_dir())?.entries()?
    };
    let producer = AckedProducer::new(&options, stop.clone()).map_err(crate::sink::SinkError::Kafka)?;
    let mut log = changelog::Changelog::new(producer, &changelog_topic, q, ledger.epoch());
    log.snapshot(&entries, next_batch)?;
    log.tombstone_later(restored.stale);
    ledger.adopt(log)?;
    let bytes: usize = entries.iter().map(|(k, v)| k.len() + v.len()).sum();
    tracing::info!(
        epoch = ledger.epoch(),
        batch = next_batch,
        "task {task}: claimed; {} ({} records, {} bytes read from the changelog in {read_ms:.0} ms), its state of {} \
         entries and {bytes} bytes written under its epoch, {:.0} ms in all",
        if kept { "its local state kept" } else { "its local state restored from the changelog" },
        restored.records,
        restored.bytes,
        entries.len(),
        started.elapsed().as_secs_f64() * 1e3,
    );
    let opts = options_for(cx, task, &pipeline, dir, &format!("merge-{q}"), stop, ledger);
    driver::run(&pipeline, stages, opts)
}

/// How a task runs, beside its stages.
fn options_for(
    cx: &TaskContext,
    task: &str,
    pipeline: &Pipeline,
    dir: PathBuf,
    label: &str,
    stop: &Arc<AtomicBool>,
    ledger: KafkaLedger,
) -> RunOptions {
    RunOptions {
        dead_letters: Some(dead_letters(pipeline, &dir, label)),
        checkpoint: dir,
        progress: Progress::new(task, cx.progress_json, Some(Duration::from_secs(2))).tap(cx.rollup.tap(task)),
        stop: stop.clone(),
        // The local directory is the working copy; the record is in Kafka, written with every
        // replica's acknowledgement before the batch's rows go out (its plan, and every commit
        // before it). A machine crash that loses local writes leaves the local copy behind the
        // record, and `make_local` rebuilds it; syncing it would buy nothing.
        fsync: false,
        flush: Flush::AsConfigured { default: false },
        own_share: true,
        ledger: Some(Box::new(ledger)),
    }
}

/// The window a two-stage pipeline aggregates in.
fn windowed(p: &Pipeline) -> Option<&Windowed> {
    match p.stateful.as_ref().map(|s| &s.keyed) {
        Some(Keyed::Window(w)) => Some(w),
        _ => None,
    }
}

/// A stage-2 task's pipeline: the repartition partition `q` as its source, its rows taken as
/// they are (no parser, no transforms: stage 1 ran them), the window and sink of the pipeline.
fn merge_pipeline(p: &Pipeline, layout: &Layout, q: i32) -> Pipeline {
    let mut m = p.clone();
    let (topic, _) = layout.source_of(TaskId::Merge(q));
    let (options, group_id) = match &p.source.kind {
        SourceKind::Kafka(k) => (k.options.clone(), format!("{}.tasks", p.group.as_deref().unwrap_or(&k.group_id))),
        _ => unreachable!("Pipeline::in_group admits Kafka sources only"),
    };
    let kafka = KafkaSourceConfig {
        topics: vec![topic.to_string()],
        partitions: Some(vec![(topic.to_string(), q)]),
        starting: StartingOffsets::Earliest,
        options,
        group_id,
    };
    let lanes = layout.lanes as u32;
    m.source = SourceConfig {
        kind: SourceKind::Repartition(Box::new(RepartitionConfig { kafka, lanes })),
        max_offsets_per_trigger: MERGE_MESSAGES_PER_BATCH,
    };
    m.parse = None;
    m.parse_parallelism = 1;
    m.transforms.clear();
    m.expect.clear();
    m.join = None;
    m
}

/// A stage-2 task's stages: partials taken as rows, merged by the window operator over the
/// pipeline's aggregator, rows out to the pipeline's sink.
fn merge_stages(p: &Pipeline, runtime: &Arc<Runtime>, stop: &Arc<AtomicBool>) -> Result<Stages, RunError> {
    let (Some(s), Some(w)) = (&p.stateful, windowed(p)) else { unreachable!("a two-stage group aggregates") };
    let agg = Box::new(Aggregator::new(runtime, w.aggregate.clone())?);
    let policy = Policy { failure: p.failure, stop: stop.clone() };
    Ok(Stages {
        parsers: vec![Box::new(DatasetRows)],
        transforms: Vec::new(),
        expect: Vec::new(),
        operator: crate::aggregate::merging(w, &s.time, agg, policy),
        sink: driver::sink(p, Output::Pipeline, Some(runtime), stop)?,
        runtime: Some(runtime.clone()),
    })
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

/// A task's dead letters: the pipeline's `dead_letter.path` with the task's label (its
/// partition, `merge-` and its partition for stage 2) before its extension, else
/// `dead-letters.jsonl` in the task's directory.
fn dead_letters(p: &Pipeline, dir: &Path, label: &str) -> PathBuf {
    match &p.dead_letter {
        None => dir.join("dead-letters.jsonl"),
        Some(path) => {
            let stem = path.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
            let ext = path.extension().map(|e| format!(".{}", e.to_string_lossy())).unwrap_or_default();
            path.with_file_name(format!("{stem}-{label}{ext}"))
        }
    }
}

/// Makes the local checkpoint at `dir` say what the group's record says; returns whether the
/// local state was kept (it already was at the record's batch, under the same identity), and
/// the directory's side-output id. A rebuilt state holds `entries` (a stage-2 task's, from the
/// changelog) with the record's last commit.
///
/// Side outputs (dead letters, late events) are this machine's files, cut back at recovery to
/// the lengths of the last commit. The record's lengths are this directory's only if its last
/// commit came from here (its `side` is this directory's id): then they are used as they are,
/// whether the record is a batch ahead of the local state (a crash between the record's commit
/// and the local one, in that order: `driver/batch.rs`) or a batch behind it (a crash before
/// the record's commit, sent, had landed), and the batches after them run again. Otherwise the
/// local state's lengths are: until the record names this directory, the local state is never
/// ahead of it (`Ledger::commit` waits), so every batch whose side outputs they count is one
/// the record has too.
fn make_local(
    dir: &Path,
    meta: &Metadata,
    record: &Fold,
    entries: Option<&BTreeMap<Vec<u8>, Vec<u8>>>,
) -> Result<(bool, String), RunError> {
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
            for (k, v) in entries.into_iter().flatten() {
                state.put(k.clone(), v.clone());
            }
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
            records_in: 0,
            rows_out: 0,
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
        let (kept, side) = make_local(dir.path(), &metadata(), &record(3, 10, None), None).unwrap();
        assert!(!kept);
        assert_eq!((local(dir.path()).next_batch, local(dir.path()).dead_letters_len), (3, 0));
        // At the record's batch under the same identity: kept as it is.
        let (kept, again) = make_local(dir.path(), &metadata(), &record(3, 99, Some(side.clone())), None).unwrap();
        assert!(kept);
        assert_eq!(again, side, "the directory keeps its side-output id");
        // The record a batch ahead, committed from here: its lengths count this directory's files.
        let (kept, _) = make_local(dir.path(), &metadata(), &record(4, 25, Some(side.clone())), None).unwrap();
        assert!(!kept);
        assert_eq!((local(dir.path()).next_batch, local(dir.path()).dead_letters_len), (4, 25));
        // Then committed elsewhere again: the local lengths stand.
        let (_, _) = make_local(dir.path(), &metadata(), &record(9, 70, Some("other".into())), None).unwrap();
        assert_eq!((local(dir.path()).next_batch, local(dir.path()).dead_letters_len), (9, 25));
    }
}
