//! The standard Debezium parser: Debezium's JSON change events (from Kafka Connect's
//! `JsonConverter`, with or without its `schema`/`payload` wrapping) as a changelog. Each
//! create, update or snapshot read (`op` `c`, `u`, `r`) becomes an upsert whose row is the
//! `after` image; each delete (`d`) becomes a deletion of its key (a tombstone). The key is the
//! table's primary key, from Debezium's message key (or `key_fields`); the event time is when
//! the database committed the change (`source.ts_ms`). So a table's change stream can keep a
//! PostgreSQL table current, feed a compacted topic that a `[join]` reads as its table, or
//! feed a dedup or a processor (`docs/debezium.md`).
//!
//! Config:
//! - `key_fields`: up to [`MAX_KEY_FIELDS`] columns of the row image whose values key the
//!   event (joined with `|`, as the JSON parser's). Without it, the message key's fields, in
//!   their order: Debezium keys each message by the table's primary key.
//! - `metadata_field` (default [`DEFAULT_METADATA_FIELD`]): the field of the row that carries
//!   the change's metadata, `{"op", "ts_ms", "source", "transaction"}` (`source` as Debezium
//!   wrote it: database, table, log position, snapshot flag; `transaction`: its id and the
//!   event's order in it, when Debezium's transaction metadata is on). `""` leaves it out.
//!
//! The tombstone Debezium writes after a delete (a message without a value, for compaction) is
//! skipped: the delete event before it already deleted the key. A record that is not a
//! change event (not JSON, no `op`, an `op` without the image it needs, a truncate, which has no
//! key to delete) is a dead letter saying why.

use std::borrow::Cow;

use serde::Deserialize;
use serde_json::value::RawValue;
use weir_guest::{Config, Emitter, Parser, PluginError, Record, RecordError, export_plugin};

/// The most `key_fields`.
const MAX_KEY_FIELDS: usize = 4;
/// The row field that carries a change's metadata unless `metadata_field` says otherwise.
const DEFAULT_METADATA_FIELD: &str = "_cdc";

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Settings {
    #[serde(default)]
    key_fields: Vec<String>,
    metadata_field: Option<String>,
}

struct DebeziumParser {
    key_fields: Vec<String>,
    /// `"NAME":` ready to splice into a row; `None`: no metadata.
    metadata: Option<String>,
}

/// A change event: the envelope's fields Weir reads; `payload` and `schema` when Kafka
/// Connect wrapped it.
#[derive(Deserialize)]
struct Envelope<'a> {
    #[serde(borrow, default)]
    before: Option<&'a RawValue>,
    #[serde(borrow, default)]
    after: Option<&'a RawValue>,
    #[serde(borrow, default)]
    op: Option<Cow<'a, str>>,
    #[serde(default)]
    ts_ms: Option<i64>,
    #[serde(borrow, default)]
    source: Option<&'a RawValue>,
    #[serde(borrow, default)]
    transaction: Option<&'a RawValue>,
    #[serde(borrow, default)]
    payload: Option<&'a RawValue>,
    #[serde(borrow, default)]
    schema: Option<&'a RawValue>,
}

#[derive(Deserialize)]
struct Source {
    #[serde(default)]
    ts_ms: Option<i64>,
}

impl Parser for DebeziumParser {
    fn new(config: &Config) -> Result<Self, PluginError> {
        let s: Settings = config.parse()?;
        if s.key_fields.len() > MAX_KEY_FIELDS {
            return Err(PluginError::InvalidConfig(format!(
                "key_fields: {} fields; at most {MAX_KEY_FIELDS}",
                s.key_fields.len()
            )));
        }
        let name = s.metadata_field.unwrap_or_else(|| DEFAULT_METADATA_FIELD.to_string());
        let metadata = (!name.is_empty()).then(|| format!("{}:", serde_json::Value::String(name)));
        Ok(DebeziumParser { key_fields: s.key_fields, metadata })
    }

    fn parse(&self, record: &Record<'_>, out: &mut Emitter) -> Result<(), RecordError> {
        if record.value.is_empty() {
            return Ok(()); // Debezium's tombstone after a delete, for compaction.
        }
        let mut e: Envelope<'_> = record.json()?;
        if e.op.is_none() && e.schema.is_some() {
            match e.payload {
                Some(payload) => e = serde_json::from_str(payload.get())?,
                None => {
                    // `"payload": null` reads as no payload: a wrapped tombstone, skipped.
                    let fields: Fields<'_> = record.json()?;
                    if fields.0.iter().any(|(k, v)| k == "payload" && v.get() == "null") {
                        return Ok(());
                    }
                }
            }
        }
        let op = e.op.as_deref().ok_or_else(|| RecordError::missing_field("op"))?;
        let source: Option<Source> = e.source.map(|s| serde_json::from_str(s.get())).transpose()?;
        let time =
            source.and_then(|s| s.ts_ms).or(e.ts_ms).ok_or_else(|| RecordError::missing_field("source.ts_ms"))?;
        fn image<'v>(which: Option<&'v RawValue>, name: &str) -> Result<&'v RawValue, RecordError> {
            which.filter(|v| v.get() != "null").ok_or_else(|| RecordError::missing_field(name))
        }
        match op {
            "c" | "u" | "r" => {
                let after = image(e.after, "after")?;
                let key = self.key(record, after)?;
                let row = self.row(after, op, &e)?;
                out.emit_json(time, Some(&key), row.as_bytes())
            }
            "d" => {
                let key = match self.key_fields.is_empty() {
                    true => message_key(record)?,
                    false => self.key(record, image(e.before, "before")?)?,
                };
                out.emit_deletion(time, &key)
            }
            "t" => Err(RecordError::invalid_value(
                "a truncate (op \"t\") deletes every row, and has no key to delete by: truncate the target too",
            )),
            other => Err(RecordError::invalid_value(format!(
                "op {other:?} is not a change: Debezium's are \"c\", \"u\", \"d\", \"r\" and \"t\""
            ))),
        }
    }
}

