//! `weir build [DIR]`: a plugin project into a component, by the toolchain its files name. A
//! `Cargo.toml` is a Rust plugin, built with cargo for `wasm32-wasip2`; otherwise `.py` files are
//! a Python plugin, built by the Python SDK's `weir.build` (componentize-py). The component lands
//! at `-o`, else `DIR/NAME.wasm` (NAME: the crate's library name, or the Python module's), where
//! the pipeline files `weir new` writes look for it.
//!
//! Nothing here is a shell command line: each tool gets its arguments as a list, and its own
//! output goes straight to the terminal.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};

use super::exit::Usage;

/// The Python that builds Python plugins when `WEIR_PYTHON` names none: the first `python3` on
/// the `PATH`. It needs the Python SDK (`pip install ./guest-sdk-python`, which brings the pinned
/// componentize-py).
const DEFAULT_PYTHON: &str = "python3";

/// The Rust target components are built for.
const WASM_TARGET: &str = "wasm32-wasip2";

/// Which toolchain a plugin project uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Lang {
    Rust,
    Python,
}

impl Lang {
    fn of(dir: &Path) -> Result<Lang> {
        if dir.join("Cargo.toml").is_file() {
            return Ok(Lang::Rust);
        }
        let py = std::fs::read_dir(dir)
            .with_context(|| format!("cannot read {}", dir.display()))?
            .filter_map(|e| e.ok())
            .any(|e| e.path().extension().is_some_and(|x| x == "py"));
        if py {
            return Ok(Lang::Python);
        }
        Err(Usage(format!(
            "{}: no Cargo.toml and no .py file: not a plugin project (`weir new` makes one)",
            dir.display()
        ))
        .into())
    }
}

/// Builds the plugin in `dir`; returns the component's path.
pub(super) fn build(dir: &Path, out: Option<&Path>) -> Result<PathBuf> {
    match Lang::of(dir)? {
        Lang::Rust => rust(dir, out),
        Lang::Python => python(dir, out),
    }
}

fn rust(dir: &Path, out: Option<&Path>) -> Result<PathBuf> {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.args(["build", "--release", "--target", WASM_TARGET, "--message-format=json-render-diagnostics"])
        .arg("--manifest-path")
        .arg(dir.join("Cargo.toml"))
        .stderr(std::process::Stdio::inherit());
    let output = cmd.output().context("cannot run cargo: is Rust installed (https://rustup.rs)?")?;
    if !output.status.success() {
        bail!(Usage(format!(
            "cargo could not build {} (its errors are above; `rustup target add {WASM_TARGET}` if the target is missing)",
            dir.display()
        )));
    }
    // The component is the artifact of the project's own package that ends in `.wasm`.
    let manifest = std::fs::canonicalize(dir.join("Cargo.toml"))?;
    let mut built = None;
    for line in output.stdout.split(|&b| b == b'\n').filter(|l| !l.is_empty()) {
        let Ok(msg) = serde_json::from_slice::<serde_json::Value>(line) else { continue };
        if msg["reason"] != "compiler-artifact" || msg["manifest_path"].as_str() != manifest.to_str() {
            continue;
        }
        let mut files = msg["filenames"].as_array().into_iter().flatten().filter_map(|f| f.as_str());
        if let Some(f) = files.rfind(|f| f.ends_with(".wasm")) {
            built = Some(PathBuf::from(f));
        }
    }
    let built = built.ok_or_else(|| {
        Usage(format!(
            "{} built no .wasm: a plugin crate has `crate-type = [\"cdylib\"]` under [lib]",
            dir.join("Cargo.toml").display()
        ))
    })?;
    let out = match out {
        Some(o) => o.to_path_buf(),
        None => dir.join(built.file_name().context("an artifact has a file name")?),
    };
    std::fs::copy(&built, &out).with_context(|| format!("cannot copy {} to {}", built.display(), out.display()))?;
    eprintln!("built {}", out.display());
    Ok(out)
}

fn python(dir: &Path, out: Option<&Path>) -> Result<PathBuf> {
    let python = std::env::var_os("WEIR_PYTHON").unwrap_or_else(|| DEFAULT_PYTHON.into());
    let has_sdk = Command::new(&python).args(["-c", "import weir.build"]).output();
    match has_sdk {
        Err(_) => bail!(Usage(format!(
            "cannot run {}: install Python 3.10 or later, or set WEIR_PYTHON to one",
            python.to_string_lossy()
        ))),
        Ok(o) if !o.status.success() => bail!(Usage(format!(
            "{} has no Weir Python SDK: `pip install weir-guest` (from a Weir checkout: `pip install ./guest-sdk-python`), \
             or set WEIR_PYTHON to a Python that has it",
            python.to_string_lossy()
        ))),
        Ok(_) => {}
    }
    let mut cmd = Command::new(&python);
    cmd.args(["-m", "weir.build"]).arg(dir);
    if let Some(o) = out {
        cmd.arg("-o").arg(o);
    }
    // The SDK prints the component's path last on stderr; it is the one line on stdout too.
    cmd.arg("--print-path").stderr(std::process::Stdio::inherit());
    let output = cmd.output().with_context(|| format!("cannot run {}", python.to_string_lossy()))?;
    if !output.status.success() {
        bail!(Usage(format!("the Python SDK could not build {} (its error is above)", dir.display())));
    }
    let path = String::from_utf8_lossy(&output.stdout).trim().to_string();
    if path.is_empty() {
        bail!("the Python SDK built {} but did not say where", dir.display());
    }
    Ok(PathBuf::from(path))
}
