//! Keeps the events whose `status` is one of `config.keep` (default: every status). A row
//! without a `status` is an error and goes to the dead-letter output.

use serde::Deserialize;
use weir_guest::{Config, Emitter, Event, PluginError, RecordError, Transformer, export_plugin};

struct StatusFilter {
    keep: Option<Vec<String>>,
}

#[derive(Deserialize)]
struct Row<'a> {
    #[serde(borrow)]
    status: &'a str,
}

impl Transformer for StatusFilter {
    fn new(config: &Config) -> Result<Self, PluginError> {
        Ok(StatusFilter { keep: config.get("keep")? })
    }

    fn transform(&self, event: &Event<'_>, out: &mut Emitter) -> Result<(), RecordError> {
        let row: Row = event.row_as()?;
        if self.keep.as_ref().is_none_or(|keep| keep.iter().any(|s| s == row.status)) {
            out.emit_json(event.time, event.key, event.row)?;
        }
        Ok(())
    }
}

export_plugin!(transformer: StatusFilter);
