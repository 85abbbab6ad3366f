use std::collections::BTreeMap;

use proptest::prelude::*;

use super::*;

struct Area {
    data: tempfile::TempDir,
    files: PathBuf,
    plugins: BTreeMap<String, PluginRecord>,
    allow: Vec<String>,
}

const DIGEST: &str = "sha256:1111111111111111111111111111111111111111111111111111111111111111";

impl Area {
    fn new() -> Self {
        let data = tempfile::tempdir().unwrap();
        let files = data.path().join("tenants/acme/files");
        std::fs::create_dir_all(&files).unwrap();
        let record = PluginRecord { digest: DIGEST.into(), bytes: 1, roles: vec!["parser".into()], uploaded_ms: 0 };
        let plugins = BTreeMap::from([("orders-json".to_string(), record.clone()), ("sink".to_string(), record)]);
        Area { data, files, plugins, allow: vec!["127.0.0.1:9092".into()] }
    }

    fn confine(&self, text: &str) -> Result<Confined, Refusal> {
        let scope = Scope {
            tenant: "acme",
            name: "orders",
            data: self.data.path(),
            files: &self.files,
            plugins: &self.plugins,
            allow_network: &self.allow,
            cpu_weight: 3,
        };
        confine(&scope, text)
    }
}

/// A pipeline file; with a file sink unless `extra` has a sink of its own.
fn file(source_path: &str, extra: &str) -> String {
    let sink = if extra.contains("[sink]") {
        ""
    } else {
        "[sink]\nplugin = \"sink\"\nconfig = { dir = \"/out\" }\ngrants.dirs = [{ host = \"out\", guest = \"/out\", writable = true }]\n"
    };
    format!(
        "name = \"orders\"\n[source]\ntype = \"replay\"\npath = {source_path:?}\n[parse]\nplugin = \"orders-json\"\n{extra}{sink}"
    )
}

#[test]
fn an_uploaded_plugin_by_name_or_digest_resolves_into_the_store_and_the_run_is_named_for_its_tenant() {
    let a = Area::new();
    let c = a.confine(&file("orders.jsonl", "")).unwrap();
    assert_eq!(c.pipeline.name, "acme--orders");
    let component = &c.pipeline.parse.as_ref().unwrap().component;
    assert_eq!(component, &a.data.path().join("plugins").join(format!("{}.wasm", &DIGEST[7..])));
    assert_eq!(c.digests, [DIGEST]);
    assert!(c.pipeline.stages().all(|s| s.limits.cpu_weight == 3), "the tenant's weight on every stage");
    let own_weight = file("orders.jsonl", "")
        .replace("plugin = \"orders-json\"\n", "plugin = \"orders-json\"\nlimits = { cpu_weight = 16 }\n");
    assert_eq!(a.confine(&own_weight).unwrap_err().field, "parse.limits.cpu_weight");
    let no_sink = file("orders.jsonl", "[sink]\n").replace("[sink]\n", "");
    assert_eq!(a.confine(&no_sink).unwrap_err().field, "sink");
    let by_digest = file("orders.jsonl", "").replace("\"orders-json\"", &format!("{DIGEST:?}"));
    assert!(a.confine(&by_digest).is_ok());
    match &c.pipeline.source.kind {
        SourceKind::Replay { path, .. } => assert_eq!(path, &a.files.join("orders.jsonl")),
        other => panic!("{other:?}"),
    }
    // Two instances of the parser and one of the sink, 512 MiB each by default.
    assert_eq!(c.memory_mb, 3 * 512);
}

