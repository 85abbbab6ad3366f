//! The scanner against serde_json: what it accepts, the fields it finds, the integers it reads.

use super::*;

const ORDER: &[u8] = br#"{"order_id":1,"user_id":26537,"status":"PENDING","amount":38.82,"order_ts":1793491193304}"#;

#[test]
fn finds_fields_and_nested_paths_in_one_pass() {
    let [ts, user, missing] = scan(ORDER, &Paths::new(["order_ts", "user_id", "nope"])).unwrap();
    assert_eq!(ts, Some(&b"1793491193304"[..]));
    assert_eq!(user, Some(&b"26537"[..]));
    assert_eq!(missing, None);
    let row = br#" {"a": {"b": [1, {"c": 2}], "c": "x\"y"}, "c": null} "#;
    let [ac, c, abc, a] = scan(row, &Paths::new(["a.c", "c", "a.b.c", "a"])).unwrap();
    assert_eq!(ac, Some(&br#""x\"y""#[..]));
    assert_eq!(c, Some(&b"null"[..]));
    assert_eq!(abc, None, "paths go through objects only, not arrays");
    assert!(a.is_some_and(|v| v.starts_with(b"{") && v.ends_with(b"}")));
}

#[test]
fn fewer_paths_than_slots_leave_the_rest_unfound() {
    let paths = Paths::<4>::up_to(&["status", "user_id"]).unwrap();
    let [status, user, a, b] = scan(ORDER, &paths).unwrap();
    assert_eq!((status, user), (Some(&br#""PENDING""#[..]), Some(&b"26537"[..])));
    assert_eq!((a, b), (None, None));
    assert!(Paths::<1>::up_to(&["a", "b"]).is_none());
}

#[test]
fn refuses_what_serde_refuses() {
    for bad in [
        &br#"[1, 2]"#[..],
        br#"{"a":1} {}"#,
        br#"{"a":01}"#,
        br#"{"a":1.}"#,
        br#"{"a":-}"#,
        br#"{"a":"\x"}"#,
        br#"{"a":"\u12"}"#,
        b"{\"a\":\"\x01\"}",
        b"{\"a\":\"\xff\"}",
        br#"{"a":tru}"#,
        br#"{"a":1,}"#,
        br#"{"a" 1}"#,
        br#"{"a":[1,]}"#,
        br#"{"order_ts":1,"order_ts":2}"#,
        b"",
    ] {
        let r = scan(bad, &Paths::new(["order_ts"]));
        assert!(r.is_err(), "{:?} accepted", String::from_utf8_lossy(bad));
    }
}

proptest::proptest! {
    /// Any JSON value serialized (compact or pretty): accepted exactly when it is an object,
    /// and each top-level field found is the text serde reads back as that field's value.
    #[test]
    fn serialized_values_scan_as_serde_reads_them(v in json_value(), pretty: bool) {
        let text = if pretty { serde_json::to_vec_pretty(&v) } else { serde_json::to_vec(&v) }.unwrap();
        let keys: Vec<String> = v.as_object().map(|o| o.keys().take(3).cloned().collect()).unwrap_or_default();
        let names: [&str; 3] = [0, 1, 2].map(|i| keys.get(i).map_or("absent", String::as_str));
        match scan(&text, &Paths::new(names)) {
            Ok(found) => {
                proptest::prop_assert!(v.is_object());
                // What serde reads the whole text as (its float parsing is not exact, so not `v`).
                let read: serde_json::Value = serde_json::from_slice(&text).unwrap();
                for (name, raw) in names.iter().zip(found) {
                    let want = read.get(*name);
                    let got = raw.map(|r| serde_json::from_slice::<serde_json::Value>(r).unwrap());
                    proptest::prop_assert_eq!(got.as_ref(), want);
                }
            }
            Err(e) => proptest::prop_assert!(!v.is_object(), "{e}"),
        }
    }

    /// Any bytes at all: accepted exactly when serde_json accepts them as a JSON object
    /// (keys are not decoded, so serde's check of surrogate escapes in keys is left out).
    #[test]
    fn whatever_bytes_are_judged_as_serde_judges_them(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..48), json in json_ish()) {
        for input in [&bytes[..], json.as_bytes()] {
            let ours = scan(input, &Paths::new([])).is_ok();
            let serde = std::str::from_utf8(input).is_ok_and(|t| {
                t.trim_start().starts_with('{') && serde_json::from_str::<serde::de::IgnoredAny>(t).is_ok()
            });
            proptest::prop_assert_eq!(ours, serde, "{:?}", String::from_utf8_lossy(input));
        }
    }
}

fn json_value() -> impl proptest::strategy::Strategy<Value = serde_json::Value> {
    json_values("\\PC{0,8}", "[a-z\\\\\"é]{0,4}")
}

/// Any JSON value, nested a few levels, with strings and object keys drawn from `strings`
/// and `keys` (regular expressions): what the SDK's scanners are tested against.
pub fn json_values(
    strings: &'static str,
    keys: &'static str,
) -> impl proptest::strategy::Strategy<Value = serde_json::Value> {
    use proptest::prelude::*;
    let leaf = prop_oneof![
        Just(serde_json::Value::Null),
        any::<bool>().prop_map(serde_json::Value::Bool),
        any::<i64>().prop_map(serde_json::Value::from),
        any::<f64>().prop_filter("finite", |f| f.is_finite()).prop_map(serde_json::Value::from),
        strings.prop_map(serde_json::Value::String),
    ];
    leaf.prop_recursive(4, 32, 6, move |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..5).prop_map(serde_json::Value::Array),
            proptest::collection::btree_map(keys, inner, 0..5)
                .prop_map(|m| serde_json::Value::Object(m.into_iter().collect())),
        ]
    })
}

/// Text that is nearly JSON: JSON's own characters, so mistakes are near misses.
fn json_ish() -> impl proptest::strategy::Strategy<Value = String> {
    "[{}\\[\\]\"\\\\:,0-9.eE+\\- tnulrfasu\u{e9}\u{1}]{0,40}"
}

#[test]
fn eight_byte_steps_find_the_first_stop() {
    let at = |text: &[u8; 8], f: fn(u64) -> u64| (f(u64::from_le_bytes(*text)).trailing_zeros() / 8) as usize;
    assert_eq!(at(b"abc\"defg", string_stops), 3);
    assert_eq!(at(b"abcdef\\g", string_stops), 6);
    assert_eq!(at(b"a\x01\"\"\"\"\"\"", string_stops), 1);
    assert_eq!(at(b"\xc3\xa9abcdef", string_stops), 0);
    assert_eq!(at(b"abcdefgh", string_stops), 8);
    assert_eq!(at(b"1234567,", non_digits), 7);
    assert_eq!(at(b"12/45678", non_digits), 2);
    assert_eq!(at(b"12:45678", non_digits), 2);
    assert_eq!(at(b"\xb12345678", non_digits), 0);
    assert_eq!(at(b"01234567", non_digits), 8);
}

#[test]
fn a_key_word_is_the_first_eight_bytes_zero_padded() {
    for text in [&b"abcdefghijkl"[..], &[0xff; 12][..], b"\x01\x02\x03\x04\x05\x06\x07\x08\x09"] {
        for n in 0..=text.len() {
            let mut w = [0u8; 8];
            w[..n.min(8)].copy_from_slice(&text[..n.min(8)]);
            assert_eq!(key_word(&text[..n]), u64::from_le_bytes(w), "{n} bytes of {text:?}");
        }
    }
}

#[test]
fn reads_integers_as_serde_does() {
    assert_eq!(int(b"1793491193304"), Some(1_793_491_193_304));
    assert_eq!(int(b"-9223372036854775808"), Some(i64::MIN));
    assert_eq!(int(b"9223372036854775808"), None);
    assert_eq!(int(b"1.5"), None);
    assert_eq!(int(b"1e3"), None);
    assert_eq!(int(b"-"), None);
    assert_eq!(int(b"-0"), Some(0));
    assert_eq!(uint(b"18446744073709551615"), Some(u64::MAX));
    assert_eq!(uint(b"18446744073709551616"), None);
    for n in [0u64, 7, 12_345_678, 98_765_432_109, 1_793_491_193_304, u64::MAX, u64::MAX / 3] {
        assert_eq!(uint(n.to_string().as_bytes()), Some(n));
    }
    assert_eq!(uint(b"1234567a90"), None);
    assert_eq!(uint(b"12345678a"), None);
}
