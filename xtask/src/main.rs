//! Project tasks, run as `cargo xtask <task>`:
//!
//! - `setup`: what a fresh machine needs (the wasm32-wasip2 target; clang for RocksDB; Graphviz; a Python
//!   environment with the pinned componentize-py and the tests' Confluent client, the Apache Kafka
//!   broker's jars and the Apicurio schema registry's distribution, all in `~/.cache/weir-tools`).
//! - `build`: the host and every plugin in release mode, the Python ones with `weir build`;
//!   components land in `plugins/dist/`, where pipeline files find them whatever
//!   `CARGO_TARGET_DIR` is.
//! - `demo`: build, then `weir demo`: an embedded Kafka broker, orders flowing in, the orders
//!   error-rate pipeline printing windows and alerts until Ctrl-C.
//! - `test`: build, fetch the Apache Kafka broker and the schema registry if they are missing, then
//!   formatting, lints, the Python SDK's tests and every test (the scale-out tests beside the
//!   others: `workspace_tests`).

mod kafka;
mod registry;

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};

/// Plugins built to components, by crate name: the examples, then the ones only the tests load
/// (`tests/plugins/`: adversarial plugins, a second build of an aggregator, an HTTP sink). All land in
/// `plugins/dist/`.
const PLUGINS: &[&str] = &[
    "orders-json",
    "status-filter",
    "error-rate",
    "jsonl-file-sink",
    "fraud-alerts",
    "json-parser",
    "avro-parser",
    "json-schema-parser",
    "protobuf-parser",
    "debezium-parser",
    "json-filter",
    "stats",
    "stdout-sink",
    "order-counts",
    "wit-major-1-parser",
    "hostile",
    "versioned-count",
    "http-sink",
    "forger",
];

/// Python plugins, by source directory, built with `weir build` into `plugins/dist/NAME.wasm`.
/// A build takes about 10 s, so each is kept in a cache keyed by the digest of everything that
/// goes into it (its sources, the SDK, the WIT, the pinned requirements).
const PYTHON_PLUGINS: &[(&str, &str)] = &[
    ("plugins/orders-json-py", "orders_json_py"),
    ("plugins/error-rate-py", "error_rate_py"),
    ("plugins/fraud-alerts-py", "fraud_alerts_py"),
    ("tests/plugins/hostile-py", "hostile_py"),
];

/// What the Python environment installs: the SDK's requirements (componentize-py, pinned).
const PYTHON_REQUIREMENTS: &str = "guest-sdk-python/requirements.txt";

/// What it installs besides, for the tests' Python helpers (Confluent's client, pinned).
const TEST_REQUIREMENTS: &str = "tests/requirements.txt";

fn main() -> Result<()> {
    // At run time, not `env!`: checkouts that share a target directory share one xtask binary.
    let manifest = std::env::var_os("CARGO_MANIFEST_DIR").context("run me as `cargo xtask`")?;
    let root = Path::new(&manifest).parent().context("xtask lives in the workspace")?.to_path_buf();
    std::env::set_current_dir(&root)?;
    let task = std::env::args().nth(1).unwrap_or_default();
    match task.as_str() {
        "setup" => setup(&[])
            .and_then(|()| python(&root))
            .and_then(|_| kafka::kafka(&root))
            .and_then(|_| registry::registry(&root))
            .map(drop),
        "build" => setup(&[]).and_then(|()| build(&root)),
        "demo" => setup(&[]).and_then(|()| build(&root)).and_then(|()| demo(&root)),
        "test" => setup(TEST_PACKAGES)
            .and_then(|()| build(&root))
            .and_then(|()| Ok((kafka::kafka(&root)?, registry::registry(&root)?)))
            .and_then(|(kafka, registry)| test(&root, &kafka, &registry)),
        _ => bail!("usage: cargo xtask setup|build|demo|test"),
    }
}

fn run(cmd: &mut Command) -> Result<()> {
    eprintln!("$ {cmd:?}");
    let status = cmd.status().with_context(|| format!("cannot start {cmd:?}"))?;
    if !status.success() {
        bail!("{cmd:?} failed: {status}");
    }
    Ok(())
}