#[test]
fn what_is_not_the_tenant_s_is_refused_with_the_key_to_blame() {
    let a = Area::new();
    let cases: &[(&str, String)] = &[
        ("source.path", file("../../other/files/orders.jsonl", "")),
        ("source.path", file("/etc/passwd", "")),
        ("parse.plugin", file("o.jsonl", "").replace("\"orders-json\"", "\"/usr/lib/evil.wasm\"")),
        ("parse.plugin", file("o.jsonl", "").replace("\"orders-json\"", "\"someone-elses\"")),
        ("checkpoint", file("o.jsonl", "[checkpoint]\nlocation = \"cp\"\n")),
        ("dead_letter.path", file("o.jsonl", "[dead_letter]\npath = \"/tmp/dl.jsonl\"\n")),
        ("name", file("o.jsonl", "").replace("name = \"orders\"", "name = \"other\"")),
    ];
    for (field, text) in cases {
        let r = a.confine(text).unwrap_err();
        assert!(r.field.ends_with(field), "{field}: {r:?}");
    }
    let sink =
        |grants: &str| file("o.jsonl", &format!("[sink]\nplugin = \"sink\"\nconfig = {{ dir = \"/out\" }}\n{grants}"));
    let r = a.confine(&sink("grants.dirs = [{ host = \"../..\", guest = \"/out\", writable = true }]")).unwrap_err();
    assert_eq!(r.field, "sink.grants.dirs[0].host");
    let r = a.confine(&sink("grants.env = [\"HOME\"]")).unwrap_err();
    assert_eq!(r.field, "sink.grants.env");
    let r = a.confine(&sink("grants.http = [\"example.com:443\"]")).unwrap_err();
    assert!(r.field == "sink.grants.http" && r.message.contains("allow-list"), "{r:?}");
    assert!(a.confine(&sink("grants.dirs = [{ host = \"out\", guest = \"/out\", writable = true }]")).is_ok());
}

#[test]
fn a_parquet_sink_writes_and_reads_its_schema_inside_the_area_only() {
    let a = Area::new();
    std::fs::write(
        a.files.join("o.avsc"),
        r#"{"type":"record","name":"O","fields":[{"name":"order_id","type":"long"}]}"#,
    )
    .unwrap();
    let sink = |path: &str, schema: &str| {
        file("o.jsonl", &format!("[sink]\ntype = \"parquet\"\npath = {path:?}\nschema = {schema:?}\n"))
    };
    let c = a.confine(&sink("lake", "o.avsc")).unwrap();
    assert!(matches!(&c.pipeline.sink, Some(SinkConfig::Parquet(p)) if p.path == a.files.join("lake")));
    assert_eq!(a.confine(&sink("../../../lake", "o.avsc")).unwrap_err().field, "sink.path");
    assert_eq!(a.confine(&sink("/tmp/lake", "o.avsc")).unwrap_err().field, "sink.path");
    // Refused before it is read: whether such a file exists is not the tenant's to learn.
    for outside in ["/etc/passwd", "/no/such/file.avsc", "../../other/files/o.avsc"] {
        let r = a.confine(&sink("lake", outside)).unwrap_err();
        assert_eq!(r.field, "sink.schema", "{outside}: {r:?}");
        assert!(!r.message.contains("No such file") && !r.message.contains("Avro"), "{r:?}");
    }
}

#[test]
fn a_postgres_sink_reads_its_files_inside_the_area_and_reaches_only_allowed_databases() {
    let a = Area::new();
    std::fs::write(a.files.join("ok.conf"), "host=127.0.0.1 port=9092 dbname=shop user=acme").unwrap();
    std::fs::write(a.files.join("far.conf"), "host=10.0.0.9 port=5432 dbname=shop user=acme").unwrap();
    std::fs::write(a.files.join("pw"), "secret\n").unwrap();
    let sink = |conn: &str, pw: &str| {
        file(
            "o.jsonl",
            &format!("[sink]\ntype = \"postgres\"\nconnection = {conn:?}\npassword_file = {pw:?}\ntable = \"t\"\n"),
        )
    };
    let c = a.confine(&sink("ok.conf", "pw")).unwrap();
    assert!(matches!(&c.pipeline.sink, Some(SinkConfig::Postgres(p)) if p.address == "127.0.0.1:9092"));
    let r = a.confine(&sink("far.conf", "pw")).unwrap_err();
    assert!(r.field == "sink.connection" && r.message.contains("allow-list"), "{r:?}");
    // Refused before they are read: no file of the service's machine is the tenant's to learn of.
    for (conn, pw, field) in [
        ("/etc/passwd", "pw", "sink.connection"),
        ("../../other/files/ok.conf", "pw", "sink.connection"),
        ("ok.conf", "/etc/shadow", "sink.password_file"),
        ("ok.conf", "/no/such/pw", "sink.password_file"),
    ] {
        let r = a.confine(&sink(conn, pw)).unwrap_err();
        assert_eq!(r.field, field, "{conn} {pw}: {r:?}");
        assert!(!r.message.contains("No such file") && !r.message.contains("libpq"), "{r:?}");
    }
}

