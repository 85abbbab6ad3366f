//! Faults of Apache Kafka itself, on a three-node cluster (replication factor 3,
//! `min.insync.replicas = 2`), each run ending with output equal to the reference: the leader of
//! an input partition killed with `kill -9` mid-run.

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

#[test]
fn killing_the_leader_of_an_input_partition_mid_run_loses_and_duplicates_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let mut cluster = ApacheKafka::cluster(&dir.path().join("kafka"), 3);
    cluster.create_topic("orders", 2);
    let events = orders(dir.path(), 60_000, 51);
    produce_lines(&cluster.brokers(), "orders", 2, &events, true);
    let (kept, _) = kept_orders(&events);
    let want = sliding_reference(&kept, 60_000, 60_000);

    let p = windows_pipeline(dir.path(), &cluster.brokers());
    let mut run =
        weir().arg("run").arg(&p).arg("--progress-json").stdout(Stdio::null()).stderr(Stdio::piped()).spawn().unwrap();
    let (mut batches, mut killed, mut log) = (0, None, String::new());
    for line in BufReader::new(run.stderr.take().unwrap()).lines() {
        let line = line.unwrap();
        if !line.starts_with('{') {
            log.push_str(&line);
            log.push('\n');
            continue;
        }
        batches += 1;
        // A few batches in: the partition's leader goes, its followers take over.
        if batches == 3 && killed.is_none() {
            let leader = cluster.leader_of("orders", 0);
            cluster.kill_node(leader);
            killed = Some(leader);
        }
    }
    let status = run.wait().unwrap();
    assert!(status.success(), "the run failed: {log}");
    assert!(killed.is_some(), "the run ended before the fault: only {batches} batches");
    assert_eq!(windows_of(&sink_rows(&dir.path().join("windows"))), want, "each window once");
}
