//! Pipeline projects end to end (docs/projects.md): the orders medallion example
//! (`plugins/orders-medallion/`) against a naive reference, dataset by dataset, on generated
//! orders with invalid and repeated records; the same through repeated kill -9; a stream fed by
//! two flows, through kill -9; the graph errors `weir validate` refuses; a full refresh after a
//! silver change, and one killed along the way. The same project with Kafka-backed datasets,
//! the example's own `kafka.toml`, and a table queried while its project runs, are in
//! `kafka_mock/medallion.rs`.

use std::path::{Path, PathBuf};

use crate::common::medallion::*;
use crate::common::{ok, weir};
use serde_json::Value;

#[test]
fn the_medallion_matches_a_naive_reference_dataset_by_dataset() {
    let dir = tempfile::tempdir().unwrap();
    let events = dirty_orders(dir.path(), 30_000, 7);
    let project = medallion(dir.path(), &[]);
    let r = reference(&events);
    assert!(r.violations.values().all(|&n| n > 0) && r.bronze.len() > r.silver.len(), "the input has what to clean");

    let out = ok(weir().arg("run").arg(&project).arg("--flush").arg("--progress-json").output().unwrap());
    check_against_reference(&project, &r);

    // Violations are counted per expectation: in each batch's progress, in the run's summary
    // and in the checkpoint.
    let summary = String::from_utf8_lossy(&out.stderr);
    let mut in_progress: std::collections::BTreeMap<String, u64> = Default::default();
    for line in summary.lines().filter(|l| l.starts_with('{')) {
        let batch: Value = serde_json::from_str(line).unwrap();
        for (name, n) in batch["expectationViolations"].as_object().into_iter().flatten() {
            *in_progress.entry(name.clone()).or_default() += n.as_u64().unwrap();
        }
    }
    let want: std::collections::BTreeMap<String, u64> = r.violations.iter().map(|(k, v)| (k.to_string(), *v)).collect();
    assert_eq!(in_progress, want, "violations summed over the batches' progress");
    for (name, n) in &r.violations {
        assert!(summary.contains(&format!("expectation {name}: {n} violations")), "{name}: {summary}");
    }
    let inspect = ok(weir().arg("inspect").arg(project.join(".weir/flows/bronze")).output().unwrap());
    let inspect = String::from_utf8_lossy(&inspect.stdout);
    for (name, n) in &r.violations {
        assert!(inspect.contains(&format!("expect     {name}: {n} violations")), "{inspect}");
    }
    // Dropped rows are dead letters under their expectation's name.
    let dead = std::fs::read_to_string(project.join(".weir/flows/bronze/dead-letters.jsonl")).unwrap();
    let by_stage = |stage: &str| dead.lines().filter(|l| l.contains(&format!("\"stage\":\"{stage}\""))).count() as u64;
    assert_eq!(by_stage("expect.positive_amount"), r.violations["positive_amount"]);
    assert_eq!(by_stage("expect.known_status"), r.violations["known_status"]);

    // A table's row by key.
    let (user, n) = r.user_orders.iter().next().unwrap();
    let row = ok(weir().arg("query").arg(&project).args(["user_orders", user]).output().unwrap());
    let row: Value = serde_json::from_slice(&row.stdout).unwrap();
    assert_eq!(row["orders"].as_u64(), Some(*n));
    let none = weir().arg("query").arg(&project).args(["user_orders", "no-such-user"]).output().unwrap();
    assert_eq!(none.status.code(), Some(1));

    // The graph shows each flow's plugins and, after the run, each dataset's rows.
    let dot = ok(weir().arg("graph").arg(&project).output().unwrap());
    let dot = String::from_utf8_lossy(&dot.stdout);
    assert!(dot.contains("\"dataset:silver\" -> \"flow:gold-error-rate\""), "{dot}");
    assert!(dot.contains("window, aggregate: error_rate.wasm"), "{dot}");
    assert!(dot.contains(&format!("{} rows", r.silver.len())), "{dot}");
    // And each flow's records read and rows written: bronze reads every line, bad ones too.
    let lines = std::fs::read_to_string(&events).unwrap().lines().count();
    assert!(dot.contains(&format!("read {lines} · wrote {}", r.bronze.len())), "{dot}");
    assert!(dot.contains(&format!("read {} · wrote {}", r.bronze.len(), r.silver.len())), "{dot}");
    // Written to a file, and rendered beside it by Graphviz (which `cargo xtask setup` installs).
    let out = ok(weir().arg("graph").arg(&project).arg("--out").arg(dir.path().join("graph.dot")).output().unwrap());
    assert!(String::from_utf8_lossy(&out.stderr).contains("graph.svg"), "{}", String::from_utf8_lossy(&out.stderr));
    let svg = std::fs::read_to_string(dir.path().join("graph.svg")).unwrap();
    assert!(
        svg.contains("<svg") && (svg.contains("gold&#45;error&#45;rate") || svg.contains("gold-error-rate")),
        "{svg}"
    );
}

