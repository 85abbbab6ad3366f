//! {{name}}: a parser. Each record is a JSON object whose `ts` is its event time (epoch ms) and
//! whose `user` is its key; the row is the record as it came. A record that is not such an
//! object is a dead letter, with the reason.
//!
//! `weir build`, then `weir test pipeline.toml --events events.jsonl --expect expected.jsonl`.

use weir_guest::{Config, Emitter, Parser, Paths, PluginError, Record, RecordError, export_plugin};

struct {{Type}} {
    fields: Paths<2>,
}

impl Parser for {{Type}} {
    fn new(_config: &Config) -> Result<Self, PluginError> {
        Ok({{Type}} { fields: Paths::new(["ts", "user"]) })
    }

    fn parse(&self, record: &Record<'_>, out: &mut Emitter) -> Result<(), RecordError> {
        let [ts, user] = record.fields(&self.fields)?;
        let ts = ts.ok_or_else(|| RecordError::missing_field("ts"))?.as_i64()?;
        let user = user.ok_or_else(|| RecordError::missing_field("user"))?.as_str()?;
        out.emit_json(ts, Some(user.as_bytes()), record.value)
    }
}

export_plugin!(parser: {{Type}});

#[cfg(test)]
mod tests {
    use weir_guest::testing;

    use super::*;

    #[test]
    fn an_order_becomes_an_event_and_garbage_a_dead_letter() {
        let (events, errors) = testing::run_parser::<{{Type}}>("{}", &[br#"{"ts":5,"user":"ada"}"#, b"oops"]).expect("config");
        assert_eq!(events.len(), 1);
        assert_eq!((events[0].time, events[0].key.as_deref()), (5, Some(&b"ada"[..])));
        assert_eq!(errors.len(), 1);
    }
}
