//! Keys read from rows: the field an operator, a join or a keyed sink keys by, and the rule that
//! turns a field's raw JSON text into key bytes. One rule for every reader of keys, so a
//! parser's key, a table's key and a changelog's message key agree.

/// A row field that keys events or rows (`dedup.key`, `process.key`, `join.on`, `sink.key`),
/// its path split once, not at every row: a per-row split showed up in `[dedup]`'s profile.
///
/// The key a row's field (`"user_id"`, or `"customer.id"` inside an object) gives is a
/// string's own text, any other value's JSON text (an integer as written, other numbers as
/// serde_json writes them, so `1` and `1.0` differ). So a key field holding `"u1"` and a
/// parser that keys the event `u1` agree, and so do a changelog's message keys and a table's.
pub struct KeyField {
    path: String,
    paths: crate::json::scan::Paths<1>,
}

impl KeyField {
    pub fn new(path: &str) -> Self {
        Self { path: path.to_string(), paths: crate::json::scan::Paths::new([path]) }
    }

    /// The key `row`'s field gives.
    pub fn key(&self, row: &[u8]) -> Result<Vec<u8>, String> {
        let [raw] = crate::json::fields(row, &self.paths)?;
        key_text(raw.ok_or_else(|| format!("the row has no field {:?} to key by", self.path))?)
    }
}

/// The key a field's raw JSON text gives ([`KeyField`]'s rule).
pub fn key_text(raw: &[u8]) -> Result<Vec<u8>, String> {
    // The common cases without a decoder: a string without escapes, an integer.
    match raw {
        [b'"', inner @ .., b'"'] if !inner.contains(&b'\\') => return Ok(inner.to_vec()),
        [b'-', digits @ ..] | digits if !digits.is_empty() && digits.iter().all(u8::is_ascii_digit) => {
            return Ok(raw.to_vec());
        }
        _ => {}
    }
    let value: serde_json::Value = serde_json::from_slice(raw).map_err(|e| e.to_string())?;
    match value {
        serde_json::Value::String(s) => Ok(s.into_bytes()),
        v => serde_json::to_vec(&v).map_err(|e| e.to_string()),
    }
}
