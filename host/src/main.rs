//! The `weir` command line.

use std::fs::File;
use std::io::{BufRead, BufReader, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use clap::{Parser, Subcommand};

use weir::driver::{self, Output, RunOptions};
use weir::pipeline::{Pipeline, ReplayFormat, SourceKind, StartingOffsets, Trigger};
use weir::plugin::Runtime;
use weir::progress::{Progress, Summary};

/// Batches allocate and free multi-megabyte buffers every few milliseconds. glibc's malloc hands
/// those to mmap or the heap depending on a threshold that moves with past frees, so throughput
/// depended on the order of batch sizes (measured: 2.56M vs 2.05M events/s from one change to the
/// first batches' sizes). mimalloc reuses such buffers either way.
mod cli;

#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser)]
#[command(name = "weir", version, about = "Stream processing with sandboxed WebAssembly plugins")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run a pipeline, resuming from its checkpoint.
    /// Run pipelines, each resuming from its checkpoint. Several files (or a directory of
    /// them) run side by side in one process, each with its own sandboxes, limits, checkpoint
    /// and progress; one failing does not stop the others.
    Run {
        #[arg(required = true)]
        pipelines: Vec<PathBuf>,
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
    },
    /// Run a pipeline over recorded events, deterministically, and print the rows that reach
    /// its sink as JSON lines.
    Test {
        pipeline: PathBuf,
        /// Recorded events (JSON lines: raw values, or envelopes; see docs/recorded-events.md).
        #[arg(long)]
        events: PathBuf,
        /// Expected rows (JSON lines): exit 1 with a diff if the output differs (in any order).
        #[arg(long)]
        expect: Option<PathBuf>,
        /// Write the rows here instead of stdout.
        #[arg(long)]
        out: Option<PathBuf>,
        /// Where dead letters go (created only if there are any).
        #[arg(long, default_value = "weir-dead-letters.jsonl")]
        dead_letters: PathBuf,
        /// Print one JSON progress object per batch to stderr.
        #[arg(long)]
        progress_json: bool,
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
        #[arg(long)]
        restart: bool,
    },
    /// Show what a checkpoint directory holds: batches, offsets per partition, watermark, state.
    Inspect {
        checkpoint: PathBuf,
        /// How many recent batches to list.
        #[arg(long, default_value_t = 10)]
        batches: usize,
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
        /// Extra librdkafka options, as NAME=VALUE (e.g. security.protocol=SSL).
        #[arg(long = "kafka", value_name = "NAME=VALUE")]
        kafka: Vec<String>,
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
    /// Order events (the schema of shared/bench/gen_orders.py).
    Orders {
        n: u64,
        #[arg(long, default_value_t = 42)]
        seed: u64,
        /// Output file (default: stdout).
        #[arg(long)]
        out: Option<PathBuf>,
    },
}

fn main() {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::try_from_env("WEIR_LOG").unwrap_or_else(|_| "info".into()))
        .with_writer(std::io::stderr)
        .init();
    if let Err(e) = real_main() {
        eprintln!("error: {e:#}");
        std::process::exit(2);
    }
}

