//! {{name}}: a transform. Keeps the events whose `amount` is at least `config.min_amount`
//! (default 10) and passes them on unchanged; a row without a numeric `amount` is a dead letter.
//!
//! `weir build`, then `weir test pipeline.toml --events events.jsonl --expect expected.jsonl`.

use weir_guest::{
    Config, Emitter, Event, Parser, Paths, PluginError, Record, RecordError, Transformer, export_plugin,
};

struct {{Type}} {
    min_amount: f64,
}

impl Transformer for {{Type}} {
    fn new(config: &Config) -> Result<Self, PluginError> {
        Ok({{Type}} { min_amount: config.get("min_amount")?.unwrap_or(10.0) })
    }

    fn transform(&self, event: &Event<'_>, out: &mut Emitter) -> Result<(), RecordError> {
        let amount: f64 = event.field("amount")?.ok_or_else(|| RecordError::missing_field("amount"))?;
        if amount >= self.min_amount {
            out.emit_json(event.time, event.key, event.row)?;
        }
        Ok(())
    }
}
{{events}}
export_plugin!(parser: Events, transformer: {{Type}});

#[cfg(test)]
mod tests {
    use weir_guest::testing;

    use super::*;

    #[test]
    fn small_amounts_are_dropped() {
        let events = [testing::event(1, r#"{"amount":3}"#), testing::event(2, r#"{"amount":30}"#)];
        let (out, errors) = testing::run_transformer::<{{Type}}>("{}", &events).expect("config");
        assert_eq!(out.iter().map(|e| e.time).collect::<Vec<_>>(), [2]);
        assert!(errors.is_empty());
    }
}
