//! Several pipelines in one process: a well-behaved tenant runs to the end, with the same output
//! as alone, while another tenant's plugin loops forever on every record; SIGTERM stops both
//! cleanly. The throughput it keeps is printed, not asserted (a timed assertion fails with the
//! machine, not with the code): docs/security.md gives the measured range.
//!
//! Its own test binary, one test: the measurement must not share the machine with other tests.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::Stdio;

use crate::common::*;

/// `[name] N input rows in Xs (R rows/s), ...` → R.
fn rate(line: &str) -> f64 {
    let open = line.find(" rows/s)").expect("a summary line");
    let start = line[..open].rfind('(').expect("a summary line") + 1;
    line[start..open].parse().unwrap()
}

/// The good tenant's pipeline, its file sink writing into `out`.
fn good_pipeline(dir: &Path, events: &Path, name: &str, out: &Path) -> std::path::PathBuf {
    std::fs::create_dir_all(out).unwrap();
    let extra =
        format!("{}[checkpoint]\nlocation = \"{}\"", file_sink(out), dir.join(format!("{name}-checkpoint")).display());
    let p = pipeline(dir, Spec { window: TUMBLING, extra: &extra, ..Default::default() });
    let text = std::fs::read_to_string(&p)
        .unwrap()
        .replace("name = \"test\"", &format!("name = \"{name}\""))
        .replace("path = \"orders.jsonl\"", &format!("path = \"{}\"", events.display()))
        // One parse thread: on this 2-core machine the looping tenant holds the other core, and the
        // measurement is of isolation, not of two tenants sharing one core.
        .replace("[parse]\n", "[parse]\nparallelism = 1\n");
    let file = dir.join(format!("{name}.toml"));
    std::fs::write(&file, text).unwrap();
    file
}

/// Runs the pipelines in one `weir run` with a metrics endpoint; once `good`'s summary is
/// printed, scrapes `/metrics` (while other pipelines still hold the process up) and stops the
/// rest with SIGTERM. Returns good's rate, the process's exit code, its stderr and the scrape.
fn run_beside(pipelines: &[&Path]) -> (f64, Option<i32>, String, String) {
    let mut child = weir()
        .arg("run")
        .args(pipelines)
        .args(["--metrics-addr", "127.0.0.1:0"])
        .env("WEIR_LOG", "error")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut log = String::new();
    let mut good = None;
    let (mut addr, mut scrape) = (String::new(), String::new());
    for line in BufReader::new(child.stderr.take().unwrap()).lines() {
        let line = line.unwrap();
        log.push_str(&line);
        log.push('\n');
        if let Some(a) = line.strip_prefix("metrics at http://") {
            addr = a.trim_end_matches("/metrics").to_string();
        }
        if line.starts_with("[good]") && line.contains(" input rows in ") {
            good = Some(rate(&line));
            // Alone, `good` was the last pipeline and the process is already exiting.
            if pipelines.len() > 1 {
                scrape = get_metrics(&addr);
            }
            ok(std::process::Command::new("kill").args(["-TERM", &child.id().to_string()]).output().unwrap());
        }
    }
    let status = child.wait().unwrap();
    (good.unwrap_or_else(|| panic!("no summary for good:\n{log}")), status.code(), log, scrape)
}

fn get_metrics(addr: &str) -> String {
    let mut response = ureq::get(&format!("http://{addr}/metrics")).call().unwrap();
    assert_eq!(response.status(), 200);
    response.body_mut().read_to_string().unwrap()
}

/// The value of one series in a Prometheus scrape.
fn series(scrape: &str, name_and_labels: &str) -> f64 {
    let line = scrape
        .lines()
        .find(|l| l.starts_with(name_and_labels))
        .unwrap_or_else(|| panic!("no {name_and_labels} in\n{scrape}"));
    line.rsplit(' ').next().unwrap().parse().unwrap()
}

#[test]
fn a_tenant_keeps_its_throughput_beside_one_whose_plugin_loops_forever() {
    let dir = tempfile::tempdir().unwrap();
    let events = orders(dir.path(), 3_000_000, 5);
    let loops = dir.path().join("loops.jsonl");
    std::fs::write(&loops, "{\"attack\":\"loop\"}\n".repeat(1_000)).unwrap();
    let bad = dir.path().join("bad.toml");
    std::fs::write(
        &bad,
        format!(
            "name = \"bad\"\n[source]\ntype = \"replay\"\npath = \"{}\"\n[parse]\nplugin = \"{}\"\n\
             limits = {{ call_timeout = \"100ms\" }}\n[failure]\nretries = 0\n[checkpoint]\nlocation = \"{}\"\n",
            loops.display(),
            component("hostile").display(),
            dir.path().join("bad-checkpoint").display()
        ),
    )
    .unwrap();

    let solo_out = dir.path().join("solo-out");
    let (solo, code, log, _) = run_beside(&[&good_pipeline(dir.path(), &events, "good", &solo_out)]);
    assert_eq!(code, Some(0), "{log}");

    // The same checkpoint location: the second run starts from nothing too.
    std::fs::remove_dir_all(dir.path().join("good-checkpoint")).unwrap();
    let beside_out = dir.path().join("beside-out");
    let (beside, code, log, scrape) = run_beside(&[&good_pipeline(dir.path(), &events, "good", &beside_out), &bad]);
    // Stopped before the end of its input: "interrupted", not a failure (docs/cli.md).
    assert_eq!(code, Some(130), "SIGTERM must stop the looping tenant cleanly too:\n{log}");
    eprintln!(
        "good tenant: {solo:.0} rows/s alone, {beside:.0} rows/s beside an infinite loop ({:.2}×)",
        beside / solo
    );

    // The neighbour's loop cost the good tenant nothing of its result.
    let rows = sink_rows(&beside_out);
    assert!(!rows.is_empty(), "{log}");
    assert_eq!(rows, sink_rows(&solo_out), "the good tenant's output changed beside the loop");

    // Each tenant's plugins are measured apart.
    let good_parse = "{pipeline=\"good\",stage=\"parse\",plugin=\"orders_json.wasm\"}";
    assert_eq!(series(&scrape, &format!("weir_plugin_records_in_total{good_parse}")), 3_000_000.0);
    assert_eq!(series(&scrape, &format!("weir_plugin_errors_total{good_parse}")), 0.0);
    let bad_parse = "{pipeline=\"bad\",stage=\"parse\",plugin=\"hostile.wasm\"}";
    let bad_errors = series(&scrape, &format!("weir_plugin_errors_total{bad_parse}"));
    // The loop was running the whole time: each of its 1,000 records costs at least one 100 ms
    // deadline, so when the good tenant ended it had failed some calls and not yet all.
    assert!((1.0..1_000.0).contains(&bad_errors), "{bad_errors} failed calls in\n{scrape}");
    assert!(series(&scrape, &format!("weir_plugin_memory_high_water_bytes{good_parse}")) > 0.0);
}
