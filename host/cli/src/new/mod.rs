//! `weir new ROLE NAME --lang rust|python`: a plugin project, outside any Weir checkout, that
//! builds (`weir build`) and passes `weir test` as it is. It holds the plugin's source with a
//! unit test through the SDK's `testing` module, a pipeline file that runs it, a few recorded
//! events with one bad record, and the rows the pipeline gives for them.
//!
//! The templates live beside this file and are compiled into the binary. A role other than
//! `parser` needs a parser in front of it, so its component also plays a small one (`Events`),
//! which the author keeps or replaces with the standard library's.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

use super::exit::Usage;

/// The role a new plugin plays.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(super) enum Role {
    Parser,
    Transform,
    Aggregate,
    Processor,
    Sink,
}

/// The language of a new plugin.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(super) enum Lang {
    Rust,
    Python,
}

/// Where the Rust template finds the guest SDK when `--sdk` is not given: a checkout's
/// `guest-sdk/` directory. Without either, the project depends on the published crate.
const SDK_ENV: &str = "WEIR_GUEST_SDK";

const EVENTS: &str = include_str!("events.jsonl");
const PIPELINE_HEAD: &str = include_str!("pipelines/head.toml");
const RUST_CARGO: &str = include_str!("rust/Cargo.toml");
const RUST_EVENTS: &str = include_str!("rust/events.rs");
const PYTHON_EVENTS: &str = include_str!("python/events.py");
const PYTHON_TEST: &str = include_str!("python/test_module.py");

impl Role {
    /// (pipeline tail, Rust source, Python source, Python test body, expected rows)
    fn templates(self) -> [&'static str; 5] {
        match self {
            Role::Parser => [
                include_str!("pipelines/parser.toml"),
                include_str!("rust/parser.rs"),
                include_str!("python/parser.py"),
                include_str!("python/tests/parser.py"),
                include_str!("expected/parser.jsonl"),
            ],
            Role::Transform => [
                include_str!("pipelines/transform.toml"),
                include_str!("rust/transform.rs"),
                include_str!("python/transform.py"),
                include_str!("python/tests/transform.py"),
                include_str!("expected/transform.jsonl"),
            ],
            Role::Aggregate => [
                include_str!("pipelines/aggregate.toml"),
                include_str!("rust/aggregate.rs"),
                include_str!("python/aggregate.py"),
                include_str!("python/tests/aggregate.py"),
                include_str!("expected/aggregate.jsonl"),
            ],
            Role::Processor => [
                include_str!("pipelines/processor.toml"),
                include_str!("rust/processor.rs"),
                include_str!("python/processor.py"),
                include_str!("python/tests/processor.py"),
                include_str!("expected/processor.jsonl"),
            ],
            Role::Sink => [
                include_str!("pipelines/sink.toml"),
                include_str!("rust/sink.rs"),
                include_str!("python/sink.py"),
                include_str!("python/tests/sink.py"),
                include_str!("expected/sink.jsonl"),
            ],
        }
    }
}

pub(super) struct NewArgs {
    pub role: Role,
    pub name: String,
    pub lang: Lang,
    /// The directory to create (default: NAME in the current directory).
    pub dir: Option<PathBuf>,
    /// The guest SDK's directory, for the Rust template.
    pub sdk: Option<PathBuf>,
    /// An Avro schema whose row types the project gets.
    pub schema: Option<PathBuf>,
}

/// The row types of `schema` (an `.avsc`), as a source file of `lang`.
fn schema_types(schema: &Path, lang: Lang) -> Result<String> {
    use weir_schema::avro::{Names, codegen};
    let lang = if lang == Lang::Rust { codegen::Lang::Rust } else { codegen::Lang::Python };
    if schema.extension().is_some_and(|e| e == "proto") {
        return Ok(weir_schema::proto_codegen::generate(schema, lang)
            .map_err(|e| Usage(format!("--schema {}: {e}", schema.display())))?);
    }
    let text = std::fs::read_to_string(schema).with_context(|| format!("cannot read --schema {}", schema.display()))?;
    let parsed =
        weir_schema::avro::parse(&text, &[]).map_err(|e| Usage(format!("--schema {}: {e}", schema.display())))?;
    Ok(codegen::generate(&parsed, &Names::of([&parsed]), lang))
}

