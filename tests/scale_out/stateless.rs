//! A stateless pipeline (parse, filter, sink) shared by a group: kills, a join and a leave, a
//! paused member fenced, continuous mode.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use crate::brokers::*;
use crate::common::*;
use crate::harness::*;

/// Three processes; one is killed with `kill -9` ten times at random points of its progress and
/// restarted; a fourth joins mid-run and leaves. Orders arrive throughout, a chunk at a time,
/// each once the last one's wanted orders are delivered. Every wanted order is in the output
/// once.
///
/// On the classic group protocol.
#[test]
fn three_processes_share_the_tasks_through_kills_a_join_and_a_leave() {
    kill_loop(Protocol::Classic);
}

/// [`three_processes_share_the_tasks_through_kills_a_join_and_a_leave`] on the consumer group
/// protocol (KIP-848), where the broker assigns the tasks.
#[test]
fn on_the_consumer_protocol_three_processes_share_the_tasks_through_kills_a_join_and_a_leave() {
    kill_loop(Protocol::Consumer);
}

fn kill_loop(protocol: Protocol) {
    let _alone = one_at_a_time();
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::speaking(dir.path(), &["scaled"], &[], protocol);
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
    let broker = Broker::start(dir.path(), &["scaled"], &[]);
    let brokers = broker.brokers.clone();
    let p = group_pipeline(dir.path(), &brokers, MICRO_BATCHES);
    let all = input(dir.path(), 12_000);
    let a = Member::start_leader(&p, &dir.path().join("a"));
    let b = Member::start(&p, &dir.path().join("b"));
    // Orders only once `b` holds tasks: before, `a` could read them all and leave `b` none.
    b.wait_log("assigned to this process");
    produce_chunk(&brokers, dir.path(), &all, 0, 3);
    a.wait_batches(0, 1);
    b.wait_batches(0, 1);
    unsafe { libc::kill(b.child.id() as i32, libc::SIGSTOP) };
    // While `b` is paused its tasks move, once the broker has evicted it (after the session
    // timeout), to `a` and to `c`, which joins meanwhile.
    let before = a.batches.load(Ordering::SeqCst);
    let c = Member::start(&p, &dir.path().join("c"));
    produce_chunk(&brokers, dir.path(), &all, 1, 3);
    wait_tasks_taken_over(&a, before, &c);
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
    let broker = Broker::start(dir.path(), &["scaled"], &[]);
    let brokers = broker.brokers.clone();
    let p = group_pipeline(dir.path(), &brokers, "mode = \"continuous\"\ninterval = \"50ms\"");
    let all = input(dir.path(), 12_000);
    let b = Member::start_leader(&p, &dir.path().join("b"));
    let mut a = Member::start(&p, &dir.path().join("a"));
    // `a` holds tasks before the first orders arrive, or `b` may read them all first and `a`
    // have nothing to commit until the next chunk, which waits for it.
    a.wait_log("assigned to this process");
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
