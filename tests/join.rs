//! `[join]` against naive references computed here. The stream-table join: orders looked up by
//! user in a table of users that is updated, deleted from (tombstones) and given bad records
//! between two runs on one checkpoint, and in a topic while a run reads it; then through
//! repeated `kill -9`. The changelog round trip on the mock Kafka cluster: windows into a keyed
//! topic, that topic back as a table, a join against it; and update mode's upserts and
//! tombstones, read back the same way. The interval join: orders with their shipments, across
//! two runs and through repeated `kill -9`.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::common::kafka::*;
use crate::common::*;
use serde_json::{Value, json};

/// A stateless orders pipeline in `dir` with `[join]` over the table `table` (the inline
/// `join.table` source) by `user_id`, writing with the file sink into `dir/out`.
fn join_pipeline(dir: &Path, orders: &Path, table: &str, kind: &str) -> PathBuf {
    join_pipeline_on(dir, orders, table, kind, "user_id")
}

/// [`join_pipeline`], looking orders up by their field `on`.
fn join_pipeline_on(dir: &Path, orders: &Path, table: &str, kind: &str, on: &str) -> PathBuf {
    let text = format!(
        r#"
name = "join"
[source]
type = "replay"
path = "{orders}"
max_offsets_per_trigger = 1500
[trigger]
mode = "available-now"
[parse]
plugin = "{parse}"
[join]
table = {table}
on = "{on}"
as = "user"
kind = "{kind}"
[checkpoint]
location = "{cp}"
[dead_letter]
path = "{dead}"
{sink}
"#,
        orders = orders.display(),
        parse = component("orders_json").display(),
        cp = dir.join("cp").display(),
        dead = dir.join("dead.jsonl").display(),
        sink = file_sink(&dir.join("out")),
    );
    let p = dir.join("join.toml");
    std::fs::write(&p, text).unwrap();
    p
}

fn replay_table(path: &Path) -> String {
    format!("{{ type = \"replay\", path = \"{}\" }}", path.display())
}

/// The table's first version: users not divisible by 3, a tier each; then two records a table
/// cannot take (a value that is no object, a record without a key).
fn users_v1(users: &[u64]) -> Vec<Value> {
    let mut lines: Vec<Value> = users
        .iter()
        .filter(|u| *u % 3 != 0)
        .map(|u| json!({"key": u.to_string(), "value": {"tier": if u % 2 == 0 { "gold" } else { "silver" }, "v": 1}}))
        .collect();
    lines.push(json!({"key": "7", "value": "not json"}));
    lines.push(json!({"value": {"tier": "keyless"}}));
    lines
}

/// Updates after the first run: users divisible by 5 deleted (a tombstone, even where the table
/// had no row), by 7 upgraded, by 3 and not 5 added.
fn users_v2(users: &[u64]) -> Vec<Value> {
    let mut lines = Vec::new();
    for u in users {
        let k = u.to_string();
        if u % 5 == 0 {
            lines.push(json!({"key": k, "value": ""}));
        } else if u % 7 == 0 {
            lines.push(json!({"key": k, "value": {"tier": "platinum", "v": 2}}));
        } else if u % 3 == 0 {
            lines.push(json!({"key": k, "value": {"tier": "new", "v": 2}}));
        }
    }
    lines
}

/// The table's rule, naively: each record with a key and an object value upserts, an empty
/// value deletes, anything else is ignored.
fn apply(table: &mut HashMap<String, Value>, lines: &[Value]) {
    for l in lines {
        let Some(key) = l["key"].as_str() else { continue };
        match &l["value"] {
            Value::String(s) if s.is_empty() => {
                table.remove(key);
            }
            v @ Value::Object(_) => {
                table.insert(key.to_string(), v.clone());
            }
            _ => {}
        }
    }
}

/// Each order with its user's table row under `user`; inner: only orders whose user has one.
fn reference(orders: &[Value], table: &HashMap<String, Value>, inner: bool) -> Vec<Value> {
    let mut out = Vec::new();
    for o in orders {
        let row = table.get(&o["user_id"].to_string()).cloned();
        if inner && row.is_none() {
            continue;
        }
        let mut o = o.clone();
        o["user"] = row.unwrap_or(Value::Null);
        out.push(o);
    }
    out
}

