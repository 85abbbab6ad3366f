//! Hostile plugins are contained: a parser and aggregator (`tests/plugins/hostile`) that attack
//! their sandbox on the records and events that ask them to, mixed into ordinary orders. Every
//! attack must end as a dead letter naming the stage, the plugin and the limit, and every other
//! record must come through (or be counted), in order, once.

use std::collections::BTreeMap;
use std::net::TcpListener;
use std::path::Path;

use crate::common::*;

const ATTACKS: [&str; 11] =
    ["loop", "sleep", "memory", "recursion", "panic", "read", "net", "output", "clock", "env", "random"];

/// Orders with one line per attack spliced in; returns the file and the attack lines' 1-based
/// line numbers, by attack.
fn poisoned_orders(dir: &Path, net_to: &str) -> (std::path::PathBuf, Vec<(String, u64)>) {
    let clean = orders(dir, 3_000, 17);
    let lines: Vec<String> = std::fs::read_to_string(&clean).unwrap().lines().map(String::from).collect();
    let mut out = Vec::new();
    let mut at = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        // Spread the attacks over the first batches and beyond.
        if i % 200 == 7 && i / 200 < ATTACKS.len() {
            let attack = ATTACKS[i / 200];
            out.push(format!("{{\"attack\":\"{attack}\",\"to\":\"{net_to}\"}}"));
            at.push((attack.to_string(), out.len() as u64));
        }
        out.push(line.clone());
    }
    let path = dir.join("poisoned.jsonl");
    std::fs::write(&path, out.join("\n") + "\n").unwrap();
    (path, at)
}

fn hostile_pipeline(dir: &Path, failure: &str) -> std::path::PathBuf {
    let text = format!(
        r#"
name = "hostile"
[source]
type = "replay"
path = "unused.jsonl"
[parse]
plugin = "{}"
limits = {{ call_timeout = "300ms", max_memory_mb = 256, max_output_mb = 4 }}
[failure]
{failure}
"#,
        component("hostile").display()
    );
    let p = dir.join("hostile.toml");
    std::fs::write(&p, text).unwrap();
    p
}

#[test]
fn every_attack_is_contained_and_named_and_no_other_record_is_lost() {
    let dir = tempfile::tempdir().unwrap();
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let (events, attacks) = poisoned_orders(dir.path(), &listener.local_addr().unwrap().to_string());
    let p = hostile_pipeline(dir.path(), "retries = 1\nbackoff = \"10ms\"");
    let Tested { rows, dead, .. } = weir_test_dead_letters(&p, &events);

    // Every order, once, in order; plus what the clock, env and random probes saw.
    let orders: Vec<_> = rows.iter().filter(|r| r.get("order_id").is_some()).cloned().collect();
    assert_eq!(orders, json_lines(&std::fs::read_to_string(dir.path().join("orders.jsonl")).unwrap()));
    let probe = |k: &str| rows.iter().find(|r| r.get(k).is_some()).unwrap_or_else(|| panic!("no {k} row")).clone();
    assert_eq!(probe("clock_ms")["clock_ms"], 0, "clocks are frozen at the epoch unless granted");
    assert_eq!(probe("env")["env"], serde_json::json!([]), "no environment unless granted");
    assert!(listener.accept().is_err(), "the plugin must not have connected");
    assert!(rows.iter().all(|r| r.get("slept").is_none()), "the sleep must have been cut short");

    let expect = [
        ("loop", "limits.call_timeout"),
        // Asleep in the host, out of epoch interruption's reach: the wait itself is bounded.
        ("sleep", "waiting in the host (limits.call_timeout)"),
        ("memory", "limits.max_memory_mb"),
        // Rust's shadow stack lives in linear memory: running off it is an out-of-bounds
        // access; a deep enough wasm call stack is "call stack exhausted". Either traps.
        ("recursion", "plugin trapped: wasm trap"),
        ("panic", "hostile record asked for a panic"),
        ("read", "read /etc/passwd"),
        ("net", "connect"),
        ("output", "limits.max_output_mb"),
    ];
    for (attack, says) in expect {
        let line = attacks.iter().find(|(a, _)| a == attack).unwrap().1;
        let d = dead.iter().find(|d| d["line"] == line).unwrap_or_else(|| panic!("no dead letter for {attack}"));
        let error = d["error"].as_str().unwrap();
        assert!(error.contains(says), "{attack}: {error}");
        if ["loop", "sleep", "memory", "recursion", "panic", "output"].contains(&attack) {
            assert_eq!(d["kind"], "plugin-failure", "{attack}: {d}");
            assert!(error.contains("hostile/parse (hostile.wasm)"), "{attack} names the stage and plugin: {error}");
        }
    }
    assert_eq!(dead.len(), expect.len(), "only the attacks are dead letters: {dead:#?}");
}

