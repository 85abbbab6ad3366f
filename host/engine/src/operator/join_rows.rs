//! What both joins do to a row: read its key field and check that `join.as` is free, in one
//! scan (which also checks the row is a JSON object), and splice the other row (the table's,
//! the other stream's event's) in as the field `join.as`, into the text rather than rebuilt.
//! The paths and the field's name are prepared once per operator, not per row.

use crate::json::scan::Paths;
use crate::plugin::EventBatch;

pub struct JoinRows {
    /// `join.on` (a path no row has without one: a JSON key cannot hold a raw NUL byte) and
    /// `join.as`.
    paths: Paths<2>,
    on: Option<String>,
    field: String,
    /// `join.as` as a JSON string, then `:`.
    name: Vec<u8>,
}

impl JoinRows {
    pub fn new(on: Option<&str>, field: &str) -> Self {
        let mut name = serde_json::to_vec(field).unwrap_or_else(|_| b"\"\"".to_vec());
        name.push(b':');
        Self {
            paths: Paths::new([on.unwrap_or("\0none"), field]),
            on: on.map(str::to_string),
            field: field.to_string(),
            name,
        }
    }

    /// Checks `row` is a JSON object without `join.as`; returns its `join.on` field's raw text.
    fn check<'a>(&self, row: &'a [u8]) -> Result<Option<&'a [u8]>, String> {
        let [on, taken] = crate::json::fields(row, &self.paths)?;
        if taken.is_some() {
            return Err(format!(
                "the row has a field {:?} already, where join.as puts the table's row; set join.as to another name",
                self.field
            ));
        }
        Ok(on)
    }

    /// Event `i`'s join key (`join.on`'s value, or its own key), once its row is checked to be a
    /// JSON object without `join.as`.
    pub fn key(&self, events: &EventBatch, i: usize) -> Result<Vec<u8>, String> {
        let on = self.check(crate::columns::item(&events.rows, &events.row_ends, i))?;
        match (&self.on, on) {
            (None, _) => Ok(crate::columns::item(&events.keys, &events.key_ends, i).to_vec()),
            (Some(_), Some(raw)) => super::key_text(raw).map_err(|e| format!("join.on: {e}")),
            (Some(path), None) => Err(format!("join.on: the row has no field {path:?} to key by")),
        }
    }

    /// Appends `row` (checked by [`JoinRows::key`]) with `value` (JSON; `null` when none) as its
    /// field `join.as`.
    pub fn splice(&self, row: &[u8], value: Option<&[u8]>, out: &mut Vec<u8>) {
        let s = row.trim_ascii();
        let inner = s[1..s.len() - 1].trim_ascii();
        out.push(b'{');
        out.extend_from_slice(inner);
        if !inner.is_empty() {
            out.push(b',');
        }
        out.extend_from_slice(&self.name);
        out.extend_from_slice(value.unwrap_or(b"null"));
        out.push(b'}');
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The event's row with `value` as its field `field`, or why it cannot have it.
    fn joined(row: &[u8], field: &str, value: Option<&[u8]>) -> Result<Vec<u8>, String> {
        let j = JoinRows::new(None, field);
        j.check(row)?;
        let mut out = Vec::new();
        j.splice(row, value, &mut out);
        Ok(out)
    }

    #[test]
    fn joined_rows_splice_the_table_row_in() {
        assert_eq!(joined(br#" {"a":1} "#, "t", Some(br#"{"b":2}"#)).unwrap(), br#"{"a":1,"t":{"b":2}}"#);
        assert_eq!(joined(b"{}", "t", None).unwrap(), br#"{"t":null}"#);
        assert_eq!(joined(br#"{"a":"x"}"#, "t\"q", None).unwrap(), br#"{"a":"x","t\"q":null}"#);
        assert!(joined(br#"{"t":1}"#, "t", None).unwrap_err().contains("join.as"));
        assert!(joined(b"[1]", "t", None).is_err());
    }

    #[test]
    fn the_key_and_the_check_come_from_one_scan() {
        let mut events = EventBatch::default();
        for (row, key) in
            [(&br#"{"u":"a1","n":1}"#[..], &b"k"[..]), (br#"{"n":2}"#, b"k"), (br#"{"u":3,"as":1}"#, b"k")]
        {
            crate::columns::push(&mut events.rows, &mut events.row_ends, row).unwrap();
            crate::columns::push(&mut events.keys, &mut events.key_ends, key).unwrap();
        }
        let by_field = JoinRows::new(Some("u"), "as");
        assert_eq!(by_field.key(&events, 0).unwrap(), b"a1");
        assert!(by_field.key(&events, 1).unwrap_err().contains("no field \"u\""));
        assert!(by_field.key(&events, 2).unwrap_err().contains("join.as"));
        assert_eq!(JoinRows::new(None, "as").key(&events, 1).unwrap(), b"k");
    }

    proptest::proptest! {
        /// Whatever the row and the table's row, the joined row is one JSON object holding both.
        #[test]
        fn joined_rows_are_json(fields in proptest::collection::btree_map("[a-z\"\\\\]{0,4}", 0i64..9, 0..5), t in 0i64..9) {
            let row = serde_json::to_vec(&fields).unwrap();
            let value = serde_json::to_vec(&serde_json::json!({ "v": t })).unwrap();
            match joined(&row, "as", Some(&value)) {
                Ok(out) => {
                    let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
                    proptest::prop_assert_eq!(&v["as"]["v"], &serde_json::json!(t));
                    for (k, n) in &fields {
                        proptest::prop_assert_eq!(&v[k], &serde_json::json!(n));
                    }
                }
                Err(_) => proptest::prop_assert!(fields.contains_key("as")),
            }
        }
    }
}
