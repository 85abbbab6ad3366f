//! Writes each batch as JSON lines to `<dir>/batch-<id>.jsonl`, where `dir` is `config.dir`
//! (default "/out", which the pipeline must grant as a directory).
//!
//! Exactly-once by batch id: `write_batch` writes a hidden staging file, `commit` renames it into
//! place. A rename replaces atomically, and a batch id always carries the same rows, so a batch
//! delivered again after a crash leaves exactly one copy. Readers take `batch-*.jsonl` in id order.

use std::io::Write;

use weir_guest::{Config, PluginError, Rows, Sink, export_plugin};

struct JsonlFiles {
    dir: String,
}

impl JsonlFiles {
    fn staged(&self, batch_id: u64) -> String {
        format!("{}/.batch-{batch_id:020}.jsonl.tmp", self.dir)
    }
    fn final_path(&self, batch_id: u64) -> String {
        format!("{}/batch-{batch_id:020}.jsonl", self.dir)
    }
}

impl Sink for JsonlFiles {
    fn new(config: &Config) -> Result<Self, PluginError> {
        Ok(JsonlFiles { dir: config.get("dir")?.unwrap_or_else(|| "/out".into()) })
    }

    fn open(&self) -> Result<(), PluginError> {
        std::fs::create_dir_all(&self.dir).map_err(|e| PluginError::Io(format!("{}: {e}", self.dir)))
    }

    fn write_batch(&self, batch_id: u64, rows: Rows<'_>) -> Result<(), PluginError> {
        if std::fs::exists(self.final_path(batch_id))? {
            return Ok(()); // committed before a crash: the rows are the same
        }
        let mut buf = Vec::new();
        for row in rows.iter() {
            buf.extend_from_slice(row);
            buf.push(b'\n');
        }
        let mut f = std::fs::File::create(self.staged(batch_id))?;
        f.write_all(&buf)?;
        f.sync_all()?;
        Ok(())
    }

    fn commit(&self, batch_id: u64) -> Result<(), PluginError> {
        match std::fs::rename(self.staged(batch_id), self.final_path(batch_id)) {
            Ok(()) => Ok(()),
            // Already committed (a re-delivered batch after a crash).
            Err(_) if std::fs::exists(self.final_path(batch_id))? => Ok(()),
            Err(e) => Err(PluginError::Io(format!("commit batch {batch_id}: {e}"))),
        }
    }
}

export_plugin!(sink: JsonlFiles);