fn write_lines(path: &Path, lines: &[Value], append: bool) {
    use std::io::Write;
    let mut f =
        std::fs::OpenOptions::new().create(true).append(append).write(true).truncate(!append).open(path).unwrap();
    for l in lines {
        writeln!(f, "{l}").unwrap();
    }
}

fn users_of(orders: &[Value]) -> Vec<u64> {
    let mut users: Vec<u64> = orders.iter().map(|o| o["user_id"].as_u64().unwrap()).collect();
    users.sort_unstable();
    users.dedup();
    users
}

#[test]
fn the_table_moves_between_runs_and_each_order_meets_the_table_of_its_batch() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let all = json_lines(&std::fs::read_to_string(orders(d, 12_000, 21)).unwrap());
    let (first, second) = all.split_at(all.len() / 2);
    let users = users_of(&all);
    let (events, table_file) = (d.join("stream.jsonl"), d.join("users.jsonl"));
    write_lines(&events, first, false);
    write_lines(&table_file, &users_v1(&users), false);
    let p = join_pipeline(d, &events, &replay_table(&table_file), "left");
    ok(weir().arg("run").arg(&p).output().unwrap());

    // The table's bad records are dead letters, with where they are, and nothing else is.
    let dead = json_lines(&std::fs::read_to_string(d.join("dead.jsonl")).unwrap());
    let lines: Vec<u64> = dead.iter().map(|l| l["line"].as_u64().unwrap()).collect();
    let v1 = users_v1(&users).len() as u64;
    assert_eq!(lines, vec![v1 - 1, v1], "{dead:?}");
    assert!(dead.iter().all(|l| l["stage"] == "join" && l["kind"] == "invalid-value"), "{dead:?}");

    // Between runs the table changes and the stream goes on.
    write_lines(&table_file, &users_v2(&users), true);
    write_lines(&events, second, true);
    ok(weir().arg("run").arg(&p).output().unwrap());

    let mut table = HashMap::new();
    apply(&mut table, &users_v1(&users));
    let mut want = reference(first, &table, false);
    apply(&mut table, &users_v2(&users));
    want.extend(reference(second, &table, false));
    let got = sink_rows(&d.join("out"));
    assert_eq!(got.len(), want.len());
    assert!(got == want, "the joined rows differ from the reference");
    assert!(got.iter().any(|r| r["user"]["tier"] == "platinum") && got.iter().any(|r| r["user"].is_null()));

    // An inner join over everything, in one run, meets the final table and drops the rest.
    let inner = tempfile::tempdir().unwrap();
    let p = join_pipeline(inner.path(), &events, &replay_table(&table_file), "inner");
    let out = ok(weir().arg("run").arg(&p).arg("--progress-json").output().unwrap());
    let want = reference(&all, &table, true);
    assert_eq!(sink_rows(&inner.path().join("out")), want);
    let unmatched: u64 = String::from_utf8_lossy(&out.stderr)
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter_map(|v| v["numUnmatched"].as_u64())
        .sum();
    assert_eq!(unmatched as usize, all.len() - want.len());
}

#[test]
fn a_join_through_repeated_kill_9_gives_the_rows_of_an_uninterrupted_run() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let events = orders(d, 20_000, 5);
    let all = json_lines(&std::fs::read_to_string(&events).unwrap());
    let users = users_of(&all);
    let table_file = d.join("users.jsonl");
    write_lines(&table_file, &users_v1(&users), false);
    write_lines(&table_file, &users_v2(&users), true);

    let straight = d.join("straight");
    std::fs::create_dir_all(&straight).unwrap();
    ok(weir().arg("run").arg(join_pipeline(&straight, &events, &replay_table(&table_file), "left")).output().unwrap());
    let killed = d.join("killed");
    std::fs::create_dir_all(&killed).unwrap();
    let kills = kill_repeatedly(&join_pipeline(&killed, &events, &replay_table(&table_file), "left"), 6);
    assert!(kills > 0);

    let expected = sink_rows(&straight.join("out"));
    let mut table = HashMap::new();
    apply(&mut table, &users_v1(&users));
    apply(&mut table, &users_v2(&users));
    assert_eq!(expected, reference(&all, &table, false));
    assert!(sink_rows(&killed.join("out")) == expected, "rows differ after {kills} kills");
}

