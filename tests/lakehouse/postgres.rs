//! PostgreSQL: each user's order count upserted through repeated `kill -9` and read back with
//! `psql`, equal to a count of the input; rows that do not fit dead-lettered naming the column;
//! a table that cannot take the rows refused at start; and a database that goes away mid-run
//! waited for, with nothing lost or applied twice.

use std::collections::BTreeMap;

use super::*;
use crate::common::postgres::Postgres;

/// A pipeline from `events` into table `table` of `pg`: the standard JSON parser, then `middle`
/// (a processor, or nothing), then the sink with `sink` besides.
fn pipeline(dir: &Path, events: &Path, pg: &Postgres, middle: &str, sink: &str) -> PathBuf {
    let text = format!(
        "name = \"orders-postgres\"\n[source]\ntype = \"replay\"\npath = {events:?}\nmax_offsets_per_trigger = 700\n\
         [trigger]\nmode = \"available-now\"\n[parse]\nplugin = {:?}\n\
         config = {{ time_field = \"order_ts\", key_fields = [\"user_id\"] }}\n{middle}\n\
         [sink]\ntype = \"postgres\"\nconnection = {:?}\npassword_file = {:?}\n{sink}\n\
         [checkpoint]\nlocation = {:?}\n[dead_letter]\npath = {:?}\n",
        component("json_parser"),
        pg.connection,
        pg.password_file,
        dir.join("cp"),
        dir.join("dead.jsonl"),
    );
    let p = dir.join("orders-postgres.toml");
    std::fs::write(&p, text).unwrap();
    p
}

/// Each user's order count, keyed by user: the `order_counts` processor, with a watermark so
/// far behind that no order is late (the counts are then a count of the input).
fn counting() -> String {
    format!(
        "[watermark]\ndelay = \"365 days\"\n[process]\nplugin = {:?}\nkey = \"user_id\"\n",
        component("order_counts")
    )
}

/// The table's rows, `|`-separated, sorted by the first column.
fn rows(pg: &Postgres, sql: &str) -> Vec<String> {
    pg.psql(sql).lines().map(str::to_string).collect()
}

/// Each user's order count in the input, as `psql` prints the table's rows.
fn counts(input: &[serde_json::Value]) -> Vec<String> {
    let mut n: BTreeMap<i64, u64> = BTreeMap::new();
    for o in input {
        *n.entry(o["user_id"].as_i64().unwrap()).or_default() += 1;
    }
    n.into_iter().map(|(u, c)| format!("{u}|{c}")).collect()
}

#[test]
fn order_counts_upserted_through_kill_9_equal_a_count_of_the_input() {
    let dir = tempfile::tempdir().unwrap();
    let pg = Postgres::start();
    pg.psql(
        "CREATE TABLE user_orders (user_id bigint PRIMARY KEY, orders bigint NOT NULL, seen timestamptz DEFAULT now())",
    );
    let (events, input) = orders(dir.path(), 20_000);
    let p =
        pipeline(dir.path(), &events, &pg, &counting(), "table = \"user_orders\"\ncolumns = [\"user_id\", \"orders\"]");
    let kills = kill_repeatedly(&p, 8);
    assert!(kills >= 3, "only {kills} kills landed");
    assert_eq!(rows(&pg, "SELECT user_id, orders FROM user_orders ORDER BY user_id"), counts(&input));
    // One record for the one checkpoint, with nothing rejected.
    assert_eq!(rows(&pg, "SELECT target, rejected FROM weir_deliveries"), ["user_orders|[]"]);
    let dead = std::fs::read_to_string(dir.path().join("dead.jsonl")).unwrap_or_default();
    assert!(dead.is_empty(), "{dead}");
}

