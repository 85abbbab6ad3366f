//! `plugins/orders-lakehouse/`, run as written: its windows into an Iceberg table and its
//! per-user counts into PostgreSQL, checked against `weir test` of the same files (the rows the
//! pipelines emit) read back by pyiceberg and `psql`.

use std::collections::BTreeMap;

use super::*;
use crate::common::postgres::Postgres;

/// The example's directory copied under `dir/plugins/`, beside the real components, with
/// `dir/out/orders.jsonl` generated.
fn example(dir: &Path) -> PathBuf {
    let ex = dir.join("plugins").join("orders-lakehouse");
    std::fs::create_dir_all(&ex).unwrap();
    for f in ["windows.toml", "windows.avsc", "user-totals.toml"] {
        std::fs::copy(root().join("plugins").join("orders-lakehouse").join(f), ex.join(f)).unwrap();
    }
    std::os::unix::fs::symlink(root().join("plugins").join("dist"), dir.join("plugins").join("dist")).unwrap();
    std::fs::create_dir_all(dir.join("out")).unwrap();
    let events = dir.join("out").join("orders.jsonl");
    ok(weir().args(["gen", "orders", "20000", "--seed", "5", "--out"]).arg(&events).output().unwrap());
    ex
}

/// The rows `weir test FILE` prints for the example's orders.
fn tested(file: &Path, events: &Path) -> Vec<serde_json::Value> {
    let out = ok(weir().arg("test").arg(file).arg("--events").arg(events).output().unwrap());
    String::from_utf8(out.stdout).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect()
}

#[test]
fn the_lakehouse_example_lands_its_windows_in_iceberg_and_its_counts_in_postgres() {
    let dir = tempfile::tempdir().unwrap();
    let ex = example(dir.path());
    let events = dir.path().join("out").join("orders.jsonl");

    ok(weir().arg("run").arg(ex.join("windows.toml")).output().unwrap());
    let lake = dir.path().join("out").join("orders-lakehouse");
    let warehouse = format!("file://{}", lake.join("warehouse").display());
    let catalog = lake.join("catalog.db");
    let home = dir.path().to_str().unwrap();
    let (counts, rows) =
        read(&["iceberg", catalog.to_str().unwrap(), &warehouse, "shop.order_windows", "--home", home]);
    let window = |r: &serde_json::Value| {
        (r["window_start"].as_i64().unwrap(), r["key"].as_str().unwrap().to_string(), r["count"].as_i64().unwrap())
    };
    let mut got: Vec<_> = rows.iter().map(window).collect();
    let mut want: Vec<_> = tested(&ex.join("windows.toml"), &events).iter().map(window).collect();
    got.sort();
    want.sort();
    assert!(!want.is_empty());
    assert_eq!(got, want, "{counts}");
    assert_eq!(counts["duckdb"], want.len());

    let pg = Postgres::start();
    pg.psql("CREATE TABLE user_orders (user_id bigint PRIMARY KEY, orders bigint NOT NULL)");
    std::fs::copy(&pg.connection, ex.join("pg.conf")).unwrap();
    std::fs::copy(&pg.password_file, ex.join("pg.password")).unwrap();
    ok(weir().arg("run").arg(ex.join("user-totals.toml")).output().unwrap());
    let mut last: BTreeMap<i64, i64> = BTreeMap::new();
    for r in tested(&ex.join("user-totals.toml"), &events) {
        // The processor's key, as text: the table's bigint column reads it.
        let user = r["user_id"].as_i64().or_else(|| r["user_id"].as_str()?.parse().ok()).unwrap();
        last.insert(user, r["orders"].as_i64().unwrap());
    }
    let want: Vec<String> = last.iter().map(|(u, n)| format!("{u}|{n}")).collect();
    let got = pg.psql("SELECT user_id, orders FROM user_orders ORDER BY user_id");
    assert_eq!(got.lines().collect::<Vec<_>>(), want);
}