#[test]
fn randomness_is_reproducible_unless_granted() {
    let dir = tempfile::tempdir().unwrap();
    let events = dir.path().join("random.jsonl");
    std::fs::write(&events, "{\"attack\":\"random\"}\n").unwrap();
    let p = hostile_pipeline(dir.path(), "");
    let run = || ok(weir().arg("test").arg(&p).arg("--events").arg(&events).output().unwrap()).stdout;
    assert_eq!(run(), run(), "same input, same output: a re-run batch must yield the same rows");
}

#[test]
fn fail_fast_stops_the_pipeline_with_the_limit_named() {
    let dir = tempfile::tempdir().unwrap();
    let events = dir.path().join("loop.jsonl");
    std::fs::write(&events, "{\"order_ts\":1}\n{\"attack\":\"loop\"}\n").unwrap();
    let p = hostile_pipeline(dir.path(), "policy = \"fail-fast\"\nretries = 0");
    let out = weir().arg("test").arg(&p).arg("--events").arg(&events).output().unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("hostile/parse (hostile.wasm)") && err.contains("limits.call_timeout"), "{err}");
}

/// A plugin that leaks 1 MiB per record would pass its 64 MiB cap after 64 records; recycled
/// every 4 calls of up to 10 records, it never does, over 3,000 records (3 GB leaked in all).
#[test]
fn recycled_instances_keep_a_leaking_plugin_under_its_memory_cap() {
    let dir = tempfile::tempdir().unwrap();
    let events = dir.path().join("leaks.jsonl");
    let lines: String = (0..3_000).map(|i| format!("{{\"attack\":\"leak\",\"order_ts\":{i}}}\n")).collect();
    std::fs::write(&events, lines).unwrap();
    let run = |recycle: u64| {
        let text = format!(
            "name = \"leaky\"\n[source]\ntype = \"replay\"\npath = \"x\"\nmax_offsets_per_trigger = 10\n\
             [parse]\nplugin = \"{}\"\nlimits = {{ max_memory_mb = 64, recycle_after_calls = {recycle} }}\n\
             [failure]\npolicy = \"fail-fast\"\nretries = 0\n",
            component("hostile").display()
        );
        let p = dir.path().join(format!("leaky-{recycle}.toml"));
        std::fs::write(&p, text).unwrap();
        weir().arg("test").arg(&p).arg("--events").arg(&events).output().unwrap()
    };
    let out = ok(run(4));
    assert_eq!(json_lines(&String::from_utf8(out.stdout).unwrap()).len(), 3_000);
    // The same plugin without recycling runs into its cap: the test above can fail.
    let out = run(1_000_000);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("limits.max_memory_mb"));
}

#[test]
fn a_fuel_budget_stops_a_loop_deterministically_and_good_records_fit_in_it() {
    let dir = tempfile::tempdir().unwrap();
    let events = dir.path().join("loop.jsonl");
    std::fs::write(&events, "{\"order_ts\":1}\n{\"attack\":\"loop\"}\n{\"order_ts\":2}\n").unwrap();
    let text = format!(
        "name = \"fueled\"\n[source]\ntype = \"replay\"\npath = \"x\"\n[parse]\nplugin = \"{}\"\n\
         limits = {{ fuel = 50000000, call_timeout = \"60s\" }}\n[failure]\nretries = 0\n",
        component("hostile").display()
    );
    let p = dir.path().join("fueled.toml");
    std::fs::write(&p, text).unwrap();
    let Tested { rows, dead, .. } = weir_test_dead_letters(&p, &events);
    assert_eq!(rows, vec![serde_json::json!({"order_ts": 1}), serde_json::json!({"order_ts": 2})]);
    assert_eq!(dead.len(), 1);
    assert!(dead[0]["error"].as_str().unwrap().contains("limits.fuel"), "{}", dead[0]);
}

