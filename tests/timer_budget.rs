//! A keyed processor that stays within every per-key limit and sets as many timers as it may
//! on every key it sees (the hostile plugin's `fanout`), over 10,000 keys, under the default
//! limits: the stage's budget (`limits.max_stage_timers`) caps the total, each key past it is a
//! dead letter naming the limit, every other key's count is exact, and the host's peak memory
//! stays within a small multiple of the same run without timers. Through repeated `kill -9`
//! the same keys are refused and the same rows delivered as in an uninterrupted run: the
//! stage's totals are state, committed with each batch.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use crate::common::{component, file_sink, json_lines, kill_repeatedly, ok, sink_rows, weir};

const KEYS: u64 = 10_000;

/// Each key's fan-out event (or a plain one), then a plain one.
fn events(dir: &Path, fanout: bool) -> std::path::PathBuf {
    let mut lines = Vec::new();
    for round in 0..2 {
        for k in 0..KEYS {
            let mut o = serde_json::json!({ "user_id": k, "order_ts": 1_000_000 + (round * KEYS + k) as i64 });
            if fanout && round == 0 {
                o["process"] = serde_json::json!("fanout");
            }
            lines.push(o.to_string());
        }
    }
    let path = dir.join(if fanout { "fanout.jsonl" } else { "plain.jsonl" });
    std::fs::write(&path, lines.join("\n") + "\n").unwrap();
    path
}

fn pipeline(dir: &Path, events: &Path) -> std::path::PathBuf {
    let hostile = component("hostile");
    let text = format!(
        "name = \"fanout\"\n[source]\ntype = \"replay\"\npath = \"{}\"\n[trigger]\nmode = \"available-now\"\n\
         [parse]\nplugin = \"{h}\"\n[watermark]\ndelay = \"1 hour\"\n[process]\nplugin = \"{h}\"\nkey = \"user_id\"\n\
         [failure]\nretries = 0\n",
        events.display(),
        h = hostile.display()
    );
    let p = dir.join(format!("{}.toml", events.file_stem().unwrap().to_string_lossy()));
    std::fs::write(&p, text).unwrap();
    p
}

/// `weir test` of `pipeline` on `events`: its rows, its dead letters, and its peak resident
/// memory in KiB (the child's own, from `wait4`, whatever else runs beside it).
#[allow(clippy::zombie_processes)] // reaped by `wait4`, which `Child::wait` cannot stand in for
fn measured(pipeline: &Path, events: &Path) -> (Vec<serde_json::Value>, Vec<serde_json::Value>, i64) {
    let dl = events.with_extension("dead-letters.jsonl");
    let out = events.with_extension("rows.jsonl");
    let mut cmd: Command = weir();
    cmd.arg("test").arg(pipeline).arg("--events").arg(events).arg("--dead-letters").arg(&dl);
    cmd.stdout(std::fs::File::create(&out).unwrap()).stderr(std::process::Stdio::null());
    let child = cmd.spawn().unwrap();
    let (mut status, mut usage) = (0, unsafe { std::mem::zeroed::<libc::rusage>() });
    // SAFETY: `status` and `usage` are valid for writes; the pid is this test's own child, reaped
    // here and nowhere else.
    let pid = unsafe { libc::wait4(child.id() as i32, &mut status, 0, &mut usage) };
    assert_eq!(pid, child.id() as i32, "wait4: {}", std::io::Error::last_os_error());
    assert!(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0, "weir test failed: {status}");
    let read = |p: &Path| std::fs::read_to_string(p).map(|t| json_lines(&t)).unwrap_or_default();
    (read(&out), read(&dl), usage.ru_maxrss)
}

