//! Scale-out on the real broker (tansu): `weir run --group` processes sharing a stateless
//! pipeline (parse, filter, sink) over a 6-partition topic through a Kafka consumer group, each
//! task's checkpoint in the group's checkpoint topic.
//!
//! Output goes to the JSON-lines file sink in one directory that every process writes (one
//! machine standing in for several, each with a checkpoint directory of its own). The sink
//! writes a file per delivery, named by the task's identity and the batch id, so the files
//! show both what was delivered and that each task kept one identity while it moved. (tansu
//! spins on records with headers, which the Kafka sink writes: the Kafka sink's group run is
//! left to a broker with transactions.)

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::kafka::*;
use common::*;

const PARTITIONS: u32 = 6;

/// Held by each test for its whole run: every test runs a broker and several processes, and on
/// two cores two such tests side by side starve the members' heartbeats into rebalances.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner())
}
const MICRO_BATCHES: &str = "mode = \"processing-time\"\ninterval = \"20ms\"";
/// How long any one wait in these tests may take before it fails.
const PATIENCE: Duration = Duration::from_secs(180);

/// The stateless orders pipeline in group `scaled`: ERROR and PENDING orders to the file sink,
/// triggered as `trigger` (a `[trigger]` table's lines).
fn group_pipeline(dir: &Path, brokers: &str, trigger: &str) -> PathBuf {
    pipeline_file(dir, brokers, trigger, "scaled", Some("scaled"), 500)
}

/// The orders pipeline `name` writing to `dir/out`, in consumer group `group` if given.
fn pipeline_file(dir: &Path, brokers: &str, trigger: &str, name: &str, group: Option<&str>, batch: usize) -> PathBuf {
    let out = dir.join("out");
    std::fs::create_dir_all(&out).unwrap();
    let scale = group.map_or(String::new(), |g| format!("[scale]\ngroup = \"{g}\""));
    let text = format!(
        r#"
name = "{name}"
[source]
{source}
starting_offsets = "earliest"
{debug}
[trigger]
{trigger}
[parse]
plugin = "{parse}"
[[transform]]
plugin = "{filter}"
config = {{ keep = ["ERROR", "PENDING"] }}
{sink}
{scale}
"#,
        source = kafka_source(brokers, "orders", batch),
        parse = component("orders_json").display(),
        filter = component("status_filter").display(),
        sink = file_sink(&out),
        debug = std::env::var("WEIR_TEST_KAFKA_DEBUG").map(|d| format!("kafka.debug = \"{d}\"")).unwrap_or_default(),
    );
    let p = dir.join(format!("{name}.toml"));
    std::fs::write(&p, text).unwrap();
    p
}

/// A `weir run` process of the group, its stderr followed: progress lines counted, the rest
/// kept.
struct Member {
    child: Child,
    batches: Arc<AtomicUsize>,
    /// The progress lines of its tasks, in order.
    tasks: Arc<Mutex<Vec<serde_json::Value>>>,
    /// The process's roll-ups of its tasks' progress, in order.
    rollups: Arc<Mutex<Vec<serde_json::Value>>>,
    log: Arc<Mutex<String>>,
}

