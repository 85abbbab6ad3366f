//! Measurements, not tests: what a group costs a pipeline against one process, run by
//! `cargo bench -p weir --bench scale_out` (`bench.rs`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::brokers::*;
use crate::common::kafka::*;
use crate::common::*;
use crate::harness::*;
use crate::windows::*;

/// What a group's records cost a stateless pipeline, on Apache Kafka (`WEIR_TEST_BROKER=mock`:
/// the mock).
/// One process without a group, then a group of one and of two processes, over the same
/// 6-partition topic, interleaved over `ROUNDS`;
/// each from the topic's start to every wanted order delivered. Prints orders/s and the mean
/// plan and commit time per batch (where the group's record writes show).
pub(crate) fn a_group_against_one_process() {
    let _alone = one_at_a_time();
    const ORDERS: u64 = 240_000;
    const ROUNDS: usize = 2;
    let dir = tempfile::tempdir().unwrap();
    let groups: Vec<String> = (0..ROUNDS).flat_map(|r| [format!("m{r}x1"), format!("m{r}x2")]).collect();
    let group_refs: Vec<&str> = groups.iter().map(String::as_str).collect();
    let broker = Broker::start(dir.path(), &group_refs, &[]);
    let brokers = broker.brokers.clone();
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

/// The measurement in `docs/performance.md` ("Scale-out"), on Apache Kafka (`WEIR_TEST_BROKER=mock`:
/// the mock). The
/// error rate over 10-second windows and per user session, of 240,000 orders read from the
/// 6-partition topic:
/// by one process without a group (one stage), and by a group of one process and of two (two
/// stages through the shuffle), interleaved over `WEIR_TEST_ROUNDS` (3). Throughput is the
/// orders over the time from the first batch's start to the last batch's end (the progress lines say both), which
/// leaves out start-up and the group's first rebalance (about 3 s on the mock). Prints the
/// median time of each step of a batch per stage, and the shuffle's cost per order (messages
/// and bytes in the repartition topic).
pub(crate) fn windows_in_two_stages_against_one() {
    let _alone = one_at_a_time();
    // The mock keeps 5 MiB per partition: 240,000 orders fit. WEIR_TEST_ORDERS sets another
    // number (on Apache Kafka, a longer run, where batches reach full size).
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
    let bench = Bench { dir: dir.path(), brokers: &brokers, broker_pid, all: &all, orders, max_batch, live };
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
                let case = Case { kind, window, parse_config, mode, processes, round };
                run_case(&bench, &case, want, &mut results);
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

/// How many chunks of a live input may be produced ahead of what the members have committed.
const LIVE_AHEAD: usize = 3;

/// What every run of [`windows_in_two_stages_against_one`] shares: the broker, the input and
/// the settings read from the environment.
struct Bench<'a> {
    dir: &'a Path,
    brokers: &'a str,
    /// The mock broker's process, whose CPU time is measured too (none on Apache Kafka).
    broker_pid: Option<u32>,
    all: &'a [String],
    orders: u64,
    max_batch: usize,
    /// The chunks of a live input (`WEIR_TEST_CHUNKS`); `None`: the input was produced up front.
    live: Option<usize>,
}

/// One run: a pipeline (its window and parser config) by one mode, in one round.
struct Case<'a> {
    kind: &'a str,
    window: &'a str,
    parse_config: &'a str,
    mode: &'a str,
    /// 0: one process, one stage; else the processes of the group.
    processes: usize,
    round: usize,
}