fn real_main() -> Result<()> {
    match Cli::parse().command {
        Command::Run { pipelines, checkpoint, progress_json, metrics_addr } => {
            run_all(&pipelines, checkpoint, progress_json, metrics_addr.as_deref())?
        }
        Command::Test { pipeline, events, expect, out, dead_letters, progress_json } => {
            let p = replay(load(&pipeline)?, &events);
            let rows_file = tempfile::NamedTempFile::new().context("cannot create a temporary file")?;
            let writer = BufWriter::new(rows_file.reopen().context("cannot open the temporary file")?);
            let summary = run_once(&p, Output::Lines(Box::new(writer)), Some(dead_letters), progress_json)?;
            let rows = std::fs::read_to_string(rows_file.path()).context("cannot read back the rows")?;
            match out {
                Some(path) => {
                    std::fs::write(&path, &rows).with_context(|| format!("cannot write {}", path.display()))?
                }
                None => std::io::stdout().write_all(rows.as_bytes()).context("cannot write to stdout")?,
            }
            eprintln!("{}", summary.render());
            if let Some(expect) = expect {
                let want =
                    std::fs::read_to_string(&expect).with_context(|| format!("cannot read {}", expect.display()))?;
                let diff = diff_rows(&rows, &want).with_context(|| format!("comparing with {}", expect.display()))?;
                if !diff.is_empty() {
                    eprintln!("{diff}");
                    bail!("output differs from {}", expect.display());
                }
                eprintln!("output matches {}", expect.display());
            }
        }
        Command::Gen { what: GenWhat::Orders { n, seed, out } } => {
            let very_late = match out {
                Some(path) => {
                    let f = File::create(&path).with_context(|| format!("cannot create {}", path.display()))?;
                    let mut w = BufWriter::with_capacity(1 << 20, f);
                    let late = weir::workload::orders(n, seed, &mut w)?;
                    w.flush()?;
                    late
                }
                None => weir::workload::orders(n, seed, &mut BufWriter::new(std::io::stdout().lock()))?,
            };
            eprintln!("events={n} seed={seed} very_late={very_late}");
        }
        Command::Bench { pipeline, latency: false, events, seed, native, cores, no_fsync, restart, .. } => {
            let pipeline = pipeline.unwrap_or_else(|| "plugins/orders-error-rate/pipeline.toml".into());
            let args =
                cli::bench::BenchArgs { pipeline: load(&pipeline)?, events, seed, native, cores, no_fsync, restart };
            cli::bench::bench(args, |p| runtime([p]))?
        }
        Command::Bench { pipeline, latency: true, rate, seconds, .. } => {
            let pipeline = pipeline.unwrap_or_else(|| "plugins/orders-alerts/pipeline.toml".into());
            let args = cli::latency::LatencyArgs { pipeline: load(&pipeline)?, rate, seconds };
            let runtime = runtime([&args.pipeline])?;
            let l = cli::latency::measure(args, &runtime)?;
            println!(
                "latency produce → output readable, {} samples at {rate} orders/s: p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms",
                l.samples,
                l.p50 as f64 / 1e3,
                l.p99 as f64 / 1e3,
                l.max as f64 / 1e3
            );
        }
        Command::Inspect { checkpoint, batches } => print!("{}", cli::inspect::inspect(&checkpoint, batches)?),
        Command::Record { brokers, topic, out, from, max, follow, kafka } => {
            let starting = match from.as_str() {
                "earliest" => StartingOffsets::Earliest,
                "latest" => StartingOffsets::Latest,
                ms => StartingOffsets::Timestamp(
                    ms.parse().with_context(|| format!("--from {ms}: use earliest, latest or epoch milliseconds"))?,
                ),
            };
            let options = kafka
                .iter()
                .map(|kv| match kv.split_once('=') {
                    Some((k, v)) => Ok((k.to_string(), v.to_string())),
                    None => bail!("--kafka {kv}: write NAME=VALUE"),
                })
                .collect::<Result<Vec<_>>>()?;
            let args = cli::record::RecordArgs { brokers, topic, starting, max, follow, options };
            let stop = stop_on_signals()?;
            let n = match &out {
                Some(path) => {
                    let f = File::create(path).with_context(|| format!("cannot create {}", path.display()))?;
                    cli::record::record(&args, &mut BufWriter::new(f), stop)?
                }
                None => cli::record::record(&args, &mut BufWriter::new(std::io::stdout().lock()), stop)?,
            };
            eprintln!("recorded {n} records from {}", args.topic);
        }
        Command::Demo { pipeline, rate, events, threshold, progress_json } => {
            let args = cli::demo::DemoArgs { pipeline: load(&pipeline)?, rate, events, threshold, progress_json };
            let runtime = runtime([&args.pipeline])?;
            cli::demo::demo(args, &runtime, stop_on_signals()?)?;
        }
    }
    Ok(())
}

/// Runs each pipeline on a thread of its own, sharing the Wasm engine and its compiled-component
/// cache. Every pipeline's failure is reported; the run fails if any did.
fn run_all(paths: &[PathBuf], checkpoint: Option<PathBuf>, progress_json: bool, metrics: Option<&str>) -> Result<()> {
    let mut files = Vec::new();
    for p in paths {
        if p.is_dir() {
            let mut found: Vec<PathBuf> = std::fs::read_dir(p)
                .with_context(|| format!("cannot list {}", p.display()))?
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|f| f.extension().is_some_and(|x| x == "toml"))
                .collect();
            found.sort();
            files.extend(found);
        } else {
            files.push(p.clone());
        }
    }
    if files.len() != 1 && checkpoint.is_some() {
        bail!("--checkpoint names one checkpoint: give it with a single pipeline (or set checkpoint.location in each)");
    }
    let pipelines = files.iter().map(|f| load(f).map(|p| (p, f.clone()))).collect::<Result<Vec<_>>>()?;
    let mut names = std::collections::HashSet::new();
    for (p, f) in &pipelines {
        if !names.insert(p.name.clone()) {
            bail!("{}: another pipeline is also named `{}`; names must differ", f.display(), p.name);
        }
    }
    let runtime = runtime(pipelines.iter().map(|(p, _)| p))?;
    if let Some(addr) = metrics {
        let bound = cli::metrics::serve(addr, runtime.clone())?;
        eprintln!("metrics at http://{bound}/metrics");
    }
    let stop = stop_on_signals()?;
    let threads: Vec<_> = pipelines
        .into_iter()
        .map(|(p, file)| {
            let checkpoint = checkpoint.clone().unwrap_or_else(|| driver::default_checkpoint(&p, &file));
            let opts = RunOptions {
                output: Output::Pipeline,
                checkpoint,
                dead_letters: None,
                progress: Progress::new(&p.name, progress_json, Some(Duration::from_secs(2))),
                stop: stop.clone(),
                native: false,
                fsync: true,
            };
            let runtime = runtime.clone();
            let thread = std::thread::Builder::new().name(format!("pipeline {}", p.name)).spawn(move || {
                match driver::run(&p, &runtime, opts) {
                    Ok(summary) => {
                        eprintln!("[{}] {}", p.name, summary.render());
                        true
                    }
                    Err(e) => {
                        eprintln!("error: pipeline {}: {:#}", p.name, anyhow::Error::from(e));
                        false
                    }
                }
            });
            thread.context("cannot start a pipeline thread")
        })
        .collect::<Result<_>>()?;
    let mut failed = 0;
    for t in threads {
        if !t.join().unwrap_or(false) {
            failed += 1;
        }
    }
    if failed > 0 {
        bail!("{failed} pipeline(s) failed");
    }
    Ok(())
}

