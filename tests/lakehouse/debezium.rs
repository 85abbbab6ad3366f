//! Debezium change events into PostgreSQL: a snapshot, then inserts, updates and deletes of a
//! customers table (some wrapped by Kafka Connect's `schema`/`payload`, each delete followed by
//! Debezium's compaction tombstone), read by `debezium_parser.wasm` through repeated `kill -9`
//! and upserted into a replica table, which must equal the changes replayed here by hand.

use std::collections::BTreeMap;

use super::*;
use crate::common::postgres::Postgres;

/// A customer row as Debezium's `after` image carries it.
fn customer(id: u32, version: u32, ts: i64) -> serde_json::Value {
    serde_json::json!({
        "id": id,
        "name": format!("c{id}-v{version}"),
        "tier": version % 4,
        "balance": f64::from(version * 7 % 1000) + 0.25,
        "updated_at": ts,
    })
}

/// One change event as a recorded-events line (`envelope` layout), keyed by its id.
fn line(
    id: u32,
    op: &str,
    before: Option<&serde_json::Value>,
    after: Option<&serde_json::Value>,
    ts: i64,
    i: usize,
) -> String {
    let event = serde_json::json!({
        "before": before, "after": after, "op": op, "ts_ms": ts + 5,
        "source": { "connector": "postgresql", "db": "shop", "schema": "public", "table": "customers",
                    "ts_ms": ts, "lsn": i, "snapshot": if op == "r" { "true" } else { "false" } },
        "transaction": if op == "r" { serde_json::Value::Null } else {
            serde_json::json!({ "id": format!("tx{}", i / 3), "total_order": 3, "data_collection_order": i % 3 + 1 })
        },
    });
    // Every seventh wrapped, as JsonConverter writes with schemas.enable on.
    let value = if i.is_multiple_of(7) {
        serde_json::json!({ "schema": { "type": "struct" }, "payload": event })
    } else {
        event
    };
    let key = serde_json::json!({ "id": id }).to_string();
    serde_json::json!({ "value": value.to_string(), "key": key }).to_string() + "\n"
}

/// The change stream as recorded-events lines (`envelope` layout), and the table it leaves.
fn changes(n: usize) -> (String, BTreeMap<u32, serde_json::Value>) {
    let mut rng = 0x2545_f491_4f6c_dd1d_u64;
    let mut next = |below: u64| {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng % below
    };
    let (mut table, mut lines, mut ts) = (BTreeMap::new(), String::new(), 1_790_000_000_000_i64);
    let mut i = 0;
    for id in 1..=100u32 {
        let row = customer(id, 0, ts);
        lines.push_str(&line(id, "r", None, Some(&row), ts, i));
        table.insert(id, (0u32, row));
        i += 1;
    }
    while i < n {
        ts += 1 + next(50) as i64;
        let id = 1 + next(300) as u32;
        match table.get(&id).cloned() {
            None => {
                let row = customer(id, 1, ts);
                lines.push_str(&line(id, "c", None, Some(&row), ts, i));
                table.insert(id, (1, row));
            }
            Some((v, old)) if next(10) < 7 => {
                let row = customer(id, v + 1, ts);
                lines.push_str(&line(id, "u", Some(&old), Some(&row), ts, i));
                table.insert(id, (v + 1, row));
            }
            Some((_, old)) => {
                lines.push_str(&line(id, "d", Some(&old), None, ts, i));
                table.remove(&id);
                // Debezium's tombstone for compaction: the key, no value.
                lines.push_str(&serde_json::json!({ "value": "", "key": format!("{{\"id\":{id}}}") }).to_string());
                lines.push('\n');
            }
        }
        i += 1;
    }
    (lines, table.into_iter().map(|(id, (_, row))| (id, row)).collect())
}

