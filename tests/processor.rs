//! The keyed processor (`[process]`) with the real fraud-alerts component, against a naive
//! reference computed here: generated orders of a few users, many of them errors, out of order,
//! with repeats and with orders hours late. Timers (event time) and TTL (event time), the
//! kill -9 loop, and the hostile processor.
//!
//! The reference follows `docs/semantics.md` ("Keyed processors") step by step: batches of
//! `BATCH` records; per batch, the orders behind the watermark in force are late, the rest go to
//! their user in event-time order (users in key order), then the watermark moves to the largest
//! event time so far less the delay, the event-time timers it reached fire (users in key order),
//! and keys whose TTL ran out lose their state. A run's last batch flushes to the latest timer.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::common::*;

/// Records per batch: `max_offsets_per_trigger`, which every batch of the run reaches (the first
/// batches grow from 64 records; 64 keeps them all the same size).
const BATCH: usize = 64;
const DELAY: i64 = 30_000;
const WITHIN: i64 = 120_000;
const THRESHOLD: u32 = 3;

/// xorshift, for reproducible orders.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

/// `n` orders of 12 users, a third of them errors, about 4 s apart with up to 50 s of disorder;
/// every 50th is repeated a few lines later and every 200th once more an hour late.
fn orders(dir: &Path, n: usize, seed: u64) -> (PathBuf, Vec<serde_json::Value>) {
    let mut rng = Rng(seed | 1);
    let mut out = Vec::new();
    let mut t = 1_793_491_200_000i64;
    for i in 0..n {
        t += rng.below(8_000) as i64;
        let status = if rng.below(3) == 0 { "ERROR" } else { "OK" };
        let o = serde_json::json!({
            "order_id": i, "user_id": rng.below(12), "status": status, "amount": 1.5,
            "order_ts": t - rng.below(50_000) as i64,
        });
        out.push(o.clone());
        if i % 50 == 7 {
            out.push(o.clone());
        }
        if i % 200 == 3 {
            let mut late = o.clone();
            late["order_ts"] = serde_json::json!(t - 3_600_000);
            out.push(late);
        }
    }
    let path = dir.join("orders.jsonl");
    std::fs::write(&path, out.iter().map(|o| format!("{o}\n")).collect::<String>()).unwrap();
    (path, out)
}

/// A user's streak, as the plugin keeps it.
#[derive(Clone)]
struct Streak {
    first: i64,
    errors: u32,
    alerted: bool,
}

/// What the reference knows of one user.
#[derive(Default)]
struct User {
    streak: Option<Streak>,
    /// The latest event time of the user's orders since it had no state (event-time TTL).
    touched: i64,
    /// Event-time timers that are set.
    timers: Vec<i64>,
}

/// How the run is set up: `reset_timer` (timers end streaks) or `ttl` (idle users lose theirs).
#[derive(Clone, Copy)]
struct Mode {
    reset_timer: bool,
    ttl: Option<i64>,
}

/// The plugin and the engine, naively: the rows in order.
fn reference(input: &[serde_json::Value], mode: Mode) -> Vec<serde_json::Value> {
    let mut users: BTreeMap<String, User> = BTreeMap::new();
    let mut rows = Vec::new();
    let (mut watermark, mut max) = (i64::MIN, i64::MIN);
    for batch in input.chunks(BATCH) {
        let mut by_user: BTreeMap<String, Vec<(i64, bool)>> = BTreeMap::new();
        for o in batch {
            let ts = o["order_ts"].as_i64().unwrap();
            max = max.max(ts);
            if ts < watermark {
                continue; // late
            }
            by_user.entry(o["user_id"].to_string()).or_default().push((ts, o["status"] == "ERROR"));
        }
        for (user, mut events) in by_user {
            events.sort_by_key(|e| e.0); // stable: ties keep input order
            let u = users.entry(user.clone()).or_default();
            let latest = events.iter().map(|e| e.0).max().unwrap();
            u.touched = if u.streak.is_some() { u.touched.max(latest) } else { latest };
            for (ts, error) in events {
                if error {
                    on_error(&user, u, ts, mode, &mut rows);
                }
            }
        }
        watermark = watermark.max(max - DELAY);
        advance(&mut users, watermark, mode, &mut rows);
    }
    // The flush at the end of input: one more batch, to the latest timer that is set.
    if let Some(latest) = users.values().flat_map(|u| u.timers.iter().copied()).max() {
        advance(&mut users, watermark.max(latest), mode, &mut rows);
    }
    rows
}

