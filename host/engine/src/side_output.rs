//! Side outputs: the dead-letter file (records that could not be processed, with their reason and
//! source position) and the late-data file (events late for everything they belong to).
//!
//! Both are append-only JSON lines whose committed length is part of each checkpoint. On
//! restart a file is cut back to that length, so lines written by a batch that did not commit
//! are written again by its re-run exactly once: nothing lost, nothing twice.
//!
//! [`DeadLetters`] and [`LateEvents`] are what the stages write through: they trace an item of
//! any stage back to its source record (stage outputs carry `origins`) and say where it was read.

use std::fs::{File, OpenOptions};
use std::io::{BufWriter, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::columns;
use crate::plugin::{EventBatch, RecordError, RecordErrorKind};
use crate::source::SourceBatch;

#[derive(Debug, thiserror::Error)]
#[error("side output {}", path.display())]
pub struct SideOutputError {
    path: PathBuf,
    source: std::io::Error,
}

pub struct SideOutput {
    path: PathBuf,
    /// Opened on the first line, so a run without bad records leaves no empty file behind.
    file: Option<BufWriter<File>>,
    len: u64,
}

impl SideOutput {
    /// Prepares `path`, cutting an existing file back to `committed_len` (what the last
    /// checkpoint saw).
    pub fn open(path: &Path, committed_len: u64) -> Result<Self, SideOutputError> {
        let err = |e| SideOutputError { path: path.to_path_buf(), source: e };
        let mut out = Self { path: path.to_path_buf(), file: None, len: committed_len };
        if path.exists() {
            out.file = Some(out.open_file().map_err(err)?);
        }
        Ok(out)
    }

    fn open_file(&self) -> std::io::Result<BufWriter<File>> {
        if let Some(dir) = self.path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir)?;
        }
        let mut file = crate::own_files::open(&self.path, OpenOptions::new().create(true).write(true).truncate(false))?;
        file.set_len(self.len)?;
        file.seek(SeekFrom::Start(self.len))?;
        Ok(BufWriter::new(file))
    }

    pub fn write<T: Serialize>(&mut self, line: &T) -> Result<(), SideOutputError> {
        let err = |path: &Path, e| SideOutputError { path: path.to_path_buf(), source: e };
        let mut bytes = serde_json::to_vec(line).map_err(|e| err(&self.path, std::io::Error::other(e)))?;
        bytes.push(b'\n');
        if self.file.is_none() {
            self.file = Some(self.open_file().map_err(|e| err(&self.path, e))?);
        }
        if let Some(f) = self.file.as_mut() {
            f.write_all(&bytes).map_err(|e| err(&self.path, e))?;
        }
        self.len += bytes.len() as u64;
        Ok(())
    }

    /// Flushes to the OS and returns the length to record in the checkpoint.
    pub fn flush(&mut self) -> Result<u64, SideOutputError> {
        if let Some(f) = self.file.as_mut() {
            f.flush().map_err(|e| SideOutputError { path: self.path.clone(), source: e })?;
        }
        Ok(self.len)
    }
}

/// One dead letter.
#[derive(Debug, Serialize)]
struct DeadLetter<'a> {
    batch_id: u64,
    /// Which step rejected it: `source`, `parse`, `transform[i]`, `join` or `aggregate`.
    stage: &'a str,
    kind: &'a str,
    error: &'a str,
    source: &'a str,
    partition: i32,
    offset: i64,
    line: u64,
    /// The record's value: as text when it is UTF-8 (`value`), else base64 (`value_base64`,
    /// an Avro or Protobuf record), so nothing of it is lost.
    #[serde(flatten)]
    value: Payload,
}

/// A record's bytes in a dead letter, as the recorded-events envelope writes them.
#[derive(Debug, Serialize)]
enum Payload {
    #[serde(rename = "value")]
    Text(String),
    #[serde(rename = "value_base64")]
    Base64(String),
}

impl Payload {
    fn of(bytes: &[u8]) -> Self {
        match std::str::from_utf8(bytes) {
            Ok(t) => Payload::Text(t.to_string()),
            Err(_) => {
                use base64::Engine;
                Payload::Base64(base64::engine::general_purpose::STANDARD.encode(bytes))
            }
        }
    }
}

/// A window the aggregator failed on, or whose row it may not emit: where it was, and its
/// accumulators (base64), so nothing of it is lost.
#[derive(Debug, Serialize)]
struct WindowDeadLetter<'a> {
    batch_id: u64,
    stage: &'a str,
    kind: &'a str,
    error: &'a str,
    window_start: i64,
    window_end: i64,
    key: String,
    accumulators_base64: Vec<String>,
}