/// The orders per user in tumbling minutes into `topic` on the mock cluster, `output` more
/// lines of `[output]` and `key` as `sink.key` (or none).
fn changelog_pipeline(dir: &Path, events: &Path, brokers: &str, topic: &str, output: &str, key: &str) -> PathBuf {
    let key = if key.is_empty() { String::new() } else { format!("key = \"{key}\"\n") };
    let extra = format!(
        "[output]\n{output}\n[sink]\ntype = \"kafka\"\ntopic = \"{topic}\"\n{key}kafka.bootstrap.servers = \"{brokers}\"\n\
         [checkpoint]\nlocation = \"{}\"",
        dir.join(format!("cp-{topic}")).display()
    );
    let p = pipeline(
        dir,
        Spec {
            window: TUMBLING,
            parse_config: "key_by_user = true",
            watermark: "flush_at_end = true",
            extra: &extra,
            ..Default::default()
        },
    );
    let text = std::fs::read_to_string(&p).unwrap().replace("path = \"orders.jsonl\"", &format!("path = {events:?}"));
    let p2 = dir.join(format!("to-{topic}.toml"));
    std::fs::write(&p2, text).unwrap();
    p2
}

fn kafka_table(brokers: &str, topic: &str) -> String {
    format!(
        "{{ type = \"kafka\", topics = [\"{topic}\"], kafka.bootstrap.servers = \"{brokers}\", \
         kafka.fetch.wait.max.ms = 10 }}"
    )
}

/// Per user, the minute windows of the kept orders: start → (count, errors).
fn per_user_minutes(events: &Path) -> BTreeMap<String, BTreeMap<i64, (u64, u64)>> {
    let (kept, _) = kept_orders(events);
    let mut by: BTreeMap<String, BTreeMap<i64, (u64, u64)>> = BTreeMap::new();
    for o in kept {
        let e = by.entry(o.user.to_string()).or_default().entry(o.ts.div_euclid(60_000) * 60_000).or_default();
        e.0 += 1;
        e.1 += o.error as u64;
    }
    by
}

#[test]
fn windows_round_trip_through_a_keyed_changelog_topic_into_a_table_and_a_join() {
    let cluster = rdkafka::mocking::MockCluster::new(1).unwrap();
    cluster.create_topic("rates", 2, 1).unwrap();
    let brokers = cluster.bootstrap_servers();
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let events = orders(d, 6_000, 8);
    let minutes = per_user_minutes(&events);

    // Each window once, keyed by its user: the topic's last row per user is its latest window.
    ok(weir().arg("run").arg(changelog_pipeline(d, &events, &brokers, "rates", "", "key")).output().unwrap());
    let n: usize = minutes.values().map(BTreeMap::len).sum();
    let msgs = read_topic(&brokers, "rates", |o| o.len() >= n, Duration::from_secs(30));
    assert_eq!(msgs.len(), n);
    for m in &msgs {
        assert_eq!(m.key.as_deref(), m.value["key"].as_str(), "a message is keyed by its row's key field");
    }

    // The topic read back as a table, each order joined with its user's latest window.
    let all = json_lines(&std::fs::read_to_string(&events).unwrap());
    let joined = d.join("joined");
    std::fs::create_dir_all(&joined).unwrap();
    ok(weir()
        .arg("run")
        .arg(join_pipeline(&joined, &events, &kafka_table(&brokers, "rates"), "inner"))
        .output()
        .unwrap());
    let got = sink_rows(&joined.join("out"));
    let mut want = 0;
    for o in &all {
        let user = o["user_id"].to_string();
        let Some((&start, &(count, errors))) = minutes.get(&user).and_then(|m| m.last_key_value()) else { continue };
        want += 1;
        let row = got.iter().find(|r| r["order_id"] == o["order_id"]).unwrap_or_else(|| panic!("order {o} is missing"));
        assert_eq!(
            (row["user"]["window_start"].as_i64(), row["user"]["count"].as_u64(), row["user"]["errors"].as_u64()),
            (Some(start), Some(count), Some(errors)),
            "{row}"
        );
    }
    assert_eq!(got.len(), want);
}

