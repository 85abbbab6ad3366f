//! Helpers for the end-to-end tests: paths to the real components built from `plugins/`, the
//! `weir` binary, generated workloads, and a naive reference computation to compare with.

#![allow(dead_code)]

pub mod apache_kafka;
pub mod kafka;
pub mod medallion;
pub mod postgres;
pub mod registry;
pub mod serve;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

pub fn root() -> PathBuf {
    // At run time, not `env!`: checkouts that share a target directory may share test binaries.
    let manifest = std::env::var_os("CARGO_MANIFEST_DIR").unwrap_or_else(|| env!("CARGO_MANIFEST_DIR").into());
    Path::new(&manifest).ancestors().nth(2).expect("host/cli is inside the workspace").to_path_buf()
}

/// A component from `plugins/dist/`, which `cargo xtask build` fills.
pub fn component(name: &str) -> PathBuf {
    let p = root().join("plugins").join("dist").join(format!("{name}.wasm"));
    assert!(p.exists(), "{} is missing: run `cargo xtask build` first", p.display());
    p
}

/// The contract's version, from the `package` line of `wit/plugin.wit` (its one definition).
pub fn wit_version() -> String {
    let wit = std::fs::read_to_string(root().join("wit/plugin.wit")).unwrap();
    wit.lines().find_map(|l| Some(l.strip_prefix("package weir:plugin@")?.strip_suffix(';')?.to_string())).unwrap()
}

pub fn weir() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_weir"));
    c.env("WEIR_LOG", "warn");
    c
}

pub fn ok(out: Output) -> Output {
    assert!(out.status.success(), "weir failed ({}):\n{}", out.status, String::from_utf8_lossy(&out.stderr));
    out
}

/// The project's reference oracle, `tests/oracle/orders_oracle.py` (Python 3, standard library
/// only): the windows of the reference query (`plugins/orders-error-rate/pipeline.toml`)
/// computed from `docs/semantics.md`'s rules, independently of the engine.
pub struct Oracle {
    script: PathBuf,
}

impl Oracle {
    /// The oracle; panics, saying what is missing, unless `python3` and the script are there.
    /// The check it makes never skips.
    pub fn find() -> Oracle {
        let script = root().join("tests/oracle/orders_oracle.py");
        assert!(script.exists(), "the reference oracle {} is missing", script.display());
        match Command::new("python3").arg("--version").output() {
            Ok(out) if out.status.success() => {}
            Ok(out) => panic!("`python3 --version` failed ({}): the reference oracle needs Python 3", out.status),
            Err(e) => panic!("cannot run python3 ({e}): the reference oracle {} needs Python 3", script.display()),
        }
        Oracle { script }
    }

    /// The oracle's windows of `events` in the reference pipeline's batches: (window start,
    /// count, errors), by start.
    pub fn windows(&self, events: &Path) -> Vec<(i64, u64, u64)> {
        self.run(events, &[])
    }

    /// The same, for a pipeline that reads at most `max` records per batch
    /// (`source.max_offsets_per_trigger`).
    pub fn windows_in_batches_of(&self, events: &Path, max: usize) -> Vec<(i64, u64, u64)> {
        self.run(events, &["--max-offsets-per-trigger".to_string(), max.to_string()])
    }

    fn run(&self, events: &Path, args: &[String]) -> Vec<(i64, u64, u64)> {
        let out = Command::new("python3").arg(&self.script).arg(events).args(args).output().unwrap();
        assert!(
            out.status.success(),
            "the reference oracle failed ({}):\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        let text = String::from_utf8(out.stdout).unwrap();
        let mut lines = text.lines();
        assert_eq!(lines.next(), Some("window_start_ms,window_end_ms,count,errors,error_rate"), "the oracle's header");
        lines
            .map(|l| {
                let f: Vec<&str> = l.split(',').collect();
                (f[0].parse().unwrap(), f[2].parse().unwrap(), f[3].parse().unwrap())
            })
            .collect()
    }
}

/// Rows as the oracle lists windows: (window start, count, errors), by start.
pub fn oracle_shape(rows: &[serde_json::Value]) -> Vec<(i64, u64, u64)> {
    windows_of(rows).into_iter().map(|((s, _, _), (c, e))| (s, c, e)).collect()
}

/// Generates `n` orders with `seed` into `dir/orders.jsonl`.
pub fn orders(dir: &Path, n: u64, seed: u64) -> PathBuf {
    let path = dir.join("orders.jsonl");
    ok(weir()
        .args(["gen", "orders", &n.to_string(), "--seed", &seed.to_string(), "--out"])
        .arg(&path)
        .output()
        .unwrap());
    path
}

/// What varies between the test pipelines; the rest is the orders pipeline.
#[derive(Default)]
pub struct Spec<'a> {
    /// Body of `[window]`.
    pub window: &'a str,
    /// Inline `config` of the parser.
    pub parse_config: &'a str,
    /// Extra lines of `[watermark]`.
    pub watermark: &'a str,
    /// Appended TOML.
    pub extra: &'a str,
    /// Body of `[source]` (default: the replay of `orders.jsonl` in batches of 5000).
    pub source: &'a str,
}

