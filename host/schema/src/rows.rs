//! Event times and keys from a decoded row, by the rules `json_parser` follows: what the
//! standard library's JSON Schema and Protobuf parsers share, each decoding into a
//! `serde_json::Value` first. A time is epoch milliseconds (seconds with `time_unit = "s"`,
//! fractions allowed) or RFC 3339 text; a key field's text is a string's own, any other
//! value's JSON text; a path goes through objects (`meta.at`).

use serde::Deserialize;
use serde_json::Value;

/// The most `key_fields` a standard parser takes.
pub const MAX_KEY_FIELDS: usize = 4;

/// `time_unit`: how a time field that is a plain number reads.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TimeUnit {
    /// Epoch milliseconds.
    #[default]
    Ms,
    /// Epoch seconds, fractions allowed.
    S,
}

/// The config of a standard registry parser: `time_field`, `time_unit`, `key_fields`, and the
/// reader schema, a fixed version of a subject (`reader_subject`, `reader_version`; never "the
/// latest", so that a replay reads the same rows).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EventSettings {
    pub time_field: String,
    #[serde(default)]
    pub time_unit: TimeUnit,
    #[serde(default)]
    pub key_fields: Vec<String>,
    pub reader_subject: Option<String>,
    pub reader_version: Option<u32>,
}

impl EventSettings {
    /// Where the event time and key are, checked.
    pub fn fields(&self) -> Result<EventFields, String> {
        EventFields::new(&self.time_field, self.time_unit, &self.key_fields)
    }

    /// The reader schema's subject and version, if one is named; both or neither.
    pub fn reader(&self) -> Result<Option<(&str, u32)>, String> {
        match (&self.reader_subject, self.reader_version) {
            (None, None) => Ok(None),
            (Some(s), Some(v)) => Ok(Some((s, v))),
            _ => {
                Err("reader_subject and reader_version go together: name the subject and the version to read as".into())
            }
        }
    }
}

/// Where a row's event time and key are, checked: at most [`MAX_KEY_FIELDS`] key fields, none
/// of them the time field; each a path of field names.
#[derive(Debug, Clone)]
pub struct EventFields {
    pub time_field: String,
    pub unit: TimeUnit,
    pub time: Vec<String>,
    pub keys: Vec<Vec<String>>,
}

/// Why a row has no event: its time field is missing, or a value is not what it must be.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EventError {
    Missing(String),
    Invalid(String),
}

impl EventFields {
    /// The fields, or what is wrong with them as config (the key's name first).
    pub fn new(time_field: &str, unit: TimeUnit, key_fields: &[String]) -> Result<Self, String> {
        if key_fields.len() > MAX_KEY_FIELDS {
            return Err(format!("key_fields: {} fields; at most {MAX_KEY_FIELDS}", key_fields.len()));
        }
        if let Some(dup) = key_fields.iter().find(|k| *k == time_field) {
            return Err(format!("key_fields: {dup:?} is the time_field"));
        }
        let path = |p: &str| p.split('.').map(String::from).collect::<Vec<_>>();
        Ok(Self {
            time_field: time_field.to_string(),
            unit,
            time: path(time_field),
            keys: key_fields.iter().map(|k| path(k)).collect(),
        })
    }

    /// The event time (epoch ms) and key (`None` without key fields) of a decoded row.
    pub fn event(&self, row: &Value) -> Result<(i64, Option<Vec<u8>>), EventError> {
        let time = lookup(row, &self.time).ok_or_else(|| EventError::Missing(self.time_field.clone()))?;
        let time = event_time(time, self.unit == TimeUnit::S, &self.time_field).map_err(EventError::Invalid)?;
        if self.keys.is_empty() {
            return Ok((time, None));
        }
        let mut key = Vec::new();
        for (i, p) in self.keys.iter().enumerate() {
            if i > 0 {
                key.push(b'|');
            }
            key_text(lookup(row, p), &mut key);
        }
        Ok((time, Some(key)))
    }
}