#[test]
fn update_mode_upserts_and_tombstones_are_a_changelog_a_table_reads_back() {
    let cluster = rdkafka::mocking::MockCluster::new(1).unwrap();
    cluster.create_topic("changes", 2, 1).unwrap();
    let brokers = cluster.bootstrap_servers();
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let events = orders(d, 6_000, 9);
    let minutes = per_user_minutes(&events);
    let output = "mode = \"update\"\ntombstones = true";
    ok(weir().arg("run").arg(changelog_pipeline(d, &events, &brokers, "changes", output, "")).output().unwrap());

    // Per message key (the window and its user): upserts, the last of them the window's final
    // count, then one tombstone, last.
    let windows: usize = minutes.values().map(BTreeMap::len).sum();
    let tombstones = |o: &[Out]| o.iter().filter(|m| m.value.is_null()).count();
    let msgs = read_topic(&brokers, "changes", |o| tombstones(o) >= windows, Duration::from_secs(30));
    let mut by_key: BTreeMap<String, Vec<&Value>> = BTreeMap::new();
    for m in &msgs {
        by_key.entry(m.key.clone().expect("every message is keyed")).or_default().push(&m.value);
    }
    let mut want = BTreeMap::new();
    for (user, ws) in &minutes {
        for (&start, &counts) in ws {
            want.insert(format!("[{start},{},{}]", start + 60_000, json!(user)), counts);
        }
    }
    assert_eq!(by_key.keys().collect::<Vec<_>>(), want.keys().collect::<Vec<_>>());
    for (key, values) in &by_key {
        let (last, rows) = values.split_last().unwrap();
        assert!(last.is_null(), "{key}: the tombstone comes last");
        assert!(rows.iter().all(|r| !r.is_null()), "{key}: one tombstone");
        let fin = rows.last().unwrap_or_else(|| panic!("{key}: no row before the tombstone"));
        assert_eq!((fin["count"].as_u64().unwrap(), fin["errors"].as_u64().unwrap()), want[key], "{key}");
    }

    // The topic as a table, looked up by each order's window key: every window's last word is
    // its tombstone, so no order finds a row. Without tombstones, each finds its window's
    // final count.
    let all = json_lines(&std::fs::read_to_string(&events).unwrap());
    let with_window: Vec<Value> = all
        .iter()
        .map(|o| {
            let start = o["order_ts"].as_i64().unwrap().div_euclid(60_000) * 60_000;
            let mut o = o.clone();
            o["window"] = json!(format!("[{start},{},{}]", start + 60_000, json!(o["user_id"].to_string())));
            o
        })
        .collect();
    let stream = d.join("with-window.jsonl");
    write_lines(&stream, &with_window, false);
    let joined = d.join("joined");
    std::fs::create_dir_all(&joined).unwrap();
    let p = join_pipeline_on(&joined, &stream, &kafka_table(&brokers, "changes"), "left", "window");
    ok(weir().arg("run").arg(p).output().unwrap());
    let got = sink_rows(&joined.join("out"));
    assert_eq!(got.len(), all.len());
    assert!(got.iter().all(|r| r["user"].is_null()));

    cluster.create_topic("upserts", 2, 1).unwrap();
    let output = "mode = \"update\"";
    ok(weir().arg("run").arg(changelog_pipeline(d, &events, &brokers, "upserts", output, "")).output().unwrap());
    let joined = d.join("joined-upserts");
    std::fs::create_dir_all(&joined).unwrap();
    let p = join_pipeline_on(&joined, &stream, &kafka_table(&brokers, "upserts"), "left", "window");
    ok(weir().arg("run").arg(p).output().unwrap());
    let got = sink_rows(&joined.join("out"));
    assert_eq!(got.len(), all.len());
    for r in &got {
        let key = r["window"].as_str().unwrap();
        // Orders the watermark dropped as late have a window key no window has.
        if let Some(&(count, errors)) = want.get(key) {
            assert_eq!((r["user"]["count"].as_u64(), r["user"]["errors"].as_u64()), (Some(count), Some(errors)), "{r}");
        }
    }
}

/// An orders pipeline in `dir` joining each order with its shipments (`ships`, a second
/// stream parsed by the same parser: its `order_ts` is the shipping time) shipped within 15
/// minutes of it, writing with the file sink into `dir/out`.
fn interval_pipeline(dir: &Path, orders: &Path, ships: &Path) -> PathBuf {
    let parse = component("orders_json");
    let text = format!(
        r#"
name = "ship"
[source]
type = "replay"
path = "{orders}"
max_offsets_per_trigger = 1500
[trigger]
mode = "available-now"
[parse]
plugin = "{parse}"
[watermark]
delay = "10 minutes"
[join]
type = "interval"
stream = "shipments"
on = "order_id"
before = "15 minutes"
after = "0s"
[streams.shipments]
source = {{ type = "replay", path = "{ships}" }}
parse = {{ plugin = "{parse}" }}
[checkpoint]
location = "{cp}"
[dead_letter]
path = "{dead}"
{sink}
"#,
        orders = orders.display(),
        ships = ships.display(),
        parse = parse.display(),
        cp = dir.join("cp").display(),
        dead = dir.join("dead.jsonl").display(),
        sink = file_sink(&dir.join("out")),
    );
    let p = dir.join("ship.toml");
    std::fs::write(&p, text).unwrap();
    p
}

