//! The `weir` command line: logging, exit codes, and one function per command (what clap parses
//! is `args.rs`). The commands that are more than a call into the engine have a file each.

mod args;
mod bench;
mod broker;
mod build;
mod client;
mod demo;
mod exit;
mod feed;
mod inspect;
mod metrics;
mod new;
mod projects;
mod record;
mod run;
mod test;
mod tryout;

// The crates below, under the names this one's modules use.
use weir_config as pipeline;
use weir_engine::{checkpoint, dataset, driver, kafka, native, progress, sink, source, state};
use weir_project as project;
use weir_sandbox as plugin;
use weir_scale as scale;
use weir_serve as serve;
use weir_types::{columns, workload};

use std::fs::File;
use std::io::{BufWriter, IsTerminal, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use clap::Parser;

use crate::pipeline::StartingOffsets;
use args::{Cli, Command, GenWhat};
use exit::Exit;

/// Runs `weir` with the process's arguments; returns its exit code.
pub fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            // Help and version go to stdout with 0; anything else is a usage error.
            let _ = e.print();
            return if e.use_stderr() { Exit::Usage.into() } else { Exit::Done.into() };
        }
    };
    init_logging(matches!(cli.command, Command::Serve(_)));
    let service = client::Service { server: cli.server, token_file: cli.token_file, ca_file: cli.ca_file };
    match dispatch(cli.command, service) {
        Ok(exit) => exit.into(),
        Err(e) => {
            eprintln!("error: {e:#}");
            Exit::of(&e).into()
        }
    }
}

/// Log lines go to stderr, filtered by `WEIR_LOG`, else `RUST_LOG` (both in `tracing`'s
/// `EnvFilter` syntax, e.g. `warn` or `weir=debug`), else `info`; coloured only on a terminal
/// and without `NO_COLOR`. `serve`: also keep each hosted pipeline's plugin lines for its API
/// (`host/serve/src/logs.rs`), whatever the filter lets through to stderr.
fn init_logging(serve: bool) {
    use tracing_subscriber::EnvFilter;
    use tracing_subscriber::prelude::*;
    let filter = EnvFilter::try_from_env("WEIR_LOG")
        .or_else(|_| EnvFilter::try_from_env("RUST_LOG"))
        .unwrap_or_else(|_| EnvFilter::new("info"));
    let colour = std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none();
    let stderr = tracing_subscriber::fmt::layer().with_writer(std::io::stderr).with_ansi(colour).with_filter(filter);
    tracing_subscriber::registry().with(stderr).with(serve.then(crate::serve::plugin_log_layer)).init();
}

/// Runs the parsed command: each that is more than a call has a function below, named after it.
fn dispatch(command: Command, service: client::Service) -> Result<Exit> {
    match command {
        Command::Remote(r) => client::run(service, r),
        Command::Run(a) => run_command(a),
        Command::Validate { project } => projects::validate(&project),
        Command::Serve(a) => serve_command(a),
        Command::Graph { project, out } => projects::graph(&project, out.as_deref()),
        Command::Query { project, table, key } => projects::query(&project, &table, key.as_deref()),
        Command::Test(a) => test_command(a),
        Command::Gen { what } => gen_command(what),
        Command::Bench(a) if a.latency => latency_command(a),
        Command::Bench(a) => bench_command(a),
        Command::Inspect(a) => inspect_command(a),
        Command::Record(a) => record_command(a),
        Command::New(a) => new_command(a),
        Command::Schema { lang, schema, out } => schema_command(lang, &schema, out.as_deref()),
        Command::Build { dir, out } => {
            build::build(&dir, out.as_deref())?;
            Ok(Exit::Done)
        }
        Command::Demo(a) => demo_command(a),
        Command::Broker(a) => broker_command(a),
    }
}

