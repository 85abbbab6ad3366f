use super::*;
use crate::retry::{DEFAULT_RETRY_FOR, MAX_RETRY_FOR};

fn file(dir: &Path, name: &str, text: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p
}

fn given<'a>(conn: &'a Path, table: Option<&'a str>) -> Given<'a> {
    Given { connection: Some(conn), table, ..Given::default() }
}

#[test]
fn defaults_are_the_named_ones_and_the_password_stays_out_of_debug() {
    let dir = tempfile::tempdir().unwrap();
    let conn = file(dir.path(), "pg.conf", "# the shop\nhost=127.0.0.1\ndbname=shop user=weir password=hunter2\n");
    let s = Settings::new(given(&conn, Some("public.user_totals"))).unwrap();
    assert_eq!(s.address, format!("127.0.0.1:{DEFAULT_PORT}"));
    assert_eq!(s.table.quoted(), "\"public\".\"user_totals\"");
    assert_eq!(s.deliveries.to_string(), format!("public.{DEFAULT_DELIVERIES_TABLE}"));
    assert_eq!(s.retry_for, DEFAULT_RETRY_FOR);
    assert!(!format!("{s:?}").contains("hunter2"));
}

#[test]
fn the_password_file_is_read_when_connecting() {
    let dir = tempfile::tempdir().unwrap();
    let conn = file(dir.path(), "pg.conf", "host=db port=6543 dbname=shop user=weir");
    let pw = file(dir.path(), "pw", "s3cret\n");
    let s = Settings::new(Given { password_file: Some(&pw), ..given(&conn, Some("t")) }).unwrap();
    assert_eq!(s.address, "db:6543");
    assert_eq!(s.connect_config().unwrap().get_password(), Some(&b"s3cret"[..]));
}

#[test]
fn a_bad_setting_names_its_key_and_the_fix() {
    let dir = tempfile::tempdir().unwrap();
    let conn = file(dir.path(), "pg.conf", "host=127.0.0.1 dbname=shop user=weir");
    let bad = |g: Given<'_>| Settings::new(g).unwrap_err();
    assert_eq!(bad(Given::default()).key, "sink.connection");
    assert_eq!(bad(given(&conn, None)).key, "sink.table");
    assert!(bad(given(&conn, Some("a.b.c"))).why.contains("not a name"));
    let e = bad(Given { deliveries_table: Some("t"), ..given(&conn, Some("t")) });
    assert_eq!(e.key, "sink.deliveries_table");
    let e = bad(Given { key_columns: Some(vec!["a".into(), "a".into()]), ..given(&conn, Some("t")) });
    assert!(e.why.contains("twice"), "{e}");
    let e = bad(Given { retry_for: Some(MAX_RETRY_FOR * 2), ..given(&conn, Some("t")) });
    assert_eq!(e.key, "sink.retry_for");
    let empty = file(dir.path(), "empty", "\n");
    assert!(bad(Given { password_file: Some(&empty), ..given(&conn, Some("t")) }).why.contains("empty"));
    for (text, fix) in [
        ("host=127.0.0.1 dbname=shop", "user="),
        ("host=127.0.0.1 user=weir", "dbname="),
        ("dbname=shop user=weir", "host="),
        ("host=/run/postgresql dbname=shop user=weir", "TCP"),
        ("host=a,b dbname=shop user=weir", "several hosts"),
        ("host=127.0.0.1 dbname=shop user=weir sslmode=require", "TLS"),
        ("host=127.0.0.1 dbname=shop user=weir password='unclosed", "key=value"),
    ] {
        let c = file(dir.path(), "c.conf", text);
        let e = bad(given(&c, Some("t")));
        assert!(e.key == "sink.connection" && e.why.contains(fix), "{text}: {e}");
        assert!(!e.why.contains("unclosed"), "the file's text stays out: {e}");
    }
}
