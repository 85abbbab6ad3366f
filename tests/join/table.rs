//! The stream-table join over a table read from a file: the table moves between two runs on
//! one checkpoint and each order meets the table of its batch; the same through repeated
//! `kill -9`; and the enrich example as shipped. Every joined row is checked against the naive
//! reference in `support`.

use std::collections::HashMap;

use crate::common::*;
use serde_json::Value;

use super::support::{apply, join_pipeline, reference, replay_table, users_of, users_v1, users_v2, write_lines};

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