fn cargo() -> Command {
    let mut c = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    // `cargo xtask` runs this binary with its own package's variables set (its manifest
    // directory among them, which names the checkout). Build scripts that track them (ring's
    // does) would take every new checkout for a change and rebuild, with all that depends on
    // them: the builds below never see them.
    for (name, _) in std::env::vars_os() {
        let n = name.to_string_lossy();
        if n.starts_with("CARGO_PKG_")
            || n.starts_with("CARGO_MANIFEST_")
            || ["CARGO_CRATE_NAME", "CARGO_BIN_NAME", "CARGO_PRIMARY_PACKAGE"].contains(&n.as_ref())
        {
            c.env_remove(&name);
        }
    }
    c
}

fn have(cmd: &str, arg: &str) -> bool {
    Command::new(cmd).arg(arg).output().is_ok_and(|o| o.status.success())
}

/// What only the tests need: the web console is tested in Debian's headless Chromium, driven
/// over WebDriver by its ChromeDriver (`tests/console.rs`); the PostgreSQL sink against Debian's
/// PostgreSQL server, read back with its `psql` (`tests/lakehouse/postgres.rs`).
const TEST_PACKAGES: &[&str] = &["chromium", "chromium-driver", "postgresql", "postgresql-client"];

/// Installs the build's tools and packages, and `extra` packages besides.
fn setup(extra: &[&str]) -> Result<()> {
    let targets = Command::new("rustup").args(["target", "list", "--installed"]).output();
    if !targets.is_ok_and(|o| String::from_utf8_lossy(&o.stdout).contains("wasm32-wasip2")) {
        run(Command::new("rustup").args(["target", "add", "wasm32-wasip2"]))?;
    }
    // RocksDB's bindings need libclang (libclang-dev; the image's libclang-cpp is another
    // library) and building it needs clang or g++. Graphviz renders `weir graph`'s SVG, which
    // the project tests check.
    const BUILD_PACKAGES: [&str; 4] = ["clang", "libclang-dev", "g++", "graphviz"];
    let packages = [&BUILD_PACKAGES[..], extra].concat();
    let installed = |p: &str| {
        Command::new("dpkg-query")
            .args(["-W", "-f=${Status}", p])
            .output()
            .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).contains("install ok installed"))
    };
    if !have("dpkg-query", "--version") {
        eprintln!("not a Debian system: make sure {packages:?} (or their equivalents) are installed");
        return Ok(());
    }
    if packages.iter().all(|p| installed(p)) {
        return Ok(());
    }
    let root = Command::new("id").arg("-u").output().is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0");
    let apt = |args: &[&str]| {
        let mut c = if root { Command::new("apt-get") } else { Command::new("sudo") };
        if !root {
            c.arg("apt-get");
        }
        run(c.args(args).env("DEBIAN_FRONTEND", "noninteractive"))
    };
    apt(&["update", "-qq"])?;
    apt(&[&["install", "-y", "-qq"][..], &packages[..]].concat())
}

/// The workspace as `cargo metadata` describes it (its own packages only).
fn metadata() -> Result<serde_json::Value> {
    let out = cargo().args(["metadata", "--format-version", "1", "--no-deps"]).output()?;
    if !out.status.success() {
        bail!("cargo metadata failed: {}", String::from_utf8_lossy(&out.stderr));
    }
    serde_json::from_slice(&out.stdout).context("cargo metadata's output")
}

fn target_dir() -> Result<PathBuf> {
    let meta = metadata()?;
    Ok(PathBuf::from(meta["target_directory"].as_str().context("cargo metadata has no target_directory")?))
}

fn build(root: &Path) -> Result<()> {
    // With the guest SDK, which `cargo test` builds too: its bindings' macros need more of the
    // crates wasmtime's macros use, and a build without it resolved wasmtime apart from the
    // tests' build (a second compile of wasmtime and all above it on a fresh machine).
    run(cargo().args(["build", "--release", "-p", "weir", "-p", "weir-guest"]))?;
    let mut c = cargo();
    c.args(["build", "--release", "--target", "wasm32-wasip2"]);
    // Plugins are small: whole-program optimisation costs seconds and lets serde inline into
    // the batch loops. The host keeps the workspace profile (LTO over wasmtime takes minutes).
    c.env("CARGO_PROFILE_RELEASE_LTO", "true").env("CARGO_PROFILE_RELEASE_CODEGEN_UNITS", "1");
    for p in PLUGINS {
        c.args(["-p", p]);
    }
    run(&mut c)?;
    let built = target_dir()?.join("wasm32-wasip2").join("release");
    let dist = root.join("plugins").join("dist");
    std::fs::create_dir_all(&dist)?;
    for p in PLUGINS {
        let file = format!("{}.wasm", p.replace('-', "_"));
        place(&built.join(&file), &dist.join(&file)).with_context(|| format!("copying {file}"))?;
    }
    build_python(root, &dist)?;
    eprintln!("components in {}", dist.display());
    Ok(())
}

