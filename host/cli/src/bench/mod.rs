//! `weir bench`: a pipeline's throughput over generated order events (the project's generator,
//! in the reference order workload's schema and statistics), with what a user compares engines
//! by: events/s, events per CPU-second (the per-core figure, whatever the threads), peak RSS.
//! Variants answer the performance questions one at a time: `--native` (the same logic as host
//! code: what the sandbox costs), `--cores` (parse parallelism), `--no-fsync` (what a durable
//! checkpoint at every batch costs), `--restart` (time from a restart to its first batch) and
//! `--kafka` (the events read from the embedded broker, not a file: `kafka.rs`). `--latency` is
//! another measurement: `latency.rs`.
//!
//! The pipeline's own sink is replaced: its rows are hashed (the digest printed shows that two
//! variants computed the same rows in the same order) and, with `--rows`, written to a file.

mod kafka;
pub(super) mod latency;

use std::fs::File;
use std::io::{BufRead, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use anyhow::{Context, Result, bail};

use crate::driver::{self, Flush, Output, RunOptions, Stages};
use crate::pipeline::{Pipeline, Trigger};
use crate::progress::{Progress, Summary};

pub(super) struct BenchArgs {
    pub pipeline: Pipeline,
    pub events: u64,
    pub seed: u64,
    pub native: bool,
    pub cores: Option<usize>,
    pub no_fsync: bool,
    pub restart: bool,
    pub kafka: bool,
    /// `--brokers`: a broker the user runs, for `kafka`.
    pub brokers: Option<String>,
    /// Where the rows go, besides the digest.
    pub rows: Option<PathBuf>,
}

pub(super) fn bench(mut a: BenchArgs) -> Result<()> {
    if let Some(c) = a.cores {
        a.pipeline.parse_parallelism = c.max(1);
    }
    let dir = tempfile::tempdir().context("cannot create a temporary directory")?;
    let file = dir.path().join("orders.jsonl");
    // With --restart, the second half waits in `rest` until the restart.
    let rest = dir.path().join("rest.jsonl");
    if !a.kafka {
        write_orders(&a, dir.path(), &file, &rest)?;
    }
    let (p, input) = if a.kafka {
        let mut p = a.pipeline;
        let input = kafka::prepare(&mut p, a.events, a.seed, a.brokers.as_deref())?;
        println!(
            "{} orders produced into the broker ({} partitions) in {:.3}s",
            input.orders, input.partitions, input.produce_s
        );
        (p, Some(input))
    } else {
        (super::test::replay(a.pipeline, &file), None)
    };
    let continuous = matches!(p.trigger, Trigger::Continuous { .. });
    if continuous && (a.native || input.is_none()) {
        bail!("a continuous pipeline is measured with --kafka, on its Wasm plugins");
    }
    // Warm the compiled-component cache so the measurement is the pipeline, not the compiler.
    super::run::runtime([&p])?;

    let runs = Runs {
        p: &p,
        native: a.native,
        input: input.as_ref(),
        continuous,
        dir: dir.path(),
        checkpoint: dir.path().join("checkpoint"),
        digest: Digest::new(a.rows.as_deref())?,
        stop: Arc::new(AtomicBool::new(false)),
    };
    // With --restart the first half leaves its trailing windows open, as a run that goes on does.
    let cpu = cpu_seconds();
    let s = runs.run(!a.no_fsync, !a.restart)?;
    let cpu = cpu_seconds() - cpu;
    print_throughput(&p, &described(&p, a.native, a.no_fsync, a.kafka), &s, cpu, &runs.digest)?;

    if let Some(input) = input.as_ref().filter(|_| !continuous) {
        print_bare_read(input)?;
    }

    if a.restart {
        restart(&runs, &file, &rest)?;
    }
    Ok(())
}

/// What every run of the measured pipeline shares: the pipeline and its input, where its
/// checkpoint and dead letters go, the digest its rows go to, and the flag that stops it.
struct Runs<'a> {
    p: &'a Pipeline,
    native: bool,
    /// `--kafka`: the orders in the embedded broker.
    input: Option<&'a kafka::KafkaInput>,
    continuous: bool,
    dir: &'a Path,
    checkpoint: PathBuf,
    digest: Digest,
    stop: Arc<AtomicBool>,
}

impl Runs<'_> {
    /// One run to the end of the input (a continuous one: until its parser has taken in every
    /// order), on the Wasm plugins or the native stages.
    fn run(&self, fsync: bool, flush: bool) -> Result<Summary> {
        let p = self.p;
        let output = Output::Lines(Box::new(self.digest.clone()));
        let (stages, watcher) = if self.native {
            (crate::native::stages(p, output, &self.stop)?, None)
        } else {
            let runtime = super::run::runtime([p])?;
            let watcher = self
                .input
                .filter(|_| self.continuous)
                .map(|i| kafka::stop_when_parsed(&runtime, &p.name, i.orders, &self.stop));
            (Stages::wasm(p, &runtime, output, &self.stop)?, watcher)
        };
        let opts = RunOptions {
            checkpoint: self.checkpoint.clone(),
            dead_letters: Some(self.dir.join("dead-letters.jsonl")),
            progress: Progress::new(&p.name, false, None),
            stop: self.stop.clone(),
            fsync,
            flush: Flush::AsConfigured { default: flush },
            own_share: true,
            ledger: None,
        };
        let summary = driver::run(p, stages, opts).with_context(|| format!("pipeline {}", p.name));
        if let Some(w) = watcher {
            self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
            let _ = w.join();
        }
        summary
    }
}