/// The plugin's rule for one error of `user` at `ts`.
fn on_error(user: &str, u: &mut User, ts: i64, mode: Mode, rows: &mut Vec<serde_json::Value>) {
    match &mut u.streak {
        Some(s) if ts - s.first <= WITHIN => s.errors += 1,
        _ => {
            if mode.reset_timer {
                if let Some(old) = &u.streak {
                    u.timers.retain(|&t| t != old.first + WITHIN);
                }
                u.timers.push(ts + WITHIN);
            }
            u.streak = Some(Streak { first: ts, errors: 1, alerted: false });
        }
    }
    let s = u.streak.as_mut().unwrap();
    if s.errors >= THRESHOLD && !s.alerted {
        s.alerted = true;
        rows.push(serde_json::json!({ "user": user, "errors": s.errors, "first_error": s.first, "alert_at": ts }));
    }
}

/// The end of a batch: the timers `watermark` reached fire (users in key order), then the TTL.
fn advance(users: &mut BTreeMap<String, User>, watermark: i64, mode: Mode, rows: &mut Vec<serde_json::Value>) {
    for (user, u) in users.iter_mut() {
        let fired: Vec<i64> = u.timers.iter().copied().filter(|&t| t <= watermark).collect();
        u.timers.retain(|&t| t > watermark);
        if let Some(s) = &u.streak
            && fired.contains(&(s.first + WITHIN))
        {
            rows.push(serde_json::json!({ "user": user, "reset_at": s.first + WITHIN, "errors": s.errors }));
            u.streak = None;
        }
    }
    if let Some(ttl) = mode.ttl {
        for u in users.values_mut() {
            if u.streak.is_some() && u.touched.saturating_add(ttl) <= watermark {
                u.streak = None;
            }
        }
    }
}

/// The fraud pipeline over `events` in `dir`, and `extra` TOML.
fn fraud_pipeline(dir: &Path, events: &Path, mode: Mode, extra: &str) -> PathBuf {
    let ttl = mode.ttl.map_or(String::new(), |ms| format!("ttl = \"{ms}ms\"\nttl_clock = \"event-time\"\n"));
    let text = format!(
        r#"
name = "fraud"
[source]
type = "replay"
path = "{events}"
max_offsets_per_trigger = {BATCH}
[trigger]
mode = "available-now"
[parse]
plugin = "{parse}"
config = {{ key_by_user = true }}
[watermark]
delay = "{DELAY}ms"
flush_at_end = true
[process]
plugin = "{fraud}"
config = {{ threshold = {THRESHOLD}, within_ms = {WITHIN}, reset_timer = {reset}, report_resets = true }}
{ttl}
{extra}
"#,
        events = events.display(),
        parse = component("orders_json").display(),
        fraud = component("fraud_alerts").display(),
        reset = mode.reset_timer,
    );
    let path = dir.join("fraud.toml");
    std::fs::write(&path, text).unwrap();
    path
}

const TIMERS: Mode = Mode { reset_timer: true, ttl: None };
/// A TTL shorter than the streak's window: a user idle for 40 s of event time starts over.
const TTL: Mode = Mode { reset_timer: false, ttl: Some(40_000) };

#[test]
fn fraud_alerts_with_event_time_timers_match_the_reference() {
    let dir = tempfile::tempdir().unwrap();
    let (events, input) = orders(dir.path(), 6_000, 41);
    let p = fraud_pipeline(dir.path(), &events, TIMERS, "");
    let rows = weir_test(&p, &events);
    let want = reference(&input, TIMERS);
    let alerts = want.iter().filter(|r| r.get("alert_at").is_some()).count();
    let resets = want.len() - alerts;
    assert!(alerts > 100 && resets > 100, "the data makes alerts ({alerts}) and resets ({resets})");
    assert_eq!(rows, want);
    // Without the timer nothing ends a streak: other alerts, and no resets.
    let p = fraud_pipeline(dir.path(), &events, Mode { reset_timer: false, ttl: None }, "");
    assert_ne!(weir_test(&p, &events), want);
}