/// Puts a built component at `to`: unchanged when it is the same, else written beside it and
/// renamed over it, so that a pipeline reading it meanwhile (the README's quick start runs
/// `cargo xtask build` while other tests run) reads the old file or the new, never half.
fn place(from: &Path, to: &Path) -> Result<()> {
    let bytes = std::fs::read(from)?;
    if std::fs::read(to).is_ok_and(|old| old == bytes) {
        return Ok(());
    }
    let name = to.file_name().context("a file name")?.to_string_lossy();
    let staged = to.with_file_name(format!(".{name}.tmp"));
    std::fs::write(&staged, &bytes)?;
    std::fs::rename(&staged, to)?;
    Ok(())
}

fn tools_dir() -> Result<PathBuf> {
    let home = std::env::var_os("HOME").context("HOME is not set")?;
    Ok(Path::new(&home).join(".cache").join("weir-tools"))
}

/// A virtual environment with the SDK's and the tests' pinned requirements, made once per pair of
/// requirements files (their digest names it); returns its Python.
fn python(root: &Path) -> Result<PathBuf> {
    let requirements = std::fs::read(root.join(PYTHON_REQUIREMENTS)).context(PYTHON_REQUIREMENTS)?;
    let test_requirements = std::fs::read(root.join(TEST_REQUIREMENTS)).context(TEST_REQUIREMENTS)?;
    let venv = tools_dir()?.join(format!("python-{:016x}", digest(&[&requirements, &test_requirements])));
    let python = venv.join("bin").join("python");
    // Written last: an interrupted install is never taken for a finished one.
    let complete = venv.join(".weir-complete");
    if !complete.exists() {
        if !have("python3", "--version") {
            bail!("Python 3.10 or later is needed for the Python SDK: install python3 and python3-venv");
        }
        let _ = std::fs::remove_dir_all(&venv);
        run(Command::new("python3").args(["-m", "venv"]).arg(&venv))
            .context("python3 -m venv failed: on Debian, install python3-venv")?;
        run(Command::new(&python)
            .args(["-m", "pip", "install", "-q", "-r"])
            .arg(root.join(PYTHON_REQUIREMENTS))
            .arg("-r")
            .arg(root.join(TEST_REQUIREMENTS)))?;
        std::fs::write(&complete, b"")?;
    }
    Ok(python)
}

/// FNV-1a over the parts: a cache key, not a security boundary.
fn digest(parts: &[&[u8]]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for part in parts {
        for &b in part.iter().chain(&(part.len() as u64).to_le_bytes()) {
            h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
        }
    }
    h
}

/// Every file under `dir` (sorted, caches skipped), as (relative path, contents).
fn files(dir: &Path) -> Result<Vec<(String, Vec<u8>)>> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).with_context(|| format!("reading {}", d.display()))? {
            let path = entry?.path();
            let name = path.file_name().and_then(|n| n.to_str()).unwrap_or_default();
            if name == "__pycache__" || name.ends_with(".wasm") || name.ends_with(".egg-info") || name == "build" {
                continue;
            }
            if path.is_dir() {
                stack.push(path);
            } else {
                let rel = path.strip_prefix(dir)?.to_string_lossy().into_owned();
                out.push((rel, std::fs::read(&path)?));
            }
        }
    }
    out.sort();
    Ok(out)
}

fn build_python(root: &Path, dist: &Path) -> Result<()> {
    let python = python(root)?;
    let mut shared = files(&root.join("guest-sdk-python").join("src"))?;
    shared.push(("wit".into(), std::fs::read(root.join("wit").join("plugin.wit"))?));
    shared.push(("requirements".into(), std::fs::read(root.join(PYTHON_REQUIREMENTS))?));
    let cache = tools_dir()?.join("python-components");
    std::fs::create_dir_all(&cache)?;
    for (src, name) in PYTHON_PLUGINS {
        let mut parts: Vec<&[u8]> = Vec::new();
        let own = files(&root.join(src))?;
        for (path, text) in shared.iter().chain(&own) {
            parts.push(path.as_bytes());
            parts.push(text);
        }
        let cached = cache.join(format!("{name}-{:016x}.wasm", digest(&parts)));
        if !cached.exists() {
            let partial = cached.with_extension("partial");
            run(weir()?
                .arg("build")
                .arg(root.join(src))
                .arg("-o")
                .arg(&partial)
                .env("WEIR_PYTHON", &python)
                .env("PYTHONPATH", root.join("guest-sdk-python").join("src")))?;
            std::fs::rename(&partial, &cached)?;
        }
        place(&cached, &dist.join(format!("{name}.wasm"))).with_context(|| format!("copying {name}.wasm"))?;
    }
    Ok(())
}

