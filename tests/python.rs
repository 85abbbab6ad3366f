//! Python plugins in the real host: the Python twins of the orders parser, the error-rate
//! aggregator and the fraud processor (`plugins/*-py`, built by `cargo xtask build` with the
//! Python SDK) give the Rust plugins' rows byte for byte, the reference's windows and the
//! reference oracle's; the Rust and Python aggregators read each other's checkpoints; and a
//! hostile Python parser is contained by the same limits (deadline, memory, fuel) and grants as a
//! Rust one.

use std::net::TcpListener;
use std::path::Path;

use crate::common::*;

/// A pipeline `name`.toml over `events`, with the given parser, aggregator or processor part.
fn pipeline(dir: &Path, name: &str, body: &str) -> std::path::PathBuf {
    let text = format!(
        "name = \"{name}\"\n[source]\ntype = \"replay\"\npath = \"orders.jsonl\"\nmax_offsets_per_trigger = 2000\n{body}"
    );
    let p = dir.join(format!("{name}.toml"));
    std::fs::write(&p, text).unwrap();
    p
}

fn windowed(parser: &str, aggregator: &str, window: &str, parse_config: &str) -> String {
    format!(
        "[parse]\nplugin = \"{}\"\nconfig = {{ {parse_config} }}\n[watermark]\ndelay = \"10 minutes\"\n[window]\n{window}\n[aggregate]\nplugin = \"{}\"\n",
        component(parser).display(),
        component(aggregator).display()
    )
}

