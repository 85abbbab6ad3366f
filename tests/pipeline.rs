//! End-to-end: the `weir` binary running real components built from `plugins/` over generated
//! and hand-made recorded events, compared with a naive reference computed here.

use crate::common::*;

#[test]
fn orders_pipeline_matches_the_reference_for_several_seeds() {
    for (n, seed) in [(50_000, 1), (230_000, 42)] {
        let dir = tempfile::tempdir().unwrap();
        let events = orders(dir.path(), n, seed);
        let rows = weir_test(&root().join("plugins/orders-error-rate/pipeline.toml"), &events);
        let (kept, dropped) = kept_orders(&events);
        assert!(dropped > 0 || n < 100_000, "the workload should have very late events");
        assert_eq!(windows_of(&rows), sliding_reference(&kept, 60_000, 60_000), "n={n} seed={seed}");
        for r in &rows {
            let rate = r["error_rate"].as_f64().unwrap();
            let want = r["errors"].as_f64().unwrap() / r["count"].as_f64().unwrap();
            assert!((rate - want).abs() < 1e-12);
        }
    }
}

/// The independent check: the project's reference oracle (`tests/oracle/orders_oracle.py`, the
/// query computed in Python from `docs/semantics.md`) over `weir gen orders`, small and large N.
#[test]
fn orders_pipeline_agrees_with_the_reference_oracle() {
    let oracle = Oracle::find();
    for (n, seed) in [(1_000, 3), (6_000, 1), (20_000, 7), (150_000, 9)] {
        let dir = tempfile::tempdir().unwrap();
        let events = orders(dir.path(), n, seed);
        let rows = weir_test(&root().join("plugins/orders-error-rate/pipeline.toml"), &events);
        assert_eq!(oracle_shape(&rows), oracle.windows(&events), "n={n} seed={seed}");
    }
}

#[test]
fn sliding_windows_match_the_reference() {
    let dir = tempfile::tempdir().unwrap();
    let events = orders(dir.path(), 120_000, 5);
    let p = pipeline(
        dir.path(),
        Spec { window: "type = \"sliding\"\nsize = \"10 minutes\"\nslide = \"1 minute\"", ..Default::default() },
    );
    let (kept, _) = kept_orders(&events);
    assert_eq!(windows_of(&weir_test(&p, &events)), sliding_reference(&kept, 600_000, 60_000));
}

#[test]
fn session_windows_per_user_match_the_reference() {
    let dir = tempfile::tempdir().unwrap();
    let events = orders(dir.path(), 60_000, 11);
    let p = pipeline(
        dir.path(),
        Spec {
            window: "type = \"session\"\ngap = \"20 seconds\"",
            parse_config: "key_by_user = true",
            ..Default::default()
        },
    );
    let (kept, _) = kept_orders(&events);
    let got = windows_of(&weir_test(&p, &events));
    let want = session_reference(&kept, 20_000);
    assert_eq!(got.len(), want.len());
    assert_eq!(got, want);
}

/// Update and complete modes emit a window more than once; its last emission is the final
/// result, and a window's count never goes down.
#[test]
fn update_and_complete_modes_converge_to_the_final_result() {
    let dir = tempfile::tempdir().unwrap();
    let events = orders(dir.path(), 40_000, 3);
    let (kept, _) = kept_orders(&events);
    let want = sliding_reference(&kept, 60_000, 60_000);
    for mode in ["update", "complete"] {
        let extra = format!("[output]\nmode = \"{mode}\"");
        let p = pipeline(dir.path(), Spec { window: TUMBLING, extra: &extra, ..Default::default() });
        let rows = weir_test(&p, &events);
        let mut last = Windows::new();
        for r in &rows {
            let k = (r["window_start"].as_i64().unwrap(), r["window_end"].as_i64().unwrap(), String::new());
            let v = (r["count"].as_u64().unwrap(), r["errors"].as_u64().unwrap());
            if let Some(prev) = last.insert(k, v) {
                assert!(prev.0 <= v.0, "{mode}: count went down");
            }
        }
        assert!(rows.len() > want.len(), "{mode} should emit windows more than once");
        assert_eq!(last, want, "{mode}");
    }
}

