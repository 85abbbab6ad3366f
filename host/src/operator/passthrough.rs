//! The operator of a stateless pipeline: each event's row goes to the sink as it is, in order.
//! Nothing is held, so nothing is ever late and nothing waits for the watermark.

use super::{Opened, Operator, OperatorError};
use crate::columns;
use crate::plugin::EventBatch;
use crate::sink::Rows;
use crate::state::StateStore;

pub(crate) struct PassThrough;

impl Operator for PassThrough {
    fn open(&mut self, _: &mut StateStore, _: Option<u32>) -> Result<Opened, OperatorError> {
        Ok(Opened::default())
    }

    fn process(
        &mut self,
        events: &EventBatch,
        _: i64,
        _: &mut StateStore,
        out: &mut Rows,
    ) -> Result<Vec<u32>, OperatorError> {
        columns::append(&mut out.rows, &mut out.row_ends, &events.rows, &events.row_ends);
        Ok(Vec::new())
    }

    fn advance(&mut self, _: i64, _: i64, _: &mut StateStore, _: &mut Rows) -> Result<usize, OperatorError> {
        Ok(0)
    }

    fn horizon(&self, _: &StateStore) -> Result<Option<i64>, OperatorError> {
        Ok(None)
    }

    fn stage(&self) -> &str {
        "passthrough"
    }

    fn mark(&self) -> usize {
        0
    }

    fn rollback(&mut self, _: usize) {}
}