/// A flag raised by SIGTERM or Ctrl-C: the run finishes (or abandons) its batch and exits 0.
/// A second signal exits at once, for when the first does not seem to work.
fn stop_on_signals() -> Result<Arc<AtomicBool>> {
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGTERM, signal_hook::consts::SIGINT] {
        signal_hook::flag::register_conditional_shutdown(sig, 130, stop.clone()).context("cannot handle signals")?;
        signal_hook::flag::register(sig, stop.clone()).context("cannot handle signals")?;
    }
    Ok(stop)
}

fn load(path: &Path) -> Result<Pipeline> {
    Ok(Pipeline::load(path)?)
}

/// The Wasm runtime for these pipelines: fuel metering on if any stage of them sets a fuel limit.
fn runtime<'a>(pipelines: impl IntoIterator<Item = &'a Pipeline>) -> Result<Arc<Runtime>> {
    let fuel = pipelines.into_iter().any(Pipeline::uses_fuel);
    Ok(Runtime::new(Runtime::default_cache_dir(), fuel)?)
}

/// The pipeline, reading `events` in bounded batches as fast as it can (the replay of a test).
pub(crate) fn replay(mut p: Pipeline, events: &Path) -> Pipeline {
    p.source.kind = SourceKind::Replay { path: events.to_path_buf(), format: ReplayFormat::Auto };
    p.trigger = Trigger::AvailableNow;
    p
}

/// Runs with a scratch checkpoint: a test or a benchmark starts from nothing, every time.
fn run_once(p: &Pipeline, output: Output, dead_letters: Option<PathBuf>, progress_json: bool) -> Result<Summary> {
    let scratch = driver::scratch_checkpoint().context("cannot create a scratch checkpoint directory")?;
    let progress = Progress::new(&p.name, progress_json, Some(Duration::from_secs(2)));
    let opts = RunOptions {
        output,
        checkpoint: scratch.path().to_path_buf(),
        dead_letters,
        progress,
        stop: stop_on_signals()?,
        native: false,
        fsync: true,
    };
    driver::run(p, &runtime([p])?, opts).with_context(|| format!("pipeline {}", p.name))
}

/// Compares rows as multisets of JSON values; returns a readable diff, empty when equal.
fn diff_rows(got: &str, want: &str) -> Result<String> {
    fn canon(text: &str, what: &str) -> Result<Vec<String>> {
        let mut v = Vec::new();
        for (i, line) in BufReader::new(text.as_bytes()).lines().enumerate() {
            let line = line?;
            if line.trim().is_empty() {
                continue;
            }
            let value: serde_json::Value =
                serde_json::from_str(&line).with_context(|| format!("{what} line {} is not JSON", i + 1))?;
            v.push(value.to_string());
        }
        v.sort();
        Ok(v)
    }
    let (got, want) = (canon(got, "output")?, canon(want, "expected")?);
    // Both sorted: walk them together like a merge.
    let (mut missing, mut unexpected) = (Vec::new(), Vec::new());
    let (mut g, mut w) = (got.iter().peekable(), want.iter().peekable());
    loop {
        match (g.peek(), w.peek()) {
            (Some(a), Some(b)) if a == b => {
                g.next();
                w.next();
            }
            (Some(a), Some(b)) if a < b => unexpected.extend(g.next()),
            (Some(_), Some(_)) | (None, Some(_)) => missing.extend(w.next()),
            (Some(_), None) => unexpected.extend(g.next()),
            (None, None) => break,
        }
    }
    let mut out = String::new();
    for (label, rows) in [("- expected, not produced", &missing), ("+ produced, not expected", &unexpected)] {
        if !rows.is_empty() {
            out.push_str(&format!("{label} ({}):\n", rows.len()));
            for r in rows.iter().take(20) {
                out.push_str(&format!("  {r}\n"));
            }
            if rows.len() > 20 {
                out.push_str(&format!("  ... and {} more\n", rows.len() - 20));
            }
        }
    }
    Ok(out)
}