#[test]
fn rows_that_do_not_fit_the_table_are_dead_letters_naming_the_column() {
    let dir = tempfile::tempdir().unwrap();
    let pg = Postgres::start();
    pg.psql(
        "CREATE TABLE last_order (user_id bigint PRIMARY KEY, order_id int NOT NULL, status varchar(4) NOT NULL, \
         amount numeric(8,2), order_ts timestamptz NOT NULL)",
    );
    let events = dir.path().join("orders.jsonl");
    let line = |id: i64, user: &str, status: &str, ts: &str| {
        format!("{{\"order_id\":{id},\"user_id\":{user},\"status\":{status},\"amount\":1.5,\"order_ts\":{ts}}}\n")
    };
    let text = [
        line(1, "7", "\"OK\"", "1793491186670"),
        line(2, "7", "\"OK\"", "1793491186671"),
        line(3, "8", "\"TOO_LONG\"", "1793491186672"),
        line(4, "9", "null", "1793491186673"),
        line(5, "10", "\"OK\"", "1793491186674"),
        line(6, "\"x\"", "\"OK\"", "1793491186675"),
    ]
    .concat();
    std::fs::write(&events, text).unwrap();
    ok(weir().arg("run").arg(pipeline(dir.path(), &events, &pg, "", "table = \"last_order\"")).output().unwrap());
    let got = rows(
        &pg,
        "SELECT user_id, order_id, status, amount, order_ts = to_timestamp(1793491186.674) FROM last_order ORDER BY user_id",
    );
    assert_eq!(got, ["7|2|OK|1.50|f", "10|5|OK|1.50|t"], "user 7's last order, and user 10's");
    let dead = std::fs::read_to_string(dir.path().join("dead.jsonl")).unwrap();
    let dead: Vec<serde_json::Value> = dead.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(dead.len(), 3, "{dead:?}");
    for (d, column) in dead.iter().zip(["status", "status", "user_id"]) {
        assert!(d["error"].as_str().unwrap().contains(column), "names the column {column}: {d}");
    }
}

#[test]
fn a_table_that_cannot_take_the_rows_is_refused_at_start_naming_the_fix() {
    let dir = tempfile::tempdir().unwrap();
    let pg = Postgres::start();
    pg.psql("CREATE TABLE keyless (user_id bigint, orders bigint); CREATE TABLE counted (user_id bigint PRIMARY KEY, orders bigint)");
    let (events, _) = orders(dir.path(), 10);
    for (sink, key, fix) in [
        ("table = \"missing\"", "sink.table", "CREATE TABLE"),
        ("table = \"keyless\"", "sink.key_columns", "no primary key"),
        ("table = \"keyless\"\nkey_columns = [\"user_id\"]", "sink.key_columns", "CREATE UNIQUE INDEX"),
        ("table = \"counted\"\ncolumns = [\"user_id\", \"total\"]", "sink.columns", "user_id, orders"),
    ] {
        let p = pipeline(dir.path(), &events, &pg, &counting(), sink);
        let out = weir().arg("run").arg(&p).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.code() == Some(2) && err.contains(key) && err.contains(fix), "{sink}: {err}");
    }
    for (sink, key) in [("table = \"counted\"\nkey = \"user_id\"", "sink.key"), ("", "sink.table")] {
        let out = weir().arg("validate").arg(pipeline(dir.path(), &events, &pg, &counting(), sink)).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success() && err.contains(key), "{sink}: {err}");
    }
    assert_eq!(rows(&pg, "SELECT count(*) FROM counted"), ["0"]);
}

#[test]
fn a_database_that_goes_away_mid_run_is_waited_for_and_nothing_is_lost() {
    let dir = tempfile::tempdir().unwrap();
    let pg = Postgres::start();
    pg.psql("CREATE TABLE user_orders (user_id bigint PRIMARY KEY, orders bigint NOT NULL)");
    let (events, input) = orders(dir.path(), 10_000);
    let p = pipeline(dir.path(), &events, &pg, &counting(), "table = \"user_orders\"\nretry_for = \"10 minutes\"");
    let waited = std::cell::Cell::new(false);
    let on_batch = |n| {
        if n == 3 {
            pg.down();
        }
    };
    let on_log = |line: &str| {
        if line.contains("retrying for up to") && !waited.get() {
            // The sink is waiting for the database: bring it back.
            waited.set(true);
            pg.up();
        }
    };
    run_watching(&p, on_batch, on_log);
    assert!(waited.get(), "the sink never said it was waiting");
    assert_eq!(rows(&pg, "SELECT user_id, orders FROM user_orders ORDER BY user_id"), counts(&input));
}