/// `weir run`: one project on its own, or pipeline files side by side.
fn run_command(a: args::Run) -> Result<Exit> {
    let args::Run { pipelines, checkpoint, progress_json, metrics_addr, flush, full_refresh, group } = a;
    match pipelines.as_slice() {
        [one] if crate::project::Project::file_at(one).is_some() => {
            if checkpoint.is_some() || metrics_addr.is_some() || group.is_some() {
                return Err(exit::Usage(
                    "--checkpoint, --metrics-addr and --group are for pipelines; a project keeps its \
                     flows' checkpoints under its state directory"
                        .into(),
                )
                .into());
            }
            projects::run_project(one, &full_refresh, progress_json, flush)
        }
        _ if pipelines.iter().any(|p| crate::project::Project::file_at(p).is_some()) => {
            Err(exit::Usage("a project runs on its own: give `weir run` one project, or pipeline files".into()).into())
        }
        _ if !full_refresh.is_empty() => {
            Err(exit::Usage("--full-refresh resets a project's datasets: give it a project".into()).into())
        }
        _ => run::run_all(&pipelines, checkpoint, progress_json, metrics_addr.as_deref(), flush, group),
    }
}

/// `weir serve`: a setup error (what the options name cannot be used) is a usage error.
fn serve_command(a: args::Serve) -> Result<Exit> {
    let args::Serve { data, listen, admin_token_file, allow_network, tls_cert, tls_key } = a;
    let tls = tls_cert.zip(tls_key);
    let options = crate::serve::Options { data, listen, admin_token_file, allow_network, tls };
    crate::serve::serve(options).map_err(|e| match e {
        crate::serve::ServeError::Setup(m) => anyhow::Error::from(exit::Usage(m)),
        e => e.into(),
    })?;
    Ok(Exit::Done)
}

/// `weir test`: a project's datasets, or one pipeline's rows (then, with `--restarts`, its
/// replay safety).
fn test_command(a: args::Test) -> Result<Exit> {
    let args::Test { pipeline, events, expect, out, dead_letters, progress_json, restarts, restart_seed, sink } = a;
    if crate::project::Project::file_at(&pipeline).is_some() {
        if out.is_some() || restarts > 0 || sink.is_some() {
            return Err(exit::Usage(
                "--out, --restarts and --sink are for a pipeline; a project's test checks its datasets \
                 (--expect DATASET=FILE)"
                    .into(),
            )
            .into());
        }
        return projects::test(&pipeline, &events, &expect, progress_json);
    }
    let [events] = events.as_slice() else {
        return Err(exit::Usage("a pipeline's test takes one --events FILE".into()).into());
    };
    let expect = match expect.as_slice() {
        [] => None,
        [one] => Some(PathBuf::from(one)),
        _ => return Err(exit::Usage("a pipeline's test takes at most one --expect FILE".into()).into()),
    };
    let events = PathBuf::from(events);
    let args = test::TestArgs { pipeline, events, expect, out, dead_letters, progress_json, sink_dir: sink };
    match test::test(&args)? {
        Exit::Done if restarts > 0 => test::replay_safety(&args, restarts, restart_seed),
        exit => Ok(exit),
    }
}

/// `weir gen`: the workload to `--out` or stdout, and what it holds to stderr.
fn gen_command(what: GenWhat) -> Result<Exit> {
    match what {
        GenWhat::Orders { n, seed, out } => {
            let very_late = generate(out.as_deref(), |w| crate::workload::orders(n, seed, w))?;
            eprintln!("events={n} seed={seed} very_late={very_late}");
        }
        GenWhat::Users { seed, out } => {
            let users = generate(out.as_deref(), |w| crate::workload::users(seed, w))?;
            eprintln!("users={users} seed={seed}");
        }
    }
    Ok(Exit::Done)
}

/// `weir bench`: throughput.
fn bench_command(a: args::Bench) -> Result<Exit> {
    let args::Bench { pipeline, events, seed, native, cores, no_fsync, restart, kafka, rows, brokers, .. } = a;
    if brokers.is_some() && !kafka {
        return Err(exit::Usage("--brokers is where --kafka or --latency measure: add one of them".into()).into());
    }
    let pipeline = pipeline.unwrap_or_else(|| "plugins/orders-error-rate/pipeline.toml".into());
    let pipeline = run::load(&pipeline)?;
    let args = bench::BenchArgs { pipeline, events, seed, native, cores, no_fsync, restart, kafka, brokers, rows };
    bench::bench(args)?;
    Ok(Exit::Done)
}

