use super::*;
use apache_avro::types::Value as Avro;
use proptest::prelude::*;

const ORDER: &str = r#"{
  "type": "record", "name": "Order", "namespace": "shop",
  "fields": [
    {"name": "order_id", "type": "string"},
    {"name": "amount", "type": "double"},
    {"name": "qty", "type": "int", "default": 1},
    {"name": "status", "type": {"type": "enum", "name": "Status", "symbols": ["OK", "ERROR"]}},
    {"name": "note", "type": ["null", "string"], "default": null},
    {"name": "tags", "type": {"type": "array", "items": "string"}, "default": []},
    {"name": "order_ts", "type": {"type": "long", "logicalType": "timestamp-millis"}},
    {"name": "price", "type": {"type": "bytes", "logicalType": "decimal", "precision": 9, "scale": 2}, "default": "\u0000"},
    {"name": "lines", "type": {"type": "array", "items": {"type": "record", "name": "Line",
        "fields": [{"name": "sku", "type": "string"}, {"name": "n", "type": "long"}]}}, "default": []}
  ]}"#;

fn encoder() -> Encoder {
    Encoder::new(crate::avro::parse(ORDER, &[]).unwrap(), vec![])
}

fn decode(e: &Encoder, bytes: &[u8]) -> Avro {
    apache_avro::reader::datum::GenericDatumReader::builder(e.schema())
        .build()
        .unwrap()
        .read_value(&mut &bytes[..])
        .unwrap()
}

#[test]
fn a_row_is_written_as_avro_s_own_reader_reads_it() {
    let e = encoder();
    let mut out = Vec::new();
    let row =
        br#"{"order_id":"o1","amount":12.5,"status":"ERROR","note":"hi","tags":["a","b"],"order_ts":1700000000000,
                   "price":"12.34","lines":[{"sku":"x","n":3}],"ignored":true}"#;
    e.encode(row, &mut out).unwrap();
    let Avro::Record(fields) = decode(&e, &out) else { panic!("a record") };
    let get = |n: &str| fields.iter().find(|(k, _)| k == n).map(|(_, v)| v.clone()).unwrap();
    assert_eq!(get("order_id"), Avro::String("o1".into()));
    assert_eq!(get("qty"), Avro::Int(1), "the default");
    assert_eq!(get("status"), Avro::Enum(1, "ERROR".into()));
    assert_eq!(get("note"), Avro::Union(1, Box::new(Avro::String("hi".into()))));
    assert_eq!(get("order_ts"), Avro::TimestampMillis(1_700_000_000_000));
    let Avro::Decimal(d) = get("price") else { panic!("a decimal") };
    assert_eq!(Vec::<u8>::try_from(d).unwrap(), 1234i32.to_be_bytes()[2..].to_vec());
    let Avro::Array(lines) = get("lines") else { panic!("an array") };
    assert_eq!(lines.len(), 1);
}

#[test]
fn a_row_that_does_not_fit_names_the_field_and_writes_nothing() {
    let e = encoder();
    let mut out = vec![9];
    let cases: [(&[u8], &str); 6] = [
        (br#"{"amount":1,"status":"OK","order_ts":1}"#, "order_id"),
        (br#"{"order_id":"o","amount":"x","status":"OK","order_ts":1}"#, "amount"),
        (br#"{"order_id":"o","amount":1,"status":"LOST","order_ts":1}"#, "status"),
        (br#"{"order_id":"o","amount":1,"status":"OK","order_ts":1,"qty":3000000000}"#, "qty"),
        (br#"{"order_id":"o","amount":1,"status":"OK","order_ts":1,"note":5}"#, "note"),
        (br#"{"order_id":"o","amount":1,"status":"OK","order_ts":1,"lines":[{"sku":"x","n":"many"}]}"#, "lines[0].n"),
    ];
    for (row, field) in cases {
        let m = e.encode(row, &mut out).unwrap_err();
        assert_eq!(m.field, field, "{m}");
        assert_eq!(out, [9], "nothing written for a misfit");
    }
    let m =
        e.encode(br#"{"order_id":"o","amount":1,"status":"OK","order_ts":1,"price":"1.234"}"#, &mut out).unwrap_err();
    assert!(m.message.contains("2 digits"), "{m}");
}

#[test]
fn decimals_are_scaled_and_two_s_complement() {
    assert_eq!(decimal(&Value::from(-1.5), 2, &[]).unwrap(), -150);
    assert_eq!(decimal(&Value::from("007.10"), 1, &[]).unwrap(), 71);
    assert_eq!(twos_complement(-1), vec![0xff]);
    assert_eq!(twos_complement(128), vec![0, 0x80]);
    assert_eq!(twos_complement(-129), vec![0xff, 0x7f]);
    assert_eq!(twos_complement(0), vec![0]);
}

fn json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        any::<f64>().prop_map(Value::from),
        "[a-zA-Z0-9.]{0,8}".prop_map(Value::from),
    ];
    leaf.prop_recursive(4, 32, 6, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            proptest::collection::btree_map("[a-z_]{1,9}", inner, 0..6)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

proptest! {
    /// Any JSON is either written as the schema's reader reads it back, or refused naming a
    /// field; nothing panics.
    #[test]
    fn any_row_is_written_readably_or_refused(v in json()) {
        let e = encoder();
        let mut out = Vec::new();
        if e.encode(v.to_string().as_bytes(), &mut out).is_ok() {
            apache_avro::reader::datum::GenericDatumReader::builder(e.schema()).build().unwrap().read_value(&mut &out[..]).unwrap();
        } else {
            prop_assert!(out.is_empty());
        }
    }
}
