//! {{name}}: a sink. Writes each delivery's rows to `DIR/batch-KEY.jsonl` (`config.dir`, default
//! `/out`: a directory the pipeline grants), exactly once: a delivery is staged, then renamed
//! into place on commit, and a delivery already there is skipped when a batch is re-delivered
//! after a crash.
//!
//! `weir build`, then `weir test pipeline.toml --events events.jsonl --expect expected.jsonl`.

use std::io::Write;

use weir_guest::{
    Config, Delivery, Emitter, Parser, Paths, PluginError, Record, RecordError, Rows, Sink, export_plugin,
};

struct {{Type}} {
    dir: String,
}

impl {{Type}} {
    fn staged(&self, d: &Delivery<'_>) -> String {
        format!("{}/.batch-{}.jsonl.tmp", self.dir, d.key())
    }
    fn final_path(&self, d: &Delivery<'_>) -> String {
        format!("{}/batch-{}.jsonl", self.dir, d.key())
    }
}

impl Sink for {{Type}} {
    fn new(config: &Config) -> Result<Self, PluginError> {
        Ok({{Type}} { dir: config.get("dir")?.unwrap_or_else(|| "/out".into()) })
    }

    fn write_batch(&self, d: &Delivery<'_>, rows: Rows<'_>) -> Result<(), PluginError> {
        if std::fs::exists(self.final_path(d))? {
            return Ok(()); // committed before a crash: the rows are the same
        }
        let mut f = std::fs::File::create(self.staged(d))?;
        for row in rows.iter() {
            f.write_all(row)?;
            f.write_all(b"\n")?;
        }
        f.sync_all()?;
        Ok(())
    }

    fn commit(&self, d: &Delivery<'_>) -> Result<(), PluginError> {
        match std::fs::rename(self.staged(d), self.final_path(d)) {
            Ok(()) => Ok(()),
            Err(_) if std::fs::exists(self.final_path(d))? => Ok(()),
            Err(e) => Err(PluginError::Io(format!("commit {}: {e}", d.key()))),
        }
    }
}
{{events}}
export_plugin!(parser: Events, sink: {{Type}});