/// `weir bench --latency`: the percentiles of the pipeline's latency, or of a baseline's.
fn latency_command(a: args::Bench) -> Result<Exit> {
    let args::Bench { pipeline, rate, seconds, baseline, rows, brokers, .. } = a;
    let pipeline = pipeline.unwrap_or_else(|| "plugins/orders-alerts/pipeline.toml".into());
    let args = bench::latency::LatencyArgs { pipeline: run::load(&pipeline)?, rate, seconds, baseline, rows, brokers };
    let runtime = run::runtime([&args.pipeline])?;
    let l = bench::latency::measure(args, &runtime)?;
    let what = match baseline {
        None => "produce → output readable",
        Some(bench::latency::Baseline::Broker) => "baseline: the broker alone, produce → readable",
        Some(bench::latency::Baseline::Relay) => "baseline: a bare relay, produce → output readable",
    };
    println!(
        "latency ({what}; {} partitions), {} samples at {rate} orders/s: p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms",
        l.partitions,
        l.samples,
        l.p50 as f64 / 1e3,
        l.p99 as f64 / 1e3,
        l.max as f64 / 1e3
    );
    Ok(Exit::Done)
}

/// `weir inspect`: a checkpoint directory, or the group that runs a pipeline file.
fn inspect_command(a: args::Inspect) -> Result<Exit> {
    match a {
        args::Inspect { checkpoint, json, .. } if checkpoint.is_file() => {
            // A pipeline file: the group that runs it (`docs/scale-out.md`).
            let p = run::load(&checkpoint)?;
            if p.group.is_none() {
                return Err(exit::Usage(format!(
                    "{}: a pipeline file is inspected for its [scale] group, and it has none: give its \
                     checkpoint directory instead",
                    checkpoint.display()
                ))
                .into());
            }
            if json {
                return Err(exit::Usage("--json is for a checkpoint directory, not a group".into()).into());
            }
            print!("{}", crate::scale::inspect(&p)?);
        }
        args::Inspect { checkpoint, json: true, .. } => println!("{}", inspect::inspect_json(&checkpoint)?),
        args::Inspect { checkpoint, batches, json: false } => print!("{}", inspect::inspect(&checkpoint, batches)?),
    }
    Ok(Exit::Done)
}

/// `weir record`: the topic's records to `--out` or stdout, until the end of the topic (or
/// `--max`, or a signal).
fn record_command(a: args::Record) -> Result<Exit> {
    let args::Record {
        brokers,
        topic,
        out,
        from,
        max,
        follow,
        kafka,
        kafka_file,
        registry,
        registry_credentials_file,
        subject,
    } = a;
    let starting = match from.as_str() {
        "earliest" => StartingOffsets::Earliest,
        "latest" => StartingOffsets::Latest,
        ms => StartingOffsets::Timestamp(
            ms.parse().map_err(|_| exit::Usage(format!("--from {ms}: use earliest, latest or epoch milliseconds")))?,
        ),
    };
    let options = record::options(&kafka, kafka_file.as_deref())?;
    let args = record::RecordArgs { brokers, topic, starting, max, follow, options };
    let stop = run::stop_on_signals()?;
    let (n, ids) = match &out {
        Some(path) => {
            let f = File::create(path).with_context(|| format!("cannot create {}", path.display()))?;
            record::record(&args, &mut BufWriter::new(f), stop)?
        }
        None => record::record(&args, &mut BufWriter::new(std::io::stdout().lock()), stop)?,
    };
    eprintln!("recorded {n} records from {}", args.topic);
    if let (Some(url), Some(out)) = (registry, &out) {
        let (file, count) = record::save_schemas(&url, registry_credentials_file, &subject, ids, out)?;
        eprintln!("saved {count} schemas in {}", file.display());
    }
    Ok(Exit::Done)
}

