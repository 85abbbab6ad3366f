//! What every scale-out test uses: the group's pipeline files, a member process followed
//! through its progress lines, producing the input and checking what the sink delivered.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::common::kafka::*;
use crate::common::*;

pub(crate) const PARTITIONS: u32 = 6;

/// Held by each test for its whole run: every test runs a broker and several processes, and on
/// two cores two such tests side by side starve the members' heartbeats into rebalances.
pub(crate) static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

pub(crate) fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner())
}
pub(crate) const MICRO_BATCHES: &str = "mode = \"processing-time\"\ninterval = \"20ms\"";
/// How long any one wait in these tests may take before it fails.
pub(crate) const PATIENCE: Duration = Duration::from_secs(180);
/// The group's session timeout in the tests' pipelines, against the product's 10 s: a killed or
/// paused member keeps its tasks until it passes, so the kill loops waited that long at every
/// kill (the three took 560 s in all, and 266 s at 3 s). Three heartbeats (one a second) still
/// fit in it. On the consumer protocol the broker sets it (`common/apache_kafka.rs`, the same
/// 3 s), and the client refuses the option.
pub(crate) const TEST_SESSION_TIMEOUT: &str = "kafka.session.timeout.ms = \"3000\"";

/// The addresses of the brokers whose groups speak the consumer protocol ([`Broker::kafka`],
/// until dropped).
pub(crate) static CONSUMER_PROTOCOL: Mutex<Vec<String>> = Mutex::new(Vec::new());

/// The Kafka source of a group's pipeline: `topic` on `brokers`, read `batch` records at a time
/// at most, in the group protocol the broker's test asked for.
pub(crate) fn group_source(brokers: &str, topic: &str, batch: usize) -> String {
    let source = kafka_source(brokers, topic, batch);
    let consumer = CONSUMER_PROTOCOL.lock().unwrap_or_else(|e| e.into_inner()).iter().any(|m| m == brokers);
    if consumer {
        format!("{source}\nkafka.group.protocol = \"consumer\"")
    } else {
        format!("{source}\n{TEST_SESSION_TIMEOUT}")
    }
}

/// The stateless orders pipeline in group `scaled`: ERROR and PENDING orders to the file sink,
/// triggered as `trigger` (a `[trigger]` table's lines).
pub(crate) fn group_pipeline(dir: &Path, brokers: &str, trigger: &str) -> PathBuf {
    pipeline_file(dir, brokers, trigger, "scaled", Some("scaled"), 500)
}

