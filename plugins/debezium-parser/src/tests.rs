use super::*;
use weir_guest::testing::{Emitted, run_parser_keyed};

const KEY: &[u8] = br#"{"id":7}"#;

fn change(op: &str, before: &str, after: &str) -> String {
    format!(
        r#"{{"before":{before},"after":{after},"source":{{"db":"shop","table":"customers","ts_ms":1700000000123,"lsn":42}},"op":"{op}","ts_ms":1700000000999,"transaction":{{"id":"tx1","total_order":2,"data_collection_order":1}}}}"#
    )
}

fn parse(config: &str, records: &[(&[u8], &[u8])]) -> (Vec<Emitted>, Vec<weir_guest::testing::Rejected>) {
    run_parser_keyed::<DebeziumParser>(config, records).unwrap()
}

fn row(e: &Emitted) -> serde_json::Value {
    serde_json::from_slice(&e.row).unwrap()
}

#[test]
fn creates_updates_and_snapshot_reads_are_upserts_of_the_after_image() {
    let c = change("c", "null", r#"{"id":7,"name":"Ann"}"#);
    let u = change("u", r#"{"id":7,"name":"Ann"}"#, r#"{"id":7,"name":"Anne"}"#);
    let r = change("r", "null", r#"{"id":7,"name":"Anne"}"#);
    let (events, errors) = parse("{}", &[(KEY, c.as_bytes()), (KEY, u.as_bytes()), (KEY, r.as_bytes())]);
    assert!(errors.is_empty(), "{errors:?}");
    assert_eq!(events.len(), 3);
    for (e, (op, name)) in events.iter().zip([("c", "Ann"), ("u", "Anne"), ("r", "Anne")]) {
        assert_eq!((e.time, e.key.as_deref()), (1700000000123, Some(&b"7"[..])), "the commit time, the primary key");
        let row = row(e);
        assert_eq!(row["name"], name);
        assert_eq!(row["_cdc"]["op"], op);
        assert_eq!(row["_cdc"]["transaction"]["id"], "tx1", "transaction metadata is carried");
        assert_eq!(row["_cdc"]["source"]["lsn"], 42);
    }
}

#[test]
fn a_delete_is_a_deletion_of_its_key_and_debezium_s_tombstone_is_skipped() {
    let d = change("d", r#"{"id":7,"name":"Anne"}"#, "null");
    let (events, errors) = parse("{}", &[(KEY, d.as_bytes()), (KEY, b"")]);
    assert!(errors.is_empty(), "{errors:?}");
    assert_eq!(events.len(), 1);
    assert_eq!((events[0].key.as_deref(), events[0].row.as_slice()), (Some(&b"7"[..]), &b""[..]));
}

#[test]
fn the_connect_wrapping_and_key_fields_are_read() {
    let wrapped =
        format!(r#"{{"schema":{{"type":"struct"}},"payload":{}}}"#, change("u", "null", r#"{"a":"x","b":2,"c":1}"#));
    let key = br#"{"schema":{"type":"struct"},"payload":{"b":2,"a":"x"}}"#;
    let (events, errors) = parse(r#"{"metadata_field":""}"#, &[(key, wrapped.as_bytes())]);
    assert!(errors.is_empty(), "{errors:?}");
    assert_eq!(events[0].key.as_deref(), Some(&b"2|x"[..]), "the key's fields in their order");
    assert_eq!(events[0].row, br#"{"a":"x","b":2,"c":1}"#, "the after image as it was");
    let (events, _) = parse(r#"{"key_fields":["a","c"]}"#, &[(b"", wrapped.as_bytes())]);
    assert_eq!(events[0].key.as_deref(), Some(&b"x|1"[..]));
    let (_, errors) = parse(r#"{"metadata_field":""}"#, &[(b"", b"{\"schema\":{},\"payload\":null}")]);
    assert!(errors.is_empty(), "a wrapped tombstone is skipped: {errors:?}");
}

#[test]
fn what_is_not_a_change_event_is_a_dead_letter_saying_why() {
    let cases: &[(&[u8], String, &str)] = &[
        (KEY, "not json".into(), ""),
        (KEY, r#"{"after":{"id":7},"source":{"ts_ms":1}}"#.into(), "op"),
        (KEY, change("c", "null", "null"), "after"),
        (KEY, change("t", "null", "null"), "truncate"),
        (KEY, change("x", "null", "null"), "\"x\""),
        (b"", change("c", "null", r#"{"id":7}"#), "key_fields"),
        (KEY, r#"{"op":"c","after":{"id":7}}"#.into(), "source.ts_ms"),
        (b"not json", change("c", "null", r#"{"id":7}"#), "key"),
    ];
    for (key, value, why) in cases {
        let (events, errors) = parse("{}", &[(key, value.as_bytes())]);
        assert!(events.is_empty(), "{value}");
        assert_eq!(errors.len(), 1, "{value}");
        assert!(errors[0].message.contains(why), "{value}: {}", errors[0].message);
    }
    assert!(run_parser_keyed::<DebeziumParser>(r#"{"key_fields":["a","b","c","d","e"]}"#, &[]).is_err());
}

proptest::proptest! {
    /// Any key and value is an event, a deletion, nothing (a tombstone) or one dead letter,
    /// never a panic; an upsert's row is a JSON object.
    #[test]
    fn any_record_is_an_event_or_a_reason(
        key in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..24),
        op in proptest::sample::select(vec!["c", "u", "d", "r", "t", "?"]),
        after in proptest::sample::select(vec!["null", "{}", r#"{"id":1}"#, "[1]", r#"{"id":"\u00e9"}"#]),
        wrap in proptest::prelude::any::<bool>(),
        cut in 0usize..400,
    ) {
        let event = format!(r#"{{"before":{after},"after":{after},"op":"{op}","source":{{"ts_ms":5}}}}"#);
        let mut value = if wrap { format!(r#"{{"schema":{{}},"payload":{event}}}"#) } else { event };
        value.truncate(cut.min(value.len()));
        let (events, errors) = parse("{}", &[(key.as_slice(), value.as_bytes())]);
        proptest::prop_assert!(events.len() + errors.len() <= 1);
        for e in &events {
            if !e.row.is_empty() {
                let row: serde_json::Value = serde_json::from_slice(&e.row).unwrap();
                proptest::prop_assert!(row.is_object());
            }
        }
    }
}
