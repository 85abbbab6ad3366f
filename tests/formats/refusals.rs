//! Incompatible schemas refused before a run: `weir validate`, `weir run`, a deploy on `weir serve`.

#[allow(unused_imports)]
use super::*;

/// Schemas that break their subject's rules are refused before a run, naming the field and
/// the rule: a sink schema under `BACKWARD`, and a reader schema that cannot read a version.
#[test]
fn incompatible_schemas_are_refused_before_a_run_naming_the_field_and_the_rule() {
    let dir = tempfile::tempdir().unwrap();
    let broker = ApacheKafka::start(&dir.path().join("kafka"));
    let registry = Registry::start(&dir.path().join("registry"));
    broker.create_topic("orders", PARTITIONS);
    let window = std::fs::read_to_string(formats("window.avsc")).unwrap();
    registry.set_compatibility("windows-value", "BACKWARD");
    registry.register("windows-value", "AVRO", &window);
    // A new field without a default: the new schema cannot read the old data.
    let v2 = window.replace(r#"{"name": "count""#, r#"{"name": "region", "type": "string"}, {"name": "count""#);
    assert_ne!(v2, window);
    let run = dir.path().join("sink");
    let p = avro_pipeline(&run, &broker.brokers(), &registry.url(), "windows", "");
    let schema = run.join("window-v2.avsc");
    std::fs::write(&schema, &v2).unwrap();
    let text = std::fs::read_to_string(&p)
        .unwrap()
        .replace(&formats("window.avsc").display().to_string(), &schema.display().to_string());
    std::fs::write(&p, text).unwrap();
    for cmd in ["validate", "run"] {
        let out = weir().arg(cmd).arg(&p).output().unwrap();
        let said = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "weir {cmd}: {said}");
        assert!(said.contains("`region`") && said.contains("BACKWARD") && said.contains("windows-value"), "{said}");
    }
    assert!(!run.join("checkpoint").join("commits").exists(), "nothing ran");

    // A reader schema pinned to a version that cannot read an older one.
    let order = std::fs::read_to_string(formats("order.avsc")).unwrap();
    registry.register("orders-value", "AVRO", &order);
    let reader =
        order.replace(r#"{"name": "order_ts""#, r#"{"name": "region", "type": "string"}, {"name": "order_ts""#);
    registry.register("orders-value", "AVRO", &reader);
    let p = avro_pipeline(&dir.path().join("reader"), &broker.brokers(), &registry.url(), "windows", "");
    let text = std::fs::read_to_string(&p).unwrap().replace(
        "time_field = \"order_ts\"",
        "time_field = \"order_ts\", reader_subject = \"orders-value\", reader_version = 2",
    );
    std::fs::write(&p, text).unwrap();
    let out = weir().arg("validate").arg(&p).output().unwrap();
    let said = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{said}");
    assert!(said.contains("`region`") && said.contains("version 1"), "{said}");

    deploying_on_serve_checks_the_same(dir.path(), &broker, &registry, &v2);
}

/// A tenant's deploy on `weir serve` is refused as `weir validate` refuses: the sink's schema
/// under its subject's level; and the registry's secrets must be the tenant's own files, its
/// address on the allow-list.
fn deploying_on_serve_checks_the_same(dir: &Path, broker: &ApacheKafka, registry: &Registry, v2: &str) {
    use crate::common::serve::{Server, admin_file, tenant};
    let (admin_path, admin) = admin_file(dir);
    let authority = registry.url().trim_start_matches("http://").split('/').next().unwrap().to_string();
    let s = Server::start(
        &dir.join("serve"),
        &admin_path,
        &["--allow-network", &authority, "--allow-network", &broker.brokers()],
    );
    let acme = tenant(&s, &admin, "acme");
    for (name, file) in [("avro-parser", "avro_parser"), ("error-rate", "error_rate")] {
        s.expect(
            201,
            "PUT",
            &format!("/v1/plugins/{name}"),
            Some(&acme),
            Some(&std::fs::read(component(file)).unwrap()),
        );
    }
    s.expect(201, "PUT", "/v1/files/window-v2.avsc", Some(&acme), Some(v2.as_bytes()));
    let text = format!(
        r#"name = "avro"
[source]
type = "kafka"
topics = ["orders"]
kafka.bootstrap.servers = "{brokers}"
[parse]
plugin = "avro-parser"
config = {{ time_field = "order_ts" }}
grants.registry = true
[registry]
url = "{url}"
[watermark]
delay = "10 minutes"
[window]
type = "tumbling"
size = "1 minute"
[aggregate]
plugin = "error-rate"
[sink]
type = "kafka"
topic = "windows"
kafka.bootstrap.servers = "{brokers}"
format = "avro"
schema = "window-v2.avsc"
"#,
        brokers = broker.brokers(),
        url = registry.url(),
    );
    let r = s.expect(400, "PUT", "/v1/pipelines/avro", Some(&acme), Some(text.as_bytes()));
    assert_eq!(r["field"], "sink.schema", "{r}");
    let said = r["error"].as_str().unwrap();
    assert!(said.contains("`region`") && said.contains("BACKWARD"), "{r}");
    let secret = text.replace("[registry]\n", "[registry]\ncredentials_file = \"/etc/hostname\"\n");
    let r = s.expect(400, "PUT", "/v1/pipelines/avro", Some(&acme), Some(secret.as_bytes()));
    assert_eq!(r["field"], "registry.credentials_file", "{r}");
    let elsewhere = text.replace(&authority, "127.0.0.1:1");
    let r = s.expect(400, "PUT", "/v1/pipelines/avro", Some(&acme), Some(elsewhere.as_bytes()));
    assert_eq!(r["field"], "registry.url", "{r}");
}
