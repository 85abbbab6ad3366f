//! Writes each row to standard output as one line of JSON, with the stage's `grants.stdout`
//! (only a `[sink]` may have it). Standard output cannot take a delivery back, so this sink is
//! at-least-once: a batch re-delivered after a crash is printed again. With `delivery = true`
//! each row is wrapped as `{"delivery":"CHECKPOINT-BATCHID","row":{...}}`, so a reader can drop
//! the repeats (the same delivery key always carries the same rows).
//!
//! A batch is written with one `write` of the whole buffer, so rows from pipelines sharing a
//! process interleave only between batches.

use std::io::Write;

use weir_guest::{Config, Delivery, PluginError, Rows, Sink, export_plugin};

struct Stdout {
    delivery: bool,
}

impl Sink for Stdout {
    fn new(config: &Config) -> Result<Self, PluginError> {
        Ok(Stdout { delivery: config.get("delivery")?.unwrap_or(false) })
    }

    fn write_batch(&self, d: &Delivery<'_>, rows: Rows<'_>) -> Result<(), PluginError> {
        let key = d.key();
        let mut buf = Vec::new();
        for row in rows.iter() {
            if self.delivery {
                buf.extend_from_slice(b"{\"delivery\":\"");
                buf.extend_from_slice(key.as_bytes());
                buf.extend_from_slice(b"\",\"row\":");
                buf.extend_from_slice(row);
                buf.push(b'}');
            } else {
                buf.extend_from_slice(row);
            }
            buf.push(b'\n');
        }
        let mut out = std::io::stdout().lock();
        out.write_all(&buf)?;
        out.flush()?;
        Ok(())
    }
}

export_plugin!(sink: Stdout);
