//! The native transactional Kafka sink on Apache Kafka, read back by a `read_committed`
//! consumer: each batch's windows in one transaction, once per checkpoint identity; and every
//! window exactly once through repeated `kill -9`, where a run killed inside a transaction
//! leaves it open until the next run's producer, with the same transactional id, fences and
//! aborts it. The mock cluster cannot show this: its `read_committed` returns aborted records.

use crate::common::apache_kafka::ApacheKafka;
use crate::common::kafka::*;
use crate::common::*;

/// A broker with `orders` (two partitions, the orders of `seed` on them, with headers) and an
/// empty `windows` topic; the reference windows.
fn broker_with_orders(dir: &std::path::Path, seed: u64) -> (ApacheKafka, Windows) {
    let broker = ApacheKafka::start(&dir.join("kafka"));
    broker.create_topic("orders", 2);
    broker.create_topic("windows", 2);
    let events = orders(dir, 20_000, seed);
    produce_lines(&broker.brokers(), "orders", 2, &events, true);
    let (kept, _) = kept_orders(&events);
    (broker, sliding_reference(&kept, 60_000, 60_000))
}

#[test]
fn each_checkpoint_s_windows_are_committed_once_and_a_replay_is_its_own_delivery() {
    let dir = tempfile::tempdir().unwrap();
    let (broker, want) = broker_with_orders(dir.path(), 4);
    let brokers = broker.brokers();
    ok(weir().arg("run").arg(to_kafka(dir.path(), &brokers, "checkpoint")).output().unwrap());
    // Read by count, not up to markers: the markers would stay in the topic before the replay's.
    let first = read_topic(&brokers, "windows", |o| o.len() >= want.len(), std::time::Duration::from_secs(30));
    assert!(first.iter().all(|o| o.batch.is_some()), "every message carries its batch id");
    let rows: Vec<_> = first.iter().map(|o| o.value.clone()).collect();
    assert_eq!(windows_of(&rows), want);
    // A replay from a fresh checkpoint is other deliveries: every window again, under its own
    // checkpoint identity.
    ok(weir().arg("run").arg(to_kafka(dir.path(), &brokers, "checkpoint-again")).output().unwrap());
    let by_checkpoint = per_checkpoint(&read_to_markers(&brokers));
    assert_eq!(by_checkpoint.len(), 2);
    for rows in by_checkpoint.values() {
        assert_eq!(windows_of(rows), want);
    }
}

#[test]
fn every_window_is_read_committed_once_through_repeated_kill_9() {
    let dir = tempfile::tempdir().unwrap();
    let (broker, want) = broker_with_orders(dir.path(), 6);
    let p = to_kafka(dir.path(), &broker.brokers(), "checkpoint");
    let kills = kill_repeatedly(&p, 12);
    assert!(kills >= 6, "only {kills} kills landed");
    let by_checkpoint = per_checkpoint(&read_to_markers(&broker.brokers()));
    assert_eq!(by_checkpoint.len(), 1, "one checkpoint throughout");
    for rows in by_checkpoint.values() {
        assert_eq!(windows_of(rows), want, "each window once; nothing of an aborted transaction");
    }
}
