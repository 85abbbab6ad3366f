use super::*;
use crate::avro_arrow::UTC;
use crate::retry::{DEFAULT_RETRY_FOR, MAX_RETRY_FOR};
use arrow_schema::{DataType, Field, TimeUnit};

fn schema() -> Schema {
    Schema::new(vec![
        Field::new("window_start", DataType::Timestamp(TimeUnit::Millisecond, Some(UTC.into())), false),
        Field::new("status", DataType::Utf8, false),
        Field::new("rate", DataType::Float64, false),
    ])
}

fn given<'a>(dir: &'a Path) -> Given<'a> {
    Given {
        catalog_uri: Some("sqlite:lake/catalog.db"),
        warehouse: Some("lake/wh"),
        table: Some("shop.windows"),
        schema_file: Some(Path::new("w.avsc")),
        schema: Some(schema()),
        dir: Some(dir),
        ..Given::default()
    }
}

#[test]
fn paths_resolve_against_the_file_and_defaults_are_the_named_ones() {
    let s = Settings::new(given(Path::new("/p"))).unwrap();
    assert_eq!(s.catalog_label(), "sqlite:/p/lake/catalog.db");
    assert_eq!(s.warehouse, "file:///p/lake/wh");
    assert_eq!((s.namespace.as_str(), s.table.as_str()), ("shop", "windows"));
    assert_eq!(s.catalog_name, DEFAULT_CATALOG_NAME);
    assert_eq!(s.retry_for, DEFAULT_RETRY_FOR);
    assert!(s.addresses().is_empty());
    let day = Settings::new(Given { partition_by: Some("day(window_start)"), ..given(Path::new("/p")) }).unwrap();
    assert_eq!(day.partition, Some(Partition::Day("window_start".into())));
}

#[test]
fn s3_and_a_postgres_catalog_name_their_addresses_and_keep_secrets_in_files() {
    let dir = tempfile::tempdir().unwrap();
    let keys = dir.path().join("s3.keys");
    std::fs::write(&keys, "AKIA:s3cr3t\n").unwrap();
    let pw = dir.path().join("pw");
    std::fs::write(&pw, "hunter2\n").unwrap();
    let s3 = S3 {
        endpoint: Some("http://127.0.0.1:9000".into()),
        region: DEFAULT_S3_REGION.into(),
        path_style: true,
        credentials_file: Some(keys.clone()),
    };
    let s = Settings::new(Given {
        catalog_uri: Some("postgres://weir@db:6543/lake"),
        catalog_password_file: Some(&pw),
        warehouse: Some("s3://warehouse/wh"),
        s3: Some(s3),
        ..given(dir.path())
    })
    .unwrap();
    assert_eq!(s.addresses(), ["db:6543", "127.0.0.1:9000"]);
    assert!(!format!("{s:?}").contains("hunter2"));
    assert_eq!(credentials(&keys).unwrap(), ("AKIA".into(), "s3cr3t".into()));
}

#[test]
fn a_bad_setting_names_its_key_and_the_fix() {
    let p = Path::new("/p");
    let bad = |g: Given<'_>| Settings::new(g).unwrap_err();
    for (g, key, fix) in [
        (Given { catalog_uri: None, ..given(p) }, "sink.catalog_uri", "sqlite:"),
        (Given { catalog_uri: Some("mysql://x"), ..given(p) }, "sink.catalog_uri", "postgres://"),
        (Given { catalog_uri: Some("postgres://u:pw@h/db"), ..given(p) }, "sink.catalog_uri", "catalog_password_file"),
        (Given { catalog_uri: Some("postgres://u@h"), ..given(p) }, "sink.catalog_uri", "names no database"),
        (Given { warehouse: None, ..given(p) }, "sink.warehouse", "s3://"),
        (Given { warehouse: Some("gs://b/x"), ..given(p) }, "sink.warehouse", "not built in"),
        (Given { warehouse: Some("s3://warehouse/x"), ..given(p) }, "sink.s3", "[sink.s3]"),
        (Given { table: Some("windows"), ..given(p) }, "sink.table", "NAMESPACE.TABLE"),
        (Given { table: Some("a.b.c"), ..given(p) }, "sink.table", "NAMESPACE.TABLE"),
        (Given { partition_by: Some("day(status)"), ..given(p) }, "sink.partition_by", "timestamp"),
        (Given { partition_by: Some("rate"), ..given(p) }, "sink.partition_by", "partition by"),
        (Given { catalog_name: Some(" "), ..given(p) }, "sink.catalog_name", "weir"),
        (Given { retry_for: Some(MAX_RETRY_FOR * 2), ..given(p) }, "sink.retry_for", "at most"),
    ] {
        let e = bad(g);
        assert!(e.key == key && e.why.contains(fix), "{key}: {e}");
    }
}