#[test]
fn a_change_stream_through_kill_9_leaves_the_table_the_changes_make() {
    let dir = tempfile::tempdir().unwrap();
    let pg = Postgres::start();
    pg.psql(
        "CREATE TABLE customers (id int PRIMARY KEY, name text NOT NULL, tier smallint, balance numeric(12,2), \
         updated_at timestamptz NOT NULL, _cdc jsonb)",
    );
    let (lines, want) = changes(3_000);
    let events = dir.path().join("changes.jsonl");
    std::fs::write(&events, lines).unwrap();
    let text = format!(
        "name = \"customers-replica\"\n[source]\ntype = \"replay\"\npath = {events:?}\nmax_offsets_per_trigger = 150\n\
         [trigger]\nmode = \"available-now\"\n[parse]\nplugin = {:?}\n[output]\ntombstones = true\n\
         [sink]\ntype = \"postgres\"\nconnection = {:?}\npassword_file = {:?}\ntable = \"customers\"\n\
         [checkpoint]\nlocation = {:?}\n[dead_letter]\npath = {:?}\n",
        component("debezium_parser"),
        pg.connection,
        pg.password_file,
        dir.path().join("cp"),
        dir.path().join("dead.jsonl"),
    );
    let p = dir.path().join("customers.toml");
    std::fs::write(&p, text).unwrap();
    let kills = kill_repeatedly(&p, 6);
    assert!(kills >= 2, "only {kills} kills landed");
    let got = pg.psql(
        "SELECT id, name, tier, balance, (extract(epoch FROM updated_at) * 1000)::bigint FROM customers ORDER BY id",
    );
    let want: Vec<String> = want
        .values()
        .map(|r| {
            format!(
                "{}|{}|{}|{:.2}|{}",
                r["id"],
                r["name"].as_str().unwrap(),
                r["tier"],
                r["balance"].as_f64().unwrap(),
                r["updated_at"]
            )
        })
        .collect();
    assert_eq!(got.lines().collect::<Vec<_>>(), want, "the replica is the table the changes make");
    // Each row's metadata came along: its op, and the transaction of a change after the snapshot.
    let meta = pg.psql("SELECT DISTINCT _cdc->>'op' FROM customers ORDER BY 1");
    assert!(meta.lines().all(|op| ["c", "r", "u"].contains(&op)), "{meta}");
    let tx = pg.psql("SELECT count(*) FROM customers WHERE _cdc->>'op' <> 'r' AND _cdc->'transaction'->>'id' IS NULL");
    assert_eq!(tx.trim(), "0");
    let dead = std::fs::read_to_string(dir.path().join("dead.jsonl")).unwrap_or_default();
    assert!(dead.is_empty(), "{dead}");
}

#[test]
fn without_output_tombstones_a_delete_is_a_dead_letter_not_a_lost_change() {
    let dir = tempfile::tempdir().unwrap();
    let (lines, _) = changes(400);
    let deletes = lines.lines().filter(|l| l.contains(r#"\"op\":\"d\""#)).count();
    assert!(deletes > 0);
    let events = dir.path().join("changes.jsonl");
    std::fs::write(&events, lines).unwrap();
    let text = format!(
        "name = \"customers\"\n[source]\ntype = \"replay\"\npath = {events:?}\n[parse]\nplugin = {:?}\n\
         [checkpoint]\nlocation = {:?}\n[dead_letter]\npath = {:?}\n",
        component("debezium_parser"),
        dir.path().join("cp"),
        dir.path().join("dead.jsonl"),
    );
    let p = dir.path().join("customers.toml");
    std::fs::write(&p, text).unwrap();
    ok(weir().arg("run").arg(&p).output().unwrap());
    let dead = std::fs::read_to_string(dir.path().join("dead.jsonl")).unwrap();
    let dead: Vec<serde_json::Value> = dead.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(dead.len(), deletes, "each delete, once");
    assert!(dead.iter().all(|d| d["error"].as_str().unwrap().contains("output.tombstones")), "{dead:?}");
}
