//! The `weir` command line.

use std::fs::File;
use std::io::{BufRead, BufReader, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use clap::{Parser, Subcommand};

use weir::driver::{self, Output, RunOptions};
use weir::pipeline::{Pipeline, ReplayFormat, Trigger};
use weir::plugin::Runtime;
use weir::progress::{Progress, Summary};

/// Batches allocate and free multi-megabyte buffers every few milliseconds. glibc's malloc hands
/// those to mmap or the heap depending on a threshold that moves with past frees, so throughput
/// depended on the order of batch sizes (measured: 2.56M vs 2.05M events/s from one change to the
/// first batches' sizes). mimalloc reuses such buffers either way.
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
    Run {
        pipeline: PathBuf,
        /// Checkpoint directory (default: checkpoint.location, else .weir/NAME beside the file).
        #[arg(long)]
        checkpoint: Option<PathBuf>,
        /// Print one JSON progress object per batch to stderr.
        #[arg(long)]
        progress_json: bool,
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
    /// Measure a pipeline's throughput over generated order events.
    Bench {
        /// The pipeline to measure.
        #[arg(default_value = "plugins/orders-error-rate/pipeline.toml")]
        pipeline: PathBuf,
        /// How many events to generate.
        #[arg(long, default_value_t = 1_000_000)]
        events: u64,
        #[arg(long, default_value_t = 42)]
        seed: u64,
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
        Command::Run { pipeline, checkpoint, progress_json } => {
            let p = load(&pipeline)?;
            let checkpoint = checkpoint.unwrap_or_else(|| driver::default_checkpoint(&p, &pipeline));
            let progress = Progress::new(&p.name, progress_json, Some(Duration::from_secs(2)));
            let opts = RunOptions { output: Output::Pipeline, checkpoint, dead_letters: None, progress };
            let summary = driver::run(&p, &runtime()?, opts).with_context(|| format!("pipeline {}", p.name))?;
            eprintln!("{}", summary.render());
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
        Command::Bench { pipeline, events, seed } => bench(&pipeline, events, seed)?,
    }
    Ok(())
}

fn load(path: &Path) -> Result<Pipeline> {
    Ok(Pipeline::load(path)?)
}

fn runtime() -> Result<Arc<Runtime>> {
    Ok(Runtime::new(Runtime::default_cache_dir())?)
}

/// The pipeline, reading `events` in bounded batches as fast as it can (the replay of a test).
fn replay(mut p: Pipeline, events: &Path) -> Pipeline {
    p.source.path = events.to_path_buf();
    p.source.format = ReplayFormat::Auto;
    p.trigger = Trigger::AvailableNow;
    p
}

/// Runs with a scratch checkpoint: a test or a benchmark starts from nothing, every time.
fn run_once(p: &Pipeline, output: Output, dead_letters: Option<PathBuf>, progress_json: bool) -> Result<Summary> {
    let scratch = driver::scratch_checkpoint().context("cannot create a scratch checkpoint directory")?;
    let progress = Progress::new(&p.name, progress_json, Some(Duration::from_secs(2)));
    let opts = RunOptions { output, checkpoint: scratch.path().to_path_buf(), dead_letters, progress };
    driver::run(p, &runtime()?, opts).with_context(|| format!("pipeline {}", p.name))
}

fn bench(pipeline: &Path, events: u64, seed: u64) -> Result<()> {
    let dir = tempfile::tempdir().context("cannot create a temporary directory")?;
    let file = dir.path().join("orders.jsonl");
    {
        let mut w = BufWriter::with_capacity(1 << 20, File::create(&file)?);
        weir::workload::orders(events, seed, &mut w)?;
        w.flush()?;
    }
    let p = replay(load(pipeline)?, &file);
    // Warm the compiled-component cache so the measurement is the pipeline, not the compiler.
    runtime()?;
    let s = run_once(&p, Output::Lines(Box::new(std::io::sink())), Some(dir.path().join("dl.jsonl")), false)?;
    println!(
        "{}: {} events in {:.3}s = {:.0} events/s ({} windows, {} late)",
        p.name, s.input_rows, s.elapsed_s, s.rows_per_s, s.windows_emitted, s.late_events
    );
    Ok(())
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