#[test]
fn bad_records_go_to_dead_letters_with_position_and_reason() {
    let dir = tempfile::tempdir().unwrap();
    let mut text = Vec::new();
    text.extend_from_slice(b"{\"order_id\":1,\"user_id\":1,\"status\":\"OK\",\"amount\":1.0,\"order_ts\":1000}\n");
    text.extend_from_slice(b"this is not json\n");
    text.extend_from_slice(b"{\"order_id\":2,\"user_id\":1,\"status\":\"OK\"}\n");
    text.extend_from_slice(b"{\"order_id\":3,\"status\":\"ERROR\",\"order_ts\":\"soon\"}\n");
    text.extend_from_slice(b"{\"order_id\":4,\"status\":\"\xff\xfe\",\"order_ts\":2000}\n");
    text.extend_from_slice(b"{\"order_id\":5,\"user_id\":2,\"status\":\"ERROR\",\"amount\":1.0,\"order_ts\":3000}\n");
    let events = dir.path().join("events.jsonl");
    std::fs::write(&events, text).unwrap();
    let p = pipeline(dir.path(), Spec { window: TUMBLING, ..Default::default() });
    let Tested { rows, dead, stderr } = weir_test_dead_letters(&p, &events);
    assert_eq!(rows.len(), 1);
    assert_eq!((rows[0]["count"].as_u64(), rows[0]["errors"].as_u64()), (Some(2), Some(1)));
    let lines: Vec<u64> = dead.iter().map(|d| d["line"].as_u64().unwrap()).collect();
    assert_eq!(lines, vec![2, 3, 4, 5]);
    let kinds: Vec<&str> = dead.iter().map(|d| d["kind"].as_str().unwrap()).collect();
    assert_eq!(kinds, vec!["malformed", "missing-field", "invalid-value", "malformed"]);
    assert!(dead[1]["error"].as_str().unwrap().contains("order_ts"));
    assert_eq!(dead[0]["value"], "this is not json");
    assert!(dead.iter().all(|d| d["stage"] == "parse"));
    assert!(stderr.contains("4 dead letters"));
}

#[test]
fn late_events_are_counted_and_written_with_their_reason() {
    let dir = tempfile::tempdir().unwrap();
    let events = orders(dir.path(), 100_000, 21);
    let late = dir.path().join("late.jsonl");
    let watermark = format!("late = \"side-output\"\nlate_path = \"{}\"", late.display());
    let p = pipeline(dir.path(), Spec { window: TUMBLING, watermark: &watermark, ..Default::default() });
    let out = ok(weir().arg("test").arg(&p).arg("--events").arg(&events).output().unwrap());
    let (_, dropped) = kept_orders(&events);
    let lines = json_lines(&std::fs::read_to_string(&late).unwrap());
    assert_eq!(lines.len(), dropped);
    for l in &lines {
        assert!(l["event_time"].as_i64().unwrap() < l["watermark"].as_i64().unwrap() - 60_000);
        assert!(l["reason"].as_str().unwrap().starts_with("late"));
        assert!(l["row"]["order_id"].as_u64().is_some());
    }
    assert!(String::from_utf8_lossy(&out.stderr).contains(&format!("{dropped} late")));
}

#[test]
fn expect_passes_on_equal_rows_in_any_order_and_fails_with_a_diff() {
    let dir = tempfile::tempdir().unwrap();
    let events = orders(dir.path(), 20_000, 2);
    let p = root().join("plugins/orders-error-rate/pipeline.toml");
    let rows = weir_test(&p, &events);
    let mut lines: Vec<String> = rows.iter().map(|r| r.to_string()).collect();
    lines.reverse();
    let expect = dir.path().join("expect.jsonl");
    std::fs::write(&expect, lines.join("\n")).unwrap();
    ok(weir().arg("test").arg(&p).arg("--events").arg(&events).arg("--expect").arg(&expect).output().unwrap());

    lines[0] = lines[0].replacen("\"count\":", "\"count\":1", 1);
    std::fs::write(&expect, lines.join("\n")).unwrap();
    let out = weir().arg("test").arg(&p).arg("--events").arg(&events).arg("--expect").arg(&expect).output().unwrap();
    assert_eq!(out.status.code(), Some(1), "a mismatch exits 1");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("- expected, not produced (1)") && err.contains("+ produced, not expected (1)"), "{err}");
}

#[test]
fn a_bad_pipeline_file_names_the_key_and_the_fix() {
    let dir = tempfile::tempdir().unwrap();
    let p = pipeline(dir.path(), Spec { window: "type = \"tumbling\"\nsise = \"1 minute\"", ..Default::default() });
    let out = weir().arg("run").arg(&p).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("window") && err.contains("unknown field `sise`") && err.contains("`size`"), "{err}");
}

