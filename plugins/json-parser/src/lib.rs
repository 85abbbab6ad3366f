//! The standard JSON parser: one JSON object per record, passed on as the row unchanged, its
//! event time read from `time_field` and its key from `key_fields`. With a window and the
//! standard aggregator (`plugins/stats`) it answers "count orders per status per 5 minutes"
//! without a line of code (`docs/plugins.md`, "The standard library").
//!
//! Config:
//! - `time_field` (required): a field path (`"order_ts"`, `"meta.ts"` inside an object) holding
//!   epoch milliseconds, epoch seconds (`time_unit = "s"`; fractions allowed) or an RFC 3339
//!   string (`"2026-11-01T00:00:00Z"`, any offset).
//! - `time_unit`: `"ms"` (default) or `"s"`, for numeric times.
//! - `key_fields`: up to [`MAX_KEY_FIELDS`] field paths whose values key the event: one field's
//!   key is a string's text or another value's JSON text (as the host reads key fields); several
//!   are joined with `|`. Without it, events have no key. A record without a key field is
//!   keyed with `null` for it.
//!
//! A record that is not a JSON object, lacks `time_field` or has a time that is no time is that
//! record's dead letter, with why.

use serde::Deserialize;
use weir_guest::{Config, Emitter, Parser, Paths, PluginError, Record, RecordError, Value, export_plugin};

/// The most `key_fields`.
const MAX_KEY_FIELDS: usize = 4;

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
enum Unit {
    #[default]
    Ms,
    S,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Settings {
    time_field: String,
    #[serde(default)]
    time_unit: Unit,
    #[serde(default)]
    key_fields: Vec<String>,
}

struct JsonParser {
    unit: Unit,
    keys: usize,
    /// The time field, then the key fields, then paths no record has (a JSON key cannot hold a
    /// raw NUL byte), so one scan of fixed width serves any number of key fields.
    paths: Paths<{ 1 + MAX_KEY_FIELDS }>,
    time_field: String,
}

impl Parser for JsonParser {
    fn new(config: &Config) -> Result<Self, PluginError> {
        let s: Settings = config.parse()?;
        if s.key_fields.len() > MAX_KEY_FIELDS {
            return Err(PluginError::InvalidConfig(format!(
                "key_fields: {} fields; at most {MAX_KEY_FIELDS}",
                s.key_fields.len()
            )));
        }
        let mut names: Vec<&str> = vec![s.time_field.as_str()];
        names.extend(s.key_fields.iter().map(String::as_str));
        let paths = Paths::up_to(&names).ok_or_else(|| PluginError::Internal("paths".into()))?;
        if let Some(dup) = s.key_fields.iter().find(|k| **k == s.time_field) {
            return Err(PluginError::InvalidConfig(format!("key_fields: {dup:?} is the time_field")));
        }
        Ok(JsonParser { unit: s.time_unit, keys: s.key_fields.len(), paths, time_field: s.time_field })
    }

    fn parse(&self, record: &Record<'_>, out: &mut Emitter) -> Result<(), RecordError> {
        let found = record.fields(&self.paths)?;
        let ts = found[0].as_ref().ok_or_else(|| RecordError::missing_field(&self.time_field))?;
        let ts = event_time(ts, self.unit)?;
        if self.keys == 0 {
            return out.emit_json(ts, None, record.value);
        }
        let mut key = Vec::new();
        for (i, v) in found[1..=self.keys].iter().enumerate() {
            if i > 0 {
                key.push(b'|');
            }
            match v {
                Some(v) => key.extend_from_slice(&key_text(v)?),
                None => key.extend_from_slice(b"null"),
            }
        }
        out.emit_json(ts, Some(&key), record.value)
    }
}

/// Epoch milliseconds of a time field.
fn event_time(v: &Value<'_>, unit: Unit) -> Result<i64, RecordError> {
    let raw = v.raw();
    if raw.first() == Some(&b'"') {
        let s = v.as_str()?;
        let t = time::OffsetDateTime::parse(&s, &time::format_description::well_known::Rfc3339)
            .map_err(|e| RecordError::invalid_value(format!("time {s:?} is not RFC 3339: {e}")))?;
        return i64::try_from(t.unix_timestamp_nanos() / 1_000_000)
            .map_err(|_| RecordError::invalid_value(format!("time {s:?} is out of range")));
    }
    match unit {
        Unit::Ms => v.as_i64(),
        Unit::S => {
            let s = v.as_f64()?;
            let ms = (s * 1000.0).round();
            if !ms.is_finite() || ms.abs() > 9.0e15 {
                return Err(RecordError::invalid_value(format!("time {s} s is out of range")));
            }
            Ok(ms as i64)
        }
    }
}

/// A key field's text: a string's own, any other value's JSON text as written.
fn key_text(v: &Value<'_>) -> Result<Vec<u8>, RecordError> {
    if v.raw().first() == Some(&b'"') {
        return Ok(v.as_str()?.into_owned().into_bytes());
    }
    Ok(v.raw().to_vec())
}

export_plugin!(parser: JsonParser);
