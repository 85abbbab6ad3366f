//! The plugin author's loop, run as a new user runs it, for every role in both languages: `weir
//! new` in a temporary directory outside this repository, `weir build`, the template's own unit
//! tests (through each SDK's `testing` module), then `weir test --expect --restarts` on the
//! events and rows the template ships. The Python SDK is installed the way a user installs it (`pip install` of
//! `guest-sdk-python/` into a fresh virtual environment), so the test also proves the package
//! carries its WIT; the Rust template depends on the guest SDK by version and path.
//!
//! Then what `weir test` proves beyond rows: the sink template's real sink, run with `--sink`
//! through crashes, writes each row once; the same sink made to append is caught.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use crate::common::*;

const ROLES: [&str; 5] = ["parser", "transform", "aggregate", "processor", "sink"];

fn run(cmd: &mut Command) -> String {
    let out = cmd.output().unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed ({}):\n{}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// A Python with the SDK installed from this checkout, made once per test process. Its base is
/// `WEIR_PYTHON` (what `cargo xtask test` sets up) or `python3`.
fn python() -> &'static Path {
    static PY: OnceLock<(tempfile::TempDir, PathBuf)> = OnceLock::new();
    &PY.get_or_init(|| {
        let dir = tempfile::tempdir().unwrap();
        let base = std::env::var_os("WEIR_PYTHON").unwrap_or_else(|| "python3".into());
        let venv = dir.path().join("venv");
        run(Command::new(base).args(["-m", "venv"]).arg(&venv));
        let python = venv.join("bin").join("python");
        // A copy, as a user's checkout or sdist would be: pip builds in the source tree.
        let sdk = dir.path().join("guest-sdk-python");
        copy_dir(&root().join("guest-sdk-python"), &sdk);
        std::fs::create_dir_all(dir.path().join("wit")).unwrap();
        std::fs::copy(root().join("wit/plugin.wit"), dir.path().join("wit/plugin.wit")).unwrap();
        run(Command::new(&python).args(["-m", "pip", "install", "-q"]).arg(&sdk));
        (dir, python)
    })
    .1
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap();
        if name == "__pycache__" || name == "build" || name.to_string_lossy().ends_with(".egg-info") {
            continue;
        }
        if path.is_dir() {
            copy_dir(&path, &to.join(name));
        } else {
            std::fs::copy(&path, to.join(name)).unwrap();
        }
    }
}

/// `weir new ROLE NAME --lang LANG` in `dir`; returns the project.
fn new_project(dir: &Path, role: &str, lang: &str) -> PathBuf {
    let name = format!("my-{role}");
    let mut cmd = weir();
    cmd.args(["new", role, &name, "--lang", lang]).current_dir(dir);
    if lang == "rust" {
        cmd.arg("--sdk").arg(root().join("guest-sdk"));
    }
    run(&mut cmd);
    dir.join(name)
}

fn build(project: &Path) -> String {
    run(weir().arg("build").current_dir(project).env("WEIR_PYTHON", python()))
}

fn weir_test(project: &Path, extra: &[&str]) -> std::process::Output {
    weir()
        .args(["test", "pipeline.toml", "--events", "events.jsonl", "--expect", "expected.jsonl"])
        .args(extra)
        .current_dir(project)
        .output()
        .unwrap()
}

fn the_loop(lang: &str) {
    let dir = tempfile::tempdir().unwrap();
    for role in ROLES {
        let project = new_project(dir.path(), role, lang);
        let built = build(&project);
        let module = format!("my_{role}");
        assert!(project.join(format!("{module}.wasm")).is_file(), "{lang} {role}: no component; {built}");
        match lang {
            "rust" => {
                run(Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()))
                    .args(["test", "--release", "-q"])
                    .current_dir(&project));
            }
            _ => {
                run(Command::new(python()).args(["-m", "unittest", "-q"]).current_dir(&project));
            }
        }
        // Out of the box: the expected rows, and the same rows again through crashes.
        let out = weir_test(&project, &["--restarts", "3", "--restart-seed", "7"]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{lang} {role}: weir test failed:\n{stderr}");
        assert!(stderr.contains("output matches expected.jsonl"), "{lang} {role}: {stderr}");
        assert!(stderr.contains("replay safety: the same"), "{lang} {role}: {stderr}");
        // The bad record the events hold is a dead letter with its reason and position.
        let dead = std::fs::read_to_string(project.join("weir-dead-letters.jsonl")).unwrap();
        let dead = json_lines(&dead);
        assert_eq!(dead.len(), 1, "{lang} {role}: {dead:?}");
        assert_eq!(dead[0]["line"], 5, "{lang} {role}: {dead:?}");
    }
    // The sink template, through its real sink and three crashes: each row written once.
    let sink = dir.path().join("my-sink");
    let out = weir_test(&sink, &["--sink", "scratch", "--restarts", "3", "--restart-seed", "11"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{lang} sink --restarts: {stderr}");
    assert!(stderr.contains("the sink wrote each of the 6 rows once, in 4 files, across the crashes"), "{stderr}");
    assert!(!sink.join("out").read_dir().unwrap().any(|e| e.unwrap().file_name() != ".gitignore"));
}

#[test]
fn a_new_rust_plugin_of_every_role_builds_and_passes_its_own_test() {
    the_loop("rust");
}

#[test]
fn a_new_python_plugin_of_every_role_builds_and_passes_its_own_test() {
    the_loop("python");
}

/// A sink that appends each delivery to one file, without minding re-deliveries, writes a
/// batch twice when it is re-delivered after a crash: `--sink --restarts` must say so.
#[test]
fn a_sink_that_appends_re_deliveries_fails_replay_safety() {
    let dir = tempfile::tempdir().unwrap();
    let project = new_project(dir.path(), "sink", "python");
    let source = project.join("my_sink.py");
    let text = std::fs::read_to_string(&source).unwrap();
    let start = text.find("    def write_batch").unwrap();
    let end = text.find("{{events}}").unwrap_or_else(|| text.find("\n\nclass Events").unwrap());
    let appending = "    def write_batch(self, delivery, rows):\n        with open(f\"{self.dir}/all.jsonl\", \"ab\") as f:\n            for row in rows:\n                f.write(row + b\"\\n\")\n";
    std::fs::write(&source, format!("{}{appending}{}", &text[..start], &text[end..])).unwrap();
    build(&project);
    // Straight through, it writes each row once.
    let out = weir_test(&project, &["--sink", "scratch"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let out = weir_test(&project, &["--sink", "scratch", "--restarts", "2", "--restart-seed", "3"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("the sink's files do not hold each row once"), "{stderr}");
    assert!(stderr.contains("+ produced, not expected"), "{stderr}");
}

#[test]
fn a_bad_name_or_an_existing_directory_is_refused_with_the_fix() {
    let dir = tempfile::tempdir().unwrap();
    let out = weir().args(["new", "parser", "My Parser"]).current_dir(dir.path()).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("use lowercase letters"));
    std::fs::create_dir(dir.path().join("taken")).unwrap();
    let out = weir().args(["new", "parser", "taken", "--lang", "python"]).current_dir(dir.path()).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("already exists"));
    let out = weir().args(["build", "."]).current_dir(dir.path()).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("not a plugin project"));
}