/// Shipments of three orders in four, 0 to 19 minutes after the order (so some fall outside
/// the 15 minutes), and a second one 3 minutes later for every tenth; in shipping order.
fn shipments(orders: &[Value]) -> Vec<Value> {
    let mut ships = Vec::new();
    for o in orders {
        let id = o["order_id"].as_i64().unwrap();
        if id % 4 == 0 {
            continue;
        }
        let at = o["order_ts"].as_i64().unwrap() + (id * 7_919 % 20) * 60_000;
        let ship = |t: i64| json!({"order_id": id, "user_id": o["user_id"], "status": "SHIPPED", "amount": 0.0, "order_ts": t});
        ships.push(ship(at));
        if id % 10 == 1 {
            ships.push(ship(at + 180_000));
        }
    }
    ships.sort_by_key(|s| s["order_ts"].as_i64().unwrap());
    ships
}

/// The rule, naively: every order the watermark keeps with every shipment of it at most 15
/// minutes later, as (order id, order time, shipping time).
fn interval_reference(events: &Path, ships: &[Value]) -> Vec<(i64, i64, i64)> {
    let all = json_lines(&std::fs::read_to_string(events).unwrap());
    let (kept, _) = kept_orders(events);
    let kept: std::collections::HashSet<(i64, u64)> = kept.iter().map(|o| (o.ts, o.user)).collect();
    let mut by_order: HashMap<i64, Vec<i64>> = HashMap::new();
    for s in ships {
        by_order.entry(s["order_id"].as_i64().unwrap()).or_default().push(s["order_ts"].as_i64().unwrap());
    }
    let mut pairs = Vec::new();
    for o in &all {
        let (id, t) = (o["order_id"].as_i64().unwrap(), o["order_ts"].as_i64().unwrap());
        if !kept.contains(&(t, o["user_id"].as_u64().unwrap())) {
            continue;
        }
        for &s in by_order.get(&id).into_iter().flatten() {
            if s - 900_000 <= t && t <= s {
                pairs.push((id, t, s));
            }
        }
    }
    pairs.sort_unstable();
    pairs
}

fn pairs_of(rows: &[Value]) -> Vec<(i64, i64, i64)> {
    let mut pairs: Vec<_> = rows
        .iter()
        .map(|r| {
            assert_eq!(r["order_id"], r["shipments"]["order_id"], "{r}");
            (
                r["order_id"].as_i64().unwrap(),
                r["order_ts"].as_i64().unwrap(),
                r["shipments"]["order_ts"].as_i64().unwrap(),
            )
        })
        .collect();
    pairs.sort_unstable();
    pairs
}

#[test]
fn an_interval_join_pairs_each_order_with_its_shipments_across_runs() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let generated = orders(d, 10_000, 31);
    let all = json_lines(&std::fs::read_to_string(&generated).unwrap());
    let ships = shipments(&all);
    // The first run sees the first half of the orders and the shipments up to the last of
    // them; the second run the rest of both, so pairs of an order from the first run and a
    // shipment from the second are made from the buffer.
    let (first, second) = all.split_at(all.len() / 2);
    let mid = first.iter().map(|o| o["order_ts"].as_i64().unwrap()).max().unwrap();
    let (ships_first, ships_second): (Vec<Value>, Vec<Value>) =
        ships.iter().cloned().partition(|s| s["order_ts"].as_i64().unwrap() <= mid);
    let (events, ship_file) = (d.join("stream.jsonl"), d.join("ships.jsonl"));
    write_lines(&events, first, false);
    write_lines(&ship_file, &ships_first, false);
    let p = interval_pipeline(d, &events, &ship_file);
    ok(weir().arg("run").arg(&p).output().unwrap());
    let after_first = sink_rows(&d.join("out")).len();
    write_lines(&events, second, true);
    write_lines(&ship_file, &ships_second, true);
    ok(weir().arg("run").arg(&p).output().unwrap());

    let rows = sink_rows(&d.join("out"));
    let want = interval_reference(&generated, &ships);
    assert!(want.len() > 2_000, "a workload with pairs: {}", want.len());
    assert_eq!(pairs_of(&rows), want);
    let across = rows[after_first..]
        .iter()
        .filter(|r| r["order_ts"].as_i64().unwrap() <= mid && r["shipments"]["order_ts"].as_i64().unwrap() > mid)
        .count();
    assert!(across > 0, "some pairs span the runs");
}

