//! Orders per key, a keyed processor: the state is the key's count so far, and each batch that
//! brings a key events emits its new count as one row, `{"FIELD": KEY, "orders": N}` (FIELD is
//! `key_field`, default "user_id"). Written to a table dataset, the rows upsert each key's
//! latest count: a per-user table of order counts.
//!
//! Config: `key_field` (default "user_id"), the name the row gives the key.

use serde::Serialize;
use weir_guest::{Config, Context, Event, PluginError, Processor, export_plugin};

struct OrderCounts {
    key_field: String,
}

impl Processor for OrderCounts {
    type State = u64;

    fn new(config: &Config) -> Result<Self, PluginError> {
        Ok(Self { key_field: config.get("key_field")?.unwrap_or_else(|| "user_id".into()) })
    }

    fn process(
        &self,
        key: &[u8],
        state: &mut Option<u64>,
        events: &[Event<'_>],
        ctx: &mut Context,
    ) -> Result<(), PluginError> {
        let Some(last) = events.iter().map(|e| e.time).max() else { return Ok(()) };
        let n = state.unwrap_or(0) + events.len() as u64;
        *state = Some(n);
        #[derive(Serialize)]
        struct Row<'a> {
            #[serde(flatten)]
            key: std::collections::BTreeMap<&'a str, &'a str>,
            orders: u64,
        }
        let key = String::from_utf8_lossy(key);
        let row = Row { key: [(self.key_field.as_str(), key.as_ref())].into_iter().collect(), orders: n };
        ctx.emit(last, &row)
    }
}

export_plugin!(processor: OrderCounts);