/// Runs one case until every window of it is delivered (`want` rows), prints its throughput,
/// CPU time and step medians, and adds its rates to `results`.
fn run_case(bench: &Bench, case: &Case, want: usize, results: &mut BTreeMap<String, Vec<f64>>) {
    let Case { kind, mode, processes, round, .. } = *case;
    let run = bench.dir.join(format!("run-{kind}-{round}-{processes}"));
    let out = run.join("out");
    std::fs::create_dir_all(&out).unwrap();
    let group = format!("{kind}{round}x{processes}");
    let topic = if bench.live.is_some() { format!("orders.{group}") } else { "orders".to_string() };
    let mut produced = 0;
    if let Some(chunks) = bench.live {
        while produced < chunks.min(LIVE_AHEAD) {
            produce_chunk_to(bench.brokers, &topic, bench.dir, bench.all, produced, chunks);
            produced += 1;
        }
    }
    let p = case_pipeline(bench, case, &run, &out, &group, &topic);
    let members: Vec<Member> = (0..processes.max(1)).map(|i| Member::start(&p, &run.join(format!("cp-{i}")))).collect();
    let cpu_from = wait_for_windows(bench, case, &members, &out, &topic, want, produced);
    let (weir_from, broker_from) = cpu_from.unwrap_or_default();
    let weir_cpu = cpu_seconds(&member_pids(&members)) - weir_from;
    let broker_cpu = bench.broker_pid.map(|b| cpu_seconds(&[b])).zip(broker_from).map(|(t, f)| t - f);
    // From the first batch's start to the last batch's end, and each step's median.
    let (first, last, mut steps) = batch_steps(&members);
    let rate = bench.orders as f64 / (last - first);
    let per_cpu = bench.orders as f64 / weir_cpu;
    let broker_line = broker_cpu.map(|b| format!(", the broker's {:.2} CPU-seconds", b));
    eprintln!(
        "{kind}, {mode}, round {round}: {rate:.0} orders/s; {per_cpu:.0} orders per CPU-second of Weir{}",
        broker_line.unwrap_or_default()
    );
    results.entry(format!("{kind}: {mode}")).or_default().push(rate);
    results.entry(format!("{kind}: {mode}, per CPU-second")).or_default().push(per_cpu);
    print_step_medians(case, &mut steps);
    for m in members {
        m.stop();
    }
    if processes > 0 {
        let (messages, bytes) = topic_size(bench.brokers, &format!("weir.{group}.repartition"));
        eprintln!(
            "{kind}, {mode}, round {round}: shuffle {messages} messages, {bytes} bytes: {:.4} messages \
             and {:.2} bytes per order",
            messages as f64 / bench.orders as f64,
            bytes as f64 / bench.orders as f64
        );
    }
}

/// Writes the case's pipeline file into `run`: the windows read from `topic`, written to `out`,
/// in a group of its own when it has processes.
fn case_pipeline(bench: &Bench, case: &Case, run: &Path, out: &Path, group: &str, topic: &str) -> PathBuf {
    let Case { kind, window, parse_config, processes, .. } = *case;
    let scale = if processes > 0 { format!("[scale]\ngroup = \"{group}\"") } else { String::new() };
    let text = format!(
        "name = \"{kind}\"\n[source]\n{}\nstarting_offsets = \"earliest\"\n[trigger]\n{MICRO_BATCHES}\n\
         [parse]\nplugin = \"{}\"\nconfig = {parse_config}\n[watermark]\ndelay = \"40 seconds\"\n[window]\n\
         {window}\n[aggregate]\nplugin = \"{}\"\n{}\n{scale}\n",
        kafka_source(bench.brokers, topic, bench.max_batch),
        component("orders_json").display(),
        component("error_rate").display(),
        file_sink(out),
    );
    let p = run.join(format!("{kind}.toml"));
    std::fs::write(&p, text).unwrap();
    p
}