const REPLAY_SOURCE: &str = "type = \"replay\"\npath = \"orders.jsonl\"\nmax_offsets_per_trigger = 5000";

/// A pipeline file in `dir` over the real components.
pub fn pipeline(dir: &Path, spec: Spec) -> PathBuf {
    let text = format!(
        r#"
name = "test"
[source]
{source}
[trigger]
mode = "available-now"
[parse]
plugin = "{parse}"
config = {{ {parse_config} }}
[watermark]
delay = "10 minutes"
{watermark}
[window]
{window}
[aggregate]
plugin = "{agg}"
{extra}
"#,
        parse = component("orders_json").display(),
        agg = component("error_rate").display(),
        parse_config = spec.parse_config,
        watermark = spec.watermark,
        window = spec.window,
        extra = spec.extra,
        source = if spec.source.is_empty() { REPLAY_SOURCE } else { spec.source },
    );
    let path = dir.join("pipeline.toml");
    std::fs::write(&path, text).unwrap();
    path
}

pub const TUMBLING: &str = "type = \"tumbling\"\nsize = \"1 minute\"";

pub fn json_lines(text: &str) -> Vec<serde_json::Value> {
    text.lines().filter(|l| !l.trim().is_empty()).map(|l| serde_json::from_str(l).unwrap()).collect()
}

/// Runs `weir test` and returns the rows.
pub fn weir_test(pipeline: &Path, events: &Path) -> Vec<serde_json::Value> {
    let out = ok(weir().arg("test").arg(pipeline).arg("--events").arg(events).output().unwrap());
    json_lines(&String::from_utf8(out.stdout).unwrap())
}

/// What `weir test` gave: its rows, its dead letters and its stderr.
pub struct Tested {
    pub rows: Vec<serde_json::Value>,
    pub dead: Vec<serde_json::Value>,
    pub stderr: String,
}

