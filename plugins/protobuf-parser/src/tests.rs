use super::*;
use base64::Engine;
use prost::Message;
use serde_json::Value;
use weir_guest::registry::Schema as Served;
use weir_guest::testing::{run_parser, serve_schemas};

const ORDER: &str = r#"syntax = "proto3";
package shop;
import "google/protobuf/timestamp.proto";
import "shop/user.proto";
message Other { string s = 1; }
message Order {
  int64 order_id = 1;
  string status = 2;
  int64 order_ts = 3;
  User user = 4;
  google.protobuf.Timestamp at = 5;
  message Line { string sku = 1; }
}
"#;
const USER: &str = "syntax = \"proto3\";\npackage shop;\nmessage User { string id = 1; }\n";

/// Field 1 (varint), 2 (bytes), 3 (varint), 4 (message with field 1 bytes).
fn order_bytes(order_id: u64, status: &str, ts: u64, user: &str) -> Vec<u8> {
    fn varint(mut n: u64, out: &mut Vec<u8>) {
        while n >= 0x80 {
            out.push((n as u8) | 0x80);
            n >>= 7;
        }
        out.push(n as u8);
    }
    let mut v = vec![0x08];
    varint(order_id, &mut v);
    v.push(0x12);
    varint(status.len() as u64, &mut v);
    v.extend_from_slice(status.as_bytes());
    v.push(0x18);
    varint(ts, &mut v);
    v.push(0x22);
    varint(user.len() as u64 + 2, &mut v);
    v.push(0x0a);
    varint(user.len() as u64, &mut v);
    v.extend_from_slice(user.as_bytes());
    v
}

fn framed(id: u32, indexes: &[u8], message: &[u8]) -> Vec<u8> {
    let mut v = vec![0];
    v.extend_from_slice(&id.to_be_bytes());
    v.extend_from_slice(indexes);
    v.extend_from_slice(message);
    v
}

fn serve() {
    // Schema 9: the same Order as a serialized descriptor, as Confluent's Python client registers it.
    let (pool, name) = descriptors::pool(8, ORDER, &[("shop/user.proto".into(), USER.into())]).unwrap();
    let user = pool.get_file_by_name("shop/user.proto").unwrap().file_descriptor_proto().encode_to_vec();
    let order = pool.get_file_by_name(&name).unwrap().file_descriptor_proto().encode_to_vec();
    let b64 = |b: &[u8]| base64::engine::general_purpose::STANDARD.encode(b);
    serve_schemas(
        vec![
            Served {
                id: 8,
                schema_type: SchemaType::Protobuf,
                text: ORDER.into(),
                references: vec![("shop/user.proto".into(), USER.into())],
            },
            Served {
                id: 9,
                schema_type: SchemaType::Protobuf,
                text: b64(&order),
                references: vec![("shop/user.proto".into(), b64(&user))],
            },
            Served { id: 10, schema_type: SchemaType::Json, text: "{}".into(), references: vec![] },
        ],
        vec![],
    );
}

#[test]
fn a_message_is_decoded_with_its_schema_text_or_descriptor_and_keyed() {
    serve();
    let config = r#"{"time_field":"order_ts","key_fields":["user.id"]}"#;
    // Message indexes [1] (Order, the second top-level message): count 1, index 1, zigzag.
    let msg = order_bytes(7, "OK", 1_700_000_000_000, "u7");
    for id in [8, 9] {
        let (events, errors) = run_parser::<ProtobufParser>(config, &[&framed(id, &[2, 2], &msg)]).unwrap();
        assert!(errors.is_empty(), "{errors:?}");
        assert_eq!((events[0].time, events[0].key.as_deref()), (1_700_000_000_000, Some(&b"u7"[..])));
        let row: Value = serde_json::from_slice(&events[0].row).unwrap();
        assert_eq!(row["order_id"], 7, "64-bit integers are numbers: {row}");
        assert_eq!(row["status"], "OK");
    }
}