/// Events that make the aggregator fail (a loop, panics) are isolated like poison records: each
/// is a dead letter of the `aggregate` stage, and every other event is counted exactly once, in
/// tumbling windows (one `accumulate` per batch) and in sessions (stored sessions deleted and
/// rewritten inside the failing call, which must leave no trace).
#[test]
fn events_the_aggregator_fails_on_are_dead_letters_and_the_windows_count_the_rest() {
    let dir = tempfile::tempdir().unwrap();
    let clean = orders(dir.path(), 4_000, 23);
    let lines: Vec<String> = std::fs::read_to_string(&clean).unwrap().lines().map(String::from).collect();
    let (mut out, mut poison, mut max) = (Vec::new(), Vec::new(), i64::MIN);
    for (i, line) in lines.iter().enumerate() {
        max = max.max(serde_json::from_str::<serde_json::Value>(line).unwrap()["order_ts"].as_i64().unwrap());
        if i % 900 == 450 {
            // At the running maximum: never late, and it moves no watermark.
            let attack = if i == 450 { "loop" } else { "panic" };
            out.push(format!("{{\"aggregate\":\"{attack}\",\"order_ts\":{max}}}"));
            poison.push((out.len() as u64, attack));
        }
        out.push(line.clone());
    }
    let events = dir.path().join("poisoned.jsonl");
    std::fs::write(&events, out.join("\n") + "\n").unwrap();
    let (kept, _) = kept_orders(&clean);

    for (window, reference) in [
        (TUMBLING.to_string(), sliding_reference(&kept, 60_000, 60_000)),
        ("type = \"session\"\ngap = \"5 minutes\"".to_string(), session_reference_unkeyed(&kept, 300_000)),
    ] {
        let extra = "limits = { call_timeout = \"300ms\" }\n[failure]\nretries = 0";
        let p = pipeline(dir.path(), Spec { window: &window, extra, ..Default::default() });
        let text = std::fs::read_to_string(&p).unwrap();
        let text =
            text.replace(&component("orders_json").display().to_string(), &component("hostile").display().to_string());
        std::fs::write(
            &p,
            text.replace(&component("error_rate").display().to_string(), &component("hostile").display().to_string()),
        )
        .unwrap();
        let Tested { rows, dead, .. } = weir_test_dead_letters(&p, &events);

        let counted: BTreeMap<(i64, i64), u64> = rows
            .iter()
            .map(|r| {
                (
                    (r["window_start"].as_i64().unwrap(), r["window_end"].as_i64().unwrap()),
                    r["only_mine"].as_u64().unwrap(),
                )
            })
            .collect();
        let want: BTreeMap<(i64, i64), u64> = reference.iter().map(|((s, e, _), (n, _))| ((*s, *e), *n)).collect();
        assert_eq!(counted, want, "{window}");

        assert_eq!(dead.len(), poison.len(), "only the poison events are dead letters: {dead:#?}");
        for (d, (line, attack)) in dead.iter().zip(&poison) {
            let error = d["error"].as_str().unwrap();
            assert_eq!((d["line"].as_u64(), d["stage"].as_str()), (Some(*line), Some("aggregate")), "{d}");
            assert!(error.contains("test/aggregate (hostile.wasm)"), "{error}");
            let says = if *attack == "loop" { "limits.call_timeout" } else { "hostile event asked for a panic" };
            assert!(error.contains(says), "{attack}: {error}");
        }
    }
}

/// Sessions over every order as one key (the hostile parser emits no key).
fn session_reference_unkeyed(kept: &[Order], gap: i64) -> Windows {
    let all: Vec<Order> = kept.iter().map(|o| Order { ts: o.ts, user: 0, error: o.error }).collect();
    session_reference(&all, gap).into_iter().map(|((s, e, _), v)| ((s, e, String::new()), v)).collect()
}

