//! Side outputs: the dead-letter file (records that could not be processed, with their reason and
//! source position) and the late-data file (events late for every window).
//!
//! Both are append-only JSON lines whose committed length is part of each checkpoint. On
//! restart a file is cut back to that length, so lines written by a batch that did not commit
//! are written again by its re-run exactly once: nothing lost, nothing twice.

use std::fs::{File, OpenOptions};
use std::io::{BufWriter, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use serde::Serialize;

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
    written: u64,
}

impl SideOutput {
    /// Prepares `path`, cutting an existing file back to `committed_len` (what the last
    /// checkpoint saw).
    pub fn open(path: &Path, committed_len: u64) -> Result<Self, SideOutputError> {
        let err = |e| SideOutputError { path: path.to_path_buf(), source: e };
        let mut out = Self { path: path.to_path_buf(), file: None, len: committed_len, written: 0 };
        if path.exists() {
            out.file = Some(out.open_file().map_err(err)?);
        }
        Ok(out)
    }

    fn open_file(&self) -> std::io::Result<BufWriter<File>> {
        if let Some(dir) = self.path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir)?;
        }
        let mut file = OpenOptions::new().create(true).write(true).truncate(false).open(&self.path)?;
        file.set_len(self.len)?;
        file.seek(SeekFrom::Start(self.len))?;
        Ok(BufWriter::new(file))
    }

    pub fn path(&self) -> &Path {
        &self.path
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
        self.written += 1;
        Ok(())
    }

    /// Flushes to the OS and returns the length to record in the checkpoint.
    pub fn flush(&mut self) -> Result<u64, SideOutputError> {
        if let Some(f) = self.file.as_mut() {
            f.flush().map_err(|e| SideOutputError { path: self.path.clone(), source: e })?;
        }
        Ok(self.len)
    }

    /// Lines written by this process.
    pub fn written(&self) -> u64 {
        self.written
    }
}

/// One dead letter.
#[derive(Debug, Serialize)]
pub struct DeadLetter<'a> {
    pub batch_id: u64,
    /// Which step rejected it: `source`, `parse`, or `transform[i]`.
    pub stage: &'a str,
    pub kind: &'a str,
    pub error: &'a str,
    pub source: &'a str,
    pub partition: i32,
    pub offset: i64,
    pub line: u64,
    /// The record's value as text (invalid UTF-8 replaced), so nothing is lost to inspection.
    pub value: String,
}

/// One late event.
#[derive(Debug, Serialize)]
pub struct LateEvent<'a> {
    pub batch_id: u64,
    pub reason: &'static str,
    pub event_time: i64,
    pub watermark: i64,
    pub source: &'a str,
    pub partition: i32,
    pub offset: i64,
    pub line: u64,
    pub key: String,
    /// The event's row (a string if the plugin emitted something that is not JSON).
    pub row: serde_json::Value,
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
