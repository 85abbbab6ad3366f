//! `weir inspect CHECKPOINT_DIR`: what a checkpoint says, for an operator deciding whether a
//! pipeline is healthy or where it will resume. Read-only; safe while the pipeline runs.

use std::fmt::Write as _;
use std::path::Path;

use crate::checkpoint::{CheckpointDir, Planned, StateMeta};
use crate::progress::show_time;
use crate::source::Offsets;
use crate::state::StateStore;
use anyhow::{Context, Result};

/// A checkpoint's state, opened read-only (safe beside the running pipeline), with its last
/// batch record (`None` before a first commit); `None` when it has no state yet.
pub(super) fn read_state(state_dir: &Path) -> Result<Option<(StateStore, Option<StateMeta>)>> {
    if !state_dir.exists() {
        return Ok(None);
    }
    let store = StateStore::open_read_only(state_dir)?;
    let last = match store.meta()? {
        Some(b) => {
            Some(serde_json::from_slice(&b).with_context(|| format!("{}: last batch record", state_dir.display()))?)
        }
        None => None,
    };
    Ok(Some((store, last)))
}

/// How many recent batches to list.
pub(super) fn inspect(dir: &Path, recent: usize) -> Result<String> {
    let (cp, meta) = CheckpointDir::existing(dir)?;
    let mut out = String::new();
    writeln!(out, "checkpoint {}", dir.display())?;
    writeln!(out, "identity   {}", if meta.id.is_empty() { "(none yet: given when next run)" } else { &meta.id })?;
    writeln!(out, "pipeline   {} ({})", meta.pipeline, meta.fingerprint)?;

    let state_dir = cp.state_dir();
    let (last, size) = match read_state(&state_dir)? {
        Some((state, last)) => (last, Some((state.estimated_keys(), dir_size(&state_dir)))),
        None => (None, None),
    };
    match &last {
        None => writeln!(out, "committed  nothing yet")?,
        Some(m) => {
            writeln!(out, "committed  batches 0..={} (next batch {})", m.next_batch.saturating_sub(1), m.next_batch)?;
            writeln!(out, "watermark  {}", show_time(m.watermark.current))?;
            if let Some(f) = m.flushed_to {
                writeln!(
                    out,
                    "flushed    windows final by {} were emitted by a flush at the end of input",
                    show_time(f)
                )?;
            }
            for ((stream, partition), max) in &m.watermark.partitions {
                writeln!(out, "           stream {stream} partition {partition}: max event time {}", show_time(*max))?;
            }
            writeln!(out, "position   {}", offsets(&m.source))?;
            writeln!(out, "side files dead letters {} bytes, late {} bytes", m.dead_letters_len, m.late_len)?;
            for (name, n) in &m.expectations {
                writeln!(out, "expect     {name}: {n} violations")?;
            }
        }
    }
    if let Some((keys, bytes)) = size {
        writeln!(out, "state      ~{keys} keys, {bytes} bytes on disk")?;
    }
    let next = last.as_ref().map_or(0, |m| m.next_batch);
    if let Some(p) = cp.planned(next)? {
        writeln!(out, "pending    batch {next} was planned and not committed: it re-runs on restart")?;
        writeln!(out, "           {}", range(&p))?;
    }

    let ids = cp.ids("offsets")?;
    writeln!(out, "recent batches (of {} kept):", ids.len())?;
    for id in ids.iter().rev().take(recent).rev() {
        let Some(p) = cp.planned(*id)? else { continue };
        let done = match cp.committed(*id)? {
            Some(c) => format!(
                "committed, {} rows out, watermark {}",
                c.rows_out.map_or("?".into(), |n| n.to_string()),
                c.watermark.map_or("none".into(), show_time)
            ),
            None => "not committed".into(),
        };
        writeln!(out, "  batch {id}: {done}\n    {}", range(&p))?;
    }
    Ok(out)
}

/// `weir inspect --json`: what [`inspect`] says, as one object, with the last batch's progress
/// record as `--progress-json` printed it (`lastProgress`, from the checkpoint's
/// `progress.json`; `null` before a first batch) and the age of the last commit.
pub(super) fn inspect_json(dir: &Path) -> Result<String> {
    let (cp, meta) = CheckpointDir::existing(dir)?;
    let state_dir = cp.state_dir();
    let (last, state) = match read_state(&state_dir)? {
        Some((store, last)) => {
            (last, serde_json::json!({ "keys": store.estimated_keys(), "bytesOnDisk": dir_size(&state_dir) }))
        }
        None => (None, serde_json::Value::Null),
    };
    let next = last.as_ref().map_or(0, |m| m.next_batch);
    let committed = match next.checked_sub(1) {
        Some(id) => cp.committed(id)?,
        None => None,
    };
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64);
    let progress_file = dir.join(crate::progress::PROGRESS_FILE);
    let last_progress: serde_json::Value = match std::fs::read(&progress_file) {
        Ok(b) => serde_json::from_slice(&b).with_context(|| format!("{}", progress_file.display()))?,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => serde_json::Value::Null,
        Err(e) => return Err(e).with_context(|| format!("{}", progress_file.display())),
    };
    let out = serde_json::json!({
        "checkpoint": dir.display().to_string(),
        "id": meta.id,
        "pipeline": meta.pipeline,
        "fingerprint": meta.fingerprint,
        "nextBatch": next,
        "watermark": last.as_ref().map(|m| m.watermark.current),
        "position": last.as_ref().map(|m| &m.source),
        "expectationViolations": last.as_ref().map(|m| &m.expectations),
        "pending": cp.planned(next)?.map(|p| serde_json::json!({ "batchId": next, "startOffset": p.start, "endOffset": p.end })),
        "lastCommit": committed.map(|c| serde_json::json!({
            "batchId": c.batch_id,
            "committedAtMs": c.committed_at_ms,
            "ageMs": now.saturating_sub(c.committed_at_ms),
        })),
        "state": state,
        "lastProgress": last_progress,
    });
    Ok(serde_json::to_string_pretty(&out)?)
}

fn range(p: &Planned) -> String {
    let flush = if p.flush { " (end of input: flush)" } else { "" };
    format!("from {} to {}{flush}", offsets(&p.start), offsets(&p.end))
}

fn offsets(o: &Offsets) -> String {
    match o {
        Offsets::Replay(p) => format!("byte {} (line {})", p.byte, p.line),
        Offsets::Kafka { partitions } => {
            partitions.iter().map(|t| format!("{}/{}@{}", t.topic, t.partition, t.offset)).collect::<Vec<_>>().join(" ")
        }
        Offsets::Log { next } => format!("offset {next}"),
        Offsets::Repartition { partitions, lanes } => {
            let at = offsets(&Offsets::Kafka { partitions: partitions.clone() });
            let taken: Vec<String> = lanes.iter().map(|s| format!("{}:{}.{}", s.lane, s.batch, s.next_part)).collect();
            format!("{at} (last batch and part taken per input partition: {})", taken.join(" "))
        }
    }
}

fn dir_size(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .map(|rd| rd.filter_map(|e| e.ok()?.metadata().ok()).filter(|m| m.is_file()).map(|m| m.len()).sum())
        .unwrap_or(0)
}