#[test]
fn every_dataset_is_the_same_after_repeated_kill_9() {
    let dir = tempfile::tempdir().unwrap();
    let whole = dir.path().join("whole");
    let killed = dir.path().join("killed");
    // Small batches, so the kills land all along the way; the flows flush at the end of input
    // (the kill loop runs `weir run` without --flush).
    // Bronze's appends (2,000 rows, some 300 KB) are ingested as sorted files, silver's go
    // through the write-ahead log: kills land in both ways of appending.
    let mut edits = vec![
        ("bronze.toml", "path = \"orders.jsonl\"", "path = \"orders.jsonl\"\nmax_offsets_per_trigger = 2000"),
        (
            "weir.toml",
            "[datasets.bronze]\nkind = \"stream\"",
            "[datasets.bronze]\nkind = \"stream\"\nappend_file_bytes = 65536",
        ),
    ];
    for f in ["silver.toml", "gold-error-rate.toml", "gold-user-orders.toml"] {
        edits.push((f, "delay = \"10 minutes\"", "delay = \"10 minutes\"\nflush_at_end = true"));
    }
    for f in ["gold-error-rate.toml", "gold-user-orders.toml"] {
        edits.push((
            f,
            "type = \"dataset\"\ndataset = \"silver\"",
            "type = \"dataset\"\ndataset = \"silver\"\nmax_offsets_per_trigger = 1500",
        ));
    }
    edits.push((
        "silver.toml",
        "type = \"dataset\"\ndataset = \"bronze\"",
        "type = \"dataset\"\ndataset = \"bronze\"\nmax_offsets_per_trigger = 1700",
    ));
    for d in [&whole, &killed] {
        std::fs::create_dir_all(d).unwrap();
        dirty_orders(d, 40_000, 11);
        medallion(d, &edits);
    }
    ok(weir().arg("run").arg(&whole).output().unwrap());
    let kills = crate::common::kill_repeatedly(&killed, 12);
    assert!(kills > 0, "no kill landed");
    let (a, b) = (datasets(&whole), datasets(&killed));
    for (name, rows) in &a {
        assert!(!rows.is_empty(), "{name} is empty");
        if name.contains('_') {
            assert_eq!(&b[name], rows, "table {name}");
        } else {
            assert_eq!(sorted(b[name].clone()), sorted(rows.clone()), "stream {name}: same rows, none twice");
        }
    }
    check_against_reference(&killed, &reference(&killed.join("orders.jsonl")));
    // The graph's counts too: each flow's records read and rows written count each committed
    // batch once, however often it ran. (The per-user processor writes a row per user per
    // batch, so its rows written, and its table's upserts, follow where batches began.)
    let flow_lines = |p: &Path| -> Vec<String> {
        let dot = String::from_utf8(ok(weir().arg("graph").arg(p).output().unwrap()).stdout).unwrap();
        dot.lines()
            .filter(|l| l.starts_with("  \"flow:") && l.contains("read "))
            .map(|l| {
                if l.contains("gold-user-orders") {
                    l.split(" · wrote").next().unwrap().to_string()
                } else {
                    l.to_string()
                }
            })
            .collect()
    };
    let counted = flow_lines(&whole);
    assert_eq!(counted.len(), 4, "{counted:?}");
    assert_eq!(flow_lines(&killed), counted);
}