/// Creates the project; returns its directory.
pub(super) fn new(args: &NewArgs) -> Result<PathBuf> {
    let name = &args.name;
    let valid = name.chars().next().is_some_and(|c| c.is_ascii_lowercase())
        && name.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '_');
    if !valid {
        return Err(Usage(format!(
            "plugin name `{name}`: use lowercase letters, digits, `-` and `_`, starting with a letter (e.g. `order-totals`)"
        ))
        .into());
    }
    let module = name.replace('-', "_");
    let type_name: String =
        module.split('_').filter(|p| !p.is_empty()).map(|p| p[..1].to_ascii_uppercase() + &p[1..]).collect();
    let dir = args.dir.clone().unwrap_or_else(|| PathBuf::from(name));
    if dir.exists() {
        return Err(Usage(format!("{} already exists: pick another NAME or --dir", dir.display())).into());
    }
    let sdk = sdk_dependency(args.sdk.as_deref())?;
    let [pipeline_tail, rust, python, python_test, expected] = args.role.templates();
    let fill = |text: &str| {
        text.replace("{{name}}", name)
            .replace("{{module}}", &module)
            .replace("{{Type}}", &type_name)
            .replace("{{sdk_dependency}}", &sdk)
    };
    let mut files: Vec<(PathBuf, String)> = vec![
        ("pipeline.toml".into(), fill(&format!("{PIPELINE_HEAD}{pipeline_tail}"))),
        ("events.jsonl".into(), EVENTS.to_string()),
        ("expected.jsonl".into(), expected.to_string()),
    ];
    let events_role = args.role != Role::Parser;
    let types = args.schema.as_deref().map(|s| schema_types(s, args.lang)).transpose()?;
    match args.lang {
        Lang::Rust => {
            let mut source = rust.replace("{{events}}", if events_role { RUST_EVENTS } else { "" });
            if let Some(types) = &types {
                source.push_str(
                    "\n/// The rows' types, from the project's schema (`weir schema rust`).\npub mod schema;\n",
                );
                files.push(("src/schema.rs".into(), types.clone()));
            }
            files.push(("Cargo.toml".into(), fill(RUST_CARGO)));
            files.push(("src/lib.rs".into(), fill(&source)));
            files.push((".gitignore".into(), "/target\n*.wasm\nweir-dead-letters.jsonl\n".into()));
        }
        Lang::Python => {
            let source = python.replace("{{events}}", if events_role { PYTHON_EVENTS } else { "" });
            if let Some(types) = &types {
                files.push(("schema.py".into(), types.clone()));
            }
            files.push((format!("{module}.py").into(), fill(&source)));
            files.push((
                format!("test_{module}.py").into(),
                fill(&PYTHON_TEST.replace("{{python_test}}", python_test.trim_end())),
            ));
            files.push((".gitignore".into(), "__pycache__/\n*.wasm\nweir-dead-letters.jsonl\n".into()));
        }
    }
    if args.role == Role::Sink {
        files.push(("out/.gitignore".into(), "*\n!.gitignore\n".into()));
    }
    for (path, text) in files {
        let path = dir.join(path);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).with_context(|| format!("cannot create {}", parent.display()))?;
        }
        std::fs::write(&path, text).with_context(|| format!("cannot write {}", path.display()))?;
    }
    Ok(dir)
}

/// The Rust template's dependency on the guest SDK: by version, as a published crate, and with
/// the local checkout's path when one is known (cargo uses the path and drops it on publish).
fn sdk_dependency(sdk: Option<&Path>) -> Result<String> {
    let version = env!("CARGO_PKG_VERSION");
    let Some(sdk) = sdk.map(Path::to_path_buf).or_else(|| std::env::var_os(SDK_ENV).map(PathBuf::from)) else {
        return Ok(format!("weir-guest = \"{version}\""));
    };
    let path = std::fs::canonicalize(&sdk).ok().filter(|p| p.join("Cargo.toml").is_file()).ok_or_else(|| {
        Usage(format!("--sdk {}: not the guest SDK's directory (a Weir checkout's `guest-sdk/`)", sdk.display()))
    })?;
    Ok(format!("weir-guest = {{ version = \"{version}\", path = {:?} }}", path.display().to_string()))
}
