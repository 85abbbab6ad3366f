//! Sandbox, round two: what a hostile plugin or hostile input could still do, each closed. The
//! adversaries are `tests/plugins/forger` (raw wit-bindgen: it returns what the SDK would never
//! let a plugin return) and `tests/plugins/hostile` (its `symlink` and `disk` attacks); the
//! hostile input is crafted records and pipeline files. Each test failed against the build
//! before the fix (`docs/security.md` lists the attacks and what now happens).

use std::path::{Path, PathBuf};

use crate::common::*;

/// A pipeline file `name`.toml in `dir` from `body` (TOML), with `{orders_json}`, `{forger}`,
/// `{hostile}`, `{error_rate}` and `{dir}` filled in.
fn toml(dir: &Path, name: &str, body: &str) -> PathBuf {
    let text = body
        .replace("{orders_json}", &component("orders_json").display().to_string())
        .replace("{forger}", &component("forger").display().to_string())
        .replace("{hostile}", &component("hostile").display().to_string())
        .replace("{error_rate}", &component("error_rate").display().to_string())
        .replace("{dir}", &dir.display().to_string());
    let p = dir.join(format!("{name}.toml"));
    std::fs::write(&p, text).unwrap();
    p
}

/// `n` orders with `extra` lines spliced in after every 500th; returns the file and the 1-based
/// line numbers of the extra lines.
fn orders_with(dir: &Path, n: u64, extra: &[&str]) -> (PathBuf, Vec<u64>) {
    let clean = orders(dir, n, 31);
    let mut out = Vec::new();
    let mut at = Vec::new();
    for (i, line) in std::fs::read_to_string(&clean).unwrap().lines().enumerate() {
        if i % 500 == 3 && i / 500 < extra.len() {
            out.push(extra[i / 500].to_string());
            at.push(out.len() as u64);
        }
        out.push(line.to_string());
    }
    let path = dir.join("events.jsonl");
    std::fs::write(&path, out.join("\n") + "\n").unwrap();
    (path, at)
}