fn weir() -> Result<Command> {
    Ok(Command::new(target_dir()?.join("release").join("weir")))
}

fn demo(root: &Path) -> Result<()> {
    run(weir()?.arg("demo").current_dir(root))
}

fn test(root: &Path, kafka: &Path, registry: &Path) -> Result<()> {
    run(cargo().args(["fmt", "--all", "--check"]))?;
    run(cargo().args(["clippy", "--release", "--all-targets", "--", "-D", "warnings"]))?;
    let mut c = cargo();
    c.args(["clippy", "--release", "--target", "wasm32-wasip2"]);
    for p in PLUGINS {
        c.args(["-p", p]);
    }
    run(c.args(["--", "-D", "warnings"]))?;
    let python = python(root)?;
    run(Command::new(&python).args([
        "-m",
        "unittest",
        "discover",
        "-s",
        "guest-sdk-python/tests",
        "-t",
        "guest-sdk-python/tests",
    ]))?;
    // The reference oracle's own tests (the end-to-end tests compare Weir with it).
    run(Command::new(&python).args(["-m", "unittest", "discover", "-s", "tests/oracle", "-t", "tests/oracle"]))?;
    // The example plugins' own unit tests, run natively against the SDKs' `testing` modules.
    for (dir, _) in PYTHON_PLUGINS.iter().filter(|(dir, _)| dir.starts_with("plugins/")) {
        run(Command::new(&python)
            .args(["-m", "unittest", "-q"])
            .current_dir(root.join(dir))
            .env("PYTHONPATH", root.join("guest-sdk-python/src")))?;
    }
    run(cargo().args([
        "test",
        "--release",
        "-p",
        "error-rate",
        "-p",
        "avro-parser",
        "-p",
        "json-schema-parser",
        "-p",
        "protobuf-parser",
        "-p",
        "debezium-parser",
    ]))?;
    workspace_tests(kafka, registry, &python)
}

/// The test target that runs beside the others: its kill loops wait on consumer groups'
/// rebalances, so over its six minutes it keeps 0.4 of a core busy.
const BESIDE: &str = "scale_out";

/// Every test of the workspace, as `cargo test --release` runs them, in two lanes: [`BESIDE`]
/// in one, its output held until it ends (so the log reads as one run after another), and
/// every other target, then the doctests, in the other. One after the other they took 10.5
/// minutes, six of them [`BESIDE`]'s.
fn workspace_tests(kafka: &Path, registry: &Path, python: &Path) -> Result<()> {
    let test = |args: &[&str]| {
        let mut c = cargo();
        c.args(["test", "--release"]).args(args).env("WEIR_PYTHON", python);
        c.env("WEIR_KAFKA", kafka).env("WEIR_SCHEMA_REGISTRY", registry);
        c
    };
    // Built first, so the lanes' own `cargo test` find everything fresh and only run.
    run(&mut test(&["--no-run"]))?;
    let mut rest = test(&["--lib", "--bins"]);
    for name in test_targets()?.iter().filter(|n| n.as_str() != BESIDE) {
        rest.args(["--test", name]);
    }
    let mut beside = test(&["--test", BESIDE]);
    eprintln!("$ {beside:?} (beside the rest, its output when it ends)");
    let beside = std::thread::spawn(move || beside.output());
    let rest = run(&mut rest).and_then(|()| run(&mut test(&["--doc"])));
    let out = beside.join().map_err(|_| anyhow::anyhow!("the {BESIDE} lane panicked"))?;
    let out = out.with_context(|| format!("cannot start the {BESIDE} tests"))?;
    // cargo's lines ("Running ...") are on stderr, the tests' on stdout: in that order.
    use std::io::Write;
    std::io::stderr().write_all(&out.stderr)?;
    std::io::stdout().write_all(&out.stdout)?;
    rest?;
    if !out.status.success() {
        bail!("the {BESIDE} tests failed: {}", out.status);
    }
    Ok(())
}