/// An aggregator handed accumulator bytes it cannot decode (another plugin's, under the same
/// state version) stops its pipeline with the reason; nothing is lost: the right build resumes
/// from the checkpoint and the result is complete.
#[test]
fn accumulators_that_do_not_decode_stop_the_pipeline_and_lose_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let HalfRun { pipeline: p, events, windows } = half_run(dir.path(), 20_000, 4);

    let good = std::fs::read_to_string(&p).unwrap().replace("flush_at_end = false", "flush_at_end = true");
    let (rate, hostile) = (component("error_rate").display().to_string(), component("hostile").display().to_string());
    std::fs::write(&p, good.replace(&rate, &hostile)).unwrap();
    let out = weir().arg("run").arg(&p).output().unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("test/aggregate (hostile.wasm)") && err.contains("accumulator does not decode"), "{err}");

    std::fs::write(&p, good).unwrap();
    ok(weir().arg("run").arg(&p).output().unwrap());
    let (kept, _) = kept_orders(&events);
    assert_eq!(windows_of(&sink_rows(&windows)), sliding_reference(&kept, 60_000, 60_000));
}

/// Requests a test server received: path and body.
type Received = std::sync::Arc<std::sync::Mutex<Vec<(String, Vec<u8>)>>>;

/// A tiny HTTP server: records each request's path and body, answers 200.
fn http_server() -> (String, Received) {
    use std::io::{BufRead, BufReader, Read, Write};
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let got = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let seen = got.clone();
    std::thread::spawn(move || {
        for conn in listener.incoming().flatten() {
            let mut r = BufReader::new(conn.try_clone().unwrap());
            let mut line = String::new();
            r.read_line(&mut line).unwrap();
            let path = line.split_whitespace().nth(1).unwrap_or("").to_string();
            let mut len = 0;
            loop {
                let mut h = String::new();
                r.read_line(&mut h).unwrap();
                if h.trim().is_empty() {
                    break;
                }
                if let Some(v) = h.to_ascii_lowercase().strip_prefix("content-length:") {
                    len = v.trim().parse().unwrap();
                }
            }
            let mut body = vec![0; len];
            r.read_exact(&mut body).unwrap();
            seen.lock().unwrap().push((path, body));
            let mut conn = conn;
            conn.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n").unwrap();
        }
    });
    (addr, got)
}

#[test]
fn outbound_http_reaches_only_the_granted_authorities() {
    let dir = tempfile::tempdir().unwrap();
    let events = orders(dir.path(), 2_000, 6);
    let (addr, got) = http_server();
    let sink = |grant: &str| {
        format!(
            "name = \"posted\"\n[source]\ntype = \"replay\"\npath = \"{}\"\n[trigger]\nmode = \"available-now\"\n\
             [parse]\nplugin = \"{}\"\n[sink]\nplugin = \"{}\"\nconfig = {{ authority = \"{addr}\" }}\n\
             grants.http = [{grant}]\n[failure]\nretries = 1\nbackoff = \"10ms\"\n[checkpoint]\nlocation = \"{}\"\n",
            events.display(),
            component("orders_json").display(),
            component("http_sink").display(),
            dir.path().join(format!("cp-{}", grant.len())).display(),
        )
    };
    let p = dir.path().join("posted.toml");

    // Not granted: the request never leaves the sandbox, and the pipeline says why.
    std::fs::write(&p, sink("")).unwrap();
    let out = weir().arg("run").arg(&p).output().unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("HttpRequestDenied"), "{err}");
    assert!(got.lock().unwrap().is_empty(), "nothing may reach the server");

    // Granted: every row arrives, batch by batch.
    std::fs::write(&p, sink(&format!("\"{addr}\""))).unwrap();
    ok(weir().arg("run").arg(&p).output().unwrap());
    let posts = got.lock().unwrap().clone();
    assert!(
        posts.iter().all(|(path, _)| path.starts_with("/batches/")),
        "{:?}",
        posts.iter().map(|p| &p.0).collect::<Vec<_>>()
    );
    let rows: usize = posts.iter().map(|(_, body)| body.iter().filter(|&&b| b == b'\n').count()).sum();
    assert_eq!(rows, 2_000);
}
