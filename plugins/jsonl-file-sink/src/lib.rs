//! Writes each batch as JSON lines to `<dir>/batch-<checkpoint>-<id>.jsonl`, where `dir` is
//! `config.dir` (default "/out", which the pipeline must grant as a directory).
//!
//! Exactly-once per delivery (the checkpoint's identity and the batch id): `write_batch` writes a
//! hidden staging file, `commit` renames it into place. A rename replaces atomically, and a
//! delivery always carries the same rows, so a batch delivered again after a crash leaves exactly
//! one copy, while a replay from a fresh checkpoint writes files of its own. File names sort by
//! checkpoint (later checkpoints after earlier ones), then batch: readers take `batch-*.jsonl` in
//! name order.

use std::io::Write;

use weir_guest::{Config, Delivery, PluginError, Rows, Sink, export_plugin};

struct JsonlFiles {
    dir: String,
}

impl JsonlFiles {
    fn staged(&self, d: &Delivery<'_>) -> String {
        format!("{}/.batch-{}.jsonl.tmp", self.dir, d.key())
    }
    fn final_path(&self, d: &Delivery<'_>) -> String {
        format!("{}/batch-{}.jsonl", self.dir, d.key())
    }
}

impl Sink for JsonlFiles {
    fn new(config: &Config) -> Result<Self, PluginError> {
        Ok(JsonlFiles { dir: config.get("dir")?.unwrap_or_else(|| "/out".into()) })
    }

    fn open(&self) -> Result<(), PluginError> {
        std::fs::create_dir_all(&self.dir).map_err(|e| PluginError::Io(format!("{}: {e}", self.dir)))
    }

    fn write_batch(&self, d: &Delivery<'_>, rows: Rows<'_>) -> Result<(), PluginError> {
        if std::fs::exists(self.final_path(d))? {
            return Ok(()); // committed before a crash: the rows are the same
        }
        let mut buf = Vec::new();
        for row in rows.iter() {
            buf.extend_from_slice(row);
            buf.push(b'\n');
        }
        let mut f = std::fs::File::create(self.staged(d))?;
        f.write_all(&buf)?;
        f.sync_all()?;
        Ok(())
    }

    fn commit(&self, d: &Delivery<'_>) -> Result<(), PluginError> {
        match std::fs::rename(self.staged(d), self.final_path(d)) {
            Ok(()) => Ok(()),
            // Already committed (a re-delivered batch after a crash).
            Err(_) if std::fs::exists(self.final_path(d))? => Ok(()),
            Err(e) => Err(PluginError::Io(format!("commit batch {} of checkpoint {}: {e}", d.batch_id, d.checkpoint))),
        }
    }
}

export_plugin!(sink: JsonlFiles);
