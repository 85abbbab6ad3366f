//! The operator of a stateless pipeline: each event's row goes to the sink as it is, in order,
//! under the event's key.
//! Nothing is held, so nothing is ever late and nothing waits for the watermark. Rows leave Weir
//! here, so each is checked to be valid JSON (`json::check_object`); one that is not is a dead
//! letter, never output. A pipeline whose expectations drop (or fail on) every row that is not
//! one has had each row checked already, in the same scan as its rule (`expect.rs`): no second
//! check then. With `deletions` (`output.tombstones` in a stateless pipeline), an event without
//! a row is a parser's deletion of its key, and leaves as a tombstone; without, it is a dead
//! letter like any row that is not a JSON object.

use super::{Advanced, Opened, Operator, OperatorError, Processed};
use crate::plugin::EventBatch;
use crate::rows::Rows;
use crate::state::StateStore;
use crate::{columns, json};

pub struct PassThrough {
    /// Every row reaching here was checked by an expectation's scan.
    pub checked: bool,
    /// An event without a row is a tombstone for its key.
    pub deletions: bool,
}

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
    ) -> Result<Processed, OperatorError> {
        let mut set_aside = Processed::default();
        let keys = columns::items(&events.keys, &events.key_ends);
        for (i, (row, key)) in columns::items(&events.rows, &events.row_ends).zip(keys).enumerate() {
            if row.is_empty() && self.deletions && !key.is_empty() {
                out.push_tombstone(key, events.times[i])?;
                continue;
            }
            if self.checked {
                out.push(key, row, events.times[i])?;
                continue;
            }
            match json::check_object(row) {
                Ok(()) => out.push(key, row, events.times[i])?,
                Err(why) => set_aside.invalid.push((i as u32, why)),
            }
        }
        Ok(set_aside)
    }

    fn advance(&mut self, _: i64, _: i64, _: &mut StateStore, _: &mut Rows) -> Result<Advanced, OperatorError> {
        Ok(Advanced::default())
    }

    fn horizon(&self, _: &StateStore) -> Result<Option<i64>, OperatorError> {
        Ok(None)
    }

    fn stage(&self) -> &str {
        "passthrough"
    }

    fn fingerprint(&self) -> String {
        "none".into()
    }

    fn mark(&self) -> usize {
        0
    }

    fn rollback(&mut self, _: usize) {}
}
