//! The `weir` command line: parsing, logging, exit codes, and one function per command. The
//! commands that are more than a call into the engine have a file each.

mod bench;
mod broker;
mod build;
mod client;
mod demo;
mod exit;
mod inspect;
mod metrics;
mod new;
mod projects;
mod record;
mod run;
mod test;

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
use clap::{Parser, Subcommand};

use crate::pipeline::StartingOffsets;
use exit::Exit;

#[derive(Parser)]
#[command(name = "weir", version, about = "Stream processing with sandboxed WebAssembly plugins")]
struct Cli {
    #[command(subcommand)]
    command: Command,
    /// The `weir serve` to talk to, for the service commands (deploy, list, status, ...).
    #[arg(long, global = true, env = "WEIR_SERVER", value_name = "URL")]
    server: Option<String>,
    /// A file whose first line is your token, for the service commands.
    #[arg(long, global = true, env = "WEIR_TOKEN_FILE", value_name = "FILE")]
    token_file: Option<PathBuf>,
    /// PEM certificates to trust for an `https://` service (default: Mozilla's roots).
    #[arg(long, global = true, env = "WEIR_CA_FILE", value_name = "FILE")]
    ca_file: Option<PathBuf>,
}

#[derive(Subcommand)]
enum Command {
    /// Run pipelines, each resuming from its checkpoint. Several files (or a directory of
    /// them) run side by side in one process, each with its own sandboxes, limits, checkpoint
    /// and progress; one failing does not stop the others. A project (a directory with a
    /// weir.toml) runs its flows in dependency order.
    Run {
        #[arg(required = true)]
        pipelines: Vec<PathBuf>,
        /// Project only: reset this dataset and every dataset downstream of it, with the
        /// checkpoints of the flows on them, and recompute them from their sources.
        #[arg(long, value_name = "DATASET")]
        full_refresh: Vec<String>,
        /// Checkpoint directory (default: checkpoint.location, else .weir/NAME beside the file);
        /// only with a single pipeline.
        #[arg(long)]
        checkpoint: Option<PathBuf>,
        /// Print one JSON progress object per batch to stderr.
        #[arg(long)]
        progress_json: bool,
        /// Serve plugin metrics for Prometheus at http://ADDR/metrics (e.g. 127.0.0.1:9464).
        #[arg(long, value_name = "ADDR")]
        metrics_addr: Option<String>,
        /// At the end of bounded input, emit every window still open, whatever the pipeline
        /// file's `watermark.flush_at_end` says (docs/semantics.md).
        #[arg(long)]
        flush: bool,
        /// Share the pipeline with every process started with the same group: a Kafka consumer
        /// group assigns each process its tasks, one per input partition, and moves them when
        /// processes come and go (as `[scale] group` in the file; docs/scale-out.md).
        #[arg(long, value_name = "GROUP")]
        group: Option<String>,
    },
    /// Run a pipeline over recorded events, deterministically, and print the rows that reach
    /// its sink as JSON lines. A project: --events FLOW=FILE for each flow with a source of its
    /// own, --expect DATASET=FILE for each dataset to check.
    Test {
        pipeline: PathBuf,
        /// Recorded events (JSON lines: raw values, or envelopes; see docs/recorded-events.md).
        #[arg(long, required = true)]
        events: Vec<String>,
        /// Expected rows (JSON lines): exit 1 with a diff if the output differs (in any order).
        #[arg(long)]
        expect: Vec<String>,
        /// Write the rows here instead of stdout.
        #[arg(long)]
        out: Option<PathBuf>,
        /// Where dead letters go (created only if there are any).
        #[arg(long, default_value = "weir-dead-letters.jsonl")]
        dead_letters: PathBuf,
        /// Print one JSON progress object per batch to stderr.
        #[arg(long)]
        progress_json: bool,
        /// Replay safety: run again with this many crashes at random batch boundaries (each
        /// after a batch was delivered and before it was committed), restarting from the
        /// checkpoint, and fail with the first differing row if the output differs.
        #[arg(long, default_value_t = 0)]
        restarts: u32,
        /// Run the pipeline's own sink plugin (its writable directory grants moved into fresh
        /// directories under DIR) instead of printing the rows, and check that what it wrote
        /// there, as JSON lines, is each delivered row once. With --restarts, after the crashes
        /// too: a sink that writes a re-delivered batch twice fails.
        #[arg(long, value_name = "DIR")]
        sink: Option<PathBuf>,
        /// The seed of the crash schedule (default: from the clock; printed either way).
        #[arg(long)]
        restart_seed: Option<u64>,
    },
    /// Generate a reference workload.
    Gen {
        #[command(subcommand)]
        what: GenWhat,
    },
    /// Measure a pipeline's throughput over generated order events, or with `--latency` a
    /// continuous pipeline's end-to-end latency on an embedded broker.
    Bench {
        /// The pipeline to measure (default: plugins/orders-error-rate/pipeline.toml, or
        /// plugins/orders-alerts/pipeline.toml with --latency).
        pipeline: Option<PathBuf>,
        /// How many events to generate.
        #[arg(long, default_value_t = 1_000_000)]
        events: u64,
        #[arg(long, default_value_t = 42)]
        seed: u64,
        /// Measure latency (produce → output readable) instead of throughput.
        #[arg(long)]
        latency: bool,
        /// With --latency: orders produced per second.
        #[arg(long, default_value_t = 20_000)]
        rate: u64,
        /// With --latency: how long to produce.
        #[arg(long, default_value_t = 10)]
        seconds: u64,
        /// With --latency: time a baseline instead of the pipeline, with the same producer and
        /// reader: `broker` reads the input topic itself, `relay` passes the same orders on with
        /// a bare consumer and producer (the pipeline's Kafka settings, no engine).
        #[arg(long, requires = "latency", value_enum)]
        baseline: Option<bench::latency::Baseline>,
        /// Parse and aggregate with the host-code baseline (the same logic as the orders-json
        /// and error-rate plugins) instead of the Wasm plugins.
        #[arg(long)]
        native: bool,
        /// Parser instances working on each batch side by side (default: the pipeline's
        /// `parse.parallelism`).
        #[arg(long)]
        cores: Option<usize>,
        /// Do not sync the checkpoint at each batch (to measure what durability costs).
        #[arg(long)]
        no_fsync: bool,
        /// Run half the events, then restart on the rest and time the first batch.
        #[arg(long, conflicts_with = "kafka")]
        restart: bool,
        /// Produce the events into the embedded broker first, then read them from there
        /// (the pipeline's own Kafka source if it has one, else a Kafka source in place of its
        /// file).
        #[arg(long)]
        kafka: bool,
        /// Also write the rows to this file (JSON lines), to check them.
        #[arg(long)]
        rows: Option<std::path::PathBuf>,
    },
    /// Check a project without reading data: its files, its graph, every plugin loaded for
    /// its stage's role; print the graph.
    Validate { project: PathBuf },
    /// Write a project's graph as Graphviz DOT (stdout, or --out FILE and beside it FILE.svg
    /// when Graphviz is installed), with each dataset's rows after a run.
    Graph {
        project: PathBuf,
        #[arg(long)]
        out: Option<PathBuf>,
    },
    /// Print a project's table dataset, one row per line (or the row of KEY), beside a running
    /// project.
    Query { project: PathBuf, table: String, key: Option<String> },
    /// Host many tenants' pipelines in one long-running process, behind an HTTP/JSON API and a
    /// web console (docs/serve.md). Pipelines that were running resume from their checkpoints.
    Serve {
        /// Where the registry, the plugins, the tenants' files and checkpoints live.
        #[arg(long)]
        data: PathBuf,
        /// Address to listen on (port 0 picks one; the chosen one is printed).
        #[arg(long, default_value = "127.0.0.1:8080")]
        listen: String,
        /// A file whose first line is the admin token (never give a token on the command line).
        #[arg(long, value_name = "FILE")]
        admin_token_file: PathBuf,
        /// A `host:port` tenants' pipelines may connect to (Kafka brokers, plugin network and
        /// HTTP grants); repeat for more. Nothing else is reachable.
        #[arg(long = "allow-network", value_name = "HOST:PORT")]
        allow_network: Vec<String>,
        /// Serve HTTPS with this certificate chain (PEM, leaf first); with --tls-key.
        #[arg(long, value_name = "FILE", requires = "tls_key")]
        tls_cert: Option<PathBuf>,
        /// The certificate's private key (PEM).
        #[arg(long, value_name = "FILE", requires = "tls_cert")]
        tls_key: Option<PathBuf>,
    },
    #[command(flatten)]
    Remote(client::Remote),
    /// Show what a checkpoint directory holds: batches, offsets per partition, watermark, state.
    /// Given a pipeline file with `[scale] group`: the group's members, the tasks each holds,
    /// and each task's epoch, offset, lag and watermark, read from Kafka.
    Inspect {
        #[arg(value_name = "CHECKPOINT|PIPELINE.toml")]
        checkpoint: PathBuf,
        /// How many recent batches to list.
        #[arg(long, default_value_t = 10)]
        batches: usize,
        /// One JSON object: the checkpoint, its last commit and the last batch's progress
        /// record (`--progress-json`'s shape).
        #[arg(long)]
        json: bool,
    },
    /// Capture a Kafka topic's records into the recorded-events format, for `weir test`.
    Record {
        /// Kafka brokers (bootstrap.servers).
        #[arg(long)]
        brokers: String,
        #[arg(long)]
        topic: String,
        /// Output file (default: stdout).
        #[arg(long)]
        out: Option<PathBuf>,
        /// Start at the earliest record, the latest, or a timestamp (epoch ms).
        #[arg(long, default_value = "earliest")]
        from: String,
        /// Stop after this many records.
        #[arg(long)]
        max: Option<u64>,
        /// Keep recording new records until Ctrl-C (default: stop at the end of the topic).
        #[arg(long)]
        follow: bool,
        /// Extra librdkafka options, as NAME=VALUE (e.g. security.protocol=SSL). Not for
        /// credentials: those go in --kafka-file, never on a command line.
        #[arg(long = "kafka", value_name = "NAME=VALUE")]
        kafka: Vec<String>,
        /// A file of librdkafka options, one NAME=VALUE per line (`#` starts a comment): where
        /// credentials (sasl.password, ssl.key.password, ...) go.
        #[arg(long, value_name = "FILE")]
        kafka_file: Option<PathBuf>,
    },
    /// Create a plugin project that builds and passes `weir test` as it is: source with a unit
    /// test, a pipeline file, recorded events and the rows they give.
    New {
        #[arg(value_enum)]
        role: new::Role,
        /// The plugin's name (lowercase, `-` and `_`), also the directory made for it.
        name: String,
        #[arg(long, value_enum, default_value = "rust")]
        lang: new::Lang,
        /// The directory to create (default: NAME).
        #[arg(long)]
        dir: Option<PathBuf>,
        /// Rust: the guest SDK's directory (a Weir checkout's `guest-sdk/`; default:
        /// $WEIR_GUEST_SDK, else the published `weir-guest` crate).
        #[arg(long)]
        sdk: Option<PathBuf>,
    },
    /// Build a plugin project (a Rust crate, or a Python module) into a component.
    Build {
        /// The project (default: the current directory).
        #[arg(default_value = ".")]
        dir: PathBuf,
        /// Where to write the component (default: DIR/NAME.wasm).
        #[arg(short, long)]
        out: Option<PathBuf>,
    },
    /// The demo: an embedded Kafka broker, generated orders flowing into it, and the orders
    /// error-rate pipeline reading them through the Wasm plugins, printing windows and alerts.
    Demo {
        /// The pipeline (its Kafka source is pointed at the embedded broker).
        #[arg(default_value = "plugins/orders-error-rate/kafka.toml")]
        pipeline: PathBuf,
        /// Orders produced per second (1000 orders are one simulated second).
        #[arg(long, default_value_t = 20_000)]
        rate: u64,
        /// Produce this many orders, wait until the pipeline has read them, and stop.
        #[arg(long)]
        events: Option<u64>,
        /// Alert when a window's error rate is above this fraction.
        #[arg(long, default_value_t = 0.05)]
        threshold: f64,
        /// Print one JSON progress object per batch to stderr.
        #[arg(long)]
        progress_json: bool,
    },
}