/// Waits until `want` rows are in `out`, feeding a live input as the members commit it
/// (`produced` of its chunks are already in). Returns the CPU seconds of the members and of the
/// broker when the first progress line came, or `None` if none did.
fn wait_for_windows(
    bench: &Bench,
    case: &Case,
    members: &[Member],
    out: &Path,
    topic: &str,
    want: usize,
    mut produced: usize,
) -> Option<(f64, Option<f64>)> {
    let Case { kind, mode, .. } = *case;
    let deadline = Instant::now() + PATIENCE;
    // CPU time of the members and the broker from the first progress line on (start-up
    // left out), to the last window.
    let mut cpu_from = None;
    let mut closed = bench.live.is_none();
    while delivered_rows(out).len() < want {
        assert!(Instant::now() < deadline, "{kind}, {mode}: the windows never all came");
        if let Some(chunks) = bench.live {
            feed_live(bench, members, topic, chunks, &mut produced, &mut closed);
        }
        if cpu_from.is_none() && members.iter().any(|m| !m.tasks.lock().unwrap().is_empty()) {
            cpu_from = Some((cpu_seconds(&member_pids(members)), bench.broker_pid.map(|b| cpu_seconds(&[b]))));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    cpu_from
}

/// Produces the next chunks of a live input of `chunks` while the members have committed all
/// but the last LIVE_AHEAD produced, and its closers once every chunk is in.
fn feed_live(bench: &Bench, members: &[Member], topic: &str, chunks: usize, produced: &mut usize, closed: &mut bool) {
    // Orders the input's tasks (or the one process) committed.
    let read: u64 = members
        .iter()
        .map(|m| {
            let tasks = m.tasks.lock().unwrap();
            let input = tasks.iter().filter(|v| !v["name"].as_str().unwrap_or("").contains("repartition"));
            input.map(|v| v["numInputRows"].as_u64().unwrap_or(0)).sum::<u64>()
        })
        .sum();
    let per = bench.orders.div_ceil(chunks as u64);
    while *produced < chunks && read >= (*produced + 1).saturating_sub(LIVE_AHEAD) as u64 * per {
        produce_chunk_to(bench.brokers, topic, bench.dir, bench.all, *produced, chunks);
        *produced += 1;
    }
    if *produced == chunks && !*closed {
        produce_closers_to(bench.brokers, topic, bench.dir, bench.all);
        *closed = true;
    }
}

/// The members' process ids, for [`cpu_seconds`].
fn member_pids(members: &[Member]) -> Vec<u32> {
    members.iter().map(|m| m.child.id()).collect()
}

/// Times a batch's step took, in ms, by stage and step (`durationMs` of the progress lines).
type Steps = BTreeMap<(&'static str, String), Vec<f64>>;

/// The first batch's start and the last batch's end (seconds since the epoch) over the
/// members' progress lines, and every step's times.
fn batch_steps(members: &[Member]) -> (f64, f64, Steps) {
    let (mut first, mut last) = (f64::MAX, f64::MIN);
    let mut steps = Steps::new();
    for m in members {
        for v in m.tasks.lock().unwrap().iter() {
            let Some(end) = v["timestamp"].as_str().and_then(|t| humantime::parse_rfc3339(t).ok()) else { continue };
            let end = end.duration_since(std::time::UNIX_EPOCH).unwrap().as_secs_f64();
            let total = v["durationMs"]["totalMs"].as_f64().unwrap_or(0.0) / 1e3;
            first = first.min(end - total);
            last = last.max(end);
            let stage = if v["name"].as_str().unwrap_or("").contains("repartition") { "stage 2" } else { "stage 1" };
            for (k, ms) in v["durationMs"].as_object().into_iter().flatten() {
                steps.entry((stage, k.clone())).or_default().push(ms.as_f64().unwrap_or(0.0));
            }
        }
    }
    (first, last, steps)
}

/// Prints the batches per stage and each step's median time (sorting each step's times).
fn print_step_medians(case: &Case, steps: &mut Steps) {
    let Case { kind, mode, round, .. } = *case;
    let medians: Vec<String> = steps
        .iter_mut()
        .map(|((stage, k), v)| {
            v.sort_by(f64::total_cmp);
            format!("{stage} {k} {:.1}", v[v.len() / 2])
        })
        .collect();
    let batches: Vec<String> = ["stage 1", "stage 2"]
        .iter()
        .filter_map(|stage| steps.get(&(*stage, "totalMs".to_string())).map(|v| format!("{stage} {}", v.len())))
        .collect();
    eprintln!(
        "{kind}, {mode}, round {round}: batches {}; median ms per batch: {}",
        batches.join(", "),
        medians.join(", ")
    );
}

/// User and system CPU seconds the processes `pids` have used (`/proc/PID/stat`; a process
/// gone counts nothing).
pub(crate) fn cpu_seconds(pids: &[u32]) -> f64 {
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
pub(crate) fn topic_size(brokers: &str, topic: &str) -> (u64, u64) {
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
