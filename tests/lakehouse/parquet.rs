//! Parquet files: the orders, partitioned by hour, written through repeated `kill -9` and read
//! by DuckDB and pyarrow with every order once; rows that do not fit and a bad setting.

use super::*;

/// A pipeline from `events` through the standard JSON parser into Parquet files under `out`.
fn pipeline(dir: &Path, events: &Path, out: &Path, sink: &str) -> PathBuf {
    let text = format!(
        "name = \"orders-parquet\"\n[source]\ntype = \"replay\"\npath = {events:?}\nmax_offsets_per_trigger = 700\n\
         [trigger]\nmode = \"available-now\"\n[parse]\nplugin = {:?}\nconfig = {{ time_field = \"order_ts\" }}\n\
         [sink]\ntype = \"parquet\"\npath = {out:?}\nschema = {:?}\n{sink}\n\
         [checkpoint]\nlocation = {:?}\n[dead_letter]\npath = {:?}\n",
        component("json_parser"),
        root().join("tests").join("formats").join("order.avsc"),
        dir.join("cp"),
        dir.join("dead.jsonl"),
    );
    let p = dir.join("orders-parquet.toml");
    std::fs::write(&p, text).unwrap();
    p
}

#[test]
fn orders_written_as_parquet_through_kill_9_are_each_read_once_by_duckdb_and_pyarrow() {
    let dir = tempfile::tempdir().unwrap();
    let (events, input) = orders(dir.path(), 20_000);
    let out = dir.path().join("orders");
    let p = pipeline(
        dir.path(),
        &events,
        &out,
        "partition_by = \"hour(order_ts)\"\ncompression = \"zstd\"\nrow_group_rows = 256",
    );
    let kills = kill_repeatedly(&p, 8);
    assert!(kills >= 3, "only {kills} kills landed");
    let (counts, rows) = read(&["parquet", out.to_str().unwrap(), "--sum", "order_id"]);
    let ids: i64 = input.iter().map(|o| o["order_id"].as_i64().unwrap()).sum();
    assert_eq!(counts["duckdb"], input.len(), "{counts}");
    assert_eq!(counts["pyarrow"], input.len(), "{counts}");
    assert_eq!(counts["pyarrow_sum"], ids, "{counts}");
    let mut got: Vec<_> = rows.iter().map(order).collect();
    let mut want: Vec<_> = input.iter().map(order).collect();
    got.sort_unstable();
    want.sort_unstable();
    assert_eq!(got, want, "every order once, as it came");
    // Each file is in its order's hour, as DuckDB reads the partition directory.
    for r in &rows {
        let hour = r["order_ts"].as_i64().unwrap() / 3_600_000 % 24;
        assert!(r["order_ts_hour"].as_str().unwrap().ends_with(&format!("-{hour:02}")), "{r}");
    }
}

#[test]
fn rows_that_do_not_fit_the_columns_are_dead_letters_naming_the_column() {
    let dir = tempfile::tempdir().unwrap();
    let events = dir.path().join("orders.jsonl");
    std::fs::write(
        &events,
        "{\"order_id\":1,\"user_id\":1,\"status\":\"OK\",\"amount\":1.5,\"order_ts\":1793491186670}\n\
         {\"order_id\":2,\"user_id\":\"nobody\",\"status\":\"OK\",\"amount\":1.5,\"order_ts\":1793491186671}\n\
         {\"order_id\":3,\"status\":\"OK\",\"amount\":1.5,\"order_ts\":1793491186672}\n\
         {\"order_id\":4,\"user_id\":4,\"status\":\"OK\",\"amount\":2.5,\"order_ts\":1793491186673}\n",
    )
    .unwrap();
    let out = dir.path().join("orders");
    ok(weir().arg("run").arg(pipeline(dir.path(), &events, &out, "")).output().unwrap());
    let (counts, rows) = read(&["parquet", out.to_str().unwrap(), "--sum", "order_id"]);
    assert_eq!(counts["duckdb"], 2, "{counts}");
    assert_eq!(rows.iter().map(|r| r["order_id"].as_i64().unwrap()).collect::<Vec<_>>(), vec![1, 4]);
    let dead = std::fs::read_to_string(dir.path().join("dead.jsonl")).unwrap();
    let dead: Vec<serde_json::Value> = dead.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(dead.len(), 2, "{dead:?}");
    for d in &dead {
        assert!(d["error"].as_str().unwrap().contains("user_id"), "names the column: {d}");
    }
}

#[test]
fn a_bad_setting_is_refused_before_a_run_naming_the_key_and_the_fix() {
    let dir = tempfile::tempdir().unwrap();
    let (events, _) = orders(dir.path(), 10);
    let out = dir.path().join("orders");
    for (setting, key, fix) in [
        ("partition_by = \"day(region)\"", "sink.partition_by", "order_id, user_id, status, amount, order_ts"),
        ("compression = \"brotli\"", "sink.compression", "\"zstd\""),
        ("row_group_rows = 0", "sink.row_group_rows", "1 to"),
        ("topic = \"t\"", "sink.topic", "remove it"),
    ] {
        let p = pipeline(dir.path(), &events, &out, setting);
        let said = weir().arg("validate").arg(&p).output().unwrap();
        let err = String::from_utf8_lossy(&said.stderr);
        assert!(!said.status.success() && err.contains(key) && err.contains(fix), "{setting}: {err}");
    }
    assert!(!out.exists(), "nothing was written");
}
