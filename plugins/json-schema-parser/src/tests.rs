use super::*;
use weir_guest::registry::Schema as Served;
use weir_guest::testing::{run_parser, serve_schemas};

const ORDER: &str = r#"{"$schema":"http://json-schema.org/draft-07/schema#","title":"Order","type":"object",
  "properties":{"order_id":{"type":"integer"},"status":{"enum":["OK","ERROR"]},"order_ts":{"type":"integer"},
  "user":{"$ref":"user.json"}},"required":["order_id","order_ts"]}"#;
const USER: &str = r#"{"type":"object","properties":{"id":{"type":"string"}},"required":["id"]}"#;

fn serve() {
    serve_schemas(
        vec![
            Served {
                id: 4,
                schema_type: SchemaType::Json,
                text: ORDER.into(),
                references: vec![("user.json".into(), USER.into())],
            },
            Served { id: 5, schema_type: SchemaType::Avro, text: "\"long\"".into(), references: vec![] },
        ],
        vec![],
    );
}

fn framed(id: u32, json: &str) -> Vec<u8> {
    let mut v = vec![0];
    v.extend_from_slice(&id.to_be_bytes());
    v.extend_from_slice(json.as_bytes());
    v
}

#[test]
fn a_record_the_schema_accepts_is_its_row() {
    serve();
    let row = r#"{"order_id":1,"status":"OK","order_ts":1700000000000,"user":{"id":"u7"}}"#;
    let config = r#"{"time_field":"order_ts","key_fields":["user.id"]}"#;
    let (events, errors) = run_parser::<JsonSchemaParser>(config, &[&framed(4, row)]).unwrap();
    assert!(errors.is_empty(), "{errors:?}");
    assert_eq!((events[0].time, events[0].key.as_deref()), (1_700_000_000_000, Some(&b"u7"[..])));
    assert_eq!(events[0].row, row.as_bytes());
}

#[test]
fn what_the_schema_refuses_is_a_dead_letter_naming_where() {
    serve();
    let records = [
        framed(4, r#"{"order_id":"one","order_ts":1}"#),
        framed(4, r#"{"order_id":1,"order_ts":1,"user":{}}"#),
        framed(4, r#"{"order_id":1}"#),
        framed(4, "[1]"),
        framed(4, "{not json"),
        framed(5, "{}"),
        framed(77, "{}"),
    ];
    let records: Vec<&[u8]> = records.iter().map(Vec::as_slice).collect();
    let (events, errors) = run_parser::<JsonSchemaParser>(r#"{"time_field":"order_ts"}"#, &records).unwrap();
    assert!(events.is_empty());
    let said: Vec<&str> = errors.iter().map(|e| e.message.as_str()).collect();
    assert!(said[0].starts_with("schema id 4: `/order_id`:"), "{said:?}");
    assert!(said[1].starts_with("schema id 4: `/user`:") && said[1].contains("id"), "{said:?}");
    assert!(said[2].contains("order_ts"), "{said:?}");
    assert!(said[3].contains("not a JSON object"), "{said:?}");
    assert!(said[4].contains("not JSON"), "{said:?}");
    assert!(said[5].contains("schema id 5: it is Avro, and this parser reads JSON Schema"), "{said:?}");
    assert!(said[6].contains("schema id 77: not in the schema registry"), "{said:?}");
}

#[test]
fn a_record_must_fit_the_reader_schema_too() {
    // The reader (a later version) requires `status`; the writer's did not.
    let reader = r#"{"type":"object","properties":{"order_id":{"type":"integer"},"status":{"enum":["OK","ERROR"]}},
        "required":["order_id","status"]}"#;
    serve_schemas(
        vec![
            Served {
                id: 4,
                schema_type: SchemaType::Json,
                text: ORDER.into(),
                references: vec![("user.json".into(), USER.into())],
            },
            Served { id: 6, schema_type: SchemaType::Json, text: reader.into(), references: vec![] },
            Served { id: 5, schema_type: SchemaType::Avro, text: "\"long\"".into(), references: vec![] },
        ],
        vec![("orders-value".into(), 2, 6), ("avro-value".into(), 1, 5)],
    );
    let config = r#"{"time_field":"order_ts","reader_subject":"orders-value","reader_version":2}"#;
    let fits = r#"{"order_id":1,"status":"OK","order_ts":1}"#;
    let records = [framed(4, fits), framed(4, r#"{"order_id":2,"order_ts":2}"#)];
    let records: Vec<&[u8]> = records.iter().map(Vec::as_slice).collect();
    let (events, errors) = run_parser::<JsonSchemaParser>(config, &records).unwrap();
    assert_eq!(events.len(), 1);
    assert_eq!(events[0].row, fits.as_bytes());
    assert!(errors[0].message.starts_with("schema id 4: the reader schema: the row:"), "{errors:?}");
    assert!(errors[0].message.contains("status"), "{errors:?}");
    let avro = r#"{"time_field":"order_ts","reader_subject":"avro-value","reader_version":1}"#;
    assert!(run_parser::<JsonSchemaParser>(avro, &[]).is_err(), "a reader schema of another type is refused");
}
