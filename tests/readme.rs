//! The README's quick start, run as written: the first `sh` block under `## Quick start`, line
//! by line in one shell at the top of the checkout, then its output checked against the
//! reference computed here from the events it generated.
//!
//! It runs in this checkout (a copy elsewhere would rebuild every crate under a new path), so
//! it first removes what an earlier run of the quick start left in `out/` (ignored by git): the
//! events, and the pipeline's windows, checkpoint and side outputs.

use std::process::Command;

use crate::common::*;

/// The block's lines, as the README has them.
fn quick_start() -> String {
    let readme = std::fs::read_to_string(root().join("README.md")).expect("README.md");
    let section = readme.split("\n## Quick start\n").nth(1).expect("README.md has a `## Quick start` section");
    let block = section.split("```sh\n").nth(1).expect("the quick start has a ```sh block");
    block.split("\n```").next().expect("the block is closed").to_string()
}

#[test]
fn the_readme_quick_start_runs_as_written_and_gives_the_reference_windows() {
    let root = root();
    let _ = std::fs::remove_dir_all(root.join("out/orders-error-rate"));
    let _ = std::fs::remove_file(root.join("out/orders.jsonl"));
    let script = quick_start();
    assert!(script.contains("weir run"), "the quick start runs a pipeline:\n{script}");
    let out = Command::new("bash")
        .args(["-euo", "pipefail", "-c", &script])
        .current_dir(&root)
        .env("WEIR_LOG", "warn")
        .output()
        .expect("bash runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "the quick start failed ({}):\n{}", out.status, String::from_utf8_lossy(&out.stderr));
    // What the block prints last is the first windows, one JSON object a line.
    let shown = json_lines(&stdout);
    assert!(!shown.is_empty() && shown.iter().all(|w| w["count"].as_u64().is_some()), "no windows shown:\n{stdout}");
    let (kept, dropped) = kept_orders(&root.join("out/orders.jsonl"));
    assert!(dropped > 0, "the generated events include very late ones");
    let windows = sink_rows(&root.join("out/orders-error-rate/windows"));
    assert_eq!(windows_of(&windows), sliding_reference(&kept, 60_000, 60_000));
}
