//! The parser of a flow that reads a dataset and names none: each record is a row an upstream
//! flow wrote, already a JSON object (operators check that before a row leaves them), with its
//! key and its event time, so it becomes an event as it is, without a plugin call or a scan.
//!
//! A record without a value is a table's tombstone (a deleted key): it is no event, and goes to
//! the dead letters saying so.

use crate::columns;
use crate::plugin::{BatchOutput, EventBatch, ParseFns, PluginError, RawBatch, RecordError, RecordErrorKind};

pub struct DatasetRows;

impl ParseFns for DatasetRows {
    fn parse(&mut self, input: &RawBatch) -> Result<BatchOutput, PluginError> {
        let n = input.value_ends.len();
        let tombstones = columns::items(&input.values, &input.value_ends).filter(|v| v.is_empty()).count();
        if tombstones == 0 {
            // The columns are the events' columns: copied whole.
            let events = EventBatch {
                times: input.timestamps.clone(),
                keys: input.keys.clone(),
                key_ends: input.key_ends.clone(),
                rows: input.values.clone(),
                row_ends: input.value_ends.clone(),
                origins: (0..n as u32).collect(),
            };
            return Ok(BatchOutput { events, errors: Vec::new() });
        }
        let mut out = BatchOutput { events: EventBatch::default(), errors: Vec::new() };
        let e = &mut out.events;
        let keys = columns::items(&input.keys, &input.key_ends);
        for (i, (value, key)) in columns::items(&input.values, &input.value_ends).zip(keys).enumerate() {
            if value.is_empty() {
                let key = String::from_utf8_lossy(key);
                let message = format!("a tombstone (key {key:?} deleted from the table), not a row");
                out.errors.push(RecordError { index: i as u32, kind: RecordErrorKind::InvalidValue, message });
                continue;
            }
            e.times.push(input.timestamps[i]);
            columns::push(&mut e.keys, &mut e.key_ends, key)?;
            columns::push(&mut e.rows, &mut e.row_ends, value)?;
            e.origins.push(i as u32);
        }
        Ok(out)
    }
}