/// What was measured, for the report: the plugins (and the stage that follows the parser) or the
/// native baseline, and the variant.
fn described(p: &Pipeline, native: bool, no_fsync: bool, kafka: bool) -> String {
    let stage = match (p.stateful.as_ref().map(|s| &s.keyed), &p.join) {
        (Some(crate::pipeline::Keyed::Process(_)), _) => "process",
        (Some(crate::pipeline::Keyed::Window(_)), _) => "aggregate",
        (_, Some(_)) => "join",
        _ => "transform",
    };
    let what = match (native, no_fsync) {
        (true, _) => "native parse + aggregate".to_string(),
        (false, true) => "Wasm, checkpoint not synced".to_string(),
        (false, false) => format!("Wasm parse + {stage}"),
    };
    if kafka { format!("{what}, from Kafka") } else { what }
}

/// The measured run's line: throughput, per CPU-second, peak RSS and the rows' digest.
fn print_throughput(p: &Pipeline, what: &str, s: &Summary, cpu: f64, digest: &Digest) -> Result<()> {
    println!(
        "{} ({what}, parse parallelism {}): {} events in {:.3}s = {:.0} events/s, {:.0} events per CPU-second \
         ({:.2} cores busy), {} windows, {} late; peak RSS {} MB; rows digest {}",
        p.name,
        p.parse_parallelism,
        s.input_rows,
        s.elapsed_s,
        s.rows_per_s,
        s.input_rows as f64 / cpu.max(1e-9),
        cpu / s.elapsed_s.max(1e-9),
        s.windows_emitted,
        s.late_events,
        peak_rss_kb() >> 10,
        digest.hex()?,
    );
    Ok(())
}

/// `--kafka`: the same records read by a bare consumer, to set the pipeline's figure against.
fn print_bare_read(input: &kafka::KafkaInput) -> Result<()> {
    let cpu = cpu_seconds();
    let secs = kafka::bare_read(input)?;
    let cpu = cpu_seconds() - cpu;
    let n = input.orders as f64;
    println!(
        "bare consumer (the pipeline's consumer settings, no engine), same broker: {} records in {secs:.3}s = \
         {:.0} records/s, {:.0} per CPU-second",
        input.orders,
        n / secs.max(1e-9),
        n / cpu.max(1e-9),
    );
    Ok(())
}

/// `--restart`: the rest of the events arrive; a new engine (compiled components from the cache,
/// as after a process restart) resumes from the checkpoint the first run left.
fn restart(runs: &Runs<'_>, file: &Path, rest: &Path) -> Result<()> {
    let mut f = std::fs::OpenOptions::new().append(true).open(file)?;
    std::io::copy(&mut std::fs::File::open(rest)?, &mut f)?;
    drop(f);
    let s = runs.run(true, true)?;
    let first = s.first_batch_s.context("the restarted run had no batch")?;
    println!(
        "restart: first batch done {:.1} ms after the restart (engine, checkpoint, state and plugins \
         opened, one full batch run and committed)",
        first * 1e3
    );
    Ok(())
}

/// Writes the orders to `file` (with `--restart`, the first half, and the rest to `rest`).
fn write_orders(a: &BenchArgs, dir: &std::path::Path, file: &std::path::Path, rest: &std::path::Path) -> Result<()> {
    let all = if a.restart { dir.join("all.jsonl") } else { file.to_path_buf() };
    let mut w = BufWriter::with_capacity(1 << 20, File::create(&all)?);
    crate::workload::orders(if a.restart { 2 * a.events } else { a.events }, a.seed, &mut w)?;
    w.flush()?;
    drop(w);
    if a.restart {
        // Whole lines, streamed: holding the events in memory would count in the peak RSS.
        let mut lines = std::io::BufReader::new(File::open(&all)?).lines();
        for (path, n) in [(file, a.events), (rest, u64::MAX)] {
            let mut w = BufWriter::with_capacity(1 << 20, File::create(path)?);
            for line in lines.by_ref().take(n.try_into().unwrap_or(usize::MAX)) {
                writeln!(w, "{}", line?)?;
            }
            w.flush()?;
        }
    }
    Ok(())
}

/// The sink's rows, hashed: equal digests, equal rows in equal order (native vs Wasm, one core
/// vs several); with `--rows`, written to a file as well.
#[derive(Clone)]
struct Digest(Arc<std::sync::Mutex<(blake3::Hasher, Option<BufWriter<File>>)>>);

impl Digest {
    fn new(rows: Option<&std::path::Path>) -> Result<Self> {
        let file = match rows {
            Some(path) => {
                let f = File::create(path).with_context(|| format!("cannot create {}", path.display()))?;
                Some(BufWriter::new(f))
            }
            None => None,
        };
        Ok(Self(Arc::new(std::sync::Mutex::new((blake3::Hasher::new(), file)))))
    }

    /// The digest, once the rows file (if any) is flushed.
    fn hex(&self) -> Result<String> {
        let mut d = self.0.lock().map_err(|_| anyhow::anyhow!("the rows digest is unavailable"))?;
        if let Some(f) = d.1.as_mut() {
            f.flush().context("cannot write the rows file")?;
        }
        Ok(d.0.finalize().to_hex()[..16].to_string())
    }
}

impl Write for Digest {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let mut d = self.0.lock().map_err(|_| std::io::Error::other("digest poisoned"))?;
        d.0.update(buf);
        if let Some(f) = d.1.as_mut() {
            f.write_all(buf)?;
        }
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// CPU time of this process so far (all threads, user + system), from `/proc/self/stat`.
fn cpu_seconds() -> f64 {
    let Ok(stat) = std::fs::read_to_string("/proc/self/stat") else { return 0.0 };
    // Fields after the command name (which may hold spaces): utime is the 12th, stime the 13th.
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    (ticks(11) + ticks(12)) / 100.0
}

/// The process's peak resident set, from `/proc/self/status`.
fn peak_rss_kb() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}
