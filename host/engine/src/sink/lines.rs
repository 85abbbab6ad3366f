//! JSON lines to a writer: the console sink of `weir run` without `[sink]`, and the capture of
//! `weir test`, which runs once and so needs no dedupe. At-least-once: a batch re-run after a
//! crash is written again. A tombstone is written as `{"key":KEY,"tombstone":true}`.

use std::io::Write;

use super::{Delivery, RowSink, Rows, SinkError};

pub struct LineSink<W: Write + Send>(pub W);

impl<W: Write + Send> RowSink for LineSink<W> {
    fn deliver(&mut self, _: &Delivery, rows: &Rows) -> Result<(), SinkError> {
        for (key, row) in rows.iter() {
            if row.is_empty() {
                let key = serde_json::to_string(&String::from_utf8_lossy(key)).map_err(std::io::Error::other)?;
                writeln!(self.0, "{{\"key\":{key},\"tombstone\":true}}")?;
                continue;
            }
            self.0.write_all(row)?;
            self.0.write_all(b"\n")?;
        }
        self.0.flush()?;
        Ok(())
    }
}
