//! The Kafka sink in a group, on Apache Kafka: its transactions, read back `read_committed`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use crate::brokers::*;
use crate::common::kafka::*;
use crate::common::*;
use crate::harness::*;

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
/// killed with `kill -9` ten times and restarted. A `read_committed` reader sees every wanted
/// order exactly once, in one delivery (checkpoint identity and batch id, from the sink's
/// headers): a batch a kill left open is aborted and invisible, and one re-run by a task's next
/// owner is the same delivery with the same rows. On the classic group protocol.
#[test]
fn the_kafka_sink_in_a_group_writes_every_record_once_through_kills() {
    kafka_sink_through_kills(Protocol::Classic);
}

/// [`the_kafka_sink_in_a_group_writes_every_record_once_through_kills`] on the consumer group
/// protocol (KIP-848), where the broker assigns the tasks.
#[test]
fn the_kafka_sink_in_a_group_on_the_consumer_protocol_writes_every_record_once_through_kills() {
    kafka_sink_through_kills(Protocol::Consumer);
}

fn kafka_sink_through_kills(protocol: Protocol) {
    let _alone = one_at_a_time();
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::kafka(dir.path(), protocol);
    if let Some(k) = &broker.kafka {
        k.create_topic("alerts", PARTITIONS);
    }
    let brokers = broker.brokers.clone();
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
    read_topic(&brokers, "alerts", found, PATIENCE);
    for m in [victim, steady, leader] {
        let (status, log) = m.stop();
        assert!(status.success(), "a member failed: {status}\n{log}");
    }
    // Everything committed, now that no member writes.
    let out = read_to_markers_in(&brokers, "alerts", PARTITIONS as i32);
    // The delivery each order is in.
    let mut owner: BTreeMap<u64, (String, u64)> = BTreeMap::new();
    for o in &out {
        let d = (o.checkpoint.clone().expect("a checkpoint header"), o.batch.expect("a batch header"));
        let id = o.value["order_id"].as_u64().unwrap();
        if let Some(other) = owner.insert(id, d.clone()) {
            panic!("order {id} was read twice: in delivery {other:?} and in {d:?}");
        }
    }
    let stray: Vec<_> = owner.keys().filter(|id| !want.contains(id)).collect();
    assert!(stray.is_empty(), "delivered but not wanted: {stray:?}");
    assert_eq!(owner.len(), want.len());
    let identities: BTreeSet<&String> = owner.values().map(|(c, _)| c).collect();
    assert_eq!(identities.len(), PARTITIONS as usize, "one identity per task, whoever ran it");
}

/// A zombie producer: process `b`, paused (SIGSTOP) past its session timeout with the
/// transactional Kafka sink, loses its tasks to `a` and to `c`, which joins meanwhile; their
/// producers take the tasks' transactional ids, which fences `b`'s. Resumed, `b` finds itself
/// fenced (or gives the tasks up) and whatever transaction it had open is aborted: a
/// `read_committed` reader sees every wanted order exactly once.
#[test]
fn a_paused_process_s_producer_is_fenced_and_nothing_is_read_twice() {
    let _alone = one_at_a_time();
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::kafka(dir.path(), Protocol::Classic);
    if let Some(k) = &broker.kafka {
        k.create_topic("alerts", PARTITIONS);
    }
    let brokers = broker.brokers.clone();
    let p = kafka_sink_pipeline(dir.path(), &brokers);
    let all = input(dir.path(), 12_000);
    let want = wanted(&all);
    let a = Member::start_leader(&p, &dir.path().join("a"));
    let b = Member::start(&p, &dir.path().join("b"));
    b.wait_log("assigned to this process");
    produce_chunk(&brokers, dir.path(), &all, 0, 3);
    b.wait_batches(0, 1);
    unsafe { libc::kill(b.child.id() as i32, libc::SIGSTOP) };
    let before = a.batches.load(Ordering::SeqCst);
    let c = Member::start(&p, &dir.path().join("c"));
    produce_chunk(&brokers, dir.path(), &all, 1, 3);
    wait_tasks_taken_over(&a, before, &c);
    unsafe { libc::kill(b.child.id() as i32, libc::SIGCONT) };
    produce_chunk(&brokers, dir.path(), &all, 2, 3);
    let found = |out: &[Out]| {
        let ids: BTreeSet<u64> = out.iter().filter_map(|o| o.value["order_id"].as_u64()).collect();
        want.iter().all(|id| ids.contains(id))
    };
    read_topic(&brokers, "alerts", found, PATIENCE);
    let (_, b_log) = b.stop();
    for m in [c, a] {
        let (status, log) = m.stop();
        assert!(status.success(), "a member failed: {status}\n{log}");
    }
    assert!(
        b_log.contains("revoked") || b_log.contains("fenced"),
        "the resumed process neither gave up its tasks nor was fenced:\n{b_log}"
    );
    let out = read_to_markers_in(&brokers, "alerts", PARTITIONS as i32);
    let mut seen = BTreeSet::new();
    for o in &out {
        let id = o.value["order_id"].as_u64().unwrap();
        assert!(seen.insert(id), "order {id} was read twice");
    }
    assert_eq!(seen, want, "every wanted order, and nothing else");
}