#[test]
fn a_stateless_pipeline_filters_into_the_sink() {
    let dir = tempfile::tempdir().unwrap();
    let events = orders(dir.path(), 30_000, 8);
    let text = format!(
        r#"
name = "errors-only"
[source]
type = "replay"
path = "orders.jsonl"
[parse]
plugin = "{parse}"
[[transform]]
plugin = "{filter}"
config = {{ keep = ["ERROR"] }}
"#,
        parse = component("orders_json").display(),
        filter = component("status_filter").display(),
    );
    let p = dir.path().join("p.toml");
    std::fs::write(&p, text).unwrap();
    let rows = weir_test(&p, &events);
    let want: Vec<serde_json::Value> =
        json_lines(&std::fs::read_to_string(&events).unwrap()).into_iter().filter(|r| r["status"] == "ERROR").collect();
    assert!(!want.is_empty());
    assert_eq!(rows, want);
}

#[test]
fn a_component_that_does_not_play_its_role_is_refused_at_start_up() {
    let err = refused_with("error_rate", "status_filter");
    assert!(
        err.contains("test/aggregate")
            && err.contains("cannot be the aggregator")
            && err.contains("status_filter.wasm"),
        "{err}"
    );
}

/// Runs the orders test pipeline with component `from` swapped for `to`; asserts it is refused
/// before producing anything, and returns the error.
fn refused_with(from: &str, to: &str) -> String {
    let dir = tempfile::tempdir().unwrap();
    let events = orders(dir.path(), 1_000, 1);
    let p = pipeline(dir.path(), Spec { window: TUMBLING, ..Default::default() });
    let text = std::fs::read_to_string(&p).unwrap();
    let (from, to) = (component(from).display().to_string(), component(to).display().to_string());
    std::fs::write(&p, text.replace(&from, &to)).unwrap();
    let out = weir().arg("test").arg(&p).arg("--events").arg(&events).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(out.stdout.is_empty());
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Partition 1 runs 20 minutes behind partition 0. The watermark is the minimum over partitions,
/// so none of partition 1's events is late (with the maximum, all would be).
#[test]
fn a_lagging_partition_holds_the_watermark_back() {
    let dir = tempfile::tempdir().unwrap();
    let mut lines = String::new();
    for i in 0..2_000i64 {
        for (partition, lag) in [(0, 0), (1, 1_200_000)] {
            let ts = 1_800_000_000_000 + i * 1_000 - lag;
            let value = format!(r#"{{"order_id":{i},"user_id":1,"status":"OK","amount":1.0,"order_ts":{ts}}}"#);
            let env = serde_json::json!({ "value": value, "partition": partition, "offset": i });
            lines.push_str(&format!("{env}\n"));
        }
    }
    let events = dir.path().join("orders.jsonl");
    std::fs::write(&events, lines).unwrap();
    let p = pipeline(dir.path(), Spec { window: TUMBLING, ..Default::default() });
    let out = ok(weir().arg("test").arg(&p).arg("--events").arg(&events).output().unwrap());
    let rows = json_lines(&String::from_utf8(out.stdout).unwrap());
    let total: u64 = rows.iter().map(|r| r["count"].as_u64().unwrap()).sum();
    assert_eq!(total, 4_000);
    assert!(String::from_utf8_lossy(&out.stderr).contains(", 0 late,"));
}

#[test]
fn trigger_once_reads_everything_in_one_batch() {
    let dir = tempfile::tempdir().unwrap();
    let events = orders(dir.path(), 30_000, 4);
    let extra = file_sink(&dir.path().join("w"));
    let p = pipeline(dir.path(), Spec { window: TUMBLING, extra: &extra, ..Default::default() });
    let text = std::fs::read_to_string(&p).unwrap().replace("mode = \"available-now\"", "mode = \"once\"");
    std::fs::write(&p, text).unwrap();
    let out = ok(weir().arg("run").arg(&p).arg("--flush").arg("--progress-json").output().unwrap());
    let progress: Vec<serde_json::Value> = String::from_utf8_lossy(&out.stderr)
        .lines()
        .filter(|l| l.starts_with('{'))
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(progress.len(), 2, "one batch of everything, then the end-of-input flush");
    assert_eq!(progress[0]["numInputRows"], 30_000);
    assert_eq!(progress[1]["watermark"], progress[0]["watermark"], "a flush leaves the watermark as it was");
    assert!(progress[1]["flushedTo"].as_i64() > progress[1]["watermark"].as_i64(), "{}", progress[1]);
    let rows = sink_rows(&dir.path().join("w"));
    // No watermark exists before the only batch, so nothing in it is late: very late events
    // count in their (old) windows, as in Spark. Bounded batches are what make a replay drop them.
    assert_eq!(windows_of(&rows), sliding_reference(&all_orders(&events), 60_000, 60_000));
    assert!(String::from_utf8_lossy(&out.stderr).contains(", 0 late,"));
}

/// A processing-time trigger paces batches but computes the same windows as available-now.
#[test]
fn a_processing_time_trigger_gives_the_same_windows() {
    let dir = tempfile::tempdir().unwrap();
    let events = orders(dir.path(), 20_000, 6);
    let extra = file_sink(&dir.path().join("w"));
    let p = pipeline(dir.path(), Spec { window: TUMBLING, extra: &extra, ..Default::default() });
    let available_now = weir_test(&p, &events);
    let text = std::fs::read_to_string(&p)
        .unwrap()
        .replace("mode = \"available-now\"", "mode = \"processing-time\"\ninterval = \"2ms\"");
    std::fs::write(&p, text).unwrap();
    ok(weir().arg("run").arg(&p).arg("--flush").output().unwrap());
    let rows = sink_rows(&dir.path().join("w"));
    assert_eq!(rows, available_now);
}

#[test]
fn a_component_built_for_another_wit_version_is_refused_by_name() {
    let err = refused_with("orders_json", "wit_major_1_parser");
    let ours = wit_version();
    let major_minor = ours.rsplit_once('.').unwrap().0;
    assert!(
        err.contains("weir:plugin@1.0.0")
            && err.contains(&format!("weir:plugin@{major_minor}.x"))
            && err.contains("wit_major_1_parser.wasm"),
        "{err}"
    );
}

/// A pipeline checkpointed by one aggregator build continues under a build with a new
/// accumulator encoding that migrates the old one; the reverse is refused, naming both versions.
#[test]
fn a_new_plugin_build_migrates_checkpointed_state_or_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    // More input has arrived since the first run; the pipeline restarts with the version-3
    // build of its aggregator.
    let HalfRun { pipeline: p, events, windows } = half_run(dir.path(), 20_000, 12);
    let swap = |text: &str, from: &str, to: &str| {
        text.replace(&component(from).display().to_string(), &component(to).display().to_string())
    };
    let v1 = std::fs::read_to_string(&p).unwrap();
    let v2 = swap(&v1, "error_rate", "versioned_count");
    std::fs::write(&p, &v2).unwrap();
    let out = ok(weir().arg("run").arg(&p).env("WEIR_LOG", "info").output().unwrap());
    assert!(String::from_utf8_lossy(&out.stderr).contains("from state version 2 to 3"));

    // Back to the version-2 build, with windows still open: it cannot read version-3
    // accumulators, and says so.
    std::fs::write(&p, &v1).unwrap();
    let out = weir().arg("run").arg(&p).output().unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("state version 3") && err.contains("declares state version 2") && err.contains("error_rate.wasm"),
        "{err}"
    );

    // The version-3 build finishes the input: every window as if one build had run throughout.
    std::fs::write(&p, v2.replace("flush_at_end = false", "flush_at_end = true")).unwrap();
    ok(weir().arg("run").arg(&p).output().unwrap());
    let (kept, _) = kept_orders(&events);
    assert_eq!(windows_of(&sink_rows(&windows)), sliding_reference(&kept, 60_000, 60_000));
}