/// The orders pipeline `name` writing to `dir/out`, in consumer group `group` if given.
pub(crate) fn pipeline_file(
    dir: &Path,
    brokers: &str,
    trigger: &str,
    name: &str,
    group: Option<&str>,
    batch: usize,
) -> PathBuf {
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
pub(crate) struct Member {
    pub(crate) child: Child,
    pub(crate) batches: Arc<AtomicUsize>,
    /// The progress lines of its tasks, in order.
    pub(crate) tasks: Arc<Mutex<Vec<serde_json::Value>>>,
    /// The process's roll-ups of its tasks' progress, in order.
    pub(crate) rollups: Arc<Mutex<Vec<serde_json::Value>>>,
    pub(crate) log: Arc<Mutex<String>>,
}

/// A member the test did not stop (it failed first) is killed, not left running.
impl Drop for Member {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Member {
    pub(crate) fn start(pipeline: &Path, checkpoint: &Path) -> Member {
        Member::start_counted(pipeline, checkpoint, Arc::default())
    }

    /// [`Member::start`], the input rows its tasks commit added to `read`.
    pub(crate) fn start_counted(pipeline: &Path, checkpoint: &Path, read: Arc<AtomicUsize>) -> Member {
        Member::spawn(&[pipeline.as_os_str(), "--checkpoint".as_ref(), checkpoint.as_os_str()], read)
    }

    /// A process running several pipelines (each with its own `checkpoint.location`); the input
    /// rows its stage-1 tasks commit are added to `read`.
    pub(crate) fn start_all(pipelines: &[PathBuf], read: Arc<AtomicUsize>) -> Member {
        let args: Vec<&std::ffi::OsStr> = pipelines.iter().map(|p| p.as_os_str()).collect();
        Member::spawn(&args, read)
    }

    pub(crate) fn spawn(args: &[&std::ffi::OsStr], read: Arc<AtomicUsize>) -> Member {
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
                    TASK_LINES.ring();
                } else {
                    l.lock().unwrap().push_str(&(line + "\n"));
                }
            }
        });
        Member { child, batches, tasks, rollups, log }
    }

    /// The group's first member, returned once the group has assigned it every task.
    pub(crate) fn start_leader(pipeline: &Path, checkpoint: &Path) -> Member {
        let m = Member::start(pipeline, checkpoint);
        m.wait_log("assigned to this process");
        m
    }

    /// Waits until this process has committed `n` more batches than `from`.
    pub(crate) fn wait_batches(&self, from: usize, n: usize) {
        let never = std::sync::atomic::AtomicBool::new(false);
        self.wait_batches_unless(from, n, &never);
    }

    /// Waits until this process has committed `n` more batches than `from` (returns true), or
    /// `done` is raised (false).
    pub(crate) fn wait_batches_unless(&self, from: usize, n: usize, done: &std::sync::atomic::AtomicBool) -> bool {
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
    pub(crate) fn wait_log(&self, text: &str) {
        self.wait_logged(text, 1);
    }

    /// Waits until this process has logged `text` `n` times.
    pub(crate) fn wait_logged(&self, text: &str, n: usize) {
        let deadline = Instant::now() + PATIENCE;
        while self.log().matches(text).count() < n {
            assert!(Instant::now() < deadline, "never logged {text:?} {n} times:\n{}", self.log());
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The tasks this process committed batches of since its `from`th progress line.
    pub(crate) fn tasks_since(&self, from: usize) -> BTreeSet<String> {
        self.tasks.lock().unwrap().iter().skip(from).map(|v| v["name"].as_str().unwrap().to_string()).collect()
    }

    pub(crate) fn log(&self) -> String {
        self.log.lock().unwrap().clone()
    }

    /// The process's metrics, scraped from its `--metrics-addr` by HTTP.
    pub(crate) fn metrics(&self) -> String {
        let log = self.log();
        let url = log.lines().find_map(|l| l.strip_prefix("metrics at ")).expect("the metrics address is logged");
        ureq::get(url).call().unwrap().body_mut().read_to_string().unwrap()
    }

    /// The batches of each task in this process's progress lines.
    pub(crate) fn batches_per_task(&self) -> BTreeMap<String, u64> {
        let mut n = BTreeMap::new();
        for v in self.tasks.lock().unwrap().iter() {
            *n.entry(v["name"].as_str().unwrap().to_string()).or_default() += 1;
        }
        n
    }

    pub(crate) fn kill(&mut self) {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
    }

    /// SIGTERM, and the exit status once it has left the group. A process that stopped
    /// cleanly ends with a roll-up that adds up every task line it printed.
    pub(crate) fn stop(mut self) -> (std::process::ExitStatus, String) {
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
                // Stage 2's windows count in the roll-up and in the process's final summary.
                let windows: u64 = tasks.iter().map(|v| v["numWindowsEmitted"].as_u64().unwrap_or(0)).sum();
                assert_eq!(last["numWindowsEmitted"].as_u64(), Some(windows), "{last}");
                let log = self.log();
                let summary = log.lines().find(|l| l.starts_with(&format!("[{pipeline}] "))).expect("a final summary");
                let said = summary.split(" windows emitted").next().and_then(|s| s.rsplit(' ').next());
                assert_eq!(said.and_then(|n| n.parse().ok()), Some(windows), "the summary counts them: {summary}");
            }
        }
        drop(tasks);
        (status, self.log())
    }
}

/// Produces orders `lines` (a slice of the generated file) round-robin over the partitions.
pub(crate) fn produce_chunk(brokers: &str, dir: &Path, all: &[String], chunk: usize, of: usize) {
    produce_chunk_to(brokers, "orders", dir, all, chunk, of);
}