/// Runs `weir test` with a fresh dead-letter file beside `events`; panics unless it succeeds.
pub fn weir_test_dead_letters(pipeline: &Path, events: &Path) -> Tested {
    let dl = events.with_extension("dead-letters.jsonl");
    let _ = std::fs::remove_file(&dl);
    let out = ok(weir()
        .arg("test")
        .arg(pipeline)
        .arg("--events")
        .arg(events)
        .arg("--dead-letters")
        .arg(&dl)
        .output()
        .unwrap());
    Tested {
        rows: json_lines(&String::from_utf8(out.stdout).unwrap()),
        dead: std::fs::read_to_string(&dl).map(|t| json_lines(&t)).unwrap_or_default(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

pub struct Order {
    pub ts: i64,
    pub user: u64,
    pub error: bool,
}

/// The events a 10-minute watermark keeps, by a per-record rule (an event more than the delay
/// behind the newest before it is dropped). With the generator's disorder (< 30 s) and very late
/// events (> 2 h, none in the first quarter), it agrees with the per-batch rule of
/// `docs/semantics.md` that the reference oracle follows, and every correct engine agrees.
pub fn kept_orders(events: &Path) -> (Vec<Order>, usize) {
    orders_within(events, 600_000)
}

/// Every event, none dropped: what one batch holding all the input computes, since no
/// watermark exists before it.
pub fn all_orders(events: &Path) -> Vec<Order> {
    orders_within(events, i64::MAX).0
}

fn orders_within(events: &Path, delay: i64) -> (Vec<Order>, usize) {
    let text = std::fs::read_to_string(events).unwrap();
    let mut max: Option<i64> = None;
    let (mut kept, mut dropped) = (Vec::new(), 0);
    for v in json_lines(&text) {
        let ts = v["order_ts"].as_i64().unwrap();
        if max.is_some_and(|m| ts < m.saturating_sub(delay)) {
            dropped += 1;
            continue;
        }
        max = Some(max.map_or(ts, |m| m.max(ts)));
        kept.push(Order { ts, user: v["user_id"].as_u64().unwrap(), error: v["status"] == "ERROR" });
    }
    (kept, dropped)
}

/// (window_start, window_end, key) -> (count, errors)
pub type Windows = BTreeMap<(i64, i64, String), (u64, u64)>;

pub fn sliding_reference(kept: &[Order], size: i64, slide: i64) -> Windows {
    let mut w = Windows::new();
    for o in kept {
        let last = o.ts.div_euclid(slide) * slide;
        for k in 0..size / slide {
            let s = last - k * slide;
            let e = w.entry((s, s + size, String::new())).or_default();
            e.0 += 1;
            e.1 += o.error as u64;
        }
    }
    w
}

pub fn session_reference(kept: &[Order], gap: i64) -> Windows {
    let mut by_user: BTreeMap<u64, Vec<&Order>> = BTreeMap::new();
    for o in kept {
        by_user.entry(o.user).or_default().push(o);
    }
    let mut w = Windows::new();
    for (user, mut os) in by_user {
        os.sort_by_key(|o| o.ts);
        let mut i = 0;
        while i < os.len() {
            let (start, mut last, mut count, mut errors) = (os[i].ts, os[i].ts, 0, 0);
            while i < os.len() && os[i].ts <= last + gap {
                last = last.max(os[i].ts);
                count += 1;
                errors += os[i].error as u64;
                i += 1;
            }
            w.insert((start, last + gap, user.to_string()), (count, errors));
        }
    }
    w
}

/// Rows as windows; panics on a window emitted twice (append mode emits each once).
pub fn windows_of(rows: &[serde_json::Value]) -> Windows {
    let mut w = Windows::new();
    for r in rows {
        let key = (
            r["window_start"].as_i64().unwrap(),
            r["window_end"].as_i64().unwrap(),
            r.get("key").and_then(|k| k.as_str()).unwrap_or("").to_string(),
        );
        let v = (r["count"].as_u64().unwrap(), r["errors"].as_u64().unwrap());
        assert!(w.insert(key.clone(), v).is_none(), "window {key:?} emitted twice");
    }
    w
}

/// `[sink]` TOML for the JSON-lines file sink writing into `dir`.
pub fn file_sink(dir: &Path) -> String {
    format!(
        "[sink]\nplugin = \"{}\"\ngrants.dirs = [{{ host = \"{}\", guest = \"/out\", writable = true }}]\n",
        component("jsonl_file_sink").display(),
        dir.display()
    )
}

/// The rows the file sink committed into `dir`, in batch order; panics on a stray file.
pub fn sink_rows(dir: &Path) -> Vec<serde_json::Value> {
    let mut files: Vec<_> = std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().path()).collect();
    files.sort();
    let mut rows = Vec::new();
    for f in &files {
        let name = f.file_name().unwrap().to_string_lossy().to_string();
        assert!(name.starts_with("batch-") && name.ends_with(".jsonl"), "stray file {name}");
        rows.extend(json_lines(&std::fs::read_to_string(f).unwrap()));
    }
    rows
}

/// xorshift: a kill schedule is reproducible from its printed seed.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

/// Runs `weir run PIPELINE` to completion, killing it with SIGKILL up to `max_kills` times and
/// restarting it each time; returns how many kills landed.
///
/// Kills synchronise on the run's own progress (a JSON line per committed batch on stderr): each
/// incarnation is killed after a random number of batches (zero included, which kills during
/// start-up), at once, while the next batch is in flight at whatever step it has reached.
pub fn kill_repeatedly(pipeline: &Path, max_kills: usize) -> usize {
    use std::io::{BufRead, BufReader};
    let seed = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos() as u64 | 1;
    eprintln!("kill schedule seed: {seed}");
    let mut rng = Rng(seed);
    let mut kills = 0;
    loop {
        let mut child = weir()
            .arg("run")
            .arg(pipeline)
            .arg("--progress-json")
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let wait_for = rng.below(3);
        let (mut batches, mut killed, mut log) = (0, false, String::new());
        for line in BufReader::new(child.stderr.take().unwrap()).lines() {
            let line = line.unwrap();
            if line.starts_with('{') {
                batches += 1;
            } else {
                log.push_str(&line);
                log.push('\n');
            }
            if batches >= wait_for && kills < max_kills {
                child.kill().unwrap();
                killed = true;
                break;
            }
        }
        let status = child.wait().unwrap();
        if killed && !status.success() {
            kills += 1;
            continue;
        }
        assert!(status.success(), "weir run failed: {status}\n{log}");
        if !killed || batches == 0 {
            eprintln!("{kills} kills");
            return kills;
        }
    }
}

/// A windowed orders pipeline with a checkpoint, already run over the first half of `n` orders
/// without flushing (so windows are open in its state); the second half has since been
/// appended to its input. What a restart with another plugin build continues from.
pub struct HalfRun {
    /// The pipeline file (replay of `orders.jsonl`, file sink into `windows`).
    pub pipeline: PathBuf,
    /// All `n` orders: the input once the second half is appended.
    pub events: PathBuf,
    pub windows: PathBuf,
}

pub fn half_run(dir: &Path, n: u64, seed: u64) -> HalfRun {
    let events = orders(dir, n, seed);
    let text = std::fs::read_to_string(&events).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    let (first, second) = lines.split_at(lines.len() / 2);
    std::fs::write(&events, first.join("\n") + "\n").unwrap();
    let windows = dir.join("w");
    let extra = format!("{}[checkpoint]\nlocation = \"{}\"", file_sink(&windows), dir.join("cp").display());
    let pipeline = pipeline(
        dir,
        Spec { window: TUMBLING, watermark: "flush_at_end = false", extra: &extra, ..Default::default() },
    );
    ok(weir().arg("run").arg(&pipeline).output().unwrap());
    let mut f = std::fs::OpenOptions::new().append(true).open(&events).unwrap();
    std::io::Write::write_all(&mut f, (second.join("\n") + "\n").as_bytes()).unwrap();
    HalfRun { pipeline, events, windows }
}
