//! Apache Iceberg tables: the orders appended through repeated `kill -9`, into a local
//! warehouse and into an S3-compatible store (moto) that goes away mid-run, read back by
//! pyiceberg and DuckDB with each order once and each batch in one snapshot; a column the
//! schema adds added to the table; a column whose type changed refused; rows that do not fit
//! dead-lettered naming the column.

use std::collections::BTreeSet;

use super::*;

/// A pipeline from `events` through the standard JSON parser into table `shop.orders`, its
/// catalog and warehouse under `dir`, with `sink` besides.
fn pipeline(dir: &Path, events: &Path, schema: &Path, sink: &str) -> PathBuf {
    let text = format!(
        "name = \"orders-iceberg\"\n[source]\ntype = \"replay\"\npath = {events:?}\nmax_offsets_per_trigger = 700\n\
         [trigger]\nmode = \"available-now\"\n[parse]\nplugin = {:?}\nconfig = {{ time_field = \"order_ts\" }}\n\
         [sink]\ntype = \"iceberg\"\ncatalog_uri = \"sqlite:lake/catalog.db\"\ntable = \"shop.orders\"\n\
         schema = {schema:?}\n{sink}\n[checkpoint]\nlocation = {:?}\n[dead_letter]\npath = {:?}\n",
        component("json_parser"),
        dir.join("cp"),
        dir.join("dead.jsonl"),
    );
    let p = dir.join("orders-iceberg.toml");
    std::fs::write(&p, text).unwrap();
    p
}

fn order_schema() -> PathBuf {
    root().join("tests").join("formats").join("order.avsc")
}

/// What `read.py iceberg` reads of the local table under `dir`.
fn read_local(dir: &Path) -> (serde_json::Value, Vec<serde_json::Value>) {
    let catalog = dir.join("lake").join("catalog.db");
    let warehouse = format!("file://{}", dir.join("lake").join("warehouse").display());
    read(&["iceberg", catalog.to_str().unwrap(), &warehouse, "shop.orders", "--home", dir.to_str().unwrap()])
}

/// Every input order once, and every snapshot an append of one batch, each batch once.
fn check(counts: &serde_json::Value, rows: &[serde_json::Value], input: &[serde_json::Value]) {
    assert_eq!(counts["pyiceberg"], input.len(), "{counts}");
    assert_eq!(counts["duckdb"], input.len(), "{counts}");
    let mut got: Vec<_> = rows.iter().map(order).collect();
    let mut want: Vec<_> = input.iter().map(order).collect();
    got.sort_unstable();
    want.sort_unstable();
    assert!(got == want, "every order once, as it came");
    let snapshots = counts["snapshots"].as_array().unwrap();
    let mut batches = BTreeSet::new();
    for s in snapshots {
        assert_eq!(s["operation"], "append", "{s}");
        let batch = (s["checkpoint"].as_str().unwrap().to_string(), s["batch"].as_str().unwrap().to_string());
        assert!(batches.insert(batch), "a batch appended twice: {s}");
    }
}

#[test]
fn orders_appended_through_kill_9_are_each_read_once_by_pyiceberg_and_duckdb() {
    let dir = tempfile::tempdir().unwrap();
    let (events, input) = orders(dir.path(), 20_000);
    let p = pipeline(
        dir.path(),
        &events,
        &order_schema(),
        "warehouse = \"lake/warehouse\"\npartition_by = \"day(order_ts)\"",
    );
    let kills = kill_repeatedly(&p, 8);
    assert!(kills >= 3, "only {kills} kills landed");
    let (counts, rows) = read_local(dir.path());
    check(&counts, &rows, &input);
    assert!(counts["snapshots"].as_array().unwrap().len() >= 20_000 / 700, "{counts}");
}

#[test]
fn a_column_the_schema_adds_is_added_and_a_changed_type_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let (events, input) = orders(dir.path(), 1_000);
    let sink = "warehouse = \"lake/warehouse\"";
    ok(weir().arg("run").arg(pipeline(dir.path(), &events, &order_schema(), sink)).output().unwrap());
    // The same orders again under a schema with an optional column more, from a fresh checkpoint.
    let avsc = std::fs::read_to_string(order_schema()).unwrap();
    let wider = avsc.replacen(
        "\"fields\": [",
        "\"fields\": [{\"name\": \"channel\", \"type\": [\"null\", \"string\"], \"default\": null},",
        1,
    );
    assert_ne!(wider, avsc, "order.avsc's fields list");
    let wider_file = dir.path().join("wider.avsc");
    std::fs::write(&wider_file, wider).unwrap();
    std::fs::remove_dir_all(dir.path().join("cp")).unwrap();
    ok(weir().arg("run").arg(pipeline(dir.path(), &events, &wider_file, sink)).output().unwrap());
    let (counts, rows) = read_local(dir.path());
    assert!(counts["columns"].as_array().unwrap().iter().any(|c| c == "channel"), "{counts}");
    assert_eq!(counts["pyiceberg"], 2 * input.len(), "{counts}");
    assert!(rows.iter().all(|r| r["channel"].is_null()));
    // A column whose type changed: refused before the first batch, naming it.
    let changed = avsc.replacen("\"long\"", "\"string\"", 1);
    let changed_file = dir.path().join("changed.avsc");
    std::fs::write(&changed_file, changed).unwrap();
    std::fs::remove_dir_all(dir.path().join("cp")).unwrap();
    let out = weir().arg("run").arg(pipeline(dir.path(), &events, &changed_file, sink)).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.code() == Some(2) && err.contains("sink.schema") && err.contains("keeps its type"), "{err}");
    assert_eq!(read_local(dir.path()).0["pyiceberg"], 2 * input.len());
}

