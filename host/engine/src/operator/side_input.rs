//! A side input: a source an operator reads besides the batch's events (a join's table, an
//! interval join's second stream), planned with each batch so that a re-run reads the same.
//!
//! [`SideInput::plan`] reads the source as far as it goes when a batch is planned and returns
//! where that is, for the plan to record (`Planned::side`); [`SideInput::take`] hands back the
//! records up to a recorded end: the ones just read, or, for a batch planned before a restart,
//! a fresh read from the position the operator's state holds. The operator keeps that position
//! in its state, committed with the batch, and opens the side input there.

use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use super::OperatorError;
use crate::pipeline::SourceConfig;
use crate::side_output::SideLetter;
use crate::source::{Offsets, Position, Source, SourceBatch};

pub struct SideInput {
    cfg: SourceConfig,
    /// Read a file's last line without its newline (bounded input).
    to_the_end: bool,
    stop: Arc<AtomicBool>,
    source: Option<Box<dyn Source>>,
    /// What [`SideInput::plan`] read, with where it ends, for the batch being planned.
    pending: Option<(SourceBatch, Offsets)>,
}

/// The records of a side input up to a batch's recorded end, with the names of the source's
/// streams (for dead letters).
pub struct Taken {
    pub batch: SourceBatch,
    names: Vec<String>,
}

impl Taken {
    /// A dead letter of stage `join` for record `rec` of the batch.
    pub fn letter(&self, kind: &'static str, error: String, rec: usize) -> SideLetter {
        let r = &self.batch.records;
        self.letter_at(kind, error, self.batch.positions[rec], crate::columns::item(&r.values, &r.value_ends, rec))
    }

    fn letter_at(&self, kind: &'static str, error: String, position: Position, raw: &[u8]) -> SideLetter {
        let source = self.names.get(position.stream as usize).cloned().unwrap_or_else(|| "?".into());
        SideLetter { stage: "join", kind, error, source, position, raw: raw.to_vec() }
    }

    /// The dead letters of the lines the source itself could not decode.
    pub fn undecodable(&self) -> Vec<SideLetter> {
        self.batch.bad.iter().map(|b| self.letter_at("malformed", b.error.clone(), b.position, &b.raw)).collect()
    }
}

impl SideInput {
    pub fn new(cfg: SourceConfig, to_the_end: bool, stop: Arc<AtomicBool>) -> Self {
        Self { cfg, to_the_end, stop, source: None, pending: None }
    }

    /// Opens the source at `at`, the position the operator's state holds (`None`: its start).
    pub fn open(&mut self, at: Option<&Offsets>) -> Result<(), OperatorError> {
        self.source = Some(crate::source::open(&self.cfg, at, self.stop.clone())?);
        Ok(())
    }

    fn source(&mut self) -> Result<&mut Box<dyn Source>, OperatorError> {
        self.source.as_mut().ok_or_else(|| OperatorError::Corrupt {
            key: "side input".into(),
            message: "read before the operator was opened".into(),
        })
    }

    /// Reads everything there is now; returns where it ends, for the plan.
    pub fn plan(&mut self) -> Result<Offsets, OperatorError> {
        let to_the_end = self.to_the_end;
        let source = self.source()?;
        let batch = source.read_available(to_the_end)?;
        let end = source.offsets();
        self.pending = Some((batch, end.clone()));
        Ok(end)
    }

    /// The records up to `end`, a batch's recorded end.
    pub fn take(&mut self, end: &Offsets) -> Result<Taken, OperatorError> {
        let batch = match self.pending.take() {
            Some((batch, planned)) if &planned == end => batch,
            // A batch planned before a restart: read to where its plan says.
            _ => self.source()?.read_until(end)?,
        };
        let names = self.source()?.stream_names();
        Ok(Taken { batch, names })
    }

    /// Takes back a batch the operator is done with, to read the next one into its columns.
    pub fn recycle(&mut self, taken: Taken) {
        if let Some(s) = self.source.as_mut() {
            s.recycle(taken.batch);
        }
    }

    /// What the source reads, for the operator's fingerprint.
    pub fn identity(&self) -> String {
        self.cfg.kind.identity()
    }
}
