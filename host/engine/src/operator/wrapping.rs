//! Operators in front of another (`[dedup]`, a table `[join]`): [`Wrapping`] gives them every
//! [`Operator`] method they do not change, forwarded to the operator they pass events on to,
//! as ripgrep's `Sink` gives its implementors defaults.

use super::{Advanced, Opened, Operator, OperatorError, Processed};
use crate::plugin::EventBatch;
use crate::rows::Rows;
use crate::side_output::SideLetter;
use crate::source::Offsets;
use crate::state::StateStore;

/// An operator in front of another (`[dedup]`, a table `[join]`): it changes what passes, and
/// whatever else it does not change is the next operator's. Implement this and the methods that
/// differ; [`Operator`] comes with it, every other method forwarded to [`Wrapping::next_mut`].
pub trait Wrapping: Send {
    /// The operator this one passes its events on to.
    fn next(&self) -> &dyn Operator;
    fn next_mut(&mut self) -> &mut dyn Operator;

    /// What passes, handed on to the next operator ([`Operator::process`]).
    fn process(
        &mut self,
        events: &EventBatch,
        watermark: i64,
        state: &mut StateStore,
        out: &mut Rows,
    ) -> Result<Processed, OperatorError>;

    /// This operator, then the next one's ([`Operator::fingerprint`]).
    fn fingerprint(&self) -> String;

    fn open(&mut self, state: &mut StateStore, restored_version: Option<u32>) -> Result<Opened, OperatorError> {
        self.next_mut().open(state, restored_version)
    }

    fn advance(
        &mut self,
        from: i64,
        to: i64,
        state: &mut StateStore,
        out: &mut Rows,
    ) -> Result<Advanced, OperatorError> {
        self.next_mut().advance(from, to, state, out)
    }

    fn horizon(&self, state: &StateStore) -> Result<Option<i64>, OperatorError> {
        self.next().horizon(state)
    }

    fn plan_side(&mut self) -> Result<Option<Offsets>, OperatorError> {
        self.next_mut().plan_side()
    }

    fn take_side(
        &mut self,
        end: Option<&Offsets>,
        watermark: i64,
        state: &mut StateStore,
    ) -> Result<Vec<SideLetter>, OperatorError> {
        self.next_mut().take_side(end, watermark, state)
    }
}

impl<W: Wrapping> Operator for W {
    fn open(&mut self, state: &mut StateStore, restored_version: Option<u32>) -> Result<Opened, OperatorError> {
        Wrapping::open(self, state, restored_version)
    }

    fn process(
        &mut self,
        events: &EventBatch,
        watermark: i64,
        state: &mut StateStore,
        out: &mut Rows,
    ) -> Result<Processed, OperatorError> {
        Wrapping::process(self, events, watermark, state, out)
    }

    fn advance(
        &mut self,
        from: i64,
        to: i64,
        state: &mut StateStore,
        out: &mut Rows,
    ) -> Result<Advanced, OperatorError> {
        Wrapping::advance(self, from, to, state, out)
    }

    fn horizon(&self, state: &StateStore) -> Result<Option<i64>, OperatorError> {
        Wrapping::horizon(self, state)
    }

    fn plan_side(&mut self) -> Result<Option<Offsets>, OperatorError> {
        Wrapping::plan_side(self)
    }

    fn take_side(
        &mut self,
        end: Option<&Offsets>,
        watermark: i64,
        state: &mut StateStore,
    ) -> Result<Vec<SideLetter>, OperatorError> {
        Wrapping::take_side(self, end, watermark, state)
    }

    fn set_processing_time(&mut self, planned_at_ms: i64) {
        self.next_mut().set_processing_time(planned_at_ms)
    }

    fn stage(&self) -> &str {
        self.next().stage()
    }

    fn fingerprint(&self) -> String {
        Wrapping::fingerprint(self)
    }

    fn mark(&self) -> usize {
        self.next().mark()
    }

    fn rollback(&mut self, mark: usize) {
        self.next_mut().rollback(mark)
    }
}
