//! Event times and keys from a decoded row, by the rules `json_parser` follows: what the
//! standard library's JSON Schema and Protobuf parsers share, each decoding into a
//! `serde_json::Value` first. A time is epoch milliseconds (seconds with `time_unit = "s"`,
//! fractions allowed) or RFC 3339 text; a key field's text is a string's own, any other
//! value's JSON text; a path goes through objects (`meta.at`).

use serde_json::Value;

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
    }
}