/// A member the test did not stop (it failed first) is killed, not left running.
impl Drop for Member {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Member {
    fn start(pipeline: &Path, checkpoint: &Path) -> Member {
        let mut child = weir()
            .arg("run")
            .arg(pipeline)
            .arg("--checkpoint")
            .arg(checkpoint)
            .arg("--progress-json")
            .args(["--metrics-addr", "127.0.0.1:0"])
            // Rebalances and claims are logged at info.
            .env("WEIR_LOG", std::env::var("WEIR_TEST_LOG").unwrap_or("info".into()))
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let (batches, log) = (Arc::new(AtomicUsize::new(0)), Arc::new(Mutex::new(String::new())));
        let (tasks, rollups) = (Arc::new(Mutex::new(Vec::new())), Arc::new(Mutex::new(Vec::new())));
        let stderr = child.stderr.take().unwrap();
        let (b, t, r, l) = (batches.clone(), tasks.clone(), rollups.clone(), log.clone());
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines() {
                let Ok(line) = line else { break };
                if let Ok(v) = serde_json::from_str::<serde_json::Value>(&line) {
                    if v.get("group").is_some() {
                        r.lock().unwrap().push(v);
                        continue;
                    }
                    t.lock().unwrap().push(v);
                    b.fetch_add(1, Ordering::SeqCst);
                } else {
                    l.lock().unwrap().push_str(&(line + "\n"));
                }
            }
        });
        Member { child, batches, tasks, rollups, log }
    }

    /// The group's first member, returned once the group has assigned it every task: on tansu,
    /// the member that will lead the group for as long as it lives.
    ///
    /// The tests kill and pause members other than the leader. tansu 0.6 never replaces a
    /// leader that drops out without leaving (killed, paused): the heartbeat that evicts it
    /// leaves the group formed with the evicted member still named leader, and every later
    /// rebalance waits for that member's assignment forever. A Kafka broker elects a leader
    /// among the members that rejoin, so on Kafka any member may be the one killed.
    fn start_leader(pipeline: &Path, checkpoint: &Path) -> Member {
        let m = Member::start(pipeline, checkpoint);
        m.wait_log("assigned to this process");
        m
    }

    /// Waits until this process has committed `n` more batches than `from`.
    fn wait_batches(&self, from: usize, n: usize) {
        let never = std::sync::atomic::AtomicBool::new(false);
        self.wait_batches_unless(from, n, &never);
    }

    /// Waits until this process has committed `n` more batches than `from` (returns true), or
    /// `done` is raised (false).
    fn wait_batches_unless(&self, from: usize, n: usize, done: &std::sync::atomic::AtomicBool) -> bool {
        let deadline = Instant::now() + PATIENCE;
        while self.batches.load(Ordering::SeqCst) < from + n {
            if done.load(Ordering::SeqCst) {
                return false;
            }
            assert!(Instant::now() < deadline, "no progress from a member; its log:\n{}", self.log());
            std::thread::sleep(Duration::from_millis(20));
        }
        true
    }

    /// Waits until this process has logged `text`.
    fn wait_log(&self, text: &str) {
        let deadline = Instant::now() + PATIENCE;
        while !self.log().contains(text) {
            assert!(Instant::now() < deadline, "never logged {text:?}:\n{}", self.log());
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The tasks this process committed batches of since its `from`th progress line.
    fn tasks_since(&self, from: usize) -> BTreeSet<String> {
        self.tasks.lock().unwrap().iter().skip(from).map(|v| v["name"].as_str().unwrap().to_string()).collect()
    }

    fn log(&self) -> String {
        self.log.lock().unwrap().clone()
    }

    /// The process's metrics, scraped from its `--metrics-addr` by HTTP.
    fn metrics(&self) -> String {
        let log = self.log();
        let url = log.lines().find_map(|l| l.strip_prefix("metrics at ")).expect("the metrics address is logged");
        ureq::get(url).call().unwrap().body_mut().read_to_string().unwrap()
    }

    /// The batches of each task in this process's progress lines.
    fn batches_per_task(&self) -> BTreeMap<String, u64> {
        let mut n = BTreeMap::new();
        for v in self.tasks.lock().unwrap().iter() {
            *n.entry(v["name"].as_str().unwrap().to_string()).or_default() += 1;
        }
        n
    }

    fn kill(&mut self) {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
    }

    /// SIGTERM, and the exit status once it has left the group. A process that stopped
    /// cleanly ends with a roll-up that adds up every task line it printed.
    fn stop(mut self) -> (std::process::ExitStatus, String) {
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let status = self.child.wait().unwrap();
        // The reader thread ends with the pipe.
        let deadline = Instant::now() + Duration::from_secs(10);
        while Arc::strong_count(&self.log) > 1 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        let tasks = self.tasks.lock().unwrap();
        let grouped = tasks.iter().any(|v| v["name"].as_str().unwrap().contains('['));
        if status.success() && (grouped || !self.rollups.lock().unwrap().is_empty()) {
            let last = self.rollups.lock().unwrap().last().cloned().expect("a final roll-up");
            let rows: u64 = tasks.iter().map(|v| v["numInputRows"].as_u64().unwrap()).sum();
            assert_eq!(last["numInputRows"].as_u64(), Some(rows), "the roll-up adds up the task lines: {last}");
            assert_eq!(last["numBatches"].as_u64(), Some(tasks.len() as u64), "{last}");
            let names: BTreeSet<&str> = tasks.iter().map(|v| v["name"].as_str().unwrap()).collect();
            let rolled: BTreeSet<&str> = last["tasks"].as_object().unwrap().keys().map(String::as_str).collect();
            assert_eq!(names, rolled, "the roll-up names the tasks this process ran");
        }
        drop(tasks);
        (status, self.log())
    }
}

/// Produces orders `lines` (a slice of the generated file) round-robin over the partitions.
fn produce_chunk(brokers: &str, dir: &Path, all: &[String], chunk: usize, of: usize) {
    let per = all.len().div_ceil(of);
    let part: Vec<&String> = all.iter().skip(chunk * per).take(per).collect();
    let file = dir.join(format!("chunk-{chunk}.jsonl"));
    let text: String = part.iter().map(|l| format!("{l}\n")).collect();
    std::fs::write(&file, text).unwrap();
    produce_lines(brokers, "orders", PARTITIONS as i32, &file, false);
}

/// The ERROR and PENDING order ids of `lines`.
fn wanted(lines: &[String]) -> BTreeSet<u64> {
    lines
        .iter()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .filter(|v| v["status"] == "ERROR" || v["status"] == "PENDING")
        .map(|v| v["order_id"].as_u64().unwrap())
        .collect()
}

/// Each delivered order id with how many times it was delivered, and the identities that
/// delivered (from the sink's file names, `batch-IDENTITY-BATCH.jsonl`).
fn delivered(out: &Path) -> (BTreeMap<u64, usize>, BTreeSet<String>) {
    let (mut ids, mut identities) = (BTreeMap::new(), BTreeSet::new());
    for e in std::fs::read_dir(out).unwrap() {
        let path = e.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().to_string();
        let Some(key) = name.strip_prefix("batch-").and_then(|n| n.strip_suffix(".jsonl")) else { continue };
        identities.insert(key.rsplit_once('-').unwrap().0.to_string());
        for row in json_lines(&std::fs::read_to_string(&path).unwrap()) {
            *ids.entry(row["order_id"].as_u64().unwrap()).or_default() += 1;
        }
    }
    (ids, identities)
}

/// Waits until every wanted order is delivered, then checks each was delivered exactly once,
/// by one identity per task.
fn check_exactly_once(out: &Path, want: &BTreeSet<u64>, members: &[&Member]) {
    let ids = wait_delivered(out, want, members);
    let twice: Vec<_> = ids.iter().filter(|(_, n)| **n > 1).collect();
    assert!(twice.is_empty(), "delivered more than once: {twice:?}");
}

/// Waits until every wanted order is delivered; checks nothing else was, and that the tasks
/// kept one identity each, whoever ran them. Returns how often each was delivered.
fn wait_delivered(out: &Path, want: &BTreeSet<u64>, members: &[&Member]) -> BTreeMap<u64, usize> {
    let deadline = Instant::now() + PATIENCE;
    loop {
        let (ids, _) = delivered(out);
        if want.iter().all(|id| ids.contains_key(id)) {
            break;
        }
        let missing = want.iter().filter(|id| !ids.contains_key(id)).count();
        let logs: String = members.iter().map(|m| m.log()).collect();
        assert!(Instant::now() < deadline, "{missing} orders never delivered; logs:\n{logs}");
        std::thread::sleep(Duration::from_millis(100));
    }
    let (ids, identities) = delivered(out);
    let stray: Vec<_> = ids.keys().filter(|id| !want.contains(id)).collect();
    assert!(stray.is_empty(), "delivered but not in the input's ERROR and PENDING orders: {stray:?}");
    assert_eq!(identities.len(), PARTITIONS as usize, "one identity per task, whoever ran it: {identities:?}");
    ids
}

fn input(dir: &Path, n: u64) -> Vec<String> {
    let events = orders(dir, n, 41);
    std::fs::read_to_string(events).unwrap().lines().map(str::to_string).collect()
}

/// Three processes; one is killed with `kill -9` ten times at random points of its progress and
/// restarted; a fourth joins mid-run and leaves. Orders arrive throughout, a chunk at a time,
/// each once the last one's wanted orders are delivered. Every wanted order is in the output
/// once.
#[test]
fn three_processes_share_the_tasks_through_kills_a_join_and_a_leave() {
    let _alone = one_at_a_time();
    let dir = tempfile::tempdir().unwrap();
    let broker = Tansu::start(&dir.path().join("tansu"));
    broker.create_topic("orders", PARTITIONS);
    let brokers = broker.brokers();
    let p = group_pipeline(dir.path(), &brokers, MICRO_BATCHES);
    let all = input(dir.path(), 24_000);
    const KILLS: usize = 10;
    const CHUNKS: usize = 120;
    let seed = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos() as u64;
    eprintln!("kill schedule seed: {seed}");
    let mut rng = seed | 1;
    let mut below = |n: u64| {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng % n
    };

    let produced = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let producer = {
        let (brokers, dir, all, produced) = (brokers.clone(), dir.path().to_path_buf(), all.clone(), produced.clone());
        std::thread::spawn(move || {
            let per = all.len().div_ceil(CHUNKS);
            let out = dir.join("out");
            for chunk in 0..CHUNKS {
                produce_chunk(&brokers, &dir, &all, chunk, CHUNKS);
                // Paced by the output, not by the clock: the next chunk once this one's wanted
                // orders are all delivered.
                let want = wanted(&all[(chunk * per).min(all.len())..((chunk + 1) * per).min(all.len())]);
                let deadline = Instant::now() + PATIENCE;
                while !want.iter().all(|id| delivered(&out).0.contains_key(id)) && Instant::now() < deadline {
                    std::thread::sleep(Duration::from_millis(100));
                }
                if Instant::now() >= deadline {
                    // The check below fails with every member's log.
                    eprintln!("chunk {chunk} was not delivered in time");
                    break;
                }
            }
            produced.store(true, Ordering::SeqCst);
        })
    };

    let checkpoint = |i: usize| dir.path().join(format!("process-{i}"));
    // The victim joins last: it is never the group's leader (see `start_leader`).
    let steady = [Member::start_leader(&p, &checkpoint(1)), Member::start(&p, &checkpoint(2))];
    let mut victim = Member::start(&p, &checkpoint(0));
    let mut visitor: Option<Member> = None;
    let mut mid_run = 0;
    for kill in 0..KILLS {
        // Zero batches: killed while it starts up, claims, or waits for tasks. Once every order
        // is out, the victim may hold nothing with data: then it is killed as it is.
        let n = below(3) as usize;
        if victim.wait_batches_unless(victim.batches.load(Ordering::SeqCst), n, &produced) {
            mid_run += 1;
        }
        victim.kill();
        victim = Member::start(&p, &checkpoint(0));
        if kill == KILLS / 2 {
            visitor = Some(Member::start(&p, &checkpoint(3)));
        }
        if kill == KILLS / 2 + 2
            && let Some(v) = visitor.take()
        {
            v.wait_log("rebalance: tasks");
            let (status, log) = v.stop();
            assert!(status.success(), "the fourth process did not leave cleanly: {status}\n{log}");
        }
    }
    eprintln!("{mid_run} of {KILLS} kills after the batches they waited for");
    producer.join().unwrap();
    check_exactly_once(&dir.path().join("out"), &wanted(&all), &[&victim, &steady[0], &steady[1]]);
    for m in std::iter::once(victim).chain(steady) {
        let (status, log) = m.stop();
        assert!(status.success(), "a member failed: {status}\n{log}");
    }
}

/// A zombie: a process paused (SIGSTOP) past its session timeout loses its tasks to the others;
/// resumed, it must not deliver a batch its tasks' new owners planned differently.
#[test]
fn a_paused_process_that_lost_its_tasks_is_fenced_when_it_resumes() {
    let _alone = one_at_a_time();
    let dir = tempfile::tempdir().unwrap();
    let broker = Tansu::start(&dir.path().join("tansu"));
    broker.create_topic("orders", PARTITIONS);
    let brokers = broker.brokers();
    let p = group_pipeline(dir.path(), &brokers, MICRO_BATCHES);
    let all = input(dir.path(), 12_000);
    // `a` leads the group, `b` is the one paused (see `start_leader`).
    let a = Member::start_leader(&p, &dir.path().join("a"));
    let b = Member::start(&p, &dir.path().join("b"));
    produce_chunk(&brokers, dir.path(), &all, 0, 3);
    a.wait_batches(0, 1);
    b.wait_batches(0, 1);
    unsafe { libc::kill(b.child.id() as i32, libc::SIGSTOP) };
    // While `b` is paused its tasks move, once the broker has evicted it (after the session
    // timeout; its member id starts with its client id, `host:pid`). On Kafka the eviction
    // itself moves them. tansu keeps a group whose leader rejoins unchanged as it was, and its
    // tasks with `b`, until the members change: `c` joins to change them.
    let b_member = format!(":{}-", b.child.id());
    broker.wait_log(|l| l.contains("missed heartbeat for") && l.contains(&b_member), PATIENCE);
    let before = a.batches.load(Ordering::SeqCst);
    let c = Member::start(&p, &dir.path().join("c"));
    produce_chunk(&brokers, dir.path(), &all, 1, 3);
    // `a` and `c` deliver batches of every task.
    let deadline = Instant::now() + PATIENCE;
    while a.tasks_since(before).union(&c.tasks_since(0)).count() < PARTITIONS as usize {
        assert!(Instant::now() < deadline, "b's tasks never moved:\n{}\n{}", a.log(), c.log());
        std::thread::sleep(Duration::from_millis(50));
    }
    unsafe { libc::kill(b.child.id() as i32, libc::SIGCONT) };
    produce_chunk(&brokers, dir.path(), &all, 2, 3);
    check_exactly_once(&dir.path().join("out"), &wanted(&all), &[&a, &b, &c]);
    // `weir inspect` on the pipeline file: once every task has committed to the input's end,
    // each shows lag 0 and a member that holds it.
    let deadline = Instant::now() + PATIENCE;
    let view = loop {
        let out = weir().arg("inspect").arg(&p).output().unwrap();
        let view = String::from_utf8_lossy(&out.stdout).to_string();
        assert!(out.status.success(), "weir inspect failed: {}", String::from_utf8_lossy(&out.stderr));
        let tasks: Vec<&str> = view.lines().filter(|l| l.starts_with("task ")).collect();
        assert_eq!(tasks.len(), PARTITIONS as usize, "a line per task:\n{view}");
        if tasks.iter().all(|l| l.contains("; lag 0;") && !l.contains("held by nobody")) {
            break view;
        }
        assert!(Instant::now() < deadline, "the group never caught up:\n{view}");
        std::thread::sleep(Duration::from_millis(200));
    };
    assert!(view.contains("member "), "{view}");
    // Its metrics: a batch count per task it ran, between its progress lines before the scrape
    // and after it.
    let before = a.batches_per_task();
    let scraped: BTreeMap<String, u64> = a
        .metrics()
        .lines()
        .filter_map(|l| l.strip_prefix("weir_task_batches_total{pipeline=\"scaled\",task=\""))
        .map(|l| {
            let (task, n) = l.split_once("\"} ").unwrap();
            (task.to_string(), n.parse().unwrap())
        })
        .collect();
    let after = a.batches_per_task();
    assert_eq!(scraped.keys().collect::<Vec<_>>(), after.keys().collect::<Vec<_>>(), "a series per task it ran");
    for (task, n) in &scraped {
        assert!(before.get(task).unwrap_or(&0) <= n, "{task}: {n} batches in the metrics, {before:?} printed before");
    }
    let (_, b_log) = b.stop();
    for m in [c, a] {
        let (status, log) = m.stop();
        assert!(status.success(), "a member failed: {status}\n{log}");
    }
    assert!(
        b_log.contains("revoked") || b_log.contains("fenced"),
        "the resumed process neither gave up its tasks nor was fenced:\n{b_log}"
    );
}

/// Continuous mode in a group: two processes, one killed with `kill -9` while records flow and
/// restarted. Continuous mode is at-least-once, so every wanted order arrives, perhaps twice,
/// and the tasks keep their identities as they move.
#[test]
fn continuous_mode_shares_the_tasks_at_least_once() {
    let _alone = one_at_a_time();
    let dir = tempfile::tempdir().unwrap();
    let broker = Tansu::start(&dir.path().join("tansu"));
    broker.create_topic("orders", PARTITIONS);
    let brokers = broker.brokers();
    let p = group_pipeline(dir.path(), &brokers, "mode = \"continuous\"\ninterval = \"50ms\"");
    let all = input(dir.path(), 12_000);
    // `b` leads the group, `a` is the one killed (see `start_leader`).
    let b = Member::start_leader(&p, &dir.path().join("b"));
    let mut a = Member::start(&p, &dir.path().join("a"));
    produce_chunk(&brokers, dir.path(), &all, 0, 3);
    a.wait_batches(0, 1);
    produce_chunk(&brokers, dir.path(), &all, 1, 3);
    a.kill();
    let a = Member::start(&p, &dir.path().join("a"));
    produce_chunk(&brokers, dir.path(), &all, 2, 3);
    wait_delivered(&dir.path().join("out"), &wanted(&all), &[&a, &b]);
    for m in [a, b] {
        let (status, log) = m.stop();
        assert!(status.success(), "a member failed: {status}\n{log}");
    }
}

/// Not a test: a measurement for `docs/scale-out.md`. One process without a group, then a group
/// of one and of two processes, over the same 6-partition topic, interleaved over `ROUNDS`;
/// each from the topic's start to every wanted order delivered. Prints orders/s and the mean
/// plan and commit time per batch (where the group's record writes show).
///
/// `cargo test --release -p weir --test scale_out -- --ignored --nocapture measure`
#[test]
#[ignore]
fn measure_a_group_against_one_process() {
    let _alone = one_at_a_time();
    const ORDERS: u64 = 240_000;
    const ROUNDS: usize = 2;
    let dir = tempfile::tempdir().unwrap();
    let broker = Tansu::start(&dir.path().join("tansu"));
    broker.create_topic("orders", PARTITIONS);
    let brokers = broker.brokers();
    let all = input(dir.path(), ORDERS);
    produce_chunk(&brokers, dir.path(), &all, 0, 1);
    let want = wanted(&all);
    let mut results: BTreeMap<&str, Vec<(f64, f64, f64)>> = BTreeMap::new();
    for round in 0..ROUNDS {
        for (mode, processes) in [("one process, no group", 0usize), ("group of 1", 1), ("group of 2", 2)] {
            let run = dir.path().join(format!("run-{round}-{processes}"));
            std::fs::create_dir_all(&run).unwrap();
            let name = format!("m{round}x{processes}");
            let group = (processes > 0).then_some(name.as_str());
            let p = pipeline_file(&run, &brokers, MICRO_BATCHES, &name, group, 5000);
            let started = Instant::now();
            let members: Vec<Member> =
                (0..processes.max(1)).map(|i| Member::start(&p, &run.join(format!("cp-{i}")))).collect();
            let out = run.join("out");
            let deadline = Instant::now() + PATIENCE;
            loop {
                let delivered: usize = std::fs::read_dir(&out)
                    .unwrap()
                    .map(|e| json_lines(&std::fs::read_to_string(e.unwrap().path()).unwrap()).len())
                    .sum();
                if delivered >= want.len() {
                    break;
                }
                assert!(Instant::now() < deadline, "{mode}: only {delivered} of {} delivered", want.len());
                std::thread::sleep(Duration::from_millis(20));
            }
            let secs = started.elapsed().as_secs_f64();
            let (mut plan, mut commit, mut n) = (0.0, 0.0, 0.0);
            for m in &members {
                for v in m.tasks.lock().unwrap().iter() {
                    plan += v["durationMs"]["planMs"].as_f64().unwrap_or(0.0);
                    commit += v["durationMs"]["commitMs"].as_f64().unwrap_or(0.0);
                    n += 1.0;
                }
            }
            for m in members {
                m.stop();
            }
            results.entry(mode).or_default().push((ORDERS as f64 / secs, plan / n, commit / n));
        }
    }
    eprintln!("| mode | orders/s, each round | mean plan ms per batch | mean commit ms per batch |");
    eprintln!("|---|---|---|---|");
    for (mode, r) in results {
        let rates: Vec<String> = r.iter().map(|(rate, _, _)| format!("{:.0}", rate)).collect();
        let plan = r.iter().map(|x| x.1).sum::<f64>() / r.len() as f64;
        let commit = r.iter().map(|x| x.2).sum::<f64>() / r.len() as f64;
        eprintln!("| {mode} | {} | {plan:.2} | {commit:.2} |", rates.join(", "));
    }
}