/// [`produce_chunk`] to `topic`.
pub(crate) fn produce_chunk_to(brokers: &str, topic: &str, dir: &Path, all: &[String], chunk: usize, of: usize) {
    let per = all.len().div_ceil(of);
    let part: Vec<&String> = all.iter().skip(chunk * per).take(per).collect();
    let file = dir.join(format!("chunk-{chunk}.jsonl"));
    let text: String = part.iter().map(|l| format!("{l}\n")).collect();
    std::fs::write(&file, text).unwrap();
    produce_lines(brokers, topic, PARTITIONS as i32, &file, false);
}

/// Waits until `a` (after its `before`th progress line) and `c` have between them delivered
/// batches of every task: a paused member's tasks have moved to them.
pub(crate) fn wait_tasks_taken_over(a: &Member, before: usize, c: &Member) {
    TASK_LINES.until(
        || a.tasks_since(before).union(&c.tasks_since(0)).count() >= PARTITIONS as usize,
        || format!("the paused member's tasks never moved:\n{}\n{}", a.log(), c.log()),
    );
}

/// Rung by every task progress line any member prints.
pub(crate) static TASK_LINES: Bell = Bell::new();

/// Rung when something a test waits for may have happened: its waits wake on it, not on time.
pub(crate) struct Bell {
    rung: Mutex<u64>,
    cv: std::sync::Condvar,
}

impl Bell {
    pub(crate) const fn new() -> Bell {
        Bell { rung: Mutex::new(0), cv: std::sync::Condvar::new() }
    }

    pub(crate) fn ring(&self) {
        if let Ok(mut n) = self.rung.lock() {
            *n += 1;
        }
        self.cv.notify_all();
    }

    /// Waits until `done()`, checked at every ring; fails with `what()` after [`PATIENCE`].
    pub(crate) fn until(&self, done: impl Fn() -> bool, what: impl Fn() -> String) {
        let deadline = Instant::now() + PATIENCE;
        // `done` is checked holding the bell, and what it reads is changed before a ring, so
        // nothing slips between a check and the wait.
        let mut n = self.rung.lock().unwrap_or_else(|e| e.into_inner());
        while !done() {
            let left = deadline.saturating_duration_since(Instant::now());
            assert!(!left.is_zero(), "{}", what());
            n = self.cv.wait_timeout(n, left).unwrap_or_else(|e| e.into_inner()).0;
        }
    }
}

/// The ERROR and PENDING order ids of `lines`.
pub(crate) fn wanted(lines: &[String]) -> BTreeSet<u64> {
    lines
        .iter()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .filter(|v| v["status"] == "ERROR" || v["status"] == "PENDING")
        .map(|v| v["order_id"].as_u64().unwrap())
        .collect()
}

/// Each delivered order id with how many times it was delivered, and the identities that
/// delivered (from the sink's file names, `batch-IDENTITY-BATCH.jsonl`).
pub(crate) fn delivered(out: &Path) -> (BTreeMap<u64, usize>, BTreeSet<String>) {
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
pub(crate) fn check_exactly_once(out: &Path, want: &BTreeSet<u64>, members: &[&Member]) {
    let ids = wait_delivered(out, want, members);
    let twice: Vec<_> = ids.iter().filter(|(_, n)| **n > 1).collect();
    assert!(twice.is_empty(), "delivered more than once: {twice:?}");
}

/// Waits until every wanted order is delivered; checks nothing else was, and that the tasks
/// kept one identity each, whoever ran them. Returns how often each was delivered.
pub(crate) fn wait_delivered(out: &Path, want: &BTreeSet<u64>, members: &[&Member]) -> BTreeMap<u64, usize> {
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

pub(crate) fn input(dir: &Path, n: u64) -> Vec<String> {
    let events = orders(dir, n, 41);
    std::fs::read_to_string(events).unwrap().lines().map(str::to_string).collect()
}

/// How far group `group`'s tasks of the input have committed, summed over the input's
/// partitions: the furthest `orders` position any commit in the group's checkpoint topic names
/// (a kill cannot lose a commit there, as it can a progress line; a zombie's commit is never
/// further than its task's new owner goes).
pub(crate) fn stage_one_committed(brokers: &str, group: &str) -> u64 {
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