fn stderr(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// The orders parser, then the forger as the aggregator with `config`, over `events.jsonl`.
fn windowed_forger(name: &str, window: &str, config: &str, extra: &str) -> String {
    format!(
        r#"name = "{name}"
[source]
type = "replay"
path = "events.jsonl"
[parse]
plugin = "{{orders_json}}"
[watermark]
delay = "10 minutes"
[window]
{window}
[aggregate]
plugin = "{{forger}}"
config = {{ {config} }}
{extra}
"#
    )
}

const STATELESS_FORGER: &str = r#"
name = "forged"
[source]
type = "replay"
path = "events.jsonl"
[trigger]
mode = "available-now"
[parse]
plugin = "{forger}"
limits = { max_output_mb = 8 }
"#;

/// (1) A host file inside a writable grant is refused at start-up; a link planted where the host
/// writes is not followed.
#[test]
fn host_files_are_out_of_reach_of_grants_and_links() {
    let dir = tempfile::tempdir().unwrap();
    let scratch = dir.path().join("scratch");
    std::fs::create_dir(&scratch).unwrap();
    std::fs::write(dir.path().join("victim.txt"), "precious").unwrap();
    let (events, _) = orders_with(dir.path(), 1_000, &[r#"{"attack":"symlink"}"#]);

    // The dead-letter file inside the plugin's writable grant: refused before anything runs.
    let inside = toml(
        dir.path(),
        "inside",
        r#"name = "inside"
[source]
type = "replay"
path = "events.jsonl"
[parse]
plugin = "{hostile}"
grants.dirs = [{ host = "scratch", guest = "/scratch", writable = true }]
[dead_letter]
path = "scratch/dead-letters.jsonl"
"#,
    );
    // (`weir run`: `weir test` writes its dead letters where `--dead-letters` says.)
    let out = weir().arg("run").arg(&inside).output().unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("reaches the dead-letter file"), "{}", stderr(&out));

    // A plugin plants `scratch/dead-letters.jsonl -> ../victim.txt` (its own dead letters
    // elsewhere); then a pipeline that writes its dead letters there meets the link.
    let planter = toml(
        dir.path(),
        "planter",
        r#"name = "planter"
[source]
type = "replay"
path = "events.jsonl"
[parse]
plugin = "{hostile}"
grants.dirs = [{ host = "scratch", guest = "/scratch", writable = true }]
"#,
    );
    let rows = weir_test(&planter, &events);
    assert!(rows.iter().any(|r| r["planted"] == true), "the link was planted");
    let victim_side = toml(
        dir.path(),
        "victim-side",
        r#"name = "victim-side"
[source]
type = "replay"
path = "events.jsonl"
[parse]
plugin = "{orders_json}"
[dead_letter]
path = "scratch/dead-letters.jsonl"
"#,
    );
    let out = weir().arg("run").arg(&victim_side).output().unwrap();
    assert!(!out.status.success());
    assert!(stderr(&out).contains("is a symbolic link"), "{}", stderr(&out));
    assert_eq!(std::fs::read_to_string(dir.path().join("victim.txt")).unwrap(), "precious");

    // Side by side in one process, the planter's writable grant reaches its neighbour's
    // dead-letter file: refused before either runs.
    let out = weir().arg("run").arg(&planter).arg(&victim_side).output().unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("another pipeline's dead-letter file"), "{}", stderr(&out));
}

/// (2) The compiled-component cache is private, its artifacts are checked against a keyed digest
/// before they are loaded, and no grant may reach it.
#[test]
fn the_component_cache_runs_only_what_it_wrote_and_no_grant_reaches_it() {
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path().join("cache");
    let events = orders(dir.path(), 2_000, 5);
    let p = pipeline(dir.path(), Spec { window: TUMBLING, ..Default::default() });
    let test =
        || weir().arg("test").arg(&p).arg("--events").arg(&events).env("WEIR_CACHE_DIR", &cache).output().unwrap();
    let want = ok(test()).stdout;
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(std::fs::metadata(&cache).unwrap().permissions().mode() & 0o777, 0o700);

    // Another component's artifact in place of the parser's (what a plugin with write access to
    // the cache did to another pipeline): found out, compiled again, never run.
    let mut artifacts: Vec<PathBuf> = std::fs::read_dir(&cache)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "cwasm"))
        .collect();
    artifacts.sort();
    assert_eq!(artifacts.len(), 2, "{artifacts:?}");
    let (a, b) = (std::fs::read(&artifacts[0]).unwrap(), std::fs::read(&artifacts[1]).unwrap());
    std::fs::write(&artifacts[0], &b).unwrap();
    std::fs::write(&artifacts[1], &a).unwrap();
    let out = ok(test());
    assert_eq!(out.stdout, want, "the right components ran");
    assert!(stderr(&out).contains("digest does not match"), "{}", stderr(&out));

    let granted = pipeline(
        dir.path(),
        Spec {
            window: TUMBLING,
            extra: &format!(
                "[sink]\nplugin = \"{}\"\ngrants.dirs = [{{ host = \"{}\", guest = \"/out\", writable = true }}]",
                component("jsonl_file_sink").display(),
                dir.path().display()
            ),
            ..Default::default()
        },
    );
    let out =
        weir().arg("test").arg(&granted).arg("--events").arg(&events).env("WEIR_CACHE_DIR", &cache).output().unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("reaches the compiled-component cache"), "{}", stderr(&out));
}