/// A stream fed by two flows (SDP's append flows): it holds each flow's rows once, through
/// repeated kill -9 as in one uninterrupted run. Each append carries its writer's delivery
/// mark, so a writer's batch appended again after a kill is skipped while the other writer's
/// appends go in.
#[test]
fn two_flows_append_to_one_stream_each_row_once_through_kill_9() {
    let dir = tempfile::tempdir().unwrap();
    let mut inputs = Vec::new();
    for run in ["whole", "killed"] {
        let d = dir.path().join(run);
        let mut lines = Vec::new();
        for (flow, seed) in [("east", 21u64), ("west", 22)] {
            let at = d.join(flow);
            std::fs::create_dir_all(&at).unwrap();
            let file = crate::common::orders(&at, 12_000, seed);
            lines.extend(std::fs::read_to_string(file).unwrap().lines().map(str::to_string));
        }
        let flow = |name: &str| {
            format!(
                "[source]\ntype = \"replay\"\npath = \"{name}/orders.jsonl\"\nmax_offsets_per_trigger = 1000\n\
                 [sink]\ntype = \"dataset\"\ndataset = \"all\"\n"
            )
        };
        small_project(&d, "[datasets.all]\nkind = \"stream\"\n", &[("east", &flow("east")), ("west", &flow("west"))]);
        inputs.push((d, sorted(lines)));
    }
    let (whole, want) = &inputs[0];
    let (killed, _) = &inputs[1];
    ok(weir().arg("run").arg(whole).output().unwrap());
    assert_eq!(sorted(query(whole, "all")), *want, "both flows' rows, each once");
    let kills = crate::common::kill_repeatedly(killed, 12);
    assert!(kills > 0, "no kill landed");
    assert_eq!(sorted(query(killed, "all")), *want, "after {kills} kills: both flows' rows, each once");
}

/// A project of `flows` (name → flow file body) over `datasets` (a `[datasets]` body).
pub(crate) fn small_project(dir: &Path, datasets: &str, flows: &[(&str, &str)]) -> PathBuf {
    let list: Vec<String> = flows.iter().map(|(n, _)| format!("\"{n}.toml\"")).collect();
    std::fs::write(dir.join("weir.toml"), format!("name = \"p\"\nflows = [{}]\n{datasets}", list.join(", "))).unwrap();
    let parser = crate::common::component("orders_json");
    for (name, body) in flows {
        let text = format!("name = \"{name}\"\n[parse]\nplugin = \"{}\"\n{body}", parser.display());
        std::fs::write(dir.join(format!("{name}.toml")), text).unwrap();
    }
    std::fs::write(dir.join("orders.jsonl"), "").unwrap();
    dir.to_path_buf()
}

pub(crate) fn refused(project: &Path) -> String {
    let out = weir().arg("validate").arg(project).output().unwrap();
    assert_eq!(out.status.code(), Some(2), "validate should refuse: {}", String::from_utf8_lossy(&out.stdout));
    String::from_utf8_lossy(&out.stderr).into_owned()
}

pub(crate) const FROM_FILE: &str = "[source]\ntype = \"replay\"\npath = \"orders.jsonl\"\n";

