//! Rows are one line of UTF-8 JSON object (`wit/plugin.wit`); these are the host's checks that
//! they are, at two depths.
//!
//! - [`misshapen`], on every row a plugin hands back: valid UTF-8, no line break, and `{`...`}`
//!   around it. Cheap (one pass of `from_utf8` and `memchr` over the whole column): it is what
//!   keeps a row from forging a second line of JSON-lines output, a non-object, or text the host
//!   cannot read back.
//! - [`check_object`], on every row before it leaves Weir (to a sink, a side output): a full
//!   JSON syntax check, without building anything (the guest SDK's one-pass scanner, [`scan`],
//!   property-tested against serde_json there). Rows passed from one plugin to the next are the
//!   tenant's own data and get only the cheap check; what reaches the outside world is always
//!   valid JSON.
//!
//! [`fields`] reads fields' raw JSON text with the same scanner: what keyed operators key by
//! and joins read.

use crate::columns;

/// The guest SDK's one-pass field scanner (what `Record::fields` runs inside a plugin): the same
/// code on both sides of the sandbox.
pub use weir_json_scan::scan;

/// The guest SDK's scanner for one top-level field (what `Event::field_str` runs inside a
/// plugin), for the native baseline.
pub use weir_json_scan::field as top_level;

/// The rows of a column that are not one line of UTF-8 with an object's braces, with why.
pub fn misshapen(rows: &[u8], ends: &[u32]) -> Vec<(usize, &'static str)> {
    let mut bad = Vec::new();
    // SIMD UTF-8 validation: the pure-ASCII rows most pipelines carry cost a few cycles a line.
    let utf8 = simdutf8::basic::from_utf8(rows);
    let broken = memchr::memchr2(b'\n', b'\r', rows).is_some();
    if let (Ok(text), false) = (utf8, broken) {
        // The common case: only the braces to look at, and the rows' ends to be character
        // boundaries (a valid whole could hide a character split between two rows).
        for (i, row) in columns::items(rows, ends).enumerate() {
            // `{` first and `}` last: ASCII at both ends, so the row is whole characters.
            if let ([b'{', ..], [.., b'}']) = (row, row) {
                continue;
            }
            let std::ops::Range { start, end } = columns::span(ends, i);
            if !text.is_char_boundary(start) || !text.is_char_boundary(end) {
                bad.push((i, "row is not UTF-8"));
            } else if !braced(row) {
                bad.push((i, "row is not a JSON object"));
            }
        }
        return bad;
    }
    for (i, row) in columns::items(rows, ends).enumerate() {
        if std::str::from_utf8(row).is_err() {
            bad.push((i, "row is not UTF-8"));
        } else if memchr::memchr2(b'\n', b'\r', row).is_some() {
            bad.push((i, "row spans more than one line"));
        } else if !braced(row) {
            bad.push((i, "row is not a JSON object"));
        }
    }
    bad
}

/// Starts with `{` and ends with `}`, spaces and tabs aside.
fn braced(row: &[u8]) -> bool {
    let row = row.trim_ascii();
    row.first() == Some(&b'{') && row.last() == Some(&b'}')
}

/// Whether `row` is one line of a valid JSON object (UTF-8, syntax, nothing after it).
pub fn check_object(row: &[u8]) -> Result<(), String> {
    check_object_for(row, &scan::Paths::new([])).map(drop)
}

/// [`check_object`], finding top-level or nested `paths` in the same pass. A path that
/// appears twice is an error.
pub fn check_object_for<'a, const N: usize>(
    row: &'a [u8],
    paths: &scan::Paths<N>,
) -> Result<[Option<&'a [u8]>; N], String> {
    if let Some((_, why)) = misshapen(row, &[row.len() as u32]).first() {
        return Err((*why).to_string());
    }
    scan_for(row, paths, |e| format!("row is not valid JSON: {e}"))
}

/// The raw JSON text of `row`'s fields at `paths` (`"user_id"`, or `"customer.id"` inside an
/// object; `None`: it has none), in one scan that checks that `row` is one JSON object in which
/// each appears at most once. The paths are split beforehand, once per operator, not per row.
pub fn fields<'a, const N: usize>(row: &'a [u8], paths: &scan::Paths<N>) -> Result<[Option<&'a [u8]>; N], String> {
    scan_for(row, paths, |e| format!("the row is not a JSON object ({e})"))
}

