//! JSON Schema and Protobuf: orders written by Confluent's own serializers (its Protobuf one
//! registers a serialized descriptor, its JSON Schema one the schema's text) are read by the
//! standard library's `json_schema_parser.wasm` and `protobuf_parser.wasm`, and bad records go
//! to the dead letters with their schema id and why.

#[allow(unused_imports)]
use super::*;

/// A stateless pipeline from `topic` through `parser` to JSON lines in `dir/rows`, or with
/// `sink`, there.
fn rows_pipeline(dir: &Path, brokers: &str, registry: &str, topic: &str, parser: &str, sink: Option<&str>) -> PathBuf {
    let rows = dir.join("rows");
    std::fs::create_dir_all(&rows).unwrap();
    let sink = sink.map_or_else(|| file_sink(&rows), String::from);
    let text = format!(
        r#"
name = "orders-{parser}"
[source]
type = "kafka"
topics = ["{topic}"]
kafka.bootstrap.servers = "{brokers}"
[trigger]
mode = "available-now"
[parse]
plugin = "{plugin}"
config = {{ time_field = "order_ts", key_fields = ["user_id"] }}
grants.registry = true
[registry]
url = "{registry}"
{sink}
[checkpoint]
location = "{checkpoint}"
[dead_letter]
path = "{dead}"
"#,
        plugin = component(parser).display(),
        checkpoint = dir.join("checkpoint").display(),
        dead = dir.join("dead-letters.jsonl").display(),
    );
    let p = dir.join("pipeline.toml");
    std::fs::write(&p, text).unwrap();
    p
}

/// Every order of `events` is a row, with its fields and its key; the one bad record a dead
/// letter saying `why`.
fn check(dir: &Path, events: &Path, why: &str) {
    let want: std::collections::BTreeMap<u64, serde_json::Value> =
        json_lines(&std::fs::read_to_string(events).unwrap())
            .into_iter()
            .map(|o| (o["order_id"].as_u64().unwrap(), o))
            .collect();
    let rows = sink_rows(&dir.join("rows"));
    assert_eq!(rows.len(), want.len(), "one row per order");
    for r in &rows {
        let o = &want[&r["order_id"].as_u64().unwrap()];
        for field in ["user_id", "status", "order_ts"] {
            assert_eq!(r[field], o[field], "{field} of {r}");
        }
        assert!((r["amount"].as_f64().unwrap() - o["amount"].as_f64().unwrap()).abs() < 1e-9, "{r}");
    }
    let dead = dead_letters(dir);
    assert_eq!(dead.len(), 1, "{dead:?}");
    assert!(dead[0]["error"].as_str().unwrap().contains(why), "{dead:?}");
}

