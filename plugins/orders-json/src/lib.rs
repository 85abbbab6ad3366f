//! Parses order events (`{"order_id":..,"user_id":..,"status":..,"amount":..,"order_ts":..}`),
//! one JSON object per record. Event time is `order_ts`; the row is the record itself, passed on
//! unchanged so nothing is re-serialized. With `key_by_user = true` the key is the `user_id`.
//!
//! The two fields are read by the SDK's one-pass scanner ([`Record::fields`]), which checks the
//! whole record is a JSON object as it goes: a record that is not one is refused, never passed on.

use weir_guest::{Config, Emitter, Parser, Paths, PluginError, Record, RecordError, export_plugin};

struct Orders {
    key_by_user: bool,
    fields: Paths<2>,
}

impl Parser for Orders {
    fn new(config: &Config) -> Result<Self, PluginError> {
        Ok(Orders {
            key_by_user: config.get("key_by_user")?.unwrap_or(false),
            fields: Paths::new(["order_ts", "user_id"]),
        })
    }

    fn parse(&self, record: &Record<'_>, out: &mut Emitter) -> Result<(), RecordError> {
        let [ts, user] = record.fields(&self.fields)?;
        let ts = ts.ok_or_else(|| RecordError::missing_field("order_ts"))?.as_i64()?;
        // `user_id`, when present, is a user id (or null) whether or not events are keyed by it.
        let user = match user {
            Some(u) if !u.is_null() => Some(u.as_u64()?),
            _ => None,
        };
        match user.filter(|_| self.key_by_user) {
            // Formatted on the stack: `to_string` allocated and went through `fmt` per event.
            Some(user) => out.emit_json(ts, Some(itoa::Buffer::new().format(user).as_bytes()), record.value),
            None => out.emit_json(ts, None, record.value),
        }
    }
}

export_plugin!(parser: Orders);
