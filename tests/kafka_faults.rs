//! Faults of Apache Kafka itself, on a three-node cluster (replication factor 3,
//! `min.insync.replicas = 2`), each run ending with output equal to the reference: the leader of
//! an input partition killed with `kill -9` mid-run, then restarted on its data; the leader of
//! the sink topic's partition killed while the transactional sink writes; and a broker frozen
//! with SIGSTOP for 30 s mid-run, then resumed.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::Stdio;

use crate::common::apache_kafka::ApacheKafka;
use crate::common::kafka::*;
use crate::common::*;

/// The orders pipeline over `orders` into the file sink in `dir/windows`, in small batches, so
/// the run is still reading when the fault comes.
fn windows_pipeline(dir: &Path, brokers: &str) -> std::path::PathBuf {
    std::fs::create_dir_all(dir.join("windows")).unwrap();
    let extra =
        format!("{}[checkpoint]\nlocation = \"{}\"", file_sink(&dir.join("windows")), dir.join("checkpoint").display());
    let source = kafka_source(brokers, "orders", 1_000);
    let flush = "flush_at_end = true";
    pipeline(dir, Spec { window: TUMBLING, watermark: flush, extra: &extra, source: &source, ..Default::default() })
}

/// A three-node cluster with `orders` (two partitions, the orders of `seed`) and `windows`; the
/// reference windows.
fn cluster_with_orders(dir: &Path, seed: u64) -> (ApacheKafka, Windows) {
    let cluster = ApacheKafka::cluster(&dir.join("kafka"), 3);
    cluster.create_topic("orders", 2);
    cluster.create_topic("windows", 2);
    let events = orders(dir, 60_000, seed);
    produce_lines(&cluster.brokers(), "orders", 2, &events, true);
    let (kept, _) = kept_orders(&events);
    (cluster, sliding_reference(&kept, 60_000, 60_000))
}

/// Runs `p` to its end, calling `fault` with the number of each committed batch; returns how
/// many batches there were, and panics with the run's log if it failed.
fn run_with(p: &Path, mut fault: impl FnMut(usize)) -> usize {
    let mut run =
        weir().arg("run").arg(p).arg("--progress-json").stdout(Stdio::null()).stderr(Stdio::piped()).spawn().unwrap();
    let (mut batches, mut log) = (0, String::new());
    for line in BufReader::new(run.stderr.take().unwrap()).lines() {
        let line = line.unwrap();
        if line.starts_with('{') {
            batches += 1;
            fault(batches);
        } else {
            log.push_str(&line);
            log.push('\n');
        }
    }
    assert!(run.wait().unwrap().success(), "the run failed: {log}");
    batches
}

#[test]
fn killing_the_leader_of_an_input_partition_mid_run_loses_and_duplicates_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let (mut cluster, want) = cluster_with_orders(dir.path(), 51);
    let p = windows_pipeline(dir.path(), &cluster.brokers());
    let mut killed = None;
    // A few batches in, the partition's leader goes and its followers take over; a few more,
    // and it comes back on its data.
    let batches = run_with(&p, |batch| match (batch, killed) {
        (3, None) => {
            let leader = cluster.leader_of("orders", 0);
            cluster.kill_node(leader);
            killed = Some(leader);
        }
        (8, Some(node)) => cluster.restart_node(node),
        _ => {}
    });
    assert!(batches > 8, "the run ended before the faults: only {batches} batches");
    assert_eq!(windows_of(&sink_rows(&dir.path().join("windows"))), want, "each window once");
}

#[test]
fn killing_the_leader_of_the_sink_s_partition_mid_transaction_loses_and_duplicates_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let (mut cluster, want) = cluster_with_orders(dir.path(), 52);
    let brokers = cluster.brokers();
    let p = to_kafka(dir.path(), &brokers, "checkpoint");
    let mut killed = false;
    let batches = run_with(&p, |batch| {
        if batch == 3 && !killed {
            let leader = cluster.leader_of("windows", 0);
            cluster.kill_node(leader);
            killed = true;
        }
    });
    assert!(killed, "the run ended before the fault: only {batches} batches");
    let by_checkpoint = per_checkpoint(&read_to_markers(&brokers));
    assert_eq!(by_checkpoint.len(), 1);
    for rows in by_checkpoint.values() {
        assert_eq!(windows_of(rows), want, "each window once, read committed");
    }
}

/// How long the frozen broker stays frozen: longer than the cluster's broker session (9 s), so
/// the controller fences it and its partitions get new leaders, and than the client's request
/// timeouts, so calls to it fail rather than wait.
const FROZEN: std::time::Duration = std::time::Duration::from_secs(30);

#[test]
fn freezing_the_leader_of_an_input_partition_for_30_s_loses_and_duplicates_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let (cluster, want) = cluster_with_orders(dir.path(), 53);
    let p = windows_pipeline(dir.path(), &cluster.brokers());
    let mut thaw = None;
    let batches = run_with(&p, |batch| {
        if batch == 3 && thaw.is_none() {
            let leader = cluster.leader_of("orders", 0);
            let pid = cluster.pid(leader).expect("the leader runs") as i32;
            unsafe { libc::kill(pid, libc::SIGSTOP) };
            // Resumed on a thread of its own, so the run's progress lines are read meanwhile.
            thaw = Some(std::thread::spawn(move || {
                std::thread::sleep(FROZEN);
                unsafe { libc::kill(pid, libc::SIGCONT) };
            }));
        }
    });
    let thaw = thaw.unwrap_or_else(|| panic!("the run ended before the fault: only {batches} batches"));
    thaw.join().unwrap();
    assert_eq!(windows_of(&sink_rows(&dir.path().join("windows"))), want, "each window once");
}
