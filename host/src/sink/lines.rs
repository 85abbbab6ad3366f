//! JSON lines to a writer: the console sink of `weir run` without `[sink]`, and the capture of
//! `weir test`, which runs once and so needs no dedupe. At-least-once: a batch re-run after a
//! crash is written again.

use std::io::Write;

use super::{Delivery, RowSink, Rows, SinkError};
use crate::columns;

pub(crate) struct LineSink<W: Write + Send>(pub W);

impl<W: Write + Send> RowSink for LineSink<W> {
    fn deliver(&mut self, _: &Delivery, rows: &Rows) -> Result<(), SinkError> {
        for row in columns::items(&rows.rows, &rows.row_ends) {
            self.0.write_all(row)?;
            self.0.write_all(b"\n")?;
        }
        self.0.flush()?;
        Ok(())
    }
}
