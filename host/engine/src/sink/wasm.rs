//! A Wasm sink plugin: `write-batch` then `commit`, both with the delivery, skipped for empty
//! batches. The plugin keeps a delivery once (the WIT's contract); the host retries a failed
//! delivery with the same rows under the same delivery. Rows reach the plugin without their
//! keys, and tombstones not at all (validation refuses `output.tombstones` with a Wasm sink).

use super::{Delivery, RowSink, Rows, SinkError};
use crate::plugin::{RowBatch, Sink};

pub struct WasmSink(pub Sink);

impl RowSink for WasmSink {
    fn deliver(&mut self, delivery: &Delivery, rows: &Rows) -> Result<(), SinkError> {
        if rows.is_empty() {
            return Ok(());
        }
        let mut batch =
            RowBatch { rows: Vec::with_capacity(rows.rows.len()), row_ends: Vec::with_capacity(rows.len()) };
        for (_, row) in rows.iter().filter(|(_, row)| !row.is_empty()) {
            crate::columns::push(&mut batch.rows, &mut batch.row_ends, row).map_err(std::io::Error::other)?;
        }
        self.0.write_batch(delivery, &batch)?;
        self.0.commit(delivery)?;
        Ok(())
    }
}