/// Parsing batches side by side (`parse.parallelism`) changes nothing: the windows of the
/// reference, and every malformed record a dead letter at its own line, whichever parser
/// instance parsed its batch.
#[test]
fn parallel_parsing_gives_the_same_windows_and_dead_letters() {
    let dir = tempfile::tempdir().unwrap();
    let clean = orders(dir.path(), 60_000, 5);
    let mut out = Vec::new();
    let mut bad = Vec::new();
    for (i, line) in std::fs::read_to_string(&clean).unwrap().lines().enumerate() {
        if i % 7_001 == 3_000 {
            out.push(format!("not json {i}"));
            bad.push(out.len() as u64);
        }
        out.push(line.to_string());
    }
    let events = dir.path().join("events.jsonl");
    std::fs::write(&events, out.join("\n") + "\n").unwrap();
    let p = pipeline(dir.path(), Spec { window: TUMBLING, ..Default::default() });
    let text = std::fs::read_to_string(&p).unwrap().replace("[parse]\n", "[parse]\nparallelism = 3\n");
    std::fs::write(&p, text).unwrap();
    let Tested { rows, dead, .. } = weir_test_dead_letters(&p, &events);
    assert_eq!(windows_of(&rows), sliding_reference(&kept_orders(&clean).0, 60_000, 60_000));
    assert_eq!(dead.iter().map(|d| d["line"].as_u64().unwrap()).collect::<Vec<_>>(), bad);
}