#[test]
fn an_interval_join_through_repeated_kill_9_gives_the_rows_of_an_uninterrupted_run() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let events = orders(d, 20_000, 32);
    let ships = shipments(&json_lines(&std::fs::read_to_string(&events).unwrap()));
    let ship_file = d.join("ships.jsonl");
    write_lines(&ship_file, &ships, false);
    let run = |name: &str| {
        let sub = d.join(name);
        std::fs::create_dir_all(&sub).unwrap();
        (interval_pipeline(&sub, &events, &ship_file), sub.join("out"))
    };
    let (straight, straight_out) = run("straight");
    ok(weir().arg("run").arg(&straight).output().unwrap());
    let (killed, killed_out) = run("killed");
    let kills = kill_repeatedly(&killed, 6);
    assert!(kills > 0);
    let expected = sink_rows(&straight_out);
    assert_eq!(pairs_of(&expected), interval_reference(&events, &ships));
    assert!(sink_rows(&killed_out) == expected, "rows differ after {kills} kills");
}

#[test]
fn the_enrich_example_joins_generated_orders_with_generated_users() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let events = orders(d, 3_000, 41);
    let users = d.join("users.jsonl");
    ok(weir().args(["gen", "users", "--out"]).arg(&users).output().unwrap());
    let text = std::fs::read_to_string(root().join("plugins/orders-enrich/pipeline.toml"))
        .unwrap()
        .replace("../../out/users.jsonl", &users.display().to_string())
        .replace("../../out/orders-enrich/checkpoint", &d.join("cp").display().to_string())
        .replace("../dist/", &format!("{}/", root().join("plugins/dist").display()));
    let p = d.join("enrich.toml");
    std::fs::write(&p, text).unwrap();
    let rows = weir_test(&p, &events);
    let all = json_lines(&std::fs::read_to_string(&events).unwrap());
    assert_eq!(rows.len(), all.len(), "a left join keeps every order");
    for (row, order) in rows.iter().zip(&all) {
        assert_eq!(row["order_id"], order["order_id"]);
        assert_eq!(row["user"]["user_id"], order["user_id"], "{row}");
        assert!(["gold", "silver", "bronze"].contains(&row["user"]["tier"].as_str().unwrap_or("")), "{row}");
    }
}

/// Produces table records (key, value; `""` a tombstone: no value) to `topic` and waits for
/// every acknowledgement.
fn produce_table(brokers: &str, topic: &str, lines: &[Value]) {
    use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
    let producer: BaseProducer = rdkafka::ClientConfig::new().set("bootstrap.servers", brokers).create().unwrap();
    for l in lines {
        let Some(key) = l["key"].as_str() else { continue };
        let value = match &l["value"] {
            Value::String(s) if s.is_empty() => None,
            v @ Value::Object(_) => Some(v.to_string()),
            v => Some(v.to_string()),
        };
        let mut record = BaseRecord::<str, str>::to(topic).key(key);
        if let Some(v) = &value {
            record = record.payload(v);
        }
        while let Err((_, r)) = producer.send(record) {
            record = r;
            producer.poll(Duration::from_millis(5));
        }
    }
    producer.flush(Duration::from_secs(30)).unwrap();
}

/// The rows the file sink has committed into `dir` so far (its staging files are skipped).
fn committed_rows(dir: &Path) -> Vec<Value> {
    let Ok(entries) = std::fs::read_dir(dir) else { return Vec::new() };
    let mut files: Vec<PathBuf> = entries
        .map(|e| e.unwrap().path())
        .filter(|p| p.file_name().is_some_and(|n| n.to_string_lossy().starts_with("batch-")))
        .collect();
    files.sort();
    files.iter().flat_map(|f| json_lines(&std::fs::read_to_string(f).unwrap())).collect()
}

