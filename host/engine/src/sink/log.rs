//! The dataset sink: a flow's rows appended to a dataset in the embedded log
//! (`dataset/log.rs`). Each batch is one append tagged with its delivery, so a batch delivered
//! again after a crash is skipped: exactly-once. A table dataset takes keyed rows only (the key
//! its operator gave, or the field `sink.key`); a row without one fails the batch, naming it.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use super::{Delivery, RowSink, Rows, SinkError};
use crate::dataset::log::Log;
use crate::pipeline::DatasetRef;
use weir_types::keys::KeyField;

pub struct LogSink {
    log: Arc<Log>,
    dataset: String,
    table: bool,
    retention: Option<Duration>,
    /// `sink.key`: the row field whose value keys each row, instead of the row's own key.
    key_field: Option<KeyField>,
}

impl LogSink {
    pub fn open(d: &DatasetRef, dir: &Path, key_field: Option<String>) -> Result<Self, SinkError> {
        let log = Log::open(dir, d.table).map_err(SinkError::Log)?;
        let key_field = key_field.as_deref().map(KeyField::new);
        Ok(Self { log, dataset: d.name.clone(), table: d.table, retention: d.retention, key_field })
    }
}

impl RowSink for LogSink {
    fn deliver(&mut self, delivery: &Delivery, rows: &Rows) -> Result<(), SinkError> {
        let keyed: Vec<(Vec<u8>, &[u8])>;
        let records: Vec<(&[u8], &[u8])> = match &self.key_field {
            Some(field) => {
                keyed = rows
                    .iter()
                    .map(|(key, row)| match row.is_empty() {
                        true => Ok((key.to_vec(), row)),
                        false => field.key(row).map(|k| (k, row)),
                    })
                    .collect::<Result<_, _>>()
                    .map_err(|why| SinkError::Unkeyed { dataset: self.dataset.clone(), why })?;
                keyed.iter().map(|(k, r)| (k.as_slice(), *r)).collect()
            }
            None => rows.iter().collect(),
        };
        if self.table
            && let Some((_, row)) = records.iter().find(|(k, _)| k.is_empty())
        {
            let why = format!("a row without a key: {}", String::from_utf8_lossy(&row[..row.len().min(200)]));
            return Err(SinkError::Unkeyed { dataset: self.dataset.clone(), why });
        }
        // Each record keeps its row's event time, for a downstream flow's watermark.
        let timed = records.into_iter().zip(rows.times.iter().copied()).map(|((k, r), t)| (k, r, t));
        let bytes = rows.rows.len() + rows.keys.len();
        self.log.append(delivery.checkpoint, delivery.batch_id, bytes, timed).map_err(SinkError::Log)?;
        if let Some(r) = self.retention {
            let now =
                std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64);
            self.log.retain_since(now.saturating_sub(r.as_millis() as i64)).map_err(SinkError::Log)?;
        }
        Ok(())
    }
}
