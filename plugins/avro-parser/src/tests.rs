use super::*;
use weir_guest::registry::Schema as Served;
use weir_guest::testing::{run_parser, serve_schemas};

const V1: &str = r#"{"type":"record","name":"Order","namespace":"shop","fields":[
    {"name":"order_id","type":"string"},{"name":"qty","type":"int"},
    {"name":"order_ts","type":{"type":"long","logicalType":"timestamp-millis"}},
    {"name":"user","type":{"type":"record","name":"User","fields":[{"name":"id","type":"string"}]}},
    {"name":"note","type":["null","string"],"default":null}]}"#;

/// V1 read as: `qty` promoted to long, `note` dropped, `channel` added with a default.
const READER: &str = r#"{"type":"record","name":"Order","namespace":"shop","fields":[
    {"name":"order_id","type":"string"},{"name":"qty","type":"long"},
    {"name":"order_ts","type":{"type":"long","logicalType":"timestamp-millis"}},
    {"name":"user","type":{"type":"record","name":"User","fields":[{"name":"id","type":"string"}]}},
    {"name":"channel","type":"string","default":"web"}]}"#;

fn served(id: u32, schema_type: SchemaType, text: &str) -> Served {
    Served { id, schema_type, text: text.into(), references: vec![] }
}

fn serve() {
    serve_schemas(
        vec![
            served(1, SchemaType::Avro, V1),
            served(2, SchemaType::Avro, READER),
            served(3, SchemaType::Protobuf, "syntax = \"proto3\";"),
        ],
        vec![("orders-value".into(), 1, 1), ("orders-value".into(), 2, 2)],
    );
}

/// `row` encoded with `schema`, framed with schema id `id`.
fn framed(id: u32, schema: &str, row: &str) -> Vec<u8> {
    let s = weir_schema::avro::parse(schema, &[]).unwrap();
    let mut out = Vec::new();
    weir_schema::wire::frame(id, &mut out);
    weir_schema::avro::Encoder::new(s, vec![]).encode(row.as_bytes(), &mut out).unwrap();
    out
}

const ROW: &str = r#"{"order_id":"o1","qty":3,"order_ts":1700000000123,"user":{"id":"u7"},"note":"gift"}"#;

fn json(bytes: &[u8]) -> serde_json::Value {
    serde_json::from_slice(bytes).unwrap()
}

#[test]
fn a_record_is_decoded_with_its_writer_s_schema_and_keyed() {
    serve();
    let config = r#"{"time_field":"order_ts","key_fields":["user.id"]}"#;
    let (events, errors) = run_parser::<AvroParser>(config, &[&framed(1, V1, ROW)]).unwrap();
    assert!(errors.is_empty(), "{errors:?}");
    assert_eq!(events[0].time, 1_700_000_000_123);
    assert_eq!(events[0].key.as_deref(), Some(&b"u7"[..]));
    assert_eq!(json(&events[0].row), json(ROW.as_bytes()));
}

#[test]
fn a_reader_schema_resolves_defaults_promotions_and_dropped_fields() {
    serve();
    let config = r#"{"time_field":"order_ts","reader_subject":"orders-value","reader_version":2}"#;
    let (events, errors) = run_parser::<AvroParser>(config, &[&framed(1, V1, ROW)]).unwrap();
    assert!(errors.is_empty(), "{errors:?}");
    let row = json(&events[0].row);
    assert_eq!(row["qty"], 3);
    assert_eq!(row["channel"], "web", "the reader's default");
    assert!(row.get("note").is_none(), "a field the reader does not have is dropped: {row}");
}

#[test]
fn bad_records_are_dead_letters_with_their_schema_id_and_why() {
    serve();
    let good = framed(1, V1, ROW);
    let mut truncated = good.clone();
    truncated.truncate(good.len() - 3);
    let mut longer = good.clone();
    longer.push(7);
    let mut unknown = good.clone();
    unknown[4] = 99;
    let mut proto = good.clone();
    proto[4] = 3;
    let json_record = br#"{"order_id":"o1"}"#.to_vec();
    let records: [&[u8]; 6] = [&truncated, &longer, &unknown, &proto, &json_record, &good[..3]];
    let (events, errors) = run_parser::<AvroParser>(r#"{"time_field":"order_ts"}"#, &records).unwrap();
    assert!(
        events.is_empty(),
        "{:?}",
        events.iter().map(|e| (e.origin, String::from_utf8_lossy(&e.row))).collect::<Vec<_>>()
    );
    let said: Vec<&str> = errors.iter().map(|e| e.message.as_str()).collect();
    assert!(said[0].starts_with("schema id 1: the bytes do not decode"), "{said:?}");
    assert!(said[1].contains("schema id 1: 1 bytes left over"), "{said:?}");
    assert!(said[2].contains("schema id 99: not in the schema registry"), "{said:?}");
    assert!(said[3].contains("schema id 3: it is Protobuf, and this parser reads Avro"), "{said:?}");
    assert!(said[4].contains("magic byte 0x7b"), "{said:?}");
    assert!(said[5].contains("too short"), "{said:?}");
}

#[test]
fn a_reader_schema_is_a_pinned_version_of_a_subject() {
    serve();
    let e = run_parser::<AvroParser>(r#"{"time_field":"t","reader_subject":"orders-value"}"#, &[]).unwrap_err();
    assert!(matches!(e, PluginError::InvalidConfig(m) if m.contains("go together")));
    let e = run_parser::<AvroParser>(r#"{"time_field":"t","reader_subject":"orders-value","reader_version":9}"#, &[])
        .unwrap_err();
    assert!(matches!(&e, PluginError::InvalidConfig(m) if m.contains("version 9")), "{e:?}");
}

#[test]
fn a_missing_or_wrong_time_field_is_the_record_s_error() {
    serve();
    let (_, errors) = run_parser::<AvroParser>(r#"{"time_field":"qty_ts"}"#, &[&framed(1, V1, ROW)]).unwrap();
    assert!(errors[0].message.contains("qty_ts"), "{errors:?}");
    let (_, errors) = run_parser::<AvroParser>(r#"{"time_field":"order_id"}"#, &[&framed(1, V1, ROW)]).unwrap();
    assert!(errors[0].message.contains("not RFC 3339"), "{errors:?}");
}

#[test]
fn without_the_grant_the_parser_refuses_to_start() {
    // No `serve_schemas` on this thread: as a stage without `grants.registry`.
    let e = std::thread::spawn(|| run_parser::<AvroParser>(r#"{"time_field":"t"}"#, &[]).unwrap_err()).join().unwrap();
    assert!(matches!(&e, PluginError::InvalidConfig(m) if m.contains("grants.registry = true")), "{e:?}");
}