/// One scan for `paths`: a path found twice names the field, any other error is `syntax`'s.
fn scan_for<'a, const N: usize>(
    row: &'a [u8],
    paths: &scan::Paths<N>,
    syntax: impl FnOnce(scan::ScanError) -> String,
) -> Result<[Option<&'a [u8]>; N], String> {
    scan::scan(row, paths).map_err(|e| match e {
        scan::ScanError::Duplicate(i) => format!("the row has the field {:?} twice", paths.name(i)),
        e => syntax(e),
    })
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    #[test]
    fn rows_that_would_forge_output_are_refused_and_good_ones_pass() {
        assert_eq!(check_object(br#"{"a":1,"b":[true,null,"x\n"]}"#), Ok(()));
        assert_eq!(check_object(b" { } "), Ok(()));
        for (row, why) in [
            (&b"[1793491186672, 5]"[..], "not a JSON object"),
            (b"{\"a\":1}\n{\"forged\":true}", "more than one line"),
            (b"{\"a\":\r1}", "more than one line"),
            (b"{\"s\":\"\xff\"}", "not UTF-8"),
            (b"{\"a\":1} {}", "not valid JSON"),
            (b"{\"a\":01}", "not valid JSON"),
            (b"{\"a\":\"\x01\"}", "not valid JSON"),
            (b"", "not a JSON object"),
        ] {
            let e = check_object(row).unwrap_err();
            assert!(e.contains(why), "{:?}: {e}", String::from_utf8_lossy(row));
        }
    }

    #[test]
    fn a_column_is_checked_row_by_row_even_when_the_whole_is_valid() {
        let (mut rows, mut ends) = (Vec::new(), Vec::new());
        for r in [&b"{}"[..], b"[2]", b"{\"x\":\"\xc3", b"\xa9\"}", b"{\"ok\":1}"] {
            columns::push(&mut rows, &mut ends, r).unwrap();
        }
        let bad: Vec<usize> = misshapen(&rows, &ends).into_iter().map(|(i, _)| i).collect();
        assert_eq!(bad, vec![1, 2, 3], "a character split between rows makes both invalid");
    }

    /// What the checks cost per order row (run with `--ignored --nocapture`; a measurement, not
    /// a test: nothing is asserted about time).
    #[test]
    #[ignore]
    fn cost_per_order_row() {
        let mut text = Vec::new();
        crate::workload::orders(200_000, 1, &mut text).unwrap();
        let (mut rows, mut ends) = (Vec::new(), Vec::new());
        for line in text.split(|&b| b == b'\n').filter(|l| !l.is_empty()) {
            columns::push(&mut rows, &mut ends, line).unwrap();
        }
        let n = ends.len() as f64;
        for _ in 0..3 {
            let t = std::time::Instant::now();
            assert!(misshapen(&rows, &ends).is_empty());
            let cheap = t.elapsed().as_nanos() as f64 / n;
            let t = std::time::Instant::now();
            assert!(columns::items(&rows, &ends).all(|r| check_object(r).is_ok()));
            let full = t.elapsed().as_nanos() as f64 / n;
            eprintln!(
                "per order row: shape check {cheap:.1} ns, full JSON check {full:.1} ns ({} bytes/row)",
                rows.len() / ends.len()
            );
        }
    }

    proptest! {
        /// Any JSON value, serialized as one line: accepted exactly when it is an object.
        #[test]
        fn serialized_values_pass_when_they_are_objects(v in json_value()) {
            let row = serde_json::to_vec(&v).unwrap();
            prop_assert_eq!(check_object(&row).is_ok(), v.is_object());
        }

        /// Any bytes at all: accepted only if serde reads them as an object and they are one line.
        #[test]
        fn whatever_is_accepted_is_an_object_on_one_line(row in proptest::collection::vec(any::<u8>(), 0..64)) {
            if check_object(&row).is_ok() {
                prop_assert!(serde_json::from_slice::<serde_json::Map<String, serde_json::Value>>(&row).is_ok());
                prop_assert!(!row.contains(&b'\n') && !row.contains(&b'\r'));
            }
        }
    }

    fn json_value() -> impl Strategy<Value = serde_json::Value> {
        let leaf = prop_oneof![
            Just(serde_json::Value::Null),
            any::<bool>().prop_map(serde_json::Value::Bool),
            any::<i64>().prop_map(serde_json::Value::from),
            any::<f64>().prop_filter("finite", |f| f.is_finite()).prop_map(serde_json::Value::from),
            ".*".prop_map(serde_json::Value::String),
        ];
        leaf.prop_recursive(4, 32, 6, |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..6).prop_map(serde_json::Value::Array),
                proptest::collection::btree_map(".*", inner, 0..6)
                    .prop_map(|m| serde_json::Value::Object(m.into_iter().collect())),
            ]
        })
    }
}