#[test]
fn validate_refuses_a_cycle_a_missing_dataset_a_role_mismatch_and_an_unkeyed_table() {
    let dir = tempfile::tempdir().unwrap();
    let at = |name: &str| {
        let d = dir.path().join(name);
        std::fs::create_dir_all(&d).unwrap();
        d
    };
    let into = |ds: &str| format!("[sink]\ntype = \"dataset\"\ndataset = \"{ds}\"\n");
    let from = |ds: &str| format!("[source]\ntype = \"dataset\"\ndataset = \"{ds}\"\n");

    // a → x → b → y → c → x: b and c form a ring through x and y.
    let cycle = small_project(
        &at("cycle"),
        "[datasets.x]\n[datasets.y]\n[datasets.z]\n",
        &[
            ("a", &format!("{FROM_FILE}{}", into("z"))),
            ("b", &format!("{}{}", from("x"), into("y"))),
            ("c", &format!("{}{}", from("y"), into("x"))),
        ],
    );
    let e = refused(&cycle);
    assert!(
        e.contains("cycle") && e.contains("b writes `y`, which c reads") && e.contains("c writes `x`, which b reads"),
        "{e}"
    );

    let missing = small_project(&at("missing"), "[datasets.x]\n", &[("a", &format!("{FROM_FILE}{}", into("nope")))]);
    let e = refused(&missing);
    assert!(e.contains("a.toml") && e.contains("sink.dataset") && e.contains("`nope`") && e.contains("x"), "{e}");

    // A parser where the aggregator should be.
    let role = small_project(
        &at("role"),
        "[datasets.x]\n",
        &[(
            "a",
            &format!(
                "{FROM_FILE}[watermark]\ndelay = \"1 minute\"\n[window]\ntype = \"tumbling\"\nsize = \"1 minute\"\n\
                 [aggregate]\nplugin = \"{}\"\n{}",
                crate::common::component("orders_json").display(),
                into("x")
            ),
        )],
    );
    let e = refused(&role);
    assert!(e.contains("flow a") && e.contains("aggregat"), "{e}");

    let unkeyed = small_project(
        &at("unkeyed"),
        "[datasets.t]\nkind = \"table\"\n",
        &[("a", &format!("{FROM_FILE}{}", into("t")))],
    );
    let e = refused(&unkeyed);
    assert!(e.contains("flow a") && e.contains("table `t`") && e.contains("no key"), "{e}");

    // Keyed by a field, the same flow is accepted, and validate prints the graph.
    let keyed = small_project(
        &at("keyed"),
        "[datasets.t]\nkind = \"table\"\n",
        &[("a", &format!("{FROM_FILE}{}key = \"user_id\"\n", into("t")))],
    );
    let out = ok(weir().arg("validate").arg(&keyed).output().unwrap());
    assert!(String::from_utf8_lossy(&out.stdout).contains("a: replay → [parse: orders_json.wasm] → dataset t"));
}