#[test]
fn bad_records_are_dead_letters_with_their_schema_id_and_why() {
    serve();
    let msg = order_bytes(7, "OK", 1, "u7");
    let mut cut = msg.clone();
    cut.truncate(msg.len() - 2);
    let records = [
        framed(8, &[2, 2], &cut),
        framed(8, &[2, 8], &msg),
        framed(10, &[0], &msg),
        framed(55, &[0], &msg),
        framed(8, &[], &[]),
    ];
    let records: Vec<&[u8]> = records.iter().map(Vec::as_slice).collect();
    let (events, errors) = run_parser::<ProtobufParser>(r#"{"time_field":"order_ts"}"#, &records).unwrap();
    assert!(events.is_empty());
    let said: Vec<&str> = errors.iter().map(|e| e.message.as_str()).collect();
    assert!(said[0].starts_with("schema id 8: the bytes do not decode as shop.Order"), "{said:?}");
    assert!(said[1].contains("message indexes [4] name no message"), "{said:?}");
    assert!(said[2].contains("it is JSON Schema, and this parser reads Protobuf"), "{said:?}");
    assert!(said[3].contains("schema id 55: not in the schema registry"), "{said:?}");
    assert!(said[4].contains("cut short"), "{said:?}");
}

/// Order as a later version has it: `status` gone, `note` and `count` new (field 2 is no longer
/// read; fields 6 and 7 take their defaults).
const ORDER_V2: &str = r#"syntax = "proto3";
package shop;
import "google/protobuf/timestamp.proto";
import "shop/user.proto";
message Other { string s = 1; }
message Order {
  int64 order_id = 1;
  int64 order_ts = 3;
  User user = 4;
  google.protobuf.Timestamp at = 5;
  string note = 6;
  int32 count = 7;
}
"#;

/// A reader whose field 3 is text: the writer's number cannot be read as it.
const ORDER_BAD: &str = r#"syntax = "proto3";
package shop;
message Order { int64 order_id = 1; string order_ts = 3; }
"#;

fn serve_with_readers() {
    let refs = vec![("shop/user.proto".to_string(), USER.to_string())];
    let schema = |id: u32, text: &str, references: Vec<(String, String)>| Served {
        id,
        schema_type: SchemaType::Protobuf,
        text: text.into(),
        references,
    };
    serve_schemas(
        vec![
            schema(8, ORDER, refs.clone()),
            schema(11, ORDER_V2, refs.clone()),
            schema(12, ORDER_BAD, vec![]),
            schema(13, "syntax = \"proto3\";\nmessage Elsewhere { int64 order_ts = 3; }\n", vec![]),
            Served { id: 10, schema_type: SchemaType::Json, text: "{}".into(), references: vec![] },
        ],
        vec![
            ("orders-value".into(), 2, 11),
            ("bad-value".into(), 1, 12),
            ("other-value".into(), 1, 13),
            ("json-value".into(), 1, 10),
        ],
    );
}

#[test]
fn a_reader_schema_reads_the_writer_s_bytes_by_field_number_with_its_defaults() {
    serve_with_readers();
    let config = |subject: &str| {
        format!(
            r#"{{"time_field":"order_ts","reader_subject":"{subject}","reader_version":{}}}"#,
            1 + u32::from(subject == "orders-value")
        )
    };
    let msg = framed(8, &[2, 2], &order_bytes(7, "OK", 1_700_000_000_000, "u7"));
    let (events, errors) = run_parser::<ProtobufParser>(&config("orders-value"), &[&msg]).unwrap();
    assert!(errors.is_empty(), "{errors:?}");
    let row: Value = serde_json::from_slice(&events[0].row).unwrap();
    assert_eq!(
        (row["order_id"].as_i64(), row["count"].as_i64(), row["note"].as_str()),
        (Some(7), Some(0), Some("")),
        "{row}"
    );
    assert!(row.get("status").is_none(), "a field the reader lacks is dropped: {row}");
    assert_eq!(events[0].time, 1_700_000_000_000);
    // A reader that reads field 3 as text, and one without the record's message: dead letters.
    let (_, errors) = run_parser::<ProtobufParser>(&config("bad-value"), &[&msg]).unwrap();
    assert!(errors[0].message.contains("do not decode as shop.Order"), "{errors:?}");
    let (_, errors) = run_parser::<ProtobufParser>(&config("other-value"), &[&msg]).unwrap();
    assert!(errors[0].message.contains("the reader schema has no message shop.Order"), "{errors:?}");
    // A reader schema of another type, or named by half, is refused at start.
    assert!(run_parser::<ProtobufParser>(&config("json-value"), &[]).is_err());
    assert!(run_parser::<ProtobufParser>(r#"{"time_field":"t","reader_subject":"orders-value"}"#, &[]).is_err());
}
