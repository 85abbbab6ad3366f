//! Parses order events (`{"order_id":..,"user_id":..,"status":..,"amount":..,"order_ts":..}`),
//! one JSON object per record. Event time is `order_ts`; the row is the record itself, passed on
//! unchanged so nothing is re-serialized. With `key_by_user = true` the key is the `user_id`.

use serde::Deserialize;
use weir_guest::{Config, Emitter, Parser, PluginError, Record, RecordError, export_plugin};

struct Orders {
    key_by_user: bool,
}

#[derive(Deserialize)]
struct Order {
    order_ts: i64,
    user_id: Option<u64>,
}

impl Parser for Orders {
    fn new(config: &Config) -> Result<Self, PluginError> {
        Ok(Orders { key_by_user: config.get("key_by_user")?.unwrap_or(false) })
    }

    fn parse(&self, record: &Record<'_>, out: &mut Emitter) -> Result<(), RecordError> {
        // serde reads a JSON array into a struct too (`[1793491186672, 5]`): only an object is
        // an order, and only an object may be passed on as a row.
        if record.value.trim_ascii_start().first() != Some(&b'{') {
            return Err(RecordError::malformed("an order is a JSON object"));
        }
        let order: Order = record.json()?;
        match order.user_id.filter(|_| self.key_by_user) {
            Some(user) => out.emit_json(order.order_ts, Some(user.to_string().as_bytes()), record.value),
            None => out.emit_json(order.order_ts, None, record.value),
        }
    }
}

export_plugin!(parser: Orders);
