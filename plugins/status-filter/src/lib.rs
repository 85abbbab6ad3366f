//! Keeps the events whose `status` is one of `config.keep` (default: every status). A row
//! without a `status` is an error and goes to the dead-letter output.
//!
//! It reads the one field it needs with the SDK's field scanner (`Event::field_str`) rather
//! than decoding the row: the row passes through as it came, so nothing else of it matters
//! here (the host checks every row a transform emits).

use weir_guest::{Config, Emitter, Event, PluginError, RecordError, Transformer, export_plugin};

struct StatusFilter {
    keep: Option<Vec<String>>,
}

impl Transformer for StatusFilter {
    fn new(config: &Config) -> Result<Self, PluginError> {
        Ok(StatusFilter { keep: config.get("keep")? })
    }

    fn transform(&self, event: &Event<'_>, out: &mut Emitter) -> Result<(), RecordError> {
        let status = event.field_str("status")?.ok_or_else(|| RecordError::missing_field("status"))?;
        if self.keep.as_ref().is_none_or(|keep| keep.iter().any(|s| *s == *status)) {
            out.emit_json(event.time, event.key, event.row)?;
        }
        Ok(())
    }
}

export_plugin!(transformer: StatusFilter);
