//! What the join tests share: the orders pipeline with a `[join]`, the users table's two
//! versions, and the naive reference a joined row is checked against. The reference applies
//! the table's rule on its own (upsert, tombstone, ignore), never the engine's code.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use crate::common::*;
use serde_json::{Value, json};

/// A stateless orders pipeline in `dir` with `[join]` over the table `table` (the inline
/// `join.table` source) by `user_id`, writing with the file sink into `dir/out`.
pub(super) fn join_pipeline(dir: &Path, orders: &Path, table: &str, kind: &str) -> PathBuf {
    join_pipeline_on(dir, orders, table, kind, "user_id")
}

/// [`join_pipeline`], looking orders up by their field `on`.
pub(super) fn join_pipeline_on(dir: &Path, orders: &Path, table: &str, kind: &str, on: &str) -> PathBuf {
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

pub(super) fn replay_table(path: &Path) -> String {
    format!("{{ type = \"replay\", path = \"{}\" }}", path.display())
}

pub(super) fn kafka_table(brokers: &str, topic: &str) -> String {
    format!(
        "{{ type = \"kafka\", topics = [\"{topic}\"], kafka.bootstrap.servers = \"{brokers}\", \
         kafka.fetch.wait.max.ms = 10 }}"
    )
}

/// The table's first version: users not divisible by 3, a tier each; then two records a table
/// cannot take (a value that is no object, a record without a key).
pub(super) fn users_v1(users: &[u64]) -> Vec<Value> {
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
pub(super) fn users_v2(users: &[u64]) -> Vec<Value> {
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
pub(super) fn apply(table: &mut HashMap<String, Value>, lines: &[Value]) {
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
pub(super) fn reference(orders: &[Value], table: &HashMap<String, Value>, inner: bool) -> Vec<Value> {
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

pub(super) fn write_lines(path: &Path, lines: &[Value], append: bool) {
    use std::io::Write;
    let mut f =
        std::fs::OpenOptions::new().create(true).append(append).write(true).truncate(!append).open(path).unwrap();
    for l in lines {
        writeln!(f, "{l}").unwrap();
    }
}

pub(super) fn users_of(orders: &[Value]) -> Vec<u64> {
    let mut users: Vec<u64> = orders.iter().map(|o| o["user_id"].as_u64().unwrap()).collect();
    users.sort_unstable();
    users.dedup();
    users
}
