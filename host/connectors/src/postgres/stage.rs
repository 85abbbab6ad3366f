//! A batch as the operations the database applies: each row an upsert (its JSON object) and
//! each tombstone a delete (an object of the key columns, read from the row's key), encoded as
//! `COPY ... FROM STDIN` text for the staging table. What cannot be staged (a tombstone whose
//! key does not give the key columns, a row PostgreSQL text cannot hold) is rejected here.

use std::io::Write;

use weir_types::rows::Rows;

/// A batch's operations: the COPY text, and for each staged operation the row it came from.
#[derive(Debug, Default)]
pub struct Staged {
    pub copy: Vec<u8>,
    pub rows: Vec<usize>,
    pub rejected: Vec<(usize, String)>,
}

pub fn stage(rows: &Rows, keys: &[&str]) -> Staged {
    let mut s = Staged { copy: Vec::with_capacity(rows.rows.len() + rows.len() * 16), ..Staged::default() };
    let mut doc = Vec::new();
    for (i, (key, row)) in rows.iter().enumerate() {
        let (tomb, body) = if row.is_empty() {
            match key_object(key, keys) {
                Ok(d) => {
                    doc.clear();
                    doc.extend_from_slice(d.as_bytes());
                    (true, doc.as_slice())
                }
                Err(why) => {
                    s.rejected.push((i, why));
                    continue;
                }
            }
        } else {
            (false, row)
        };
        if body.contains(&0) {
            s.rejected.push((i, "holds a NUL byte, which PostgreSQL text cannot hold".into()));
            continue;
        }
        // Into the buffer, not through a String per row.
        let _ = write!(s.copy, "{}", s.rows.len());
        s.copy.extend_from_slice(if tomb { b"\tt\t" } else { b"\tf\t" });
        escape(body, &mut s.copy);
        s.copy.push(b'\n');
        s.rows.push(i);
    }
    s
}

/// COPY's text format: backslash, newline, carriage return and tab escaped.
fn escape(text: &[u8], out: &mut Vec<u8>) {
    let mut from = 0;
    for (i, &b) in text.iter().enumerate() {
        let e: &[u8] = match b {
            b'\\' => b"\\\\",
            b'\n' => b"\\n",
            b'\r' => b"\\r",
            b'\t' => b"\\t",
            _ => continue,
        };
        out.extend_from_slice(&text[from..i]);
        out.extend_from_slice(e);
        from = i + 1;
    }
    out.extend_from_slice(&text[from..]);
}

/// COPY's reading of escaped text (what PostgreSQL does with it): one staged operation back as
/// it was.
pub fn unescape(text: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(text.len());
    let mut it = text.iter();
    while let Some(&b) = it.next() {
        if b != b'\\' {
            out.push(b);
            continue;
        }
        match it.next() {
            Some(b'n') => out.push(b'\n'),
            Some(b'r') => out.push(b'\r'),
            Some(b't') => out.push(b'\t'),
            Some(&o) => out.push(o),
            None => {}
        }
    }
    out
}

/// A tombstone's key as an object of the key columns: for one column, the key itself (a JSON
/// value as it is, anything else as a string); for several, a JSON array of as many values
/// (a window's `[start,end,"key"]`) or as many values joined with `|` (the JSON parser's
/// `key_fields`).
pub fn key_object(key: &[u8], columns: &[&str]) -> Result<String, String> {
    let text = std::str::from_utf8(key).map_err(|_| "a tombstone whose key is not UTF-8".to_string())?;
    if text.is_empty() {
        return Err("a tombstone without a key: nothing says which row to delete".into());
    }
    let parsed: Option<serde_json::Value> = serde_json::from_str(text).ok();
    let values: Vec<serde_json::Value> = match (columns.len(), parsed) {
        (1, Some(v)) if !v.is_array() && !v.is_object() => vec![v],
        (1, _) => vec![serde_json::Value::String(text.into())],
        (n, Some(serde_json::Value::Array(a))) if a.len() == n => a,
        (n, _) if text.split('|').count() == n => {
            text.split('|').map(|p| serde_json::Value::String(p.into())).collect()
        }
        (n, _) => {
            return Err(format!(
                "a tombstone whose key {text:?} does not give the {n} key columns ({}): key it by a JSON array of \
                 {n} values, or {n} values joined with |",
                columns.join(", ")
            ));
        }
    };
    let object: serde_json::Map<String, serde_json::Value> =
        columns.iter().map(|c| c.to_string()).zip(values).collect();
    Ok(serde_json::Value::Object(object).to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn a_tombstone_key_gives_the_key_columns() {
        assert_eq!(key_object(b"u1", &["user"]).unwrap(), r#"{"user":"u1"}"#);
        assert_eq!(key_object(b"42", &["user"]).unwrap(), r#"{"user":42}"#);
        assert_eq!(key_object(b"\"u1\"", &["user"]).unwrap(), r#"{"user":"u1"}"#);
        assert_eq!(key_object(b"[1,2]", &["user"]).unwrap(), r#"{"user":"[1,2]"}"#);
        assert_eq!(key_object(b"[10,20,\"x\"]", &["s", "e", "k"]).unwrap(), r#"{"e":20,"k":"x","s":10}"#);
        assert_eq!(key_object(b"a|b", &["x", "y"]).unwrap(), r#"{"x":"a","y":"b"}"#);
        assert!(key_object(b"a|b|c", &["x", "y"]).unwrap_err().contains("x, y"));
        assert!(key_object(b"", &["x"]).is_err());
    }

    #[test]
    fn staging_keeps_rows_and_rejects_what_cannot_be_staged() {
        let mut rows = Rows::default();
        rows.push(b"k", b"{\"a\":\"x\\ty\"}", 1).unwrap();
        rows.push_tombstone(b"k", 2).unwrap();
        rows.push_tombstone(b"", 3).unwrap();
        rows.push(b"k", b"{\"a\":\"\0\"}", 4).unwrap();
        let s = stage(&rows, &["a"]);
        assert_eq!(s.rows, vec![0, 1]);
        assert_eq!(s.rejected.iter().map(|r| r.0).collect::<Vec<_>>(), vec![2, 3]);
        assert_eq!(String::from_utf8(s.copy).unwrap(), "0\tf\t{\"a\":\"x\\\\ty\"}\n1\tt\t{\"a\":\"k\"}\n");
    }

    proptest! {
        #[test]
        fn escaped_text_is_one_field_that_reads_back(text in proptest::collection::vec(1u8..=255, 0..200)) {
            let mut out = Vec::new();
            escape(&text, &mut out);
            prop_assert!(!out.contains(&b'\n') && !out.contains(&b'\t') && !out.contains(&b'\r'));
            prop_assert_eq!(unescape(&out), text);
        }

        #[test]
        fn any_key_gives_an_object_or_a_reason(key in proptest::collection::vec(any::<u8>(), 0..40), n in 1usize..4) {
            let cols = ["a", "b", "c"];
            if let Ok(doc) = key_object(&key, &cols[..n]) {
                let v: serde_json::Value = serde_json::from_str(&doc).unwrap();
                prop_assert_eq!(v.as_object().map(|o| o.len()), Some(n));
            }
        }
    }
}