impl DebeziumParser {
    /// The event's key: `key_fields` of `image`, or the message key's fields.
    fn key(&self, record: &Record<'_>, image: &RawValue) -> Result<Vec<u8>, RecordError> {
        if self.key_fields.is_empty() {
            return message_key(record);
        }
        let fields: Fields<'_> = serde_json::from_str(image.get())?;
        let mut key = Vec::new();
        for (i, name) in self.key_fields.iter().enumerate() {
            if i > 0 {
                key.push(b'|');
            }
            let v = fields.0.iter().find(|(k, _)| k == name).map(|(_, v)| *v);
            let v = v.ok_or_else(|| RecordError::missing_field(name))?;
            key.extend_from_slice(&key_text(v)?);
        }
        Ok(key)
    }

    /// The `after` image as the row, with the change's metadata in `metadata_field`.
    fn row<'a>(&self, after: &'a RawValue, op: &str, e: &Envelope<'_>) -> Result<Cow<'a, str>, RecordError> {
        let text = after.get().trim();
        let Some(field) = &self.metadata else { return Ok(Cow::Borrowed(text)) };
        let body = text
            .strip_prefix('{')
            .and_then(|t| t.strip_suffix('}'))
            .ok_or_else(|| RecordError::invalid_value("`after` is not a JSON object"))?;
        let raw = |v: Option<&RawValue>| v.map_or("null", RawValue::get).to_string();
        let ts = e.ts_ms.map_or_else(|| "null".to_string(), |t| t.to_string());
        let meta = format!(
            "{{\"op\":\"{op}\",\"ts_ms\":{ts},\"source\":{},\"transaction\":{}}}",
            raw(e.source),
            raw(e.transaction)
        );
        let comma = if body.trim().is_empty() { "" } else { "," };
        Ok(Cow::Owned(format!("{{{body}{comma}{field}{meta}}}")))
    }
}

/// The message key's fields in order (Debezium's key is the primary key's columns), unwrapped
/// from Kafka Connect's `schema`/`payload` when wrapped.
fn message_key(record: &Record<'_>) -> Result<Vec<u8>, RecordError> {
    let raw = record.key.filter(|k| !k.is_empty()).ok_or_else(|| {
        RecordError::missing_field("the message key (the primary key): set key_fields to the table's key columns")
    })?;
    let text = std::str::from_utf8(raw).map_err(|e| RecordError::malformed(format!("key is not UTF-8: {e}")))?;
    let mut fields: Fields<'_> = serde_json::from_str(text)
        .map_err(|e| RecordError::malformed(format!("the message key is not a JSON object: {e}")))?;
    if let [(a, _), (b, payload)] = fields.0.as_slice()
        && a == "schema"
        && b == "payload"
    {
        fields = serde_json::from_str(payload.get())?;
    }
    if fields.0.is_empty() {
        return Err(RecordError::invalid_value("the message key has no fields: set key_fields"));
    }
    let mut key = Vec::new();
    for (i, (_, v)) in fields.0.iter().enumerate() {
        if i > 0 {
            key.push(b'|');
        }
        key.extend_from_slice(&key_text(v)?);
    }
    Ok(key)
}

/// A JSON object's fields in the order written.
struct Fields<'a>(Vec<(Cow<'a, str>, &'a RawValue)>);

impl<'de: 'a, 'a> Deserialize<'de> for Fields<'a> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visit<'a>(std::marker::PhantomData<&'a ()>);
        impl<'de: 'a, 'a> serde::de::Visitor<'de> for Visit<'a> {
            type Value = Fields<'a>;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<M: serde::de::MapAccess<'de>>(self, mut m: M) -> Result<Fields<'a>, M::Error> {
                let mut v = Vec::new();
                while let Some((k, raw)) = m.next_entry::<Cow<'de, str>, &'de RawValue>()? {
                    v.push((k, raw));
                }
                Ok(Fields(v))
            }
        }
        d.deserialize_map(Visit(std::marker::PhantomData))
    }
}

/// A key value's text: a string's own, any other value's JSON text.
fn key_text(v: &RawValue) -> Result<Vec<u8>, RecordError> {
    let raw = v.get();
    if raw.starts_with('"') {
        let s: Cow<'_, str> = serde_json::from_str(raw)?;
        return Ok(s.into_owned().into_bytes());
    }
    Ok(raw.as_bytes().to_vec())
}

export_plugin!(parser: DebeziumParser);

#[cfg(test)]
mod tests;