#[test]
fn an_event_time_ttl_ends_idle_streaks_without_a_call() {
    let dir = tempfile::tempdir().unwrap();
    let (events, input) = orders(dir.path(), 6_000, 42);
    let p = fraud_pipeline(dir.path(), &events, TTL, "");
    let rows = weir_test(&p, &events);
    assert_eq!(rows, reference(&input, TTL));
    assert_ne!(rows, reference(&input, Mode { reset_timer: false, ttl: None }), "the TTL changes the alerts");
}

#[test]
fn processor_state_and_timers_survive_repeated_kill_9_and_timers_fire_once() {
    let dir = tempfile::tempdir().unwrap();
    let (events, input) = orders(dir.path(), 4_000, 43);
    let out = dir.path().join("alerts");
    std::fs::create_dir_all(&out).unwrap();
    let extra = format!("{}[checkpoint]\nlocation = \"{}\"", file_sink(&out), dir.path().join("cp").display());
    let p = fraud_pipeline(dir.path(), &events, TIMERS, &extra);
    let kills = kill_repeatedly(&p, 12);
    assert!(kills >= 4, "only {kills} kills landed");
    // Each reset row is one timer firing: a timer fired twice, or lost, would show here.
    assert_eq!(sink_rows(&out), reference(&input, TIMERS));
}

/// The hostile processor (`tests/plugins/hostile`) counts each user's events; one event of
/// each of the three users attacks. Each attack is one dead letter naming its limit or the panic, and every other
/// user's count goes on as if the attacks had never been.
#[test]
fn a_hostile_processor_is_capped_and_loses_no_other_key_s_state() {
    let dir = tempfile::tempdir().unwrap();
    let mut lines = Vec::new();
    let mut want: BTreeMap<u64, u64> = BTreeMap::new();
    for i in 0..300u64 {
        let user = i % 3;
        let attack = match i {
            100 => Some("timers"),
            152 => Some("state"),
            201 => Some("panic"),
            _ => None,
        };
        let mut o = serde_json::json!({ "user_id": user, "order_ts": 1_000_000 + i as i64 });
        match attack {
            Some(a) => o["process"] = serde_json::json!(a),
            None => *want.entry(user).or_default() += 1,
        }
        lines.push(o.to_string());
    }
    let events = dir.path().join("attacks.jsonl");
    std::fs::write(&events, lines.join("\n") + "\n").unwrap();
    let hostile = component("hostile");
    let text = format!(
        r#"
name = "hostile-process"
[source]
type = "replay"
path = "{events}"
[trigger]
mode = "available-now"
[parse]
plugin = "{hostile}"
[watermark]
delay = "1 minute"
[process]
plugin = "{hostile}"
key = "user_id"
limits = {{ max_timers = 1000, max_state_kb = 1024 }}
[failure]
retries = 0
"#,
        events = events.display(),
        hostile = hostile.display(),
    );
    let p = dir.path().join("hostile.toml");
    std::fs::write(&p, text).unwrap();
    let Tested { rows, dead, .. } = weir_test_dead_letters(&p, &events);
    assert_eq!(dead.len(), 3, "{dead:?}");
    let reasons: Vec<String> = dead.iter().map(|d| d["error"].as_str().unwrap_or_default().to_string()).collect();
    assert!(reasons.iter().any(|r| r.contains("limits.max_timers")), "{reasons:?}");
    assert!(reasons.iter().any(|r| r.contains("limits.max_state_kb")), "{reasons:?}");
    assert!(reasons.iter().any(|r| r.contains("panic")), "{reasons:?}");
    // Every user's last count is its good events, and each count appears once, in order.
    let mut last: BTreeMap<u64, u64> = BTreeMap::new();
    for r in &rows {
        let user: u64 = r["key"].as_str().unwrap().parse().unwrap();
        let n = r["n"].as_u64().unwrap();
        assert_eq!(n, last.get(&user).copied().unwrap_or(0) + 1, "user {user} counted in order: {r}");
        last.insert(user, n);
    }
    assert_eq!(last, want);
}