#[test]
fn json_schema_and_protobuf_orders_from_confluent_s_serializers_are_read_by_the_standard_parsers() {
    let dir = tempfile::tempdir().unwrap();
    let broker = ApacheKafka::start(&dir.path().join("kafka"));
    let registry = Registry::start(&dir.path().join("registry"));
    for topic in ["orders-json", "orders-proto"] {
        broker.create_topic(topic, PARTITIONS);
    }
    let events = orders(dir.path(), 2_000, 5);
    let (b, r, input) = (broker.brokers(), registry.url(), events.to_str().unwrap().to_string());
    let schema = formats("order.json");
    let common = ["--brokers", &b, "--registry", &r, "--input", &input];
    let json = [&common[..], &["--topic", "orders-json", "--schema", schema.to_str().unwrap()]].concat();
    assert_eq!(confluent(&[&["produce-json"], &json[..]].concat()).trim(), "2000");
    let proto = [&common[..], &["--topic", "orders-proto"]].concat();
    assert_eq!(confluent(&[&["produce-protobuf"], &proto[..]].concat()).trim(), "2000");
    let (json_id, proto_id) =
        (subject_id(&registry, "orders-json-value", 1), subject_id(&registry, "orders-proto-value", 1));
    // A negative amount the schema refuses; a message cut short (indexes [1]: the Order).
    produce_raw(
        &b,
        "orders-json",
        &[framed(json_id, br#"{"order_id":1,"user_id":1,"status":"OK","amount":-1,"order_ts":1}"#)],
    );
    produce_raw(&b, "orders-proto", &[framed(proto_id, &[2, 2, 0x08])]);

    let json_dir = dir.path().join("json");
    ok(weir()
        .arg("run")
        .arg(rows_pipeline(&json_dir, &b, &r, "orders-json", "json_schema_parser", None))
        .output()
        .unwrap());
    check(&json_dir, &events, &format!("schema id {json_id}: `/amount`"));

    let proto_dir = dir.path().join("proto");
    ok(weir()
        .arg("run")
        .arg(rows_pipeline(&proto_dir, &b, &r, "orders-proto", "protobuf_parser", None))
        .output()
        .unwrap());
    check(&proto_dir, &events, &format!("schema id {proto_id}: the bytes do not decode as shop.Order"));

    written_back_as_each_format(dir.path(), &broker, &registry, &events);
}

/// The Kafka sink writes the JSON Schema orders back as Protobuf and as JSON Schema, and
/// Confluent's deserializers read them; a row the schema refuses is a dead letter naming it.
fn written_back_as_each_format(dir: &Path, broker: &ApacheKafka, registry: &Registry, events: &Path) {
    let want: std::collections::BTreeMap<u64, serde_json::Value> =
        json_lines(&std::fs::read_to_string(events).unwrap())
            .into_iter()
            .map(|o| (o["order_id"].as_u64().unwrap(), o))
            .collect();
    // The JSON Schema output refuses ERROR orders: each is a dead letter naming `/status`.
    let strict = dir.join("order-no-errors.json");
    let text = std::fs::read_to_string(formats("order.json")).unwrap();
    std::fs::write(&strict, text.replace(r#"["OK", "PENDING", "ERROR"]"#, r#"["OK", "PENDING"]"#)).unwrap();
    let errors = want.values().filter(|o| o["status"] == "ERROR").count();
    assert!(errors > 0);
    for (format, schema, extra, decode) in [
        ("protobuf", formats("order.proto"), "message = \"shop.Order\"", "decode-protobuf"),
        ("json-schema", strict, "", "decode-json"),
    ] {
        let refused = if format == "json-schema" { errors } else { 0 };
        let topic = format!("out-{format}");
        broker.create_topic(&topic, PARTITIONS);
        let sink = format!(
            "[sink]\ntype = \"kafka\"\ntopic = \"{topic}\"\nkafka.bootstrap.servers = \"{}\"\nformat = \"{format}\"\n\
             schema = \"{}\"\n{extra}\n",
            broker.brokers(),
            schema.display()
        );
        let out = dir.join(&topic);
        let p =
            rows_pipeline(&out, &broker.brokers(), &registry.url(), "orders-json", "json_schema_parser", Some(&sink));
        ok(weir().arg("run").arg(&p).output().unwrap());
        let values: Vec<Vec<u8>> = read_raw(&broker.brokers(), &topic).into_iter().map(|(_, v)| v).collect();
        assert_eq!(values.len(), want.len() - refused, "{format}: one message per order that fits");
        let dead: Vec<serde_json::Value> = dead_letters(&out).into_iter().filter(|d| d["stage"] == "sink").collect();
        assert_eq!(dead.len(), refused, "{format}: {dead:?}");
        assert!(dead.iter().all(|d| d["error"].as_str().unwrap().contains("field `/status`")), "{dead:?}");
        let hex: Vec<String> = values.iter().map(|v| v.iter().map(|b| format!("{b:02x}")).collect()).collect();
        let file = dir.join(format!("{topic}.hex"));
        std::fs::write(&file, hex.join("\n") + "\n").unwrap();
        let text =
            confluent(&[decode, "--registry", &registry.url(), "--topic", &topic, "--input", file.to_str().unwrap()]);
        for r in json_lines(&text) {
            // Protobuf's JSON mapping writes 64-bit integers as text.
            let int = |v: &serde_json::Value| v.as_u64().or_else(|| v.as_str().and_then(|s| s.parse().ok()));
            let o = &want[&int(&r["order_id"]).unwrap()];
            assert_eq!(int(&r["order_ts"]), o["order_ts"].as_u64(), "{format}: {r}");
            assert_eq!(r["status"], o["status"], "{format}: {r}");
        }
        let (status, _) = registry.get(&format!("/subjects/{topic}-value/versions/1"));
        assert_eq!(status, 200, "{format}: the sink registered its schema");
    }
}
