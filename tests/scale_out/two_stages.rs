//! Windowed aggregations in two stages around the group's repartition topic, their state in
//! its changelog topic: through kills, a join and a leave, a restore from the changelog,
//! scaling down and up, and a paused member fenced.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use crate::brokers::*;
use crate::common::*;
use crate::harness::*;
use crate::windows::*;

/// Three processes run the error rate over the global window and per-user sessions, each
/// in two stages; one is killed with `kill -9` ten times at random points of its progress and
/// restarted, and a fourth joins mid-run and leaves, while orders arrive a chunk at a time. The
/// windows are one process's, each once.
/// On the classic group protocol.
#[test]
fn windows_in_two_stages_survive_kills_a_join_and_a_leave() {
    two_stage_kill_loop(Protocol::Classic);
}

/// [`windows_in_two_stages_survive_kills_a_join_and_a_leave`] on the consumer group protocol
/// (KIP-848), where the broker assigns the tasks of both stages.
#[test]
fn on_the_consumer_protocol_windows_in_two_stages_survive_kills_a_join_and_a_leave() {
    two_stage_kill_loop(Protocol::Consumer);
}

fn two_stage_kill_loop(protocol: Protocol) {
    let _alone = one_at_a_time();
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::speaking(dir.path(), &[], &["rate", "sessions"], protocol);
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
    let broker = Broker::start(dir.path(), &[], &["rate", "sessions"]);
    let brokers = broker.brokers.clone();
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
    let broker = Broker::start(dir.path(), &[], &["rate", "sessions"]);
    let brokers = broker.brokers.clone();
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

/// A zombie in two stages: process `b`, paused (SIGSTOP) past its session timeout, loses its
/// tasks of both stages to `a`, which restores their stage-2 state from the changelog. Resumed,
/// `b` gives its tasks up or is fenced, and whatever it writes meanwhile (repartition messages,
/// changelog records of an older epoch) changes nothing: the windows are one process's.
#[test]
fn a_paused_process_in_two_stages_is_fenced_and_the_windows_hold() {
    let _alone = one_at_a_time();
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start(dir.path(), &[], &["rate", "sessions"]);
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
