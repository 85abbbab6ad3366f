//! `[registry]`, `grants.registry` and a Kafka sink's Avro keys: good files, and bad ones
//! naming the key and the fix.

use std::path::Path;

use super::*;

const AVRO: &str = r#"
    name = "orders"
    [source]
    type = "kafka"
    topics = ["orders"]
    kafka = { "bootstrap.servers" = "localhost:9092" }
    [parse]
    plugin = "avro_parser.wasm"
    config = { time_field = "order_ts" }
    grants.registry = true
    [registry]
    url = "http://localhost:8081/"
    credentials_file = "secrets/registry"
    retry_for = "30s"
    [sink]
    type = "kafka"
    topic = "out"
    kafka = { "bootstrap.servers" = "localhost:9092" }
    format = "avro"
    schema = "out.avsc"
    subject_strategy = "topic-record"
"#;

fn err(text: &str) -> String {
    Pipeline::parse(text, Path::new("dir/p.toml")).unwrap_err().to_string()
}

#[test]
fn a_registry_reaches_the_stages_granted_it_and_the_avro_sink() {
    let p = Pipeline::parse(AVRO, Path::new("dir/p.toml")).unwrap();
    let r = p.registry.clone().expect("the registry");
    assert_eq!(r.url, "http://localhost:8081");
    assert_eq!(r.credentials_file.as_deref(), Some(Path::new("dir/secrets/registry")));
    assert_eq!(r.retry_for, Duration::from_secs(30));
    assert_eq!(p.parse.as_ref().and_then(|s| s.grants.registry.clone()), Some(r.clone()));
    let Some(SinkConfig::Kafka(k)) = &p.sink else { panic!("a kafka sink") };
    let a = k.encoded.as_ref().expect("avro output");
    assert_eq!(a.schema, Path::new("dir/out.avsc"));
    assert_eq!(a.strategy, weir_schema::SubjectStrategy::TopicRecord);
    assert!(a.auto_register);
    assert_eq!(a.registry, r);
}

#[test]
fn registry_keys_are_refused_naming_the_key_and_the_fix() {
    let no_registry = AVRO.replace("[registry]\n    url = \"http://localhost:8081/\"\n    credentials_file = \"secrets/registry\"\n    retry_for = \"30s\"\n", "");
    assert!(err(&no_registry).contains("parse.grants.registry: the pipeline names no schema registry: add [registry]"));
    let e = err(&AVRO.replace("http://localhost:8081/", "https://me:secret@localhost:8081"));
    assert!(e.contains("registry.url: credentials do not belong in the URL"), "{e}");
    assert!(!e.contains("secret"), "the error repeats no secret: {e}");
    assert!(err(&AVRO.replace("\"30s\"", "\"soon\"")).contains("registry.retry_for: `soon` is not a duration"));
    assert!(err(&AVRO.replace("retry_for", "retry_fro")).contains("unknown field `retry_fro`"));
}

#[test]
fn avro_sink_keys_are_refused_where_they_do_not_apply() {
    let e = err(&AVRO.replace("    schema = \"out.avsc\"\n", ""));
    assert!(e.contains("sink.schema: format = \"avro\" writes with a schema"), "{e}");
    let e = err(&AVRO.replace("format = \"avro\"", "format = \"json\""));
    assert!(e.contains("sink.schema: only with format = \"avro\", \"protobuf\" or \"json-schema\""), "{e}");
    let e = err(&AVRO.replace("format = \"avro\"", "format = \"avro\"\n    message = \"shop.Order\""));
    assert!(e.contains("sink.message: only with format = \"protobuf\""), "{e}");
    let p = Pipeline::parse(
        &AVRO.replace("format = \"avro\"", "format = \"protobuf\"\n    message = \"shop.Order\""),
        Path::new("dir/p.toml"),
    )
    .unwrap();
    let Some(SinkConfig::Kafka(k)) = &p.sink else { panic!("a kafka sink") };
    let out = k.encoded.as_ref().unwrap();
    assert_eq!((out.format, out.message.as_deref()), (SchemaFormat::Protobuf, Some("shop.Order")));
    let e = err(&AVRO.replace("subject_strategy = \"topic-record\"", "subject_strategy = \"sideways\""));
    assert!(e.contains("sink.subject_strategy") && e.contains("topic-record"), "{e}");
    let wasm = r#"
        name = "o"
        [source]
        type = "replay"
        path = "e.jsonl"
        [parse]
        plugin = "p.wasm"
        [sink]
        plugin = "s.wasm"
        format = "avro"
    "#;
    assert!(err(wasm).contains("sink.format: only a Kafka sink"), "{}", err(wasm));
}