#[test]
fn a_timer_fan_out_over_ten_thousand_keys_is_capped_by_the_stage_s_budget() {
    let dir = tempfile::tempdir().unwrap();
    let fanout = events(dir.path(), true);
    let (rows, dead, fanout_kb) = measured(&pipeline(dir.path(), &fanout), &fanout);
    let plain = events(dir.path(), false);
    let (plain_rows, plain_dead, plain_kb) = measured(&pipeline(dir.path(), &plain), &plain);
    assert_eq!((plain_rows.len() as u64, plain_dead.len()), (2 * KEYS, 0));

    // Every event is a row or a dead letter, never both, never neither; each dead letter names
    // the stage's budget.
    assert_eq!(rows.len() + dead.len(), (2 * KEYS) as usize);
    assert!(!dead.is_empty(), "10,000 keys × 1,000 timers must pass the default budget");
    for d in &dead {
        assert_eq!(d["kind"], "over-limit", "{d}");
        assert!(d["error"].as_str().unwrap_or_default().contains("limits.max_stage_timers"), "{d}");
    }
    // Each key counts exactly its events that were not refused, in order.
    let mut refused: BTreeMap<String, u64> = BTreeMap::new();
    for d in &dead {
        let value: serde_json::Value = serde_json::from_str(d["value"].as_str().unwrap()).unwrap();
        *refused.entry(value["user_id"].to_string()).or_default() += 1;
    }
    let mut counts: BTreeMap<String, u64> = BTreeMap::new();
    for r in &rows {
        let key = r["key"].as_str().unwrap().to_string();
        let n = counts.entry(key.clone()).or_default();
        *n += 1;
        assert_eq!(r["n"].as_u64(), Some(*n), "{key} counted in order: {r}");
    }
    for k in 0..KEYS {
        let key = k.to_string();
        let got = counts.get(&key).copied().unwrap_or(0) + refused.get(&key).copied().unwrap_or(0);
        assert_eq!(got, 2, "key {key}: every event once");
    }
    // The keys whose fan-out was taken hold at most the budget's timers.
    let taken = KEYS - refused.len() as u64;
    assert!(taken * 1_000 <= 100_000, "{taken} keys took 1,000 timers each");
    eprintln!("peak RSS: {fanout_kb} KiB with the fan-out, {plain_kb} KiB without");
    assert!(fanout_kb <= 4 * plain_kb, "peak RSS {fanout_kb} KiB against {plain_kb} KiB without timers");
}

/// The fan-out into the file sink, with its checkpoint and dead letters under `run`.
fn delivering(dir: &Path, events: &Path, run: &str) -> (std::path::PathBuf, std::path::PathBuf, std::path::PathBuf) {
    let (out, dead) = (dir.join(run).join("out"), dir.join(run).join("dead-letters.jsonl"));
    std::fs::create_dir_all(&out).unwrap();
    let text = std::fs::read_to_string(pipeline(dir, events)).unwrap();
    let text = format!(
        "{text}{}[checkpoint]\nlocation = \"{}\"\n[dead_letter]\npath = \"{}\"\n",
        file_sink(&out),
        dir.join(run).join("checkpoint").display(),
        dead.display()
    );
    let p = dir.join(format!("{run}.toml"));
    std::fs::write(&p, text).unwrap();
    (p, out, dead)
}

/// What a run delivered and refused: its rows, and its dead letters' (value, error), sorted.
fn outcome(out: &Path, dead: &Path) -> (Vec<String>, Vec<(String, String)>) {
    let mut rows: Vec<String> = sink_rows(out).iter().map(|r| r.to_string()).collect();
    rows.sort();
    let text = std::fs::read_to_string(dead).unwrap_or_default();
    let mut letters: Vec<(String, String)> =
        json_lines(&text).iter().map(|d| (d["value"].to_string(), d["error"].to_string())).collect();
    letters.sort();
    (rows, letters)
}

#[test]
fn the_budget_refuses_the_same_keys_through_repeated_kill_9() {
    let dir = tempfile::tempdir().unwrap();
    let fanout = events(dir.path(), true);
    let (p, out, dead) = delivering(dir.path(), &fanout, "whole");
    ok(weir().arg("run").arg(&p).output().unwrap());
    let whole = outcome(&out, &dead);
    assert!(!whole.1.is_empty() && !whole.0.is_empty(), "some keys refused, some taken");
    let (p, out, dead) = delivering(dir.path(), &fanout, "killed");
    let kills = kill_repeatedly(&p, 8);
    assert!(kills >= 3, "only {kills} kills landed");
    assert_eq!(outcome(&out, &dead), whole);
}
