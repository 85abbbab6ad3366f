//! The interval join: orders with their shipments, a second stream, shipped within 15 minutes,
//! across two runs on one checkpoint (pairs made from the buffer of the first) and through
//! repeated `kill -9`. The pairs are checked against a naive reference of the same rule.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use crate::common::*;
use serde_json::{Value, json};

use super::support::write_lines;

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