/// A result row the sink could not write (it does not fit the sink's schema): which batch,
/// its place among the batch's rows, its key and the row, so nothing of it is lost.
#[derive(Debug, Serialize)]
struct RowDeadLetter<'a> {
    batch_id: u64,
    stage: &'a str,
    kind: &'a str,
    error: &'a str,
    row_index: usize,
    key: String,
    row: String,
}

/// One late event.
#[derive(Debug, Serialize)]
struct LateEvent<'a> {
    batch_id: u64,
    reason: &'static str,
    event_time: i64,
    watermark: i64,
    source: &'a str,
    partition: i32,
    offset: i64,
    line: u64,
    key: String,
    /// The event's row (a string if the plugin emitted something that is not JSON).
    row: serde_json::Value,
}

/// The dead-letter output of a pipeline. Every dead letter names its source record.
pub struct DeadLetters {
    out: SideOutput,
    /// The source's stream names (files, topics), by `Position::stream`.
    streams: Vec<String>,
}

/// Why an item failed, as the dead letter says it.
pub struct Failure {
    /// Index of the item in the stage's input.
    pub index: usize,
    pub kind: &'static str,
    pub message: String,
}

impl Failure {
    /// A record error a plugin reported.
    pub fn record(e: &RecordError) -> Self {
        let kind = match e.kind {
            RecordErrorKind::Malformed => "malformed",
            RecordErrorKind::MissingField => "missing-field",
            RecordErrorKind::InvalidValue => "invalid-value",
        };
        Self { index: e.index as usize, kind, message: e.message.clone() }
    }

    /// An item the stage cannot take, for `why`.
    pub fn invalid(index: usize, why: String) -> Self {
        Self { index, kind: "invalid-value", message: why }
    }

    /// An item whose key's result a stage's budget refused, for `why` (the limit).
    pub fn over_limit(index: usize, why: String) -> Self {
        Self { index, kind: "over-limit", message: why }
    }

    /// An item the failure policy isolated: the plugin failed on it alone.
    pub fn isolated(index: usize, error: &impl std::fmt::Display) -> Self {
        Self { index, kind: "plugin-failure", message: error.to_string() }
    }
}

/// A record of a side input (a join's table) that the operator could not take.
#[derive(Debug, Clone)]
pub struct SideLetter {
    pub stage: &'static str,
    pub kind: &'static str,
    pub error: String,
    /// The side input's stream (its file or topic).
    pub source: String,
    pub position: crate::source::Position,
    pub raw: Vec<u8>,
}

fn stream_name(streams: &[String], stream: u16) -> &str {
    streams.get(stream as usize).map_or("?", String::as_str)
}

impl DeadLetters {
    pub fn new(out: SideOutput, streams: Vec<String>) -> Self {
        Self { out, streams }
    }

    /// The records the source itself could not decode.
    pub fn undecodable(&mut self, batch_id: u64, batch: &SourceBatch) -> Result<usize, SideOutputError> {
        for bad in &batch.bad {
            self.out.write(&DeadLetter {
                batch_id,
                stage: "source",
                kind: "malformed",
                error: &bad.error,
                source: stream_name(&self.streams, bad.position.stream),
                partition: bad.position.partition,
                offset: bad.position.offset,
                line: bad.position.line,
                value: Payload::of(&bad.raw),
            })?;
        }
        Ok(batch.bad.len())
    }

    /// Result rows of batch `batch_id` the sink set aside, by their index in `rows`.
    pub fn rows(
        &mut self,
        batch_id: u64,
        rows: &crate::rows::Rows,
        rejected: &[(usize, String)],
    ) -> Result<usize, SideOutputError> {
        for (i, why) in rejected {
            self.out.write(&RowDeadLetter {
                batch_id,
                stage: "sink",
                kind: "invalid-value",
                error: why,
                row_index: *i,
                key: String::from_utf8_lossy(columns::item(&rows.keys, &rows.key_ends, *i)).into_owned(),
                row: String::from_utf8_lossy(columns::item(&rows.rows, &rows.row_ends, *i)).into_owned(),
            })?;
        }
        Ok(rejected.len())
    }

    /// Records of a side input the operator could not take.
    pub fn side(&mut self, batch_id: u64, letters: &[SideLetter]) -> Result<usize, SideOutputError> {
        for l in letters {
            self.out.write(&DeadLetter {
                batch_id,
                stage: l.stage,
                kind: l.kind,
                error: &l.error,
                source: &l.source,
                partition: l.position.partition,
                offset: l.position.offset,
                line: l.position.line,
                value: Payload::of(&l.raw),
            })?;
        }
        Ok(letters.len())
    }