fn rows_text(p: &Path, events: &Path) -> String {
    let out = ok(weir().arg("test").arg(p).arg("--events").arg(events).output().unwrap());
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn python_parser_and_aggregator_give_the_rust_rows_and_the_reference_windows() {
    let dir = tempfile::tempdir().unwrap();
    let events = orders(dir.path(), 20_000, 7);
    let (kept, _) = kept_orders(&events);
    let cases = [
        ("tumbling", TUMBLING, "", sliding_reference(&kept, 60_000, 60_000)),
        ("sessions", "type = \"session\"\ngap = \"1 minute\"", "key_by_user = true", session_reference(&kept, 60_000)),
    ];
    for (name, window, parse_config, reference) in cases {
        let rust =
            pipeline(dir.path(), &format!("{name}-rust"), &windowed("orders_json", "error_rate", window, parse_config));
        let py = pipeline(
            dir.path(),
            &format!("{name}-py"),
            &windowed("orders_json_py", "error_rate_py", window, parse_config),
        );
        let (rust, py) = (rows_text(&rust, &events), rows_text(&py, &events));
        assert!(!rust.is_empty());
        assert_eq!(py, rust, "{name}: the Python plugins' rows, byte for byte");
        assert_eq!(windows_of(&json_lines(&py)), reference, "{name}: against the reference");
    }
}

#[test]
fn python_fraud_processor_gives_the_rust_alerts_and_resets() {
    let dir = tempfile::tempdir().unwrap();
    let events = orders(dir.path(), 20_000, 9);
    let body = |plugin: &str| {
        format!(
            "[parse]\nplugin = \"{}\"\nconfig = {{ key_by_user = true }}\n[watermark]\ndelay = \"10 minutes\"\n[process]\nplugin = \"{}\"\nconfig = {{ threshold = 2, within_ms = 120000, report_resets = true }}\n",
            component("orders_json").display(),
            component(plugin).display()
        )
    };
    let rust = rows_text(&pipeline(dir.path(), "fraud-rust", &body("fraud_alerts")), &events);
    let py = rows_text(&pipeline(dir.path(), "fraud-py", &body("fraud_alerts_py")), &events);
    let rows = json_lines(&rust);
    assert!(rows.iter().any(|r| r.get("alert_at").is_some()), "alerts fire");
    assert!(rows.iter().any(|r| r.get("reset_at").is_some()), "timers fire");
    assert_eq!(py, rust, "the Python processor's rows, byte for byte");
}

/// The two error-rate builds write the same accumulator bytes under the same state version, so
/// a pipeline can move from one to the other on its checkpoint: half the events with Rust, the
/// rest with Python, gives the windows of one uninterrupted run.
#[test]
fn a_checkpoint_written_by_the_rust_aggregator_resumes_under_the_python_one() {
    let dir = tempfile::tempdir().unwrap();
    let all = orders(dir.path(), 20_000, 5);
    let text = std::fs::read_to_string(&all).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    let body = |agg: &str| {
        format!(
            "[trigger]\nmode = \"available-now\"\n{}[checkpoint]\nlocation = \"{}\"\n{}",
            windowed("orders_json", agg, TUMBLING, ""),
            dir.path().join("checkpoint").display(),
            file_sink(&dir.path().join("out"))
        )
    };
    std::fs::write(&all, lines[..10_000].join("\n") + "\n").unwrap();
    ok(weir().arg("run").arg(pipeline(dir.path(), "half", &body("error_rate"))).output().unwrap());
    std::fs::write(&all, lines.join("\n") + "\n").unwrap();
    let second = pipeline(dir.path(), "half", &body("error_rate_py"));
    ok(weir().arg("run").arg("--flush").arg(&second).output().unwrap());
    let (kept, _) = kept_orders(&all);
    assert_eq!(windows_of(&sink_rows(&dir.path().join("out"))), sliding_reference(&kept, 60_000, 60_000));
}

#[test]
fn python_attacks_are_contained_and_named_and_no_other_record_is_lost() {
    let dir = tempfile::tempdir().unwrap();
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let to = listener.local_addr().unwrap().to_string();
    let clean = orders(dir.path(), 2_000, 13);
    let attacks = ["loop", "memory", "read", "net"];
    let mut out = Vec::new();
    let mut at = Vec::new();
    for (i, line) in std::fs::read_to_string(&clean).unwrap().lines().enumerate() {
        if i % 400 == 7 && i / 400 < attacks.len() {
            out.push(format!("{{\"attack\":\"{}\",\"to\":\"{to}\"}}", attacks[i / 400]));
            at.push((attacks[i / 400], out.len() as u64));
        }
        out.push(line.to_string());
    }
    let events = dir.path().join("poisoned.jsonl");
    std::fs::write(&events, out.join("\n") + "\n").unwrap();
    let p = pipeline(
        dir.path(),
        "hostile-py",
        &format!(
            "[parse]\nplugin = \"{}\"\nlimits = {{ call_timeout = \"500ms\", max_memory_mb = 128 }}\n[failure]\nretries = 1\nbackoff = \"10ms\"\n",
            component("hostile_py").display()
        ),
    );
    let Tested { rows, dead, .. } = weir_test_dead_letters(&p, &events);
    assert_eq!(rows, json_lines(&std::fs::read_to_string(&clean).unwrap()), "every order, once, in order");
    assert!(listener.accept().is_err(), "the plugin must not have connected");
    let expect = [
        ("loop", "limits.call_timeout"),
        ("memory", "limits.max_memory_mb"),
        ("read", "/etc/passwd"),
        ("net", "PermissionError"),
    ];
    for (attack, says) in expect {
        let line = at.iter().find(|(a, _)| *a == attack).unwrap().1;
        let d =
            dead.iter().find(|d| d["line"] == line).unwrap_or_else(|| panic!("no dead letter for {attack}: {dead:#?}"));
        let error = d["error"].as_str().unwrap();
        assert!(error.contains(says), "{attack}: {error}");
    }
    assert_eq!(dead.len(), expect.len(), "only the attacks are dead letters: {dead:#?}");

    // The control: granted the address, the same code connects, so what stopped it above was
    // the sandbox, not the interpreter.
    let granted = pipeline(
        dir.path(),
        "hostile-py-granted",
        &format!("[parse]\nplugin = \"{}\"\ngrants.network = [\"{to}\"]\n", component("hostile_py").display()),
    );
    let one = dir.path().join("net.jsonl");
    std::fs::write(&one, format!("{{\"attack\":\"net\",\"to\":\"{to}\"}}\n")).unwrap();
    let Tested { rows, .. } = weir_test_dead_letters(&granted, &one);
    assert_eq!(rows, vec![serde_json::json!({"connected": true})]);
    assert!(listener.accept().is_ok(), "granted, the plugin connects");
}

/// The bench pipeline with both plugins in Python (`plugins/orders-error-rate/python.toml`, what
/// `docs/performance.md` measures) gives the Rust pipeline's rows, by `weir bench`'s digest.
#[test]
fn the_python_bench_pipeline_gives_the_rust_digest() {
    let digest = |file: &str| {
        let out = ok(weir()
            .current_dir(root())
            .args(["bench", &format!("plugins/orders-error-rate/{file}"), "--events", "20000"])
            .output()
            .unwrap());
        let text = String::from_utf8(out.stdout).unwrap();
        text.rsplit_once("rows digest ").unwrap_or_else(|| panic!("no digest in {text}")).1.trim().to_string()
    };
    assert_eq!(digest("python.toml"), digest("pipeline.toml"));
}

/// The independent check, as `tests/pipeline.rs` makes it for the Rust plugins: orders from
/// `weir gen orders` through the Python pipeline give the reference oracle's windows.
#[test]
fn the_python_pipeline_agrees_with_the_reference_oracle() {
    let oracle = Oracle::find();
    let dir = tempfile::tempdir().unwrap();
    let events = orders(dir.path(), 30_000, 4);
    let rows = weir_test(&root().join("plugins/orders-error-rate/python.toml"), &events);
    assert_eq!(oracle_shape(&rows), oracle.windows(&events));
}

/// Fuel counts the interpreter's Wasm instructions like any other: the Python loop ends at
/// `limits.fuel`, deterministically, and the orders around it fit in the budget.
#[test]
fn a_fuel_budget_stops_a_python_loop_and_good_records_fit_in_it() {
    let dir = tempfile::tempdir().unwrap();
    let events = dir.path().join("loop.jsonl");
    std::fs::write(&events, "{\"order_ts\":1}\n{\"attack\":\"loop\"}\n{\"order_ts\":2}\n").unwrap();
    let p = pipeline(
        dir.path(),
        "fueled-py",
        &format!(
            "[parse]\nplugin = \"{}\"\nlimits = {{ fuel = 500000000, call_timeout = \"60s\" }}\n[failure]\nretries = 0\n",
            component("hostile_py").display()
        ),
    );
    let Tested { rows, dead, .. } = weir_test_dead_letters(&p, &events);
    assert_eq!(rows, vec![serde_json::json!({"order_ts": 1}), serde_json::json!({"order_ts": 2})]);
    assert_eq!(dead.len(), 1);
    assert!(dead[0]["error"].as_str().unwrap().contains("limits.fuel"), "{}", dead[0]);
}