/// The value at `path` (field names from the top), `None` if absent or `null`.
pub fn lookup<'v>(value: &'v Value, path: &[String]) -> Option<&'v Value> {
    let mut v = value;
    for part in path {
        v = v.as_object()?.get(part)?;
    }
    (!v.is_null()).then_some(v)
}

/// Epoch milliseconds of time field `field`'s value `v`; `seconds`: numbers are epoch seconds.
pub fn event_time(v: &Value, seconds: bool, field: &str) -> Result<i64, String> {
    let out_of_range = || format!("time field `{field}` is out of range");
    match v {
        Value::String(s) => {
            let t = time::OffsetDateTime::parse(s, &time::format_description::well_known::Rfc3339)
                .map_err(|e| format!("time {s:?} is not RFC 3339: {e}"))?;
            i64::try_from(t.unix_timestamp_nanos() / 1_000_000).map_err(|_| out_of_range())
        }
        Value::Number(n) if !seconds => {
            n.as_i64().ok_or_else(|| format!("time field `{field}` is {n}, not whole epoch milliseconds"))
        }
        Value::Number(n) => {
            let ms = (n.as_f64().unwrap_or(f64::NAN) * 1000.0).round();
            if !ms.is_finite() || ms.abs() > 9.0e15 {
                return Err(out_of_range());
            }
            Ok(ms as i64)
        }
        other => Err(format!(
            "time field `{field}` is {}, not a time (epoch {} or RFC 3339 text)",
            kind(other),
            if seconds { "seconds" } else { "milliseconds" }
        )),
    }
}

/// Appends the key text of `v` (absent: `null`).
pub fn key_text(v: Option<&Value>, out: &mut Vec<u8>) {
    match v {
        Some(Value::String(s)) => out.extend_from_slice(s.as_bytes()),
        Some(v) => out.extend_from_slice(v.to_string().as_bytes()),
        None => out.extend_from_slice(b"null"),
    }
}

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn times_and_keys_follow_json_parser_s_rules() {
        let row = json!({"meta": {"at": "2026-11-01T00:00:00.5+01:00"}, "ts": 1700000000123_i64, "s": 1.5, "k": "u1", "n": 7});
        let p = |s: &str| s.split('.').map(String::from).collect::<Vec<_>>();
        assert_eq!(event_time(lookup(&row, &p("meta.at")).unwrap(), false, "meta.at"), Ok(1_793_487_600_500));
        assert_eq!(event_time(lookup(&row, &p("ts")).unwrap(), false, "ts"), Ok(1_700_000_000_123));
        assert_eq!(event_time(lookup(&row, &p("s")).unwrap(), true, "s"), Ok(1_500));
        assert!(event_time(lookup(&row, &p("s")).unwrap(), false, "s").unwrap_err().contains("not whole"));
        assert!(event_time(&json!(true), false, "b").unwrap_err().contains("a boolean"));
        let mut k = Vec::new();
        key_text(lookup(&row, &p("k")), &mut k);
        key_text(lookup(&row, &p("n")), &mut k);
        key_text(lookup(&row, &p("missing")), &mut k);
        assert_eq!(k, b"u17null");
        let f = EventFields::new("meta.at", TimeUnit::Ms, &["k".into(), "n".into()]).unwrap();
        assert_eq!(f.event(&row), Ok((1_793_487_600_500, Some(b"u1|7".to_vec()))));
        let f = EventFields::new("gone", TimeUnit::Ms, &[]).unwrap();
        assert_eq!(f.event(&row), Err(EventError::Missing("gone".into())));
        assert!(EventFields::new("t", TimeUnit::Ms, &["t".into()]).unwrap_err().contains("is the time_field"));
        assert!(EventFields::new("t", TimeUnit::Ms, &vec!["k".into(); 5]).unwrap_err().contains("at most 4"));
    }
}