/// Every `weir bench` mode computes the reference rows: the windows of the orders it generated
/// (the same generator and seed as `weir gen orders`), whether read from a file, read from the
/// embedded broker, or run in two halves across a restart; and the latency mode's pipeline
/// passes on exactly the orders it keeps.
#[test]
fn every_bench_mode_computes_the_reference_rows() {
    let dir = tempfile::tempdir().unwrap();
    let (n, seed) = (30_000, 42);
    let events = orders(dir.path(), n, seed);
    let want = sliding_reference(&kept_orders(&events).0, 60_000, 60_000);
    for mode in [&[][..], &["--native"], &["--kafka"], &["--restart"], &["--cores", "2"], &["--no-fsync"]] {
        let rows = dir.path().join("rows.jsonl");
        // --restart runs the events twice over: half, then the other half after the restart.
        let n = if mode == ["--restart"] { n / 2 } else { n };
        ok(weir()
            .current_dir(root())
            .args(["bench", "plugins/orders-error-rate/pipeline.toml", "--events", &n.to_string()])
            .args(["--seed", &seed.to_string()])
            .args(mode)
            .arg("--rows")
            .arg(&rows)
            .output()
            .unwrap());
        let got = windows_of(&json_lines(&std::fs::read_to_string(&rows).unwrap()));
        assert_eq!(got, want, "weir bench {mode:?}");
    }

    let rows = dir.path().join("alerts.jsonl");
    let out = ok(weir()
        .current_dir(root())
        .args(["bench", "--latency", "--rate", "2000", "--seconds", "2", "--rows"])
        .arg(&rows)
        .output()
        .unwrap());
    let text = String::from_utf8_lossy(&out.stderr);
    let produced: u64 = text
        .lines()
        .find_map(|l| l.split_once(" orders produced")?.0.trim().parse().ok())
        .unwrap_or_else(|| panic!("no count of orders produced in:\n{text}"));
    let sent = dir.path().join("sent");
    std::fs::create_dir_all(&sent).unwrap();
    // The latency producer's stream is `weir gen orders RATE*SECONDS --seed 11`, as far as it got.
    let all = json_lines(&std::fs::read_to_string(orders(&sent, 4_000, 11)).unwrap());
    let kept: Vec<u64> = all[..produced as usize]
        .iter()
        .filter(|o| o["status"] == "ERROR" || o["status"] == "PENDING")
        .map(|o| o["order_id"].as_u64().unwrap())
        .collect();
    let mut passed: Vec<u64> =
        json_lines(&std::fs::read_to_string(&rows).unwrap()).iter().map(|r| r["order_id"].as_u64().unwrap()).collect();
    passed.sort_unstable();
    assert_eq!(passed, kept, "the latency pipeline passes on each kept order once, and nothing else");
}

/// `weir bench`'s variants compute the same rows in the same order: the native baseline and the
/// Wasm plugins, one parser and two, checkpoint synced or not.
#[test]
fn bench_variants_agree_row_for_row() {
    let digest = |args: &[&str]| {
        let out = ok(weir()
            .current_dir(root())
            .args(["bench", "plugins/orders-error-rate/pipeline.toml", "--events", "40000"])
            .args(args)
            .output()
            .unwrap());
        let text = String::from_utf8(out.stdout).unwrap();
        assert!(!text.contains(" 0 windows"), "{text}");
        text.rsplit_once("rows digest ").unwrap_or_else(|| panic!("no digest in {text}")).1.trim().to_string()
    };
    let wasm = digest(&[]);
    for variant in [&["--native"][..], &["--cores", "2"], &["--native", "--cores", "2"], &["--no-fsync"]] {
        assert_eq!(digest(variant), wasm, "{variant:?}");
    }
}