#[derive(Subcommand)]
enum GenWhat {
    /// Order events (the reference order workload's schema and statistics).
    Orders {
        n: u64,
        #[arg(long, default_value_t = 42)]
        seed: u64,
        /// Output file (default: stdout).
        #[arg(long)]
        out: Option<PathBuf>,
    },
    /// The user table the orders refer to: one keyed record per user (a `[join]` table).
    Users {
        #[arg(long, default_value_t = 42)]
        seed: u64,
        /// Output file (default: stdout).
        #[arg(long)]
        out: Option<PathBuf>,
    },
}

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
    init_logging(matches!(cli.command, Command::Serve { .. }));
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

fn dispatch(command: Command, service: client::Service) -> Result<Exit> {
    match command {
        Command::Remote(r) => client::run(service, r),
        Command::Run { pipelines, checkpoint, progress_json, metrics_addr, flush, full_refresh, group } => {
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
                    Err(exit::Usage("a project runs on its own: give `weir run` one project, or pipeline files".into())
                        .into())
                }
                _ if !full_refresh.is_empty() => {
                    Err(exit::Usage("--full-refresh resets a project's datasets: give it a project".into()).into())
                }
                _ => run::run_all(&pipelines, checkpoint, progress_json, metrics_addr.as_deref(), flush, group),
            }
        }
        Command::Validate { project } => projects::validate(&project),
        Command::Serve { data, listen, admin_token_file, allow_network, tls_cert, tls_key } => {
            let tls = tls_cert.zip(tls_key);
            crate::serve::serve(crate::serve::Options { data, listen, admin_token_file, allow_network, tls }).map_err(
                |e| match e {
                    crate::serve::ServeError::Setup(m) => anyhow::Error::from(exit::Usage(m)),
                    e => e.into(),
                },
            )?;
            Ok(Exit::Done)
        }
        Command::Graph { project, out } => projects::graph(&project, out.as_deref()),
        Command::Query { project, table, key } => projects::query(&project, &table, key.as_deref()),
        Command::Test { pipeline, events, expect, out, dead_letters, progress_json, restarts, restart_seed, sink } => {
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
        Command::Gen { what: GenWhat::Orders { n, seed, out } } => {
            let very_late = generate(out.as_deref(), |w| crate::workload::orders(n, seed, w))?;
            eprintln!("events={n} seed={seed} very_late={very_late}");
            Ok(Exit::Done)
        }
        Command::Gen { what: GenWhat::Users { seed, out } } => {
            let users = generate(out.as_deref(), |w| crate::workload::users(seed, w))?;
            eprintln!("users={users} seed={seed}");
            Ok(Exit::Done)
        }
        Command::Bench {
            pipeline,
            latency: false,
            events,
            seed,
            native,
            cores,
            no_fsync,
            restart,
            kafka,
            rows,
            ..
        } => {
            let pipeline = pipeline.unwrap_or_else(|| "plugins/orders-error-rate/pipeline.toml".into());
            let pipeline = run::load(&pipeline)?;
            let args = bench::BenchArgs { pipeline, events, seed, native, cores, no_fsync, restart, kafka, rows };
            bench::bench(args)?;
            Ok(Exit::Done)
        }
        Command::Bench { pipeline, latency: true, rate, seconds, baseline, rows, .. } => {
            let pipeline = pipeline.unwrap_or_else(|| "plugins/orders-alerts/pipeline.toml".into());
            let args = bench::latency::LatencyArgs { pipeline: run::load(&pipeline)?, rate, seconds, baseline, rows };
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
        Command::Inspect { checkpoint, json, .. } if checkpoint.is_file() => {
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
            Ok(Exit::Done)
        }
        Command::Inspect { checkpoint, json: true, .. } => {
            println!("{}", inspect::inspect_json(&checkpoint)?);
            Ok(Exit::Done)
        }
        Command::Inspect { checkpoint, batches, json: false } => {
            print!("{}", inspect::inspect(&checkpoint, batches)?);
            Ok(Exit::Done)
        }
        Command::Record { brokers, topic, out, from, max, follow, kafka, kafka_file } => {
            let starting = match from.as_str() {
                "earliest" => StartingOffsets::Earliest,
                "latest" => StartingOffsets::Latest,
                ms => StartingOffsets::Timestamp(
                    ms.parse()
                        .map_err(|_| exit::Usage(format!("--from {ms}: use earliest, latest or epoch milliseconds")))?,
                ),
            };
            let options = record::options(&kafka, kafka_file.as_deref())?;
            let args = record::RecordArgs { brokers, topic, starting, max, follow, options };
            let stop = run::stop_on_signals()?;
            let n = match &out {
                Some(path) => {
                    let f = File::create(path).with_context(|| format!("cannot create {}", path.display()))?;
                    record::record(&args, &mut BufWriter::new(f), stop)?
                }
                None => record::record(&args, &mut BufWriter::new(std::io::stdout().lock()), stop)?,
            };
            eprintln!("recorded {n} records from {}", args.topic);
            Ok(Exit::Done)
        }
        Command::New { role, name, lang, dir, sdk } => {
            let dir = new::new(&new::NewArgs { role, name, lang, dir, sdk })?;
            eprintln!(
                "created {d}; next: weir build {d} && (cd {d} && weir test pipeline.toml --events events.jsonl --expect expected.jsonl)",
                d = dir.display()
            );
            Ok(Exit::Done)
        }
        Command::Build { dir, out } => {
            build::build(&dir, out.as_deref())?;
            Ok(Exit::Done)
        }
        Command::Demo { pipeline, rate, events, threshold, progress_json } => {
            let args = demo::DemoArgs { pipeline: run::load(&pipeline)?, rate, events, threshold, progress_json };
            let runtime = run::runtime([&args.pipeline])?;
            demo::demo(args, &runtime, run::stop_on_signals()?)?;
            Ok(Exit::Done)
        }
    }
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