    /// A stage's failed items. `origins` maps the stage's input index to a record of `batch`
    /// (`None`: the stage's input is the batch's records themselves).
    pub fn write(
        &mut self,
        batch_id: u64,
        stage: &str,
        batch: &SourceBatch,
        failures: impl IntoIterator<Item = Failure>,
        origins: Option<&[u32]>,
    ) -> Result<usize, SideOutputError> {
        let r = &batch.records;
        let mut n = 0;
        for f in failures {
            let rec = origins.map_or(f.index, |o| o[f.index] as usize);
            let pos = batch.positions[rec];
            self.out.write(&DeadLetter {
                batch_id,
                stage,
                kind: f.kind,
                error: &f.message,
                source: stream_name(&self.streams, pos.stream),
                partition: pos.partition,
                offset: pos.offset,
                line: pos.line,
                value: Payload::of(columns::item(&r.values, &r.value_ends, rec)),
            })?;
            n += 1;
        }
        Ok(n)
    }

    /// Windows the operator could not emit.
    pub fn windows(&mut self, batch_id: u64, stage: &str, failed: &[FailedWindow]) -> Result<usize, SideOutputError> {
        use base64::Engine as _;
        for w in failed {
            self.out.write(&WindowDeadLetter {
                batch_id,
                stage,
                kind: w.kind,
                error: &w.error,
                window_start: w.start,
                window_end: w.end,
                key: String::from_utf8_lossy(&w.key).into_owned(),
                accumulators_base64: w
                    .accs
                    .iter()
                    .map(|a| base64::engine::general_purpose::STANDARD.encode(a))
                    .collect(),
            })?;
        }
        Ok(failed.len())
    }

    /// Flushes to the OS; returns the length to record in the checkpoint.
    pub fn flush(&mut self) -> Result<u64, SideOutputError> {
        self.out.flush()
    }
}

/// The late-event output: events late for everything they belong to, with the watermark they
/// were judged against.
pub struct LateEvents {
    out: SideOutput,
    streams: Vec<String>,
}

impl LateEvents {
    pub fn new(out: SideOutput, streams: Vec<String>) -> Self {
        Self { out, streams }
    }

    /// Writes events `late` of `events` (whose origins index `batch`'s records).
    pub fn write(
        &mut self,
        batch_id: u64,
        batch: &SourceBatch,
        events: &EventBatch,
        late: &[u32],
        watermark: i64,
    ) -> Result<(), SideOutputError> {
        for &i in late {
            let i = i as usize;
            let pos = batch.positions[events.origins[i] as usize];
            let row = columns::item(&events.rows, &events.row_ends, i);
            self.out.write(&LateEvent {
                batch_id,
                reason: "late: behind the watermark (every window of this event had closed; or with [process] its time is behind it; or with [dedup] its time is more than dedup.within behind it)",
                event_time: events.times[i],
                watermark,
                source: stream_name(&self.streams, pos.stream),
                partition: pos.partition,
                offset: pos.offset,
                line: pos.line,
                key: String::from_utf8_lossy(columns::item(&events.keys, &events.key_ends, i)).into_owned(),
                row: serde_json::from_slice(row)
                    .unwrap_or_else(|_| serde_json::Value::String(String::from_utf8_lossy(row).into_owned())),
            })?;
        }
        Ok(())
    }

    pub fn flush(&mut self) -> Result<u64, SideOutputError> {
        self.out.flush()
    }
}

/// A window (or other result) the operator could not emit: the plugin failed on it alone, or
/// gave a row it may not emit. It goes to the dead letters with its accumulators.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FailedWindow {
    pub start: i64,
    pub end: i64,
    pub key: Vec<u8>,
    pub accs: Vec<Vec<u8>>,
    /// `plugin-failure` or `invalid-value`.
    pub kind: &'static str,
    pub error: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reopening_cuts_back_to_the_committed_length() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("dl.jsonl");
        let mut s = SideOutput::open(&p, 0).unwrap();
        s.write(&"a").unwrap();
        let committed = s.flush().unwrap();
        s.write(&"uncommitted").unwrap();
        s.flush().unwrap();
        drop(s);
        let mut s = SideOutput::open(&p, committed).unwrap();
        s.write(&"b").unwrap();
        s.flush().unwrap();
        assert_eq!(std::fs::read_to_string(&p).unwrap(), "\"a\"\n\"b\"\n");
    }
}
