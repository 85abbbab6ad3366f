//! Scale-out on the real broker (tansu): `weir run --group` processes sharing a pipeline over a
//! 6-partition topic through a Kafka consumer group, each task's checkpoint in the group's
//! checkpoint topic: a stateless pipeline (parse, filter, sink), and windowed aggregations in two
//! stages around the group's repartition topic, their state in its changelog topic.
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
/// The group's session timeout in pipelines on the mock broker, against the product's 10 s: a
/// killed or paused member keeps its tasks until it passes, so the kill loops waited that long
/// at every kill (the three took 560 s in all, and 266 s at 3 s). Three heartbeats (one a
/// second) still fit in it. On tansu the default stays: it holds a rejoining member's
/// `JoinGroup` for 3 s, and a short timeout evicts live members (docs/scale-out.md, "What the
/// test broker gets wrong").
const MOCK_SESSION_TIMEOUT: &str = "kafka.session.timeout.ms = \"3000\"";

/// The addresses of the mock brokers running ([`MockBroker::start`], until dropped).
static MOCKS: Mutex<Vec<String>> = Mutex::new(Vec::new());

/// The Kafka source of a group's pipeline: `topic` on `brokers`, read `batch` records at a time
/// at most.
fn group_source(brokers: &str, topic: &str, batch: usize) -> String {
    let source = kafka_source(brokers, topic, batch);
    let on_mock = MOCKS.lock().unwrap_or_else(|e| e.into_inner()).iter().any(|m| m == brokers);
    if on_mock { format!("{source}\n{MOCK_SESSION_TIMEOUT}") } else { source }
}

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
        source = group_source(brokers, "orders", batch),
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
        Member::start_counted(pipeline, checkpoint, Arc::default())
    }

    /// [`Member::start`], the input rows its tasks commit added to `read`.
    fn start_counted(pipeline: &Path, checkpoint: &Path, read: Arc<AtomicUsize>) -> Member {
        Member::spawn(&[pipeline.as_os_str(), "--checkpoint".as_ref(), checkpoint.as_os_str()], read)
    }

    /// A process running several pipelines (each with its own `checkpoint.location`); the input
    /// rows its stage-1 tasks commit are added to `read`.
    fn start_all(pipelines: &[PathBuf], read: Arc<AtomicUsize>) -> Member {
        let args: Vec<&std::ffi::OsStr> = pipelines.iter().map(|p| p.as_os_str()).collect();
        Member::spawn(&args, read)
    }

    fn spawn(args: &[&std::ffi::OsStr], read: Arc<AtomicUsize>) -> Member {
        let mut child = weir()
            .arg("run")
            .args(args)
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
        // `WEIR_TEST_KEEP_LOGS=DIR` keeps each process's whole stderr in DIR, to read after a run.
        let mut kept = std::env::var_os("WEIR_TEST_KEEP_LOGS").map(|d| {
            let path = PathBuf::from(d).join(format!("member-{}.log", child.id()));
            std::fs::File::create(path).unwrap()
        });
        std::thread::spawn(move || {
            // Lines as bytes: a line that is not UTF-8 must not end the reading, or the process
            // would block on its next write to stderr.
            for line in BufReader::new(stderr).split(b'\n') {
                let Ok(line) = line else { break };
                let line = String::from_utf8_lossy(&line).into_owned();
                if let Some(f) = kept.as_mut() {
                    let _ = std::io::Write::write_all(f, format!("{line}\n").as_bytes());
                }
                if let Ok(v) = serde_json::from_str::<serde_json::Value>(&line) {
                    if v.get("group").is_some() {
                        r.lock().unwrap().push(v);
                        continue;
                    }
                    if v["name"].as_str().is_some_and(|n| n.contains("[orders-")) {
                        read.fetch_add(v["numInputRows"].as_u64().unwrap_or(0) as usize, Ordering::SeqCst);
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
        self.wait_logged(text, 1);
    }

    /// Waits until this process has logged `text` `n` times.
    fn wait_logged(&self, text: &str, n: usize) {
        let deadline = Instant::now() + PATIENCE;
        while self.log().matches(text).count() < n {
            assert!(Instant::now() < deadline, "never logged {text:?} {n} times:\n{}", self.log());
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
        // Each pipeline's last roll-up adds up its task lines.
        let mut per_pipeline: BTreeMap<&str, Vec<&serde_json::Value>> = BTreeMap::new();
        for v in tasks.iter() {
            let name = v["name"].as_str().unwrap();
            if let Some((pipeline, _)) = name.split_once('[') {
                per_pipeline.entry(pipeline).or_default().push(v);
            }
        }
        if status.success() {
            let rollups = self.rollups.lock().unwrap();
            for (pipeline, tasks) in per_pipeline {
                let last = rollups.iter().rev().find(|r| r["name"] == pipeline).expect("a final roll-up");
                let rows: u64 = tasks.iter().map(|v| v["numInputRows"].as_u64().unwrap()).sum();
                assert_eq!(last["numInputRows"].as_u64(), Some(rows), "the roll-up adds up the task lines: {last}");
                assert_eq!(last["numBatches"].as_u64(), Some(tasks.len() as u64), "{last}");
                let names: BTreeSet<&str> = tasks.iter().map(|v| v["name"].as_str().unwrap()).collect();
                let rolled: BTreeSet<&str> = last["tasks"].as_object().unwrap().keys().map(String::as_str).collect();
                assert_eq!(names, rolled, "the roll-up names the tasks this process ran");
            }
        }
        drop(tasks);
        (status, self.log())
    }
}

/// Produces orders `lines` (a slice of the generated file) round-robin over the partitions.
fn produce_chunk(brokers: &str, dir: &Path, all: &[String], chunk: usize, of: usize) {
    produce_chunk_to(brokers, "orders", dir, all, chunk, of);
}

/// [`produce_chunk`] to `topic`.
fn produce_chunk_to(brokers: &str, topic: &str, dir: &Path, all: &[String], chunk: usize, of: usize) {
    let per = all.len().div_ceil(of);
    let part: Vec<&String> = all.iter().skip(chunk * per).take(per).collect();
    let file = dir.join(format!("chunk-{chunk}.jsonl"));
    let text: String = part.iter().map(|l| format!("{l}\n")).collect();
    std::fs::write(&file, text).unwrap();
    produce_lines(brokers, topic, PARTITIONS as i32, &file, false);
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
///
/// On the mock broker: on tansu this loop passes most runs, but now and then its coordinator
/// leaves a task held by no member after the victim's restarts, and the loop stalls (see the
/// two-stage kill loop's comment). WEIR_TEST_ON_TANSU runs it on tansu.
#[test]
fn three_processes_share_the_tasks_through_kills_a_join_and_a_leave() {
    let _alone = one_at_a_time();
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start(dir.path(), &["scaled"], &[]);
    let brokers = broker.brokers.clone();
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

/// Not a test: a measurement of what a group's records cost a stateless pipeline, on tansu.
/// One process without a group, then a group of one and of two processes, over the same
/// 6-partition topic, interleaved over `ROUNDS`;
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

// Windowed aggregations in two stages.

/// The watermark delay of the windowed pipelines: above the generator's disorder (< 30 s), so
/// only its very late events (hours behind) are late, whatever the batching.
const DELAY_MS: i64 = 40_000;
/// The error rate's window: 10-second tumbling windows over every order (the global window).
const RATE_WINDOW_MS: i64 = 10_000;
/// The sessions' gap: per user, a session closes after 2 seconds without orders.
const GAP_MS: i64 = 2_000;

/// The two windowed pipelines for process `process`, each in the group of its name, writing
/// to `dir/out/NAME`, its checkpoint in `dir/process-N/NAME`: `rate`, the error rate per
/// 10-second window over all orders, and `sessions`, the error rate per user session.
fn windowed_pipelines(dir: &Path, brokers: &str, process: usize, delay: &str) -> Vec<PathBuf> {
    let here = dir.join(format!("process-{process}"));
    std::fs::create_dir_all(&here).unwrap();
    let windows = [
        ("rate", "type = \"tumbling\"\nsize = \"10 seconds\"", "{}"),
        ("sessions", "type = \"session\"\ngap = \"2 seconds\"", "{ key_by_user = true }"),
    ];
    windows
        .iter()
        .map(|(name, window, parse_config)| {
            let out = dir.join("out").join(name);
            std::fs::create_dir_all(&out).unwrap();
            let text = format!(
                r#"
name = "{name}"
[source]
{source}
starting_offsets = "earliest"
{debug}
[trigger]
{MICRO_BATCHES}
[parse]
plugin = "{parse}"
config = {parse_config}
[watermark]
delay = "{delay}"
[window]
{window}
[aggregate]
plugin = "{aggregate}"
{sink}
[checkpoint]
location = "{checkpoint}"
[scale]
group = "{name}"
"#,
                source = group_source(brokers, "orders", 2000),
                parse = component("orders_json").display(),
                aggregate = component("error_rate").display(),
                sink = file_sink(&out),
                checkpoint = here.join(name).display(),
                debug = std::env::var("WEIR_TEST_KAFKA_DEBUG")
                    .map(|d| format!("kafka.debug = \"{d}\""))
                    .unwrap_or_default(),
            );
            let p = here.join(format!("{name}.toml"));
            std::fs::write(&p, text).unwrap();
            p
        })
        .collect()
}

/// The orders of `lines` a watermark `delay` behind the largest event time so far keeps (the
/// very late ones dropped), for the references.
fn kept_within(lines: &[String], delay: i64) -> Vec<Order> {
    let mut max: Option<i64> = None;
    let mut kept = Vec::new();
    for l in lines {
        let v: serde_json::Value = serde_json::from_str(l).unwrap();
        let ts = v["order_ts"].as_i64().unwrap();
        if max.is_some_and(|m| ts < m - delay) {
            continue;
        }
        max = Some(max.map_or(ts, |m| m.max(ts)));
        kept.push(Order { ts, user: v["user_id"].as_u64().unwrap(), error: v["status"] == "ERROR" });
    }
    kept
}

/// `n` orders for the windowed pipelines: [`input`]'s, without the very late orders of its
/// first third. A group's stage-2 task has no watermark until every stage-1 task has written to
/// it, so one lane's very late order that arrives before the slowest lane's first batch is not
/// late there, while one process, whose watermark exists after its first 64 records, drops it:
/// the timing of the group's start, not a difference of results. Later very late orders meet a
/// watermark in both and are dropped by both.
fn windowed_input(dir: &Path, n: u64) -> Vec<String> {
    let all = input(dir, n);
    let settled = all.len() / 3;
    let mut max = i64::MIN;
    let mut kept = Vec::with_capacity(all.len());
    for (i, l) in all.into_iter().enumerate() {
        let ts = serde_json::from_str::<serde_json::Value>(&l).unwrap()["order_ts"].as_i64().unwrap();
        if i < settled && ts < max.saturating_sub(DELAY_MS) {
            continue;
        }
        max = max.max(ts);
        kept.push(l);
    }
    kept
}

/// The windows one process emits for `lines`, per pipeline: what the group must emit.
fn references(lines: &[String], delay: i64) -> BTreeMap<&'static str, Windows> {
    let kept = kept_within(lines, delay);
    BTreeMap::from([
        ("rate", sliding_reference(&kept, RATE_WINDOW_MS, RATE_WINDOW_MS)),
        ("sessions", session_reference(&kept, GAP_MS)),
    ])
}

/// Orders a day past the input, one to each partition: every stage-1 task's event time moves
/// past every window, which the watermark then closes. Their own windows never close, and
/// their users are no input's.
fn produce_closers(brokers: &str, dir: &Path, lines: &[String]) {
    produce_closers_to(brokers, "orders", dir, lines);
}

/// [`produce_closers`] to `topic`.
fn produce_closers_to(brokers: &str, topic: &str, dir: &Path, lines: &[String]) {
    let max = lines
        .iter()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()["order_ts"].as_i64().unwrap())
        .max()
        .unwrap();
    let text: String = (0..PARTITIONS)
        .map(|p| {
            format!(
                "{{\"order_id\":{},\"user_id\":{},\"status\":\"OK\",\"amount\":1.0,\"order_ts\":{}}}\n",
                900_000_000 + p,
                900_000_000 + p,
                max + 86_400_000
            )
        })
        .collect();
    let file = dir.join("closers.jsonl");
    std::fs::write(&file, text).unwrap();
    produce_lines(brokers, topic, PARTITIONS as i32, &file, false);
}

/// Waits until each pipeline's sink holds as many windows as its reference, then checks they
/// are the reference's, each once.
fn check_windows(dir: &Path, want: &BTreeMap<&str, Windows>, members: &[&Member]) {
    for (name, reference) in want {
        let out = dir.join("out").join(name);
        let deadline = Instant::now() + PATIENCE;
        loop {
            let got = windows_of(&delivered_rows(&out));
            if got.len() >= reference.len() {
                let missing: Vec<_> = reference.iter().filter(|(k, v)| got.get(k) != Some(v)).take(5).collect();
                let stray: Vec<_> = got.iter().filter(|(k, _)| !reference.contains_key(k)).take(5).collect();
                assert!(
                    missing.is_empty() && stray.is_empty(),
                    "{name}: windows differ: missing or other {missing:?}, not in the reference {stray:?}"
                );
                break;
            }
            let logs: String = members.iter().map(|m| m.log()).collect();
            assert!(
                Instant::now() < deadline,
                "{name}: {} of {} windows after {PATIENCE:?}; logs:\n{logs}",
                got.len(),
                reference.len()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

/// The rows the file sink has committed into `dir` so far: its files, without the one it may be
/// writing (a dot-file it renames when whole).
fn delivered_rows(dir: &Path) -> Vec<serde_json::Value> {
    let mut files: Vec<_> = std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().path()).collect();
    files.retain(|f| f.file_name().is_some_and(|n| !n.to_string_lossy().starts_with('.')));
    files.sort();
    files.iter().flat_map(|f| json_lines(&std::fs::read_to_string(f).unwrap())).collect()
}

/// Starts the group's first member and returns it once it holds every task of both pipelines'
/// groups: on tansu, the member that leads them (see `Member::start_leader`).
fn start_leader_of_all(pipelines: &[PathBuf], read: &Arc<AtomicUsize>) -> Member {
    let m = Member::start_all(pipelines, read.clone());
    m.wait_logged("assigned to this process", pipelines.len());
    m
}

/// Three processes run the error rate over the global window and per-user sessions, each
/// in two stages; one is killed with `kill -9` ten times at random points of its progress and
/// restarted, and a fourth joins mid-run and leaves, while orders arrive a chunk at a time. The
/// windows are one process's, each once.
///
/// On the mock broker: tansu's group coordinator hands the group's leadership to whichever
/// member starts a rebalance, often the process just restarted, and never replaces a leader
/// that is killed (see `Member::start_leader`), so with two groups per process a kill loop on
/// tansu stalls. librdkafka's mock elects a leader among the members at every rebalance, as
/// Kafka does. Its partitions keep 5 MiB each, which this run stays well inside.
#[test]
fn windows_in_two_stages_survive_kills_a_join_and_a_leave() {
    let _alone = one_at_a_time();
    let dir = tempfile::tempdir().unwrap();
    // WEIR_TEST_ON_TANSU runs it on tansu instead, to see whether its coordinator still stalls.
    let broker = Broker::start(dir.path(), &[], &["rate", "sessions"]);
    let brokers = broker.brokers.clone();
    let all = windowed_input(dir.path(), 60_000);
    let want = references(&all, DELAY_MS);
    const KILLS: usize = 10;
    const CHUNKS: usize = 40;
    let seed = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos() as u64;
    eprintln!("kill schedule seed: {seed}");
    let mut rng = seed | 1;
    let mut below = |n: u64| {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng % n
    };
    let delay = "40 seconds";
    let read = Arc::new(AtomicUsize::new(0));
    let produced = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let files = |i: usize| windowed_pipelines(dir.path(), &brokers, i, delay);
    let producer = {
        let (brokers, dir, all, produced) = (brokers.clone(), dir.path().to_path_buf(), all.clone(), produced.clone());
        std::thread::spawn(move || {
            for chunk in 0..CHUNKS {
                produce_chunk(&brokers, &dir, &all, chunk, CHUNKS);
                // Paced by the stage-1 tasks: the next chunk once both pipelines' tasks have
                // committed as far as there are orders (their records in the checkpoint topic,
                // which a kill cannot lose, unlike a progress line).
                let sent = (all.len() * (chunk + 1)).div_ceil(CHUNKS) as u64;
                let deadline = Instant::now() + PATIENCE;
                while ["rate", "sessions"].iter().any(|g| stage_one_committed(&brokers, g) < sent) {
                    if Instant::now() >= deadline {
                        if std::env::var_os("WEIR_TEST_HOLD_ON_STALL").is_some() {
                            eprintln!("STALLED at chunk {chunk}: holding 120 s for a look");
                            std::thread::sleep(Duration::from_secs(120));
                        }
                        produced.store(true, Ordering::SeqCst);
                        return Err(format!("chunk {chunk} was not read in {PATIENCE:?}"));
                    }
                    std::thread::sleep(Duration::from_millis(50));
                }
            }
            produce_closers(&brokers, &dir, &all);
            produced.store(true, Ordering::SeqCst);
            Ok(())
        })
    };
    let steady = [start_leader_of_all(&files(1), &read), Member::start_all(&files(2), read.clone())];
    let mut victim = Member::start_all(&files(0), read.clone());
    let mut visitor: Option<Member> = None;
    let mut mid_run = 0;
    // Every killed incarnation's log, for a failure's message.
    let mut killed = String::new();
    for kill in 0..KILLS {
        // At least one batch: each incarnation takes part in a rebalance before it dies.
        let n = 1 + below(3) as usize;
        let lived = Instant::now();
        let waited = victim.wait_batches_unless(victim.batches.load(Ordering::SeqCst), n, &produced);
        mid_run += usize::from(waited);
        victim.kill();
        killed.push_str(&format!(
            "==== victim incarnation {kill}, killed after {:?} ({}):\n{}",
            lived.elapsed(),
            if waited { format!("{n} batches") } else { "the input was all produced".into() },
            victim.log()
        ));
        victim = Member::start_all(&files(0), read.clone());
        if kill == KILLS / 2 {
            visitor = Some(Member::start_all(&files(3), read.clone()));
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
    if let Err(e) = producer.join().unwrap() {
        let labels = ["the victim", "the first (leader)", "the second"];
        let logs: String = [&victim, &steady[0], &steady[1]]
            .iter()
            .zip(labels)
            .map(|(m, l)| format!("==== {l}'s log:\n{}", m.log()))
            .collect();
        panic!("{e}; logs:\n{killed}{logs}");
    }
    check_windows(dir.path(), &want, &[&victim, &steady[0], &steady[1]]);
    for m in std::iter::once(victim).chain(steady) {
        let (status, log) = m.stop();
        assert!(status.success(), "a member failed: {status}\n{log}");
    }
}

/// The restores a process logged: (bytes of state, milliseconds) of each stage-2 task it
/// restored from the changelog.
fn restores(log: &str) -> Vec<(u64, f64)> {
    log.lines()
        .filter(|l| l.contains("restored from the changelog"))
        .filter_map(|l| {
            let bytes = l.split(" entries and ").nth(1)?.split(' ').next()?.parse().ok()?;
            let ms = l.split(" ms in all").next()?.rsplit(", ").next()?.parse().ok()?;
            Some((bytes, ms))
        })
        .collect()
}

/// Stage-2 tasks move while their state is large: per-user sessions over 100,000 orders, with
/// a watermark that closes none of them until the end, are held by one process; a second joins,
/// the first leaves, and the second restores every stage-2 task's state from the changelog.
/// The windows are those of one process that never moved. Prints the restore times per MB of
/// state.
#[test]
fn stage_two_state_restored_from_the_changelog_gives_the_same_windows() {
    let _alone = one_at_a_time();
    let dir = tempfile::tempdir().unwrap();
    let broker = Tansu::start(&dir.path().join("tansu"));
    broker.create_topic("orders", PARTITIONS);
    let brokers = broker.brokers();
    let all = windowed_input(dir.path(), 100_000);
    let delay = "10 minutes";
    let want = references(&all, 600_000);
    let read = Arc::new(AtomicUsize::new(0));
    let sessions_only = |i: usize| vec![windowed_pipelines(dir.path(), &brokers, i, delay).remove(1)];
    let want = BTreeMap::from([("sessions", want["sessions"].clone())]);
    let a = start_leader_of_all(&sessions_only(0), &read);
    produce_chunk(&brokers, dir.path(), &all, 0, 1);
    let deadline = Instant::now() + PATIENCE;
    while read.load(Ordering::SeqCst) < all.len() {
        assert!(Instant::now() < deadline, "the first process never read the input:\n{}", a.log());
        std::thread::sleep(Duration::from_millis(50));
    }
    // Its stage-2 tasks have merged everything once their lag is 0 (`weir inspect`).
    wait_caught_up(&sessions_only(0)[0]);
    // `b` joins and is given tasks (which, of either stage, is the assignor's choice); then
    // `a` leaves and `b` holds every task, each stage-2 one restored from the changelog.
    let b = Member::start_all(&sessions_only(1), read.clone());
    b.wait_log("assigned to this process");
    let (status, log) = a.stop();
    assert!(status.success(), "the first process failed: {status}\n{log}");
    b.wait_logged("restored from the changelog", PARTITIONS as usize);
    produce_closers(&brokers, dir.path(), &all);
    check_windows(dir.path(), &want, &[&b]);
    let (status, log) = b.stop();
    assert!(status.success(), "the second process failed: {status}\n{log}");
    for l in log.lines().filter(|l| l.contains("restored from the changelog")) {
        eprintln!("{l}");
    }
    let moved = restores(&log);
    let bytes: u64 = moved.iter().map(|(b, _)| b).sum();
    let slowest = moved.iter().map(|(_, ms)| *ms).fold(0.0, f64::max);
    assert!(bytes > 0, "no state moved: {log}");
    eprintln!(
        "restored {} stage-2 tasks side by side: {:.2} MB of state, the slowest task in {slowest:.0} ms (read, \
         applied, and written again under the new epoch)",
        moved.len(),
        bytes as f64 / 1e6,
    );
}

/// How far group `group`'s tasks of the input have committed, summed over the input's
/// partitions: the furthest `orders` position any commit in the group's checkpoint topic names
/// (a kill cannot lose a commit there, as it can a progress line; a zombie's commit is never
/// further than its task's new owner goes).
fn stage_one_committed(brokers: &str, group: &str) -> u64 {
    use rdkafka::consumer::{BaseConsumer, Consumer};
    use rdkafka::message::Message;
    let topic = format!("weir.{group}.checkpoints");
    let consumer: BaseConsumer = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .set("group.id", "weir-test-pacing")
        .set("enable.auto.commit", "false")
        .set("fetch.wait.max.ms", "5")
        .create()
        .unwrap();
    let md = consumer.fetch_metadata(Some(&topic), Duration::from_secs(5)).unwrap();
    let mut tpl = rdkafka::TopicPartitionList::new();
    let mut ends = BTreeMap::new();
    for p in md.topics()[0].partitions() {
        let (_, high) = consumer.fetch_watermarks(&topic, p.id(), Duration::from_secs(5)).unwrap();
        if high > 0 {
            tpl.add_partition_offset(&topic, p.id(), rdkafka::Offset::Beginning).unwrap();
            ends.insert(p.id(), high);
        }
    }
    if ends.is_empty() {
        return 0;
    }
    consumer.assign(&tpl).unwrap();
    let mut furthest: BTreeMap<i64, u64> = BTreeMap::new();
    let deadline = Instant::now() + PATIENCE;
    while !ends.is_empty() {
        assert!(Instant::now() < deadline, "{topic} was never read to its end");
        let Some(Ok(m)) = consumer.poll(Duration::from_millis(50)) else { continue };
        if ends.get(&m.partition()).is_some_and(|&end| m.offset() + 1 >= end) {
            ends.remove(&m.partition());
        }
        let Some(record) = m.payload().and_then(|p| serde_json::from_slice::<serde_json::Value>(p).ok()) else {
            continue;
        };
        let partitions = record["meta"]["source"]["partitions"].as_array().cloned().unwrap_or_default();
        for p in partitions.iter().filter(|p| p["topic"] == "orders") {
            let at = furthest.entry(p["partition"].as_i64().unwrap()).or_default();
            *at = (*at).max(p["offset"].as_u64().unwrap());
        }
    }
    furthest.values().sum()
}

/// Waits until `weir inspect` shows every task of the pipeline's group at lag 0.
fn wait_caught_up(pipeline: &Path) {
    let deadline = Instant::now() + PATIENCE;
    loop {
        let out = weir().arg("inspect").arg(pipeline).output().unwrap();
        let view = String::from_utf8_lossy(&out.stdout).to_string();
        assert!(out.status.success(), "weir inspect failed: {}", String::from_utf8_lossy(&out.stderr));
        let tasks: Vec<&str> = view.lines().filter(|l| l.starts_with("task ")).collect();
        if tasks.len() == 2 * PARTITIONS as usize && tasks.iter().all(|l| l.contains("; lag 0;")) {
            return;
        }
        assert!(Instant::now() < deadline, "the group never caught up:\n{view}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Three processes, then one (two leave), then three again (two join), with orders arriving
/// at each: the windows are one process's.
#[test]
fn scaling_down_to_one_process_and_back_up_gives_the_same_windows() {
    let _alone = one_at_a_time();
    let dir = tempfile::tempdir().unwrap();
    let broker = Tansu::start(&dir.path().join("tansu"));
    broker.create_topic("orders", PARTITIONS);
    let brokers = broker.brokers();
    let all = windowed_input(dir.path(), 30_000);
    let want = references(&all, DELAY_MS);
    let read = Arc::new(AtomicUsize::new(0));
    let files = |i: usize| windowed_pipelines(dir.path(), &brokers, i, "40 seconds");
    let wait_read = |n: usize, members: &[&Member]| {
        let deadline = Instant::now() + PATIENCE;
        while read.load(Ordering::SeqCst) < 2 * n {
            let logs: String = members.iter().map(|m| m.log()).collect();
            assert!(Instant::now() < deadline, "the input was never read; logs:\n{logs}");
            std::thread::sleep(Duration::from_millis(50));
        }
    };
    let leader = start_leader_of_all(&files(0), &read);
    let others = [Member::start_all(&files(1), read.clone()), Member::start_all(&files(2), read.clone())];
    for m in &others {
        m.wait_log("assigned to this process");
    }
    produce_chunk(&brokers, dir.path(), &all, 0, 3);
    wait_read(all.len() / 3, &[&leader, &others[0], &others[1]]);
    for m in others {
        let (status, log) = m.stop();
        assert!(status.success(), "a process did not leave cleanly: {status}\n{log}");
    }
    produce_chunk(&brokers, dir.path(), &all, 1, 3);
    wait_read(2 * all.len() / 3, &[&leader]);
    let others = [Member::start_all(&files(1), read.clone()), Member::start_all(&files(2), read.clone())];
    for m in &others {
        m.wait_log("assigned to this process");
    }
    produce_chunk(&brokers, dir.path(), &all, 2, 3);
    produce_closers(&brokers, dir.path(), &all);
    check_windows(dir.path(), &want, &[&leader, &others[0], &others[1]]);
    for m in std::iter::once(leader).chain(others) {
        let (status, log) = m.stop();
        assert!(status.success(), "a member failed: {status}\n{log}");
    }
}

// The Kafka sink in a group, on the mock broker (tansu spins on the record headers the sink
// writes; librdkafka's mock cluster has transactions).

/// Not a test on its own: the mock broker of the Kafka sink's group test, as a process of its
/// own (this test binary, started again for this test alone), so that it outlives the members
/// the test kills. Prints its address, then serves until its stdin closes.
#[test]
#[ignore = "a helper process of the_kafka_sink_in_a_group_writes_every_record_once_through_kills"]
fn mock_broker_process() {
    if std::env::var_os("WEIR_TEST_MOCK_BROKER").is_none() {
        return;
    }
    let cluster = rdkafka::mocking::MockCluster::new(1).unwrap();
    // The mock does not answer CreateTopics: every topic the test's groups use, made here
    // (`MockBroker::start` lists them).
    let topics = std::env::var("WEIR_TEST_MOCK_TOPICS").unwrap();
    for t in topics.split(',') {
        let (name, partitions) = t.split_once(':').unwrap();
        cluster.create_topic(name, partitions.parse().unwrap(), 1).unwrap();
    }
    println!("bootstrap {}", cluster.bootstrap_servers());
    let mut rest = String::new();
    let _ = std::io::Read::read_to_string(&mut std::io::stdin(), &mut rest);
}

/// The broker a test that can run on either uses: librdkafka's mock with the topics of
/// groups `stateless` and `windowed` ([`MockBroker::start`]), or tansu with `WEIR_TEST_ON_TANSU`
/// (it makes a group's topics itself). It runs for as long as this lives.
struct Broker {
    mock: Option<MockBroker>,
    _tansu: Option<Tansu>,
    brokers: String,
}

impl Broker {
    fn start(dir: &Path, stateless: &[&str], windowed: &[&str]) -> Broker {
        if std::env::var_os("WEIR_TEST_ON_TANSU").is_some() {
            let tansu = Tansu::start(&dir.join("tansu"));
            tansu.create_topic("orders", PARTITIONS);
            Broker { brokers: tansu.brokers(), mock: None, _tansu: Some(tansu) }
        } else {
            let mock = MockBroker::start(stateless, windowed);
            Broker { brokers: mock.brokers.clone(), mock: Some(mock), _tansu: None }
        }
    }
}

/// The mock broker in a process of its own; killed when dropped.
struct MockBroker {
    child: Child,
    brokers: String,
}

impl MockBroker {
    /// The broker, with the `orders` and `alerts` topics and those of groups `stateless` (one
    /// stage) and `windowed` (two stages), and an input of its own for each windowed group,
    /// `orders.GROUP` (for a measurement whose input outgrows what the mock keeps).
    fn start(stateless: &[&str], windowed: &[&str]) -> MockBroker {
        let p = PARTITIONS;
        let mut topics = vec![format!("orders:{p}"), format!("alerts:{p}")];
        topics.extend(stateless.iter().map(|g| format!("weir.{g}.checkpoints:{p}")));
        for g in windowed {
            topics.push(format!("orders.{g}:{p}"));
            topics.push(format!("weir.{g}.checkpoints:{}", 2 * p));
            topics.push(format!("weir.{g}.repartition:{p}"));
            topics.push(format!("weir.{g}.changelog:{p}"));
        }
        let mut child = std::process::Command::new(std::env::current_exe().unwrap())
            .args(["--exact", "mock_broker_process", "--ignored", "--nocapture", "--test-threads", "1"])
            .env("WEIR_TEST_MOCK_BROKER", "1")
            .env("WEIR_TEST_MOCK_TOPICS", topics.join(","))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let brokers = BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
            // libtest may print the test's name on the same line first.
            .find_map(|l| l.split_once("bootstrap ").map(|(_, b)| b.trim().to_string()))
            .expect("the mock broker printed its address");
        MOCKS.lock().unwrap_or_else(|e| e.into_inner()).push(brokers.clone());
        MockBroker { child, brokers }
    }
}

impl Drop for MockBroker {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        // Its port is free again: a later broker (tansu) may get the same address.
        MOCKS.lock().unwrap_or_else(|e| e.into_inner()).retain(|m| *m != self.brokers);
    }
}

/// The stateless orders pipeline in group `alerting`, writing ERROR and PENDING orders to the
/// `alerts` topic through the transactional Kafka sink (a transactional id per task).
fn kafka_sink_pipeline(dir: &Path, brokers: &str) -> PathBuf {
    let text = format!(
        r#"
name = "alerting"
[source]
{source}
starting_offsets = "earliest"
[trigger]
{MICRO_BATCHES}
[parse]
plugin = "{parse}"
[[transform]]
plugin = "{filter}"
config = {{ keep = ["ERROR", "PENDING"] }}
[sink]
type = "kafka"
topic = "alerts"
kafka.bootstrap.servers = "{brokers}"
[scale]
group = "alerting"
"#,
        source = group_source(brokers, "orders", 500),
        parse = component("orders_json").display(),
        filter = component("status_filter").display(),
    );
    let p = dir.join("alerting.toml");
    std::fs::write(&p, text).unwrap();
    p
}

/// Three processes share a stateless pipeline whose sink is the transactional Kafka sink; one is
/// killed with `kill -9` ten times and restarted. Every wanted order is in the output topic, in
/// exactly one delivery (checkpoint identity and batch id, from the sink's headers): a batch
/// re-run by a task's next owner is the same delivery with the same rows. The mock broker shows
/// a `read_committed` reader the records of aborted transactions too (a batch a kill left open),
/// which a Kafka broker hides, so a delivery may be read more than once here; what must hold is
/// that no order is in two deliveries and that every delivery is one of the tasks'.
#[test]
fn the_kafka_sink_in_a_group_writes_every_record_once_through_kills() {
    let _alone = one_at_a_time();
    let broker = MockBroker::start(&["alerting"], &[]);
    let brokers = broker.brokers.clone();
    let dir = tempfile::tempdir().unwrap();
    let p = kafka_sink_pipeline(dir.path(), &brokers);
    let all = input(dir.path(), 24_000);
    let want = wanted(&all);
    const KILLS: usize = 10;
    const CHUNKS: usize = 40;
    let read = Arc::new(AtomicUsize::new(0));
    let produced = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let producer = {
        let (brokers, dir, all, produced) = (brokers.clone(), dir.path().to_path_buf(), all.clone(), produced.clone());
        std::thread::spawn(move || {
            for chunk in 0..CHUNKS {
                produce_chunk(&brokers, &dir, &all, chunk, CHUNKS);
                // The next chunk once the tasks have committed this one (their checkpoint records).
                let sent = (all.len() * (chunk + 1)).div_ceil(CHUNKS) as u64;
                let deadline = Instant::now() + PATIENCE;
                while stage_one_committed(&brokers, "alerting") < sent && Instant::now() < deadline {
                    std::thread::sleep(Duration::from_millis(50));
                }
            }
            produced.store(true, Ordering::SeqCst);
        })
    };
    let start = |i: usize| Member::start_counted(&p, &dir.path().join(format!("process-{i}")), read.clone());
    let leader = start(1);
    leader.wait_log("assigned to this process");
    let steady = start(2);
    let mut victim = start(0);
    for kill in 0..KILLS {
        let n = 1 + kill % 3;
        victim.wait_batches_unless(victim.batches.load(Ordering::SeqCst), n, &produced);
        victim.kill();
        victim = start(0);
    }
    producer.join().unwrap();
    let found = |out: &[Out]| {
        let ids: BTreeSet<u64> = out.iter().filter_map(|o| o.value["order_id"].as_u64()).collect();
        want.iter().all(|id| ids.contains(id))
    };
    let out = read_topic(&brokers, "alerts", found, PATIENCE);
    // The delivery each order is in.
    let mut owner: BTreeMap<u64, (String, u64)> = BTreeMap::new();
    for o in &out {
        let d = (o.checkpoint.clone().expect("a checkpoint header"), o.batch.expect("a batch header"));
        let id = o.value["order_id"].as_u64().unwrap();
        if let Some(other) = owner.insert(id, d.clone()) {
            assert_eq!(other, d, "order {id} is in two deliveries");
        }
    }
    let stray: Vec<_> = owner.keys().filter(|id| !want.contains(id)).collect();
    assert!(stray.is_empty(), "delivered but not wanted: {stray:?}");
    assert_eq!(owner.len(), want.len());
    let identities: BTreeSet<&String> = owner.values().map(|(c, _)| c).collect();
    assert_eq!(identities.len(), PARTITIONS as usize, "one identity per task, whoever ran it");
    for m in [victim, steady, leader] {
        let (status, log) = m.stop();
        assert!(status.success(), "a member failed: {status}\n{log}");
    }
}

/// Not a test: the measurement in `docs/performance.md` ("Scale-out"), on the mock broker. The
/// error rate over 10-second windows and per user session, of 240,000 orders read from the
/// 6-partition topic:
/// by one process without a group (one stage), and by a group of one process and of two (two
/// stages through the shuffle), interleaved over `WEIR_TEST_ROUNDS` (3). Throughput is the
/// orders over the time from the first batch's start to the last batch's end (the progress lines say both), which
/// leaves out start-up and the group's first rebalance (about 3 s on the mock). Prints the
/// median time of each step of a batch per stage, and the shuffle's cost per order (messages
/// and bytes in the repartition topic).
///
/// `cargo test --release -p weir --test scale_out -- --ignored --nocapture measure_windows`
#[test]
#[ignore]
fn measure_windows_in_two_stages_against_one() {
    let _alone = one_at_a_time();
    // The mock keeps 5 MiB per partition: 240,000 orders fit. WEIR_TEST_ON_TANSU measures on
    // tansu instead, with WEIR_TEST_ORDERS orders (a longer run, where batches reach full size).
    let orders: u64 = std::env::var("WEIR_TEST_ORDERS").ok().and_then(|n| n.parse().ok()).unwrap_or(240_000);
    // WEIR_TEST_BATCH: the largest batch (`max_offsets_per_trigger`). Small enough that a task's
    // batches reach it early, it compares the two paths at the same batch size.
    let max_batch: usize = std::env::var("WEIR_TEST_BATCH").ok().and_then(|n| n.parse().ok()).unwrap_or(50_000);
    let rounds: usize = std::env::var("WEIR_TEST_ROUNDS").ok().and_then(|n| n.parse().ok()).unwrap_or(3);
    // WEIR_TEST_KINDS (`rate`, `sessions`) and WEIR_TEST_PROCESSES (`0` one process, one stage;
    // `1`, `2` a group of so many) narrow the run, to profile one case.
    let only = |var: &str, what: &str| std::env::var(var).map_or(true, |v| v.split(',').any(|x| x == what));
    let kinds: Vec<_> = [
        ("rate", "type = \"tumbling\"\nsize = \"10 seconds\"", "{}"),
        ("sessions", "type = \"session\"\ngap = \"2 seconds\"", "{ key_by_user = true }"),
    ]
    .into_iter()
    .filter(|(k, _, _)| only("WEIR_TEST_KINDS", k))
    .collect();
    // WEIR_TEST_CHUNKS=N (the mock only): each run reads an input of its own, produced in N
    // chunks while it runs, at most LIVE_AHEAD chunks ahead of what it has committed, so the
    // input may outgrow the 5 MiB per partition the mock keeps and batches reach full size.
    let live: Option<usize> = std::env::var("WEIR_TEST_CHUNKS").ok().and_then(|n| n.parse().ok());
    const LIVE_AHEAD: usize = 3;
    let groups: Vec<String> = (0..rounds)
        .flat_map(|r| {
            kinds.iter().flat_map(move |(k, _, _)| [format!("{k}{r}x0"), format!("{k}{r}x1"), format!("{k}{r}x2")])
        })
        .collect();
    let group_refs: Vec<&str> = groups.iter().map(String::as_str).collect();
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start(dir.path(), &[], &group_refs);
    let brokers = broker.brokers.clone();
    let broker_pid = broker.mock.as_ref().map(|m| m.child.id());
    let all = input(dir.path(), orders);
    if live.is_none() {
        produce_chunk(&brokers, dir.path(), &all, 0, 1);
        produce_closers(&brokers, dir.path(), &all);
    }
    let references = references(&all, DELAY_MS);
    let mut results: BTreeMap<String, Vec<f64>> = BTreeMap::new();
    for round in 0..rounds {
        for &(kind, window, parse_config) in &kinds {
            let want = references[kind].len();
            for (mode, processes) in
                [("one process, one stage", 0usize), ("a group of 1, two stages", 1), ("a group of 2, two stages", 2)]
            {
                if !only("WEIR_TEST_PROCESSES", &processes.to_string()) {
                    continue;
                }
                let run = dir.path().join(format!("run-{kind}-{round}-{processes}"));
                let out = run.join("out");
                std::fs::create_dir_all(&out).unwrap();
                let group = format!("{kind}{round}x{processes}");
                let topic = if live.is_some() { format!("orders.{group}") } else { "orders".to_string() };
                let mut produced = 0;
                if let Some(chunks) = live {
                    while produced < chunks.min(LIVE_AHEAD) {
                        produce_chunk_to(&brokers, &topic, dir.path(), &all, produced, chunks);
                        produced += 1;
                    }
                }
                let scale = if processes > 0 { format!("[scale]\ngroup = \"{group}\"") } else { String::new() };
                let text = format!(
                    "name = \"{kind}\"\n[source]\n{}\nstarting_offsets = \"earliest\"\n[trigger]\n{MICRO_BATCHES}\n\
                     [parse]\nplugin = \"{}\"\nconfig = {parse_config}\n[watermark]\ndelay = \"40 seconds\"\n[window]\n\
                     {window}\n[aggregate]\nplugin = \"{}\"\n{}\n{scale}\n",
                    kafka_source(&brokers, &topic, max_batch),
                    component("orders_json").display(),
                    component("error_rate").display(),
                    file_sink(&out),
                );
                let p = run.join(format!("{kind}.toml"));
                std::fs::write(&p, text).unwrap();
                let members: Vec<Member> =
                    (0..processes.max(1)).map(|i| Member::start(&p, &run.join(format!("cp-{i}")))).collect();
                let deadline = Instant::now() + PATIENCE;
                // CPU time of the members and the broker from the first progress line on (start-up
                // left out), to the last window.
                let pids = || members.iter().map(|m| m.child.id()).collect::<Vec<_>>();
                let mut cpu_from = None;
                let mut closed = live.is_none();
                while delivered_rows(&out).len() < want {
                    assert!(Instant::now() < deadline, "{kind}, {mode}: the windows never all came");
                    if let Some(chunks) = live {
                        // Orders the input's tasks (or the one process) committed.
                        let read: u64 = members
                            .iter()
                            .map(|m| {
                                let tasks = m.tasks.lock().unwrap();
                                let input =
                                    tasks.iter().filter(|v| !v["name"].as_str().unwrap_or("").contains("repartition"));
                                input.map(|v| v["numInputRows"].as_u64().unwrap_or(0)).sum::<u64>()
                            })
                            .sum();
                        let per = orders.div_ceil(chunks as u64);
                        while produced < chunks && read >= (produced + 1).saturating_sub(LIVE_AHEAD) as u64 * per {
                            produce_chunk_to(&brokers, &topic, dir.path(), &all, produced, chunks);
                            produced += 1;
                        }
                        if produced == chunks && !closed {
                            produce_closers_to(&brokers, &topic, dir.path(), &all);
                            closed = true;
                        }
                    }
                    if cpu_from.is_none() && members.iter().any(|m| !m.tasks.lock().unwrap().is_empty()) {
                        cpu_from = Some((cpu_seconds(&pids()), broker_pid.map(|b| cpu_seconds(&[b]))));
                    }
                    std::thread::sleep(Duration::from_millis(20));
                }
                let (weir_from, broker_from) = cpu_from.unwrap_or_default();
                let weir_cpu = cpu_seconds(&pids()) - weir_from;
                let broker_cpu = broker_pid.map(|b| cpu_seconds(&[b])).zip(broker_from).map(|(t, f)| t - f);
                // From the first batch's start to the last batch's end, and each step's median.
                let (mut first, mut last) = (f64::MAX, f64::MIN);
                let mut steps: BTreeMap<(&str, String), Vec<f64>> = BTreeMap::new();
                for m in &members {
                    for v in m.tasks.lock().unwrap().iter() {
                        let Some(end) = v["timestamp"].as_str().and_then(|t| humantime::parse_rfc3339(t).ok()) else {
                            continue;
                        };
                        let end = end.duration_since(std::time::UNIX_EPOCH).unwrap().as_secs_f64();
                        let total = v["durationMs"]["totalMs"].as_f64().unwrap_or(0.0) / 1e3;
                        first = first.min(end - total);
                        last = last.max(end);
                        let stage = if v["name"].as_str().unwrap_or("").contains("repartition") {
                            "stage 2"
                        } else {
                            "stage 1"
                        };
                        for (k, ms) in v["durationMs"].as_object().into_iter().flatten() {
                            steps.entry((stage, k.clone())).or_default().push(ms.as_f64().unwrap_or(0.0));
                        }
                    }
                }
                let rate = orders as f64 / (last - first);
                let per_cpu = orders as f64 / weir_cpu;
                let broker_line = broker_cpu.map(|b| format!(", the broker's {:.2} CPU-seconds", b));
                eprintln!(
                    "{kind}, {mode}, round {round}: {rate:.0} orders/s; {per_cpu:.0} orders per CPU-second of Weir{}",
                    broker_line.unwrap_or_default()
                );
                results.entry(format!("{kind}: {mode}")).or_default().push(rate);
                results.entry(format!("{kind}: {mode}, per CPU-second")).or_default().push(per_cpu);
                let medians: Vec<String> = steps
                    .iter_mut()
                    .map(|((stage, k), v)| {
                        v.sort_by(f64::total_cmp);
                        format!("{stage} {k} {:.1}", v[v.len() / 2])
                    })
                    .collect();
                let batches: Vec<String> = ["stage 1", "stage 2"]
                    .iter()
                    .filter_map(|stage| {
                        steps.get(&(*stage, "totalMs".to_string())).map(|v| format!("{stage} {}", v.len()))
                    })
                    .collect();
                eprintln!(
                    "{kind}, {mode}, round {round}: batches {}; median ms per batch: {}",
                    batches.join(", "),
                    medians.join(", ")
                );
                for m in members {
                    m.stop();
                }
                if processes > 0 {
                    let (messages, bytes) = topic_size(&brokers, &format!("weir.{group}.repartition"));
                    eprintln!(
                        "{kind}, {mode}, round {round}: shuffle {messages} messages, {bytes} bytes: {:.4} messages \
                         and {:.2} bytes per order",
                        messages as f64 / orders as f64,
                        bytes as f64 / orders as f64
                    );
                }
            }
        }
    }
    eprintln!("| pipeline: mode | orders/s, each round |");
    eprintln!("|---|---|");
    for (mode, r) in &results {
        let rates: Vec<String> = r.iter().map(|rate| format!("{rate:.0}")).collect();
        eprintln!("| {mode} | {} |", rates.join(", "));
    }
}

/// User and system CPU seconds the processes `pids` have used (`/proc/PID/stat`; a process
/// gone counts nothing).
fn cpu_seconds(pids: &[u32]) -> f64 {
    // SAFETY: sysconf only reads a constant of the system.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    let mut total = 0.0;
    for pid in pids {
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else { continue };
        // Fields after the command's closing parenthesis: utime and stime are the 12th and 13th.
        let Some((_, rest)) = stat.rsplit_once(')') else { continue };
        let fields: Vec<&str> = rest.split_whitespace().collect();
        let field = |i: usize| fields.get(i).and_then(|f| f.parse::<f64>().ok()).unwrap_or(0.0);
        total += (field(11) + field(12)) / ticks;
    }
    total
}

/// Messages in `topic` and the bytes of their values.
fn topic_size(brokers: &str, topic: &str) -> (u64, u64) {
    use rdkafka::consumer::{BaseConsumer, Consumer};
    use rdkafka::message::Message;
    let consumer: BaseConsumer = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .set("group.id", "weir-test-size")
        .set("fetch.wait.max.ms", "5")
        .create()
        .unwrap();
    let md = consumer.fetch_metadata(Some(topic), Duration::from_secs(5)).unwrap();
    let mut tpl = rdkafka::TopicPartitionList::new();
    let mut left = 0;
    for p in md.topics()[0].partitions() {
        let (low, high) = consumer.fetch_watermarks(topic, p.id(), Duration::from_secs(5)).unwrap();
        left += high - low;
        tpl.add_partition_offset(topic, p.id(), rdkafka::Offset::Beginning).unwrap();
    }
    consumer.assign(&tpl).unwrap();
    let (mut messages, mut bytes) = (0, 0);
    let deadline = Instant::now() + PATIENCE;
    while messages < left as u64 {
        assert!(Instant::now() < deadline, "{topic} was never read to its end");
        if let Some(Ok(m)) = consumer.poll(Duration::from_millis(50)) {
            messages += 1;
            bytes += m.payload().map_or(0, <[u8]>::len) as u64;
        }
    }
    (messages, bytes)
}

/// A zombie in two stages: process `b`, paused (SIGSTOP) past its session timeout, loses its
/// tasks of both stages to `a`, which restores their stage-2 state from the changelog. Resumed,
/// `b` gives its tasks up or is fenced, and whatever it writes meanwhile (repartition messages,
/// changelog records of an older epoch) changes nothing: the windows are one process's. On the
/// mock broker, whose coordinator moves an evicted member's tasks (see the kill loop's comment).
#[test]
fn a_paused_process_in_two_stages_is_fenced_and_the_windows_hold() {
    let _alone = one_at_a_time();
    let dir = tempfile::tempdir().unwrap();
    let broker = MockBroker::start(&[], &["rate", "sessions"]);
    let brokers = broker.brokers.clone();
    let all = windowed_input(dir.path(), 30_000);
    let want = references(&all, DELAY_MS);
    let read = Arc::new(AtomicUsize::new(0));
    let files = |i: usize| windowed_pipelines(dir.path(), &brokers, i, "40 seconds");
    let committed = |n: usize| {
        let deadline = Instant::now() + PATIENCE;
        while ["rate", "sessions"].iter().any(|g| stage_one_committed(&brokers, g) < n as u64) {
            assert!(Instant::now() < deadline, "the input was never committed as far as {n}");
            std::thread::sleep(Duration::from_millis(100));
        }
    };
    let a = start_leader_of_all(&files(0), &read);
    let b = Member::start_all(&files(1), read.clone());
    b.wait_logged("assigned to this process", 2);
    produce_chunk(&brokers, dir.path(), &all, 0, 3);
    committed(all.len() / 3);
    unsafe { libc::kill(b.child.id() as i32, libc::SIGSTOP) };
    // `a` can only get this far by taking `b`'s tasks, once `b` is evicted.
    produce_chunk(&brokers, dir.path(), &all, 1, 3);
    committed(2 * all.len() / 3);
    unsafe { libc::kill(b.child.id() as i32, libc::SIGCONT) };
    produce_chunk(&brokers, dir.path(), &all, 2, 3);
    produce_closers(&brokers, dir.path(), &all);
    check_windows(dir.path(), &want, &[&a, &b]);
    let (_, b_log) = b.stop();
    let (status, log) = a.stop();
    assert!(status.success(), "the process that stayed failed: {status}\n{log}");
    assert!(
        b_log.contains("revoked") || b_log.contains("fenced"),
        "the resumed process neither gave up its tasks nor was fenced:\n{b_log}"
    );
}
