//! Reading one top-level field of a JSON object without parsing the rest of it.
//!
//! Rows reaching a transformer or an aggregator were produced by a parser, so they are JSON
//! already; an aggregator that needs one field (the orders' `status`) should not pay for
//! deserializing the whole row once more per event. This scanner walks the object's top level,
//! skipping values by their delimiters, and stops at the wanted key. Keys are compared as
//! written (a key spelt with escapes does not match). It rejects what is not an object, but it
//! is not a validator: that is the parser's job. The word-at-a-time byte tests are
//! `scan.rs`'s.

use crate::scan::{bytes_below, equal_bytes, same, word};

/// The raw bytes of top-level field `name` of the JSON object `json`; `Ok(None)` if absent.
#[inline]
pub fn top_level_field<'a>(json: &'a [u8], name: &str) -> Result<Option<&'a [u8]>, &'static str> {
    let mut i = skip_ws(json, 0);
    if json.get(i) != Some(&b'{') {
        return Err("row is not a JSON object");
    }
    i = skip_ws(json, i + 1);
    if json.get(i) == Some(&b'}') {
        return Ok(None);
    }
    loop {
        if json.get(i) != Some(&b'"') {
            return Err("expected a key");
        }
        let key_end = string_end(json, i)?;
        let key = &json[i + 1..key_end - 1];
        i = skip_ws(json, key_end);
        if json.get(i) != Some(&b':') {
            return Err("expected `:`");
        }
        i = skip_ws(json, i + 1);
        let value_end = value_end(json, i)?;
        if same(key, name.as_bytes()) {
            return Ok(Some(&json[i..value_end]));
        }
        i = skip_ws(json, value_end);
        match json.get(i) {
            Some(b',') => i = skip_ws(json, i + 1),
            Some(b'}') => return Ok(None),
            _ => return Err("expected `,` or `}`"),
        }
    }
}

fn skip_ws(b: &[u8], mut i: usize) -> usize {
    while matches!(b.get(i), Some(b' ' | b'\t' | b'\n' | b'\r')) {
        i += 1;
    }
    i
}

/// `b[i]` is an opening quote; returns the index after the closing one. Eight bytes a step
/// where there are eight (the same word arithmetic as `scan.rs`).
#[inline(always)]
fn string_end(b: &[u8], i: usize) -> Result<usize, &'static str> {
    let mut j = i + 1;
    loop {
        if let Some(w) = word(b, j) {
            let stops = equal_bytes(w, b'"') | equal_bytes(w, b'\\');
            if stops == 0 {
                j += 8;
                continue;
            }
            j += (stops.trailing_zeros() / 8) as usize;
        }
        match b.get(j) {
            Some(b'"') => return Ok(j + 1),
            Some(b'\\') => j += 2,
            Some(_) => j += 1,
            None => return Err("unterminated string"),
        }
    }
}

fn value_end(b: &[u8], i: usize) -> Result<usize, &'static str> {
    match b.get(i) {
        Some(b'"') => string_end(b, i),
        Some(b'{' | b'[') => {
            let mut depth = 0usize;
            let mut j = i;
            loop {
                match b.get(j) {
                    Some(b'"') => {
                        j = string_end(b, j)?;
                        continue;
                    }
                    Some(b'{' | b'[') => depth += 1,
                    Some(b'}' | b']') => {
                        depth -= 1;
                        if depth == 0 {
                            return Ok(j + 1);
                        }
                    }
                    Some(_) => {}
                    None => return Err("unterminated value"),
                }
                j += 1;
            }
        }
        Some(_) => {
            // A number or literal runs to the next delimiter (or white space, or anything below
            // it): eight bytes a step.
            let mut j = i;
            while let Some(w) = word(b, j) {
                let stops = equal_bytes(w, b',') | equal_bytes(w, b'}') | equal_bytes(w, b']') | bytes_below(w, 0x21);
                if stops != 0 {
                    j += (stops.trailing_zeros() / 8) as usize;
                    return if j == i { Err("expected a value") } else { Ok(j) };
                }
                j += 8;
            }
            while !matches!(b.get(j), None | Some(b',' | b'}' | b']' | b' ' | b'\t' | b'\n' | b'\r')) {
                j += 1;
            }
            if j == i { Err("expected a value") } else { Ok(j) }
        }
        None => Err("expected a value"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ROW: &[u8] =
        br#" { "id" : 1, "nested": {"status": "no", "a": [1, "}"]}, "s\"x": "q", "status":"ERROR" ,"n":-1.5e3} "#;

    #[test]
    fn finds_top_level_fields_only() {
        assert_eq!(top_level_field(ROW, "status").unwrap(), Some(&b"\"ERROR\""[..]));
        assert_eq!(top_level_field(ROW, "id").unwrap(), Some(&b"1"[..]));
        assert_eq!(top_level_field(ROW, "n").unwrap(), Some(&b"-1.5e3"[..]));
        assert_eq!(top_level_field(ROW, "nested").unwrap(), Some(&br#"{"status": "no", "a": [1, "}"]}"#[..]));
        assert_eq!(top_level_field(ROW, "a").unwrap(), None);
        assert_eq!(top_level_field(b"{}", "a").unwrap(), None);
    }

    #[test]
    fn rejects_what_is_not_an_object() {
        assert!(top_level_field(b"[1]", "a").is_err());
        assert!(top_level_field(b"{\"a\" 1}", "a").is_err());
        assert!(top_level_field(b"{\"a\":\"1}", "a").is_err());
        assert!(top_level_field(b"{\"b\":1 \"a\":2}", "a").is_err());
    }

    proptest::proptest! {
        /// Any object serde writes: each top-level field found is the text serde reads back as
        /// that field, and an absent one is absent.
        #[test]
        fn finds_what_serde_wrote(
            fields in proptest::collection::btree_map("[a-z\"\\\\]{0,5}", value(), 0..6),
            pretty: bool,
        ) {
            let obj = serde_json::Value::Object(fields.clone().into_iter().collect());
            let text = if pretty { serde_json::to_vec_pretty(&obj) } else { serde_json::to_vec(&obj) }.unwrap();
            let read: serde_json::Value = serde_json::from_slice(&text).unwrap();
            for name in fields.keys().filter(|k| !k.contains(['"', '\\'])).chain(std::iter::once(&"absent".to_string())) {
                let raw = top_level_field(&text, name).unwrap();
                let got = raw.map(|r| serde_json::from_slice::<serde_json::Value>(r).unwrap());
                proptest::prop_assert_eq!(got.as_ref(), read.get(name.as_str()));
            }
        }
    }

    /// Strings full of the delimiters the skipping must not be fooled by.
    fn value() -> impl proptest::strategy::Strategy<Value = serde_json::Value> {
        super::super::scan::tests::json_values("[a-z,}\\]\"\\\\ ]{0,12}", "[a-z]{0,3}")
    }

    #[test]
    fn agrees_with_serde_on_generated_orders() {
        for (i, status) in ["OK", "ERROR", "PENDING"].iter().enumerate() {
            let row = format!(
                r#"{{"order_id":{i},"user_id":26537,"status":"{status}","amount":38.82,"order_ts":1793491193304}}"#
            );
            let v: serde_json::Value = serde_json::from_str(&row).unwrap();
            let raw = top_level_field(row.as_bytes(), "status").unwrap().unwrap();
            assert_eq!(serde_json::from_slice::<serde_json::Value>(raw).unwrap(), v["status"]);
        }
    }
}