/// (3) A row that would forge output (a second line, a non-object, bytes that are not UTF-8) is a
/// dead letter; every row that leaves is one line of JSON object.
#[test]
fn rows_that_would_forge_output_are_dead_letters() {
    let dir = tempfile::tempdir().unwrap();
    let forgeries = [r#"{"forge":"newline"}"#, r#"{"forge":"array"}"#, r#"{"forge":"invalid-utf8"}"#];
    let (events, at) = orders_with(dir.path(), 3_000, &forgeries);
    let p = toml(dir.path(), "forged", STATELESS_FORGER);
    let Tested { rows, dead, .. } = weir_test_dead_letters(&p, &events);
    assert_eq!(rows.len(), 3_000, "every order, and nothing forged");
    assert!(rows.iter().all(|r| r.is_object() && r.get("forged").is_none()));
    let lines: Vec<u64> = dead.iter().map(|d| d["line"].as_u64().unwrap()).collect();
    assert_eq!(lines, at);
    assert!(dead.iter().all(|d| d["kind"] == "invalid-value"), "{dead:#?}");

    // The stock parser takes only objects: serde would read `[ts, user]` as an order.
    let stock = toml(dir.path(), "stock", &STATELESS_FORGER.replace("{forger}", "{orders_json}"));
    std::fs::write(&events, "[1793491186672, 5]\n").unwrap();
    let Tested { rows, dead, .. } = weir_test_dead_letters(&stock, &events);
    assert!(rows.is_empty());
    assert_eq!(dead.len(), 1);

    // A Kafka record can hold a newline between JSON tokens (valid JSON, which the stock parser
    // passes on as its row): a second output line, refused where rows leave the plugin.
    let envelope = |value: &str| serde_json::json!({ "value": value }).to_string();
    let order = |sep: &str| {
        format!("{{\"order_id\":1,{sep}\"user_id\":2,\"status\":\"OK\",\"amount\":1.0,\"order_ts\":1793491186672}}")
    };
    let forged = order("\n{\"forged\":true}\n");
    std::fs::write(&events, [envelope(&order("")), envelope(&order("\n")), envelope(&forged)].join("\n") + "\n")
        .unwrap();
    let Tested { rows, dead, .. } = weir_test_dead_letters(&stock, &events);
    assert_eq!(rows.len(), 1, "the one-line order only: {rows:?}");
    assert!(rows.iter().all(|r| r.get("forged").is_none()));
    assert_eq!(dead.iter().map(|d| d["line"].as_u64().unwrap()).collect::<Vec<_>>(), vec![2, 3], "{dead:#?}");
}

/// (4) One record is one dead letter at most, with its message cut, and never also delivered; (14)
/// errors count against the output cap, which is also what the host copies out of a call.
#[test]
fn one_record_is_one_dead_letter_and_errors_count_against_the_cap() {
    let dir = tempfile::tempdir().unwrap();
    let forgeries = [r#"{"forge":"error-flood"}"#, r#"{"forge":"error-and-event"}"#, r#"{"forge":"error-overflow"}"#];
    let (events, at) = orders_with(dir.path(), 2_000, &forgeries);
    let p = toml(dir.path(), "forged", STATELESS_FORGER);
    let Tested { rows, dead, .. } = weir_test_dead_letters(&p, &events);
    assert_eq!(rows.len(), 2_000, "the orders, and not the refused record");
    assert_eq!(dead.len(), 3, "one dead letter per record: {}", dead.len());
    assert_eq!(dead.iter().map(|d| d["line"].as_u64().unwrap()).collect::<Vec<_>>(), at);
    // The flood fits under the output cap, so the call succeeds and the host settles its errors.
    let flood = dead[0]["error"].as_str().unwrap();
    assert!(flood.len() < 1_100 && flood.ends_with("..."), "the message is cut: {} bytes", flood.len());
    assert_eq!(dead[1]["error"], "delivered and refused at once");
    assert!(dead[2]["error"].as_str().unwrap().contains("limits.max_output_mb"), "{}", dead[2]);
}

/// (5) A window whose `finish` traps is a dead letter with its accumulator; every other window is
/// emitted. (8) A finished row may not repeat the host's fields. (9) `merge` may not return an
/// empty accumulator.
#[test]
fn emission_failures_cost_only_their_own_windows() {
    let dir = tempfile::tempdir().unwrap();
    let events = orders(dir.path(), 20_000, 8);
    let mut lines: Vec<String> = std::fs::read_to_string(&events).unwrap().lines().map(String::from).collect();
    lines[5_000] = lines[5_000].replacen('{', "{\"trap\":true,", 1);
    std::fs::write(&events, lines.join("\n") + "\n").unwrap();
    let (kept, _) = kept_orders(&events);
    let want = sliding_reference(&kept, 60_000, 60_000);
    let window = |config: &str, kind: &str| {
        let body = windowed_forger("emit", kind, config, "[failure]\nretries = 0");
        weir_test_dead_letters(&toml(dir.path(), "emit", &body), &events)
    };

    let Tested { rows, dead, .. } = window("finish = \"trap\"", TUMBLING);
    assert_eq!(dead.len(), 1, "{dead:#?}");
    let trapped = (dead[0]["window_start"].as_i64().unwrap(), dead[0]["window_end"].as_i64().unwrap());
    assert!(dead[0]["error"].as_str().unwrap().contains("finish trapped"), "{}", dead[0]);
    assert!(!dead[0]["accumulators_base64"][0].as_str().unwrap().is_empty());
    let counts: Vec<(i64, u64)> =
        rows.iter().map(|r| (r["window_start"].as_i64().unwrap(), r["count"].as_u64().unwrap())).collect();
    assert_eq!(counts.len(), want.len() - 1, "every other window");
    for ((s, e, _), (c, _)) in &want {
        if (*s, *e) != trapped {
            assert!(counts.contains(&(*s, *c)), "window {s}");
        }
    }

    let Tested { rows, dead, .. } = window("finish = \"key\"", TUMBLING);
    assert!(rows.is_empty(), "no row with a forged key leaves");
    assert_eq!(dead.len(), want.len());
    assert!(dead.iter().all(|d| d["error"].as_str().unwrap().contains("`key`")), "{}", dead[0]);

    let sliding = "type = \"sliding\"\nsize = \"2 minutes\"\nslide = \"1 minute\"";
    let Tested { rows, dead, .. } = window("merge = \"empty\"", sliding);
    assert!(rows.is_empty(), "no window finished from an empty accumulator");
    assert!(!dead.is_empty() && dead.iter().all(|d| d["error"].as_str().unwrap().contains("empty accumulator")));

    // A trapping merge costs the two sliding windows that hold the marked pane, no other.
    let Tested { rows, dead, .. } = window("merge = \"trap\"", sliding);
    assert_eq!(dead.len(), 2, "{dead:#?}");
    assert!(dead.iter().all(|d| d["error"].as_str().unwrap().contains("merge trapped")), "{}", dead[0]);
    assert_eq!(rows.len() + 2, sliding_reference(&kept, 120_000, 60_000).len(), "every other window");
}

/// (9) `migrate` may not return empty accumulators either: the restart with the new build is
/// refused, naming the contract, and the checkpointed state is left as it was.
#[test]
fn a_migration_to_empty_accumulators_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let events = orders(dir.path(), 20_000, 8);
    std::fs::rename(&events, dir.path().join("events.jsonl")).unwrap();
    let body =
        |config: &str| windowed_forger("migrate", TUMBLING, config, "[checkpoint]\nlocation = \"{dir}/checkpoint\"");
    let counted = |out: &std::process::Output| -> u64 {
        json_lines(&String::from_utf8_lossy(&out.stdout)).iter().map(|r| r["count"].as_u64().unwrap()).sum()
    };
    let p = toml(dir.path(), "migrate", &body("state_version = 1"));
    let first = ok(weir().arg("run").arg(&p).output().unwrap());
    let p = toml(dir.path(), "migrate", &body("state_version = 2, migrate = \"empty\""));
    let out = weir().arg("run").arg(&p).output().unwrap();
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    assert!(stderr(&out).contains("empty accumulator"), "{}", stderr(&out));
    assert_eq!(counted(&out), 0, "nothing emitted by the refused build");
    // The old build still resumes: the refused migration changed nothing, so the windows it
    // left open still count every event they hold.
    let p = toml(dir.path(), "migrate", &body("state_version = 1"));
    let last = ok(weir().arg("run").arg(&p).arg("--flush").output().unwrap());
    let (kept, _) = kept_orders(&dir.path().join("events.jsonl"));
    assert!(counted(&first) < kept.len() as u64, "the first run left windows open");
    assert_eq!(counted(&first) + counted(&last), kept.len() as u64, "every kept event counted once");
}

/// (6) 40,000 keyed windows final at once, under a 1 MiB output cap: finished in calls below it,
/// every window emitted. A batch larger than the parser's cap is parsed in chunks below it, not
/// failed and retried.
#[test]
fn emission_and_parsing_are_chunked_below_the_output_cap() {
    let dir = tempfile::tempdir().unwrap();
    let mut text = String::new();
    for user in 0..40_000u64 {
        text.push_str(&format!(
            "{{\"order_id\":{user},\"user_id\":{user},\"status\":\"OK\",\"amount\":1.0,\"order_ts\":{}}}\n",
            1_800_000_000_000i64 + (user % 1_000) as i64
        ));
    }
    let events = dir.path().join("events.jsonl");
    std::fs::write(&events, text).unwrap();
    let p = toml(
        dir.path(),
        "many",
        r#"name = "many"
[source]
type = "replay"
path = "events.jsonl"
[trigger]
mode = "once"
[parse]
plugin = "{orders_json}"
config = { key_by_user = true }
limits = { max_output_mb = 1 }
[watermark]
delay = "1 minute"
[window]
type = "tumbling"
size = "1 minute"
[aggregate]
plugin = "{error_rate}"
limits = { max_output_mb = 1 }
"#,
    );
    let Tested { rows, dead, stderr } = weir_test_dead_letters(&p, &events);
    assert_eq!(rows.len(), 40_000, "every window");
    assert!(dead.is_empty(), "{dead:#?}");
    assert!(!stderr.contains("retrying"), "nothing failed to be cut:\n{stderr}");

    // Rows far larger than their accumulators: a call's output over the cap is halved at once
    // (the same call would fail again), not retried, and every window still comes out.
    let big = std::fs::read_to_string(&p)
        .unwrap()
        .replace(&component("error_rate").display().to_string(), &component("forger").display().to_string())
        + "config = { finish = \"big\" }\n";
    std::fs::write(&p, big).unwrap();
    let Tested { rows, dead, stderr } = weir_test_dead_letters(&p, &events);
    assert_eq!(rows.len(), 40_000, "every window: {dead:#?}");
    assert!(rows.iter().all(|r| r["pad"].as_str().is_some_and(|p| p.len() == 1 << 10)), "{}", rows[0]);
    assert!(!stderr.contains("retrying"), "output over the cap is halved, not retried:\n{stderr}");
}

/// (7) Event times whose windows would fall outside the timeline are dead letters, not windows at
/// the other end (nor a panic).
#[test]
fn event_times_at_the_ends_of_the_timeline_are_dead_letters() {
    let dir = tempfile::tempdir().unwrap();
    let order =
        |ts: i64| format!("{{\"order_id\":1,\"user_id\":1,\"status\":\"OK\",\"amount\":1.0,\"order_ts\":{ts}}}");
    let text = [order(i64::MIN), order(1_800_000_000_000), order(i64::MAX)].join("\n") + "\n";
    let events = dir.path().join("events.jsonl");
    std::fs::write(&events, text).unwrap();
    let sliding = "type = \"sliding\"\nsize = \"10 minutes\"\nslide = \"1 minute\"";
    let p = pipeline(dir.path(), Spec { window: sliding, ..Default::default() });
    let Tested { rows, dead, .. } = weir_test_dead_letters(&p, &events);
    assert_eq!(rows.len(), 10, "the one ordinary order, in its ten windows");
    assert!(rows.iter().all(|r| r["window_start"].as_i64().unwrap().abs() < 2_000_000_000_000));
    assert_eq!(dead.iter().map(|d| d["line"].as_u64().unwrap()).collect::<Vec<_>>(), vec![1, 3]);
    assert!(dead.iter().all(|d| d["kind"] == "invalid-value"), "{dead:#?}");
}

/// (10) `host.log` is bounded per call and per minute, and cannot forge a log line.
#[test]
fn host_log_is_bounded_and_cannot_forge_lines() {
    let dir = tempfile::tempdir().unwrap();
    let (events, _) = orders_with(dir.path(), 1_000, &[r#"{"forge":"log-flood"}"#, r#"{"forge":"log-forge"}"#]);
    let p = toml(dir.path(), "forged", STATELESS_FORGER);
    let out = ok(weir()
        .arg("test")
        .arg(&p)
        .arg("--events")
        .arg(&events)
        .arg("--progress-json")
        .env("WEIR_LOG", "info")
        .output()
        .unwrap());
    let log = stderr(&out);
    assert!(log.len() < 200_000, "{} bytes of log for 16 MB asked", log.len());
    assert!(log.contains("dropping messages"), "{}", &log[..log.len().min(2_000)]);
    assert!(!log.lines().any(|l| l.starts_with("2026-11-30T00:00:00.000000Z ERROR")), "a forged line");
    assert!(log.contains("innocent\\n2026-11-30"), "the newline shows escaped");
    let dropped = log
        .lines()
        .filter(|l| l.starts_with('{'))
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter_map(|v| v["plugins"]["parse"]["logDropped"].as_u64())
        .max()
        .unwrap_or(0);
    assert!(dropped >= 990, "{dropped} drops counted");
}

/// (11) A plugin may not fill the disk through its writable grant, nor by keeping files alive
/// under hard links while unlinking their first names.
#[test]
fn a_writable_grant_has_a_disk_limit() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("scratch")).unwrap();
    let (events, at) = orders_with(dir.path(), 1_000, &[r#"{"attack":"disk-links"}"#, r#"{"attack":"disk"}"#]);
    let p = toml(
        dir.path(),
        "flood",
        r#"name = "flood"
[source]
type = "replay"
path = "events.jsonl"
[parse]
plugin = "{hostile}"
grants.dirs = [{ host = "scratch", guest = "/scratch", writable = true }]
limits = { max_disk_mb = 16 }
"#,
    );
    let Tested { rows, dead, .. } = weir_test_dead_letters(&p, &events);
    assert_eq!(rows.len(), 1_000);
    assert_eq!(dead.iter().map(|d| d["line"].as_u64().unwrap()).collect::<Vec<_>>(), at);
    assert!(dead.iter().all(|d| d["error"].as_str().unwrap().contains("limits.max_disk_mb")), "{dead:#?}");
    // Every file there, links and all (each link's data counted once: they are distinct files).
    let written: u64 = std::fs::read_dir(dir.path().join("scratch"))
        .unwrap()
        .map(|e| e.unwrap().metadata().unwrap())
        .filter(|m| m.is_file())
        .map(|m| m.len())
        .sum();
    assert!(written <= 16 << 20, "{written} bytes on disk");
}

/// (12) Values that crashed the host are refused at validation, naming the key.
#[test]
fn values_that_crashed_the_host_are_refused_naming_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let events = orders(dir.path(), 100, 1);
    for (window, extra, key) in [
        ("type = \"tumbling\"\nsize = \"500us\"", "", "window.size"),
        ("type = \"sliding\"\nsize = \"20 minutes\"\nslide = \"1ms\"", "", "window.slide"),
        (TUMBLING, "[aggregate.limits]\ncall_timeout = \"500000000000 years\"", "aggregate.limits.call_timeout"),
        (TUMBLING, "[aggregate.limits]\nmax_output_mb = 4096", "aggregate.limits.max_output_mb"),
    ] {
        // `extra` goes at the end, after `[aggregate]`.
        let p = pipeline(dir.path(), Spec { window, extra, ..Default::default() });
        let out = weir().arg("test").arg(&p).arg("--events").arg(&events).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{key}: {}", stderr(&out));
        assert!(stderr(&out).contains(key), "{key}: {}", stderr(&out));
    }
}