#[test]
fn an_iceberg_sink_keeps_its_catalog_and_warehouse_in_the_area_and_its_store_on_the_allow_list() {
    let a = Area::new();
    std::fs::write(
        a.files.join("o.avsc"),
        r#"{"type":"record","name":"O","fields":[{"name":"order_id","type":"long"}]}"#,
    )
    .unwrap();
    std::fs::write(a.files.join("s3.keys"), "id:secret\n").unwrap();
    let sink = |extra: &str| {
        file("o.jsonl", &format!("[sink]\ntype = \"iceberg\"\ntable = \"shop.orders\"\nschema = \"o.avsc\"\n{extra}\n"))
    };
    let local = "catalog_uri = \"sqlite:lake/catalog.db\"\nwarehouse = \"lake/wh\"";
    assert!(matches!(a.confine(&sink(local)).unwrap().pipeline.sink, Some(SinkConfig::Iceberg(_))));
    let s3 = |endpoint: &str, keys: &str| {
        format!(
            "catalog_uri = \"sqlite:lake/catalog.db\"\nwarehouse = \"s3://warehouse/lake\"\n\
             s3 = {{ endpoint = \"{endpoint}\", path_style = true, credentials_file = \"{keys}\" }}"
        )
    };
    assert!(a.confine(&sink(&s3("http://127.0.0.1:9092", "s3.keys"))).is_ok());
    for (extra, field) in [
        ("catalog_uri = \"sqlite:/tmp/catalog.db\"\nwarehouse = \"lake/wh\"".to_string(), "sink.catalog_uri"),
        ("catalog_uri = \"sqlite:lake/catalog.db\"\nwarehouse = \"../../other\"".to_string(), "sink.warehouse"),
        (s3("http://10.0.0.9:9000", "s3.keys"), "sink"),
        (s3("http://127.0.0.1:9092", "/etc/shadow"), "sink.s3.credentials_file"),
    ] {
        let r = a.confine(&sink(&extra)).unwrap_err();
        assert_eq!(r.field, field, "{extra}: {r:?}");
    }
}

#[test]
fn a_link_out_of_the_area_is_refused_though_its_words_stay_inside() {
    let a = Area::new();
    let outside = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(outside.path(), a.files.join("escape")).unwrap();
    let r = a.confine(&file("escape/orders.jsonl", "")).unwrap_err();
    assert_eq!(r.field, "source.path");
}

#[test]
fn kafka_options_that_reach_the_host_or_brokers_off_the_allow_list_are_refused() {
    let a = Area::new();
    let kafka = |options: &str| {
        file("o.jsonl", "").replace(
            "type = \"replay\"\npath = \"o.jsonl\"",
            &format!("type = \"kafka\"\ntopics = [\"orders\"]\nkafka = {{ {options} }}"),
        )
    };
    assert!(a.confine(&kafka("\"bootstrap.servers\" = \"127.0.0.1:9092\"")).is_ok());
    for (options, field) in [
        ("\"bootstrap.servers\" = \"10.0.0.1:9092\"", "bootstrap.servers"),
        (
            "\"bootstrap.servers\" = \"127.0.0.1:9092\", \"plugin.library.paths\" = \"/tmp/x.so\"",
            "plugin.library.paths",
        ),
        ("\"bootstrap.servers\" = \"127.0.0.1:9092\", \"ssl.ca.location\" = \"/etc/x\"", "ssl.ca.location"),
        ("\"bootstrap.servers\" = \"127.0.0.1:9092\", \"sasl.kerberos.kinit.cmd\" = \"sh\"", "kinit.cmd"),
        ("\"bootstrap.servers\" = \"127.0.0.1:9092\", \"group.id\" = \"weir-other--x\"", "group.id"),
    ] {
        let r = a.confine(&kafka(options)).unwrap_err();
        assert!(r.field.ends_with(field), "{options}: {r:?}");
    }
}

proptest! {
    /// Whatever a tenant writes as a path, a confined pipeline's path is inside its area.
    #[test]
    fn no_written_path_confines_to_outside_the_area(parts in proptest::collection::vec("(\\.\\.|\\.|[a-z]{1,3}|/|)", 0..8)) {
        let a = Area::new();
        let path = parts.join("/");
        if let Ok(c) = a.confine(&file(&path, "")) {
            match &c.pipeline.source.kind {
                SourceKind::Replay { path, .. } => prop_assert!(normalize(path).starts_with(&a.files), "{}", path.display()),
                other => prop_assert!(false, "{other:?}"),
            }
        }
    }

    /// Any text at all is refused or confined; never a panic.
    #[test]
    fn any_text_is_refused_or_confined(text in "\\PC{0,300}") {
        let a = Area::new();
        let _ = a.confine(&text);
    }
}