#[test]
fn a_full_refresh_of_silver_recomputes_silver_and_gold_and_leaves_bronze() {
    let dir = tempfile::tempdir().unwrap();
    let events = dirty_orders(dir.path(), 20_000, 5);
    let project = medallion(dir.path(), &[]);
    ok(weir().arg("run").arg(&project).arg("--flush").output().unwrap());
    let before = datasets(&project);
    let identity = |flow: &str| identity(&project, flow);
    let bronze_identity = identity("bronze");
    let silver_identity = identity("silver");

    drop_pending_in_silver(&project);
    let out = ok(weir().arg("run").arg(&project).args(["--flush", "--full-refresh", "silver"]).output().unwrap());
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(said.contains("reset error_rate, silver, user_orders"), "{said}");

    let after = datasets(&project);
    assert_eq!(after["bronze"], before["bronze"], "bronze untouched");
    assert_eq!(identity("bronze"), bronze_identity, "bronze's checkpoint untouched");
    assert_ne!(identity("silver"), silver_identity, "silver's checkpoint was reset");
    check_against_reference(&project, &without_pending(reference(&events)));
    assert_ne!(after["silver"], before["silver"]);

    // A dataset the project does not have is refused, naming the ones it has.
    let out = weir().arg("run").arg(&project).args(["--full-refresh", "platinum"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("bronze, error_rate, silver, user_orders"));
}

/// A full refresh killed with kill -9 at points along it, from its first moments to its flows'
/// batches. Bronze is untouched every time, and what is left is one of two things: the project
/// as it was (the refresh had not begun; its user runs it again), or a refresh under way, which
/// the next plain start finishes before any flow runs (`STATE/refresh.json`) or whose reset
/// flows carry on from their new checkpoints. Either way the end is the new datasets.
#[test]
fn a_full_refresh_killed_anywhere_leaves_the_old_project_or_one_the_next_start_finishes() {
    use std::io::{BufRead, BufReader};
    use std::process::Stdio;
    // Every dataset, or `None` when one cannot be read (its log deleted by the reset).
    let readable =
        |project: &Path| -> Option<Vec<Vec<String>>> { DATASETS.iter().map(|d| try_query(project, d)).collect() };
    let dir = tempfile::tempdir().unwrap();
    let events = dirty_orders(dir.path(), 20_000, 19);
    let new = without_pending(reference(&events));
    let mut finished_by_the_next_start = 0;
    for lines in [0usize, 1, 2, 3, 5, 8, 13] {
        let d = dir.path().join(format!("kill-after-{lines}"));
        std::fs::create_dir_all(&d).unwrap();
        std::fs::copy(&events, d.join("orders.jsonl")).unwrap();
        let project = medallion(&d, &[]);
        ok(weir().arg("run").arg(&project).arg("--flush").output().unwrap());
        let before = readable(&project).unwrap();
        let bronze_identity = identity(&project, "bronze");
        drop_pending_in_silver(&project);

        let mut child = weir()
            .arg("run")
            .arg(&project)
            .args(["--flush", "--full-refresh", "silver", "--progress-json"])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut said = BufReader::new(child.stderr.take().unwrap()).lines();
        for _ in 0..lines {
            if said.next().is_none() {
                break;
            }
        }
        let ended = child.try_wait().unwrap().is_some();
        if !ended {
            child.kill().unwrap();
        }
        child.wait().unwrap();
        drop(said);

        assert_eq!(query(&project, "bronze"), before[0], "bronze untouched (kill after {lines} lines)");
        assert_eq!(identity(&project, "bronze"), bronze_identity, "bronze's checkpoint untouched");
        let plan = project.join(".weir/refresh.json").exists();
        let untouched = !plan && readable(&project).as_ref() == Some(&before);
        eprintln!("killed after {lines} lines: ended by itself {ended}, plan {plan}, untouched {untouched}");
        if untouched {
            ok(weir().arg("run").arg(&project).args(["--flush", "--full-refresh", "silver"]).output().unwrap());
        } else {
            ok(weir().arg("run").arg(&project).arg("--flush").output().unwrap());
            finished_by_the_next_start += usize::from(!ended);
        }
        assert!(!project.join(".weir/refresh.json").exists(), "the plan is gone once carried out");
        assert_eq!(query(&project, "bronze"), before[0], "bronze untouched");
        check_against_reference(&project, &new);
    }
    assert!(finished_by_the_next_start > 0, "no kill landed once the refresh had begun");
}

/// Expectations in any pipeline: `warn` counts and keeps, a plugin's dropped rows are its
/// violations (`drop`: to the dead letters), `fail` stops the run naming the rule and the row.
#[test]
fn expectations_warn_drop_through_a_plugin_and_fail() {
    let dir = tempfile::tempdir().unwrap();
    let events = crate::common::orders(dir.path(), 3_000, 2);
    let text = std::fs::read_to_string(&events).unwrap();
    let statuses: Vec<String> = text
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap()["status"].as_str().unwrap().to_string())
        .collect();
    let not_ok = statuses.iter().filter(|s| *s != "OK").count();
    let pending = statuses.iter().filter(|s| *s == "PENDING").count();
    assert!(pending > 0 && not_ok > pending);
    let pipeline = |expect: &str| {
        let p = dir.path().join("p.toml");
        std::fs::write(
            &p,
            format!(
                "name = \"e\"\n[source]\ntype = \"replay\"\npath = \"orders.jsonl\"\n[parse]\nplugin = \"{}\"\n{expect}\n\
                 [checkpoint]\nlocation = \"cp-{}\"\n",
                crate::common::component("orders_json").display(),
                expect.len()
            ),
        )
        .unwrap();
        p
    };
    let warn_and_plugin = pipeline(&format!(
        "[[expect]]\nname = \"ok\"\nrule = 'status == \"OK\"'\non_violation = \"warn\"\n\
         [[expect]]\nname = \"settled\"\nplugin = \"{}\"\nconfig = {{ keep = [\"OK\", \"ERROR\"] }}\n",
        crate::common::component("status_filter").display()
    ));
    let out = ok(weir().arg("run").arg(&warn_and_plugin).output().unwrap());
    let rows = String::from_utf8_lossy(&out.stdout).lines().count();
    assert_eq!(rows, statuses.len() - pending, "PENDING orders dropped by the plugin, the rest kept");
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(said.contains(&format!("expectation ok: {not_ok} violations")), "{said}");
    assert!(said.contains(&format!("expectation settled: {pending} violations")), "{said}");

    let fail = pipeline("[[expect]]\nname = \"small\"\nrule = \"amount < 0\"\non_violation = \"fail\"\n");
    let out = weir().arg("run").arg(&fail).output().unwrap();
    assert_eq!(out.status.code(), Some(3));
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(said.contains("expectation small (amount < 0) failed") && said.contains("line 1 holds the row"), "{said}");

    // A bad rule is refused when the file is validated, naming it.
    let bad = pipeline("[[expect]]\nname = \"bad\"\nrule = \"amount >> 3\"\n");
    let out = weir().arg("run").arg(&bad).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("expect[0].rule"));
}