/// The integration-test targets of the workspace's default members, which `cargo test` runs
/// (`cargo metadata`).
fn test_targets() -> Result<Vec<String>> {
    let meta = metadata()?;
    let defaults = meta["workspace_default_members"].as_array().context("no default members in cargo metadata")?;
    let mut names = Vec::new();
    for package in meta["packages"].as_array().into_iter().flatten().filter(|p| defaults.contains(&p["id"])) {
        for target in package["targets"].as_array().into_iter().flatten() {
            if target["kind"].as_array().is_some_and(|k| k.iter().any(|k| k == "test")) {
                names.extend(target["name"].as_str().map(String::from));
            }
        }
    }
    if !names.iter().any(|n| n == BESIDE) {
        bail!("no test target named {BESIDE}: the lane beside the rest would run nothing");
    }
    Ok(names)
}

/// The repository stands alone, and says each version once.
#[cfg(test)]
mod tests {
    use std::path::{Path, PathBuf};

    /// At run time first: checkouts that share a target directory share one test binary, and
    /// `env!` names the checkout that built it.
    fn root() -> PathBuf {
        let manifest = std::env::var_os("CARGO_MANIFEST_DIR").unwrap_or_else(|| env!("CARGO_MANIFEST_DIR").into());
        Path::new(&manifest).parent().expect("xtask lives in the workspace").to_path_buf()
    }

    /// Every text file git tracks, with its path relative to the root.
    fn tracked() -> Vec<(String, String)> {
        let out = std::process::Command::new("git").arg("ls-files").current_dir(root()).output().expect("git runs");
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter_map(|f| Some((f.to_string(), std::fs::read_to_string(root().join(f)).ok()?)))
            .collect()
    }

    /// The contract's version, as `wit/plugin.wit` declares it.
    fn wit_version() -> String {
        let wit = std::fs::read_to_string(root().join("wit/plugin.wit")).expect("wit/plugin.wit");
        wit.lines()
            .find_map(|l| Some(l.strip_prefix("package weir:plugin@")?.strip_suffix(';')?.to_string()))
            .expect("a package line")
    }

    /// The guest SDK can be published: its package holds the WIT its bindings are generated
    /// from (`guest-sdk/wit` links to the one `wit/`), so a plugin built outside this repository
    /// gets the same contract.
    #[test]
    fn the_guest_sdk_package_carries_the_wit() {
        let out = std::process::Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
            .args(["package", "--list", "--allow-dirty", "-p", "weir-guest"])
            .current_dir(root())
            .output()
            .expect("cargo runs");
        let files = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        assert!(files.lines().any(|f| f == "wit/plugin.wit"), "the package lists no wit/plugin.wit:\n{files}");
    }

    #[test]
    fn no_file_cites_design_notes_outside_the_repository() {
        let design = ["DESIGN", ".md"].concat();
        let citing: Vec<String> =
            tracked().into_iter().filter(|(_, text)| text.contains(&design)).map(|(f, _)| f).collect();
        assert!(citing.is_empty(), "these cite {design}, which is not in the repository: {citing:?}");
    }

    /// Docs and code name the contract by the version the WIT file declares (or its
    /// major.minor), never another; the adversarial component built for another major is the
    /// one deliberate exception.
    #[test]
    fn every_mention_of_the_contract_version_is_the_wit_file_s() {
        let version = wit_version();
        let major_minor = version.rsplit_once('.').expect("major.minor.patch").0.to_string();
        let prefix = ["weir:plugin", "@"].concat();
        for (file, text) in tracked() {
            if file.starts_with("tests/plugins/wit-major-1-parser/") || file == "tests/pipeline.rs" {
                continue;
            }
            for (i, _) in text.match_indices(&prefix) {
                let rest = &text[i + prefix.len()..];
                let mentioned: String = rest.chars().take_while(|c| c.is_ascii_digit() || *c == '.').collect();
                let mentioned = mentioned.trim_end_matches('.');
                if mentioned.is_empty() {
                    continue; // `weir:plugin@{version}` in a format string
                }
                assert!(
                    mentioned == version || mentioned == major_minor,
                    "{file} mentions {prefix}{mentioned}; the WIT file declares {version}"
                );
            }
        }
    }
}
