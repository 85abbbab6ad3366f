//! `weir inspect` on a running group: a task that falls behind is marked, on Apache Kafka.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::brokers::*;
use crate::common::*;
use crate::harness::*;

/// A process alone in its group is paused: nobody takes its tasks, and what arrives meanwhile
/// waits. `weir inspect`, run while orders keep arriving, marks every task's lag as growing, its
/// position not moving. Resumed, the process catches up and stops cleanly.
#[test]
fn inspect_marks_the_tasks_whose_lag_grows() {
    let _alone = one_at_a_time();
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start(dir.path(), &["scaled"], &[]);
    let brokers = broker.brokers.clone();
    let p = group_pipeline(dir.path(), &brokers, MICRO_BATCHES);
    let all = input(dir.path(), 12_000);
    let a = Member::start_leader(&p, &dir.path().join("a"));
    produce_chunk(&brokers, dir.path(), &all, 0, 12);
    a.wait_batches(0, 1);
    unsafe { libc::kill(a.child.id() as i32, libc::SIGSTOP) };
    // Orders keep arriving, in every partition, for as long as `weir inspect` looks.
    let looking = Arc::new(AtomicBool::new(true));
    let feeder = {
        let (brokers, dir, all, looking) = (brokers.clone(), dir.path().to_path_buf(), all.clone(), looking.clone());
        std::thread::spawn(move || {
            let mut chunk = 1;
            while looking.load(Ordering::SeqCst) {
                produce_chunk(&brokers, &dir, &all, chunk, 12);
                chunk = chunk % 11 + 1;
            }
        })
    };
    let out = weir().arg("inspect").arg(&p).output().unwrap();
    looking.store(false, Ordering::SeqCst);
    feeder.join().unwrap();
    unsafe { libc::kill(a.child.id() as i32, libc::SIGCONT) };
    let view = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(out.status.success(), "weir inspect failed: {}", String::from_utf8_lossy(&out.stderr));
    let tasks: Vec<&str> = view.lines().filter(|l| l.starts_with("task ")).collect();
    assert_eq!(tasks.len(), PARTITIONS as usize, "a line per task:\n{view}");
    for t in &tasks {
        assert!(
            t.contains("(growing: +") && t.contains("its position not moving"),
            "a stalled task is marked:\n{view}"
        );
    }
    let (status, log) = a.stop();
    assert!(status.success(), "the member failed after it resumed: {status}\n{log}");
}