/// `weir schema`: types from an Avro schema file.
fn schema_command(lang: args::SchemaLang, schema: &std::path::Path, out: Option<&std::path::Path>) -> Result<Exit> {
    use weir_schema::avro::{Names, codegen};
    let lang = match lang {
        args::SchemaLang::Rust => codegen::Lang::Rust,
        args::SchemaLang::Python => codegen::Lang::Python,
    };
    let code = if schema.extension().is_some_and(|e| e == "proto") {
        weir_schema::proto_codegen::generate(schema, lang)
            .map_err(|e| exit::Usage(format!("{}: {e}", schema.display())))?
    } else {
        let text = std::fs::read_to_string(schema).with_context(|| format!("cannot read {}", schema.display()))?;
        let parsed =
            weir_schema::avro::parse(&text, &[]).map_err(|e| exit::Usage(format!("{}: {e}", schema.display())))?;
        codegen::generate(&parsed, &Names::of([&parsed]), lang)
    };
    match out {
        Some(path) => std::fs::write(path, code).with_context(|| format!("cannot write {}", path.display()))?,
        None => print!("{code}"),
    }
    Ok(Exit::Done)
}

/// `weir new`: the project, and the commands that build and test it.
fn new_command(a: args::New) -> Result<Exit> {
    let args::New { role, name, lang, dir, sdk, schema } = a;
    let dir = new::new(&new::NewArgs { role, name, lang, dir, sdk, schema })?;
    eprintln!(
        "created {d}; next: weir build {d} && (cd {d} && weir test pipeline.toml --events events.jsonl --expect expected.jsonl)",
        d = dir.display()
    );
    Ok(Exit::Done)
}

/// `weir demo`: until its `--events` are read, or a signal.
fn demo_command(a: args::Demo) -> Result<Exit> {
    let args::Demo { pipeline, rate, events, threshold, progress_json } = a;
    let args = demo::DemoArgs { pipeline: run::load(&pipeline)?, rate, events, threshold, progress_json };
    let runtime = run::runtime([&args.pipeline])?;
    demo::demo(args, &runtime, run::stop_on_signals()?)?;
    Ok(Exit::Done)
}

/// `weir broker`: a mock broker with the pipelines' topics, until Ctrl-C.
fn broker_command(a: args::Broker) -> Result<Exit> {
    let args::Broker { pipelines, port, partitions, topics, orders } = a;
    let pipelines = pipelines.into_iter().map(|p| run::load(&p).map(|l| (p, l))).collect::<Result<Vec<_>>>()?;
    let args = tryout::BrokerArgs { pipelines, port, partitions, topics, orders };
    tryout::broker(args, run::stop_on_signals()?)
}

/// Paces a producer at `rate` records per second: record `n` is due `n / rate` seconds after
/// the start.
struct Pacer {
    started: Instant,
    rate: u64,
}

impl Pacer {
    fn new(rate: u64) -> Self {
        Self { started: Instant::now(), rate: rate.max(1) }
    }

    /// How long until record `n` is due; `None` when it is due now.
    fn ahead(&self, n: u64) -> Option<Duration> {
        let due = Duration::from_secs_f64(n as f64 / self.rate as f64);
        due.checked_sub(self.started.elapsed()).filter(|d| !d.is_zero())
    }

    fn elapsed(&self) -> Duration {
        self.started.elapsed()
    }
}

/// Runs a generator into `out` (its directory created if missing, as a fresh clone has no
/// `out/`), or to standard output without one. The generator writes to the buffer, which only
/// hands whole blocks to the file or stdout.
fn generate<T>(
    out: Option<&std::path::Path>,
    run: impl FnOnce(&mut BufWriter<Box<dyn Write>>) -> std::io::Result<T>,
) -> Result<T> {
    let to: Box<dyn Write> = match out {
        None => Box::new(std::io::stdout().lock()),
        Some(path) => {
            if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
                std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
            }
            Box::new(File::create(path).with_context(|| format!("cannot create {}", path.display()))?)
        }
    };
    let mut w = BufWriter::with_capacity(1 << 20, to);
    let made = run(&mut w)?;
    w.flush()?;
    Ok(made)
}