/// `weir test` on a whole project: recorded events for the flow with a source of its own,
/// expected rows for each dataset checked; a wrong expectation is a diff and exit 1.
#[test]
fn weir_test_runs_a_project_on_recorded_events_against_expected_datasets() {
    let dir = tempfile::tempdir().unwrap();
    let project = medallion(dir.path(), &[]);
    let recorded = dir.path().join("recorded");
    std::fs::create_dir_all(&recorded).unwrap();
    let events = dirty_orders(&recorded, 5_000, 9);
    let r = reference(&events);
    let expected = |name: &str, rows: &[String]| {
        let f = dir.path().join(format!("{name}.expected.jsonl"));
        std::fs::write(&f, rows.iter().map(|l| format!("{l}\n")).collect::<String>()).unwrap();
        format!("{name}={}", f.display())
    };
    let users: Vec<String> =
        r.user_orders.iter().map(|(u, n)| format!("{{\"user_id\":{u:?},\"orders\":{n}}}")).collect();
    let out = weir()
        .arg("test")
        .arg(&project)
        .arg("--events")
        .arg(format!("bronze={}", events.display()))
        .args(["--expect", &expected("bronze", &r.bronze), "--expect", &expected("silver", &r.silver)])
        .args(["--expect", &expected("user_orders", &users)])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    // Nothing was written beside the project: the test ran in a scratch state directory.
    assert!(!project.join(".weir").exists());

    let wrong = weir()
        .arg("test")
        .arg(&project)
        .arg("--events")
        .arg(format!("bronze={}", events.display()))
        .args(["--expect", &expected("silver", &r.bronze)])
        .output()
        .unwrap();
    assert_eq!(wrong.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&wrong.stderr).contains("dataset silver differs"));

    // Without --expect, every dataset's rows, tagged with the dataset.
    let all = ok(weir()
        .arg("test")
        .arg(&project)
        .arg("--events")
        .arg(format!("bronze={}", events.display()))
        .output()
        .unwrap());
    let lines = String::from_utf8_lossy(&all.stdout);
    let silver = lines.lines().filter(|l| l.starts_with("{\"dataset\":\"silver\"")).count();
    assert_eq!(silver, r.silver.len());
    let bad = weir().arg("test").arg(&project).args(["--events", "gold-error-rate=x.jsonl"]).output().unwrap();
    assert_eq!(bad.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("those that do: bronze"));
}