/// Waits, without sleeping on a guess, until the sink in `dir` has committed `n` rows: polls
/// the directory while `child` runs; panics if it exits or takes over a minute.
fn wait_for_rows(dir: &Path, n: usize, child: &mut std::process::Child) -> Vec<Value> {
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        let rows = committed_rows(dir);
        if rows.len() >= n {
            return rows;
        }
        assert!(child.try_wait().unwrap().is_none(), "weir exited with {} of {n} rows", rows.len());
        assert!(std::time::Instant::now() < deadline, "{} of {n} rows after a minute", rows.len());
        std::thread::yield_now();
    }
}

#[test]
fn a_table_topic_updated_while_the_stream_runs_reaches_the_events_after_the_update() {
    let cluster = rdkafka::mocking::MockCluster::new(1).unwrap();
    cluster.create_topic("orders", 2, 1).unwrap();
    cluster.create_topic("users", 1, 1).unwrap();
    let brokers = cluster.bootstrap_servers();
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let generated = orders(d, 6_000, 51);
    let all = json_lines(&std::fs::read_to_string(&generated).unwrap());
    let users = users_of(&all);
    let (first, second) = all.split_at(all.len() / 2);
    let (first_file, second_file) = (d.join("first.jsonl"), d.join("second.jsonl"));
    write_lines(&first_file, first, false);
    write_lines(&second_file, second, false);

    // A pipeline that runs until told to stop, reading both topics as they grow.
    let p = join_pipeline(d, &generated, &kafka_table(&brokers, "users"), "left");
    let text = std::fs::read_to_string(&p).unwrap().replace(
        &format!("type = \"replay\"\npath = \"{}\"\nmax_offsets_per_trigger = 1500", generated.display()),
        &kafka_source(&brokers, "orders", 1_500),
    );
    let text = text.replace("mode = \"available-now\"", "mode = \"processing-time\"");
    std::fs::write(&p, text).unwrap();
    produce_table(&brokers, "users", &users_v1(&users));
    produce_lines(&brokers, "orders", 2, &first_file, false);
    let mut child = weir().arg("run").arg(&p).stdout(std::process::Stdio::null()).spawn().unwrap();
    let out = d.join("out");
    wait_for_rows(&out, first.len(), &mut child);
    // Every order of the first half is out; now the table changes, then more orders come.
    produce_table(&brokers, "users", &users_v2(&users));
    produce_lines(&brokers, "orders", 2, &second_file, false);
    let rows = wait_for_rows(&out, all.len(), &mut child);
    ok(std::process::Command::new("kill").args(["-TERM", &child.id().to_string()]).output().unwrap());
    assert!(child.wait().unwrap().success());

    let mut table = HashMap::new();
    apply(&mut table, &users_v1(&users));
    let mut want = reference(first, &table, false);
    apply(&mut table, &users_v2(&users));
    want.extend(reference(second, &table, false));
    let by_id = |rows: &[Value]| {
        let mut rows = rows.to_vec();
        rows.sort_by_key(|r| r["order_id"].as_i64().unwrap());
        rows
    };
    assert_eq!(rows.len(), want.len());
    assert!(by_id(&rows) == by_id(&want), "the joined rows differ from the reference");
}

#[test]
fn weir_test_shows_tombstones_as_lines_of_their_own() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let events = orders(d, 3_000, 71);
    let extra = "[output]\nmode = \"update\"\ntombstones = true";
    let p = pipeline(d, Spec { window: TUMBLING, parse_config: "key_by_user = true", extra, ..Default::default() });
    let rows = weir_test(&p, &events);
    let minutes = per_user_minutes(&events);
    let windows: usize = minutes.values().map(BTreeMap::len).sum();
    let tombstones: Vec<&Value> = rows.iter().filter(|r| r["tombstone"] == true).collect();
    assert_eq!(tombstones.len(), windows, "one per window, at the flush");
    for (user, ws) in &minutes {
        for start in ws.keys() {
            let key = format!("[{start},{},{}]", start + 60_000, json!(user));
            let at = rows.iter().rposition(|r| r["key"] == json!(key)).unwrap_or_else(|| panic!("{key}: no tombstone"));
            let last_row = rows.iter().rposition(|r| r["window_start"] == json!(start) && r["key"] == json!(user));
            assert!(last_row.is_some_and(|r| r < at), "{key}: the tombstone follows the window's rows");
        }
    }
}