#[test]
fn rows_that_do_not_fit_the_columns_are_dead_letters_naming_the_column() {
    let dir = tempfile::tempdir().unwrap();
    let events = dir.path().join("orders.jsonl");
    std::fs::write(
        &events,
        "{\"order_id\":1,\"user_id\":1,\"status\":\"OK\",\"amount\":1.5,\"order_ts\":1793491186670}\n\
         {\"order_id\":2,\"user_id\":\"nobody\",\"status\":\"OK\",\"amount\":1.5,\"order_ts\":1793491186671}\n\
         {\"order_id\":3,\"user_id\":3,\"status\":\"OK\",\"amount\":2.5,\"order_ts\":1793491186673}\n",
    )
    .unwrap();
    ok(weir()
        .arg("run")
        .arg(pipeline(dir.path(), &events, &order_schema(), "warehouse = \"lake/warehouse\""))
        .output()
        .unwrap());
    let (counts, rows) = read_local(dir.path());
    assert_eq!(counts["pyiceberg"], 2, "{counts}");
    assert_eq!(rows.iter().map(|r| r["order_id"].as_i64().unwrap()).collect::<BTreeSet<_>>(), BTreeSet::from([1, 3]));
    let dead = std::fs::read_to_string(dir.path().join("dead.jsonl")).unwrap();
    let dead: Vec<serde_json::Value> = dead.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(dead.len(), 1, "{dead:?}");
    assert!(dead[0]["error"].as_str().unwrap().contains("user_id"), "{dead:?}");
}

/// moto's S3 server behind a proxy the test takes down and brings back (`tests/lakehouse/s3.py`).
struct Store {
    child: std::process::Child,
    lines: std::io::Lines<std::io::BufReader<std::process::ChildStdout>>,
    endpoint: String,
}

impl Store {
    fn start() -> Store {
        use std::io::BufRead;
        let mut child = Command::new(python())
            .arg(root().join("tests").join("lakehouse").join("s3.py"))
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut lines = std::io::BufReader::new(child.stdout.take().unwrap()).lines();
        let ready = lines.next().expect("s3.py says it is ready").unwrap();
        let port = ready.strip_prefix("ready ").expect("ready PORT");
        Store { child, lines, endpoint: format!("http://127.0.0.1:{port}") }
    }

    /// Sends `cmd` (`down`, `up`) and waits until it is done.
    fn tell(&mut self, cmd: &str) {
        use std::io::Write;
        writeln!(self.child.stdin.as_mut().unwrap(), "{cmd}").unwrap();
        assert_eq!(self.lines.next().unwrap().unwrap(), cmd);
    }

    /// The sink's keys for this store, its credentials in `dir/s3.keys`.
    fn sink(&self, dir: &Path) -> String {
        let keys = dir.join("s3.keys");
        std::fs::write(&keys, "testing:testing\n").unwrap();
        format!(
            "warehouse = \"s3://warehouse/lake\"\npartition_by = \"hour(order_ts)\"\nretry_for = \"10 minutes\"\n\
             s3 = {{ endpoint = {:?}, path_style = true, credentials_file = {keys:?} }}",
            self.endpoint
        )
    }

    fn read(&self, dir: &Path) -> (serde_json::Value, Vec<serde_json::Value>) {
        let catalog = dir.join("lake").join("catalog.db");
        let args = ["iceberg", catalog.to_str().unwrap(), "s3://warehouse/lake", "shop.orders"];
        read(&[&args[..], &["--s3-endpoint", &self.endpoint, "--home", dir.to_str().unwrap()]].concat())
    }
}

impl Drop for Store {
    fn drop(&mut self) {
        drop(self.child.stdin.take());
        let _ = self.child.wait();
    }
}

#[test]
fn orders_appended_to_a_table_in_s3_through_kill_9_are_each_read_once() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::start();
    let (events, input) = orders(dir.path(), 10_000);
    let p = pipeline(dir.path(), &events, &order_schema(), &store.sink(dir.path()));
    let kills = kill_repeatedly(&p, 6);
    assert!(kills >= 2, "only {kills} kills landed");
    let (counts, rows) = store.read(dir.path());
    check(&counts, &rows, &input);
}

#[test]
fn a_store_that_goes_away_mid_run_is_waited_for_and_nothing_is_lost() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::start();
    let (events, input) = orders(dir.path(), 10_000);
    let p = pipeline(dir.path(), &events, &order_schema(), &store.sink(dir.path()));
    let (store, waited) = (std::cell::RefCell::new(store), std::cell::Cell::new(false));
    let on_batch = |n| {
        if n == 3 {
            store.borrow_mut().tell("down");
        }
    };
    let on_log = |line: &str| {
        if line.contains("retrying for up to") && !waited.get() {
            waited.set(true);
            store.borrow_mut().tell("up");
        }
    };
    run_watching(&p, on_batch, on_log);
    assert!(waited.get(), "the sink never said it was waiting");
    let (counts, rows) = store.borrow().read(dir.path());
    check(&counts, &rows, &input);
}
