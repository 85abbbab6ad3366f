//! A Wasm sink plugin: `write-batch` then `commit`, both with the delivery, skipped for empty
//! batches. The plugin keeps a delivery once (the WIT's contract); the host retries a failed
//! delivery with the same rows under the same delivery.

use super::{Delivery, RowSink, Rows, SinkError};
use crate::plugin::Sink;

pub(crate) struct WasmSink(pub Sink);

impl RowSink for WasmSink {
    fn deliver(&mut self, delivery: &Delivery, rows: &Rows) -> Result<(), SinkError> {
        if rows.row_ends.is_empty() {
            return Ok(());
        }
        self.0.write_batch(delivery, rows)?;
        self.0.commit(delivery)?;
        Ok(())
    }
}
