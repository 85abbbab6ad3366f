//! A group through the faults of its brokers, on three Apache Kafka nodes (replication factor 3,
//! `min.insync.replicas = 2`): the broker that coordinates the group killed with `kill -9` while
//! the group rebalances, then restarted on its data. Every wanted order is delivered once.

use crate::brokers::*;
use crate::harness::*;

/// Process `a` holds every task; `b` joins, and while the group rebalances for it, the node
/// that coordinates the group is killed. The group finds its new coordinator (the new leader
/// of its `__consumer_offsets` partition), the rebalance completes there, both processes run
/// tasks, the node comes back, and every wanted order is delivered exactly once. On the
/// classic group protocol.
#[test]
fn killing_the_group_coordinator_during_a_rebalance_loses_and_duplicates_nothing() {
    coordinator_killed(Protocol::Classic);
}

/// [`killing_the_group_coordinator_during_a_rebalance_loses_and_duplicates_nothing`] on the
/// consumer group protocol (KIP-848).
#[test]
fn on_the_consumer_protocol_killing_the_group_coordinator_during_a_rebalance_loses_nothing() {
    coordinator_killed(Protocol::Consumer);
}

fn coordinator_killed(protocol: Protocol) {
    let _alone = one_at_a_time();
    let dir = tempfile::tempdir().unwrap();
    let mut broker = Broker::nodes(dir.path(), 3, protocol);
    let brokers = broker.brokers.clone();
    let p = group_pipeline(dir.path(), &brokers, MICRO_BATCHES);
    let all = input(dir.path(), 12_000);
    let a = Member::start_leader(&p, &dir.path().join("a"));
    produce_chunk(&brokers, dir.path(), &all, 0, 4);
    a.wait_batches(0, 1);
    let kafka = broker.kafka.as_mut().expect("Apache Kafka");
    let coordinator = kafka.coordinator_of("scaled");
    // `b` joins: its first call to the coordinator starts the rebalance, which `a` learns of at
    // its next heartbeat and must answer by rejoining (classic) or by acknowledging its
    // revocations (consumer protocol): the coordinator dies between the two.
    let b = Member::start(&p, &dir.path().join("b"));
    b.wait_log("joined group scaled");
    kafka.kill_node(coordinator);
    eprintln!("killed node {} (the coordinator of group scaled)", coordinator + 1);
    produce_chunk(&brokers, dir.path(), &all, 1, 4);
    b.wait_log("assigned to this process");
    // `a` may have read all of chunk 1 while the rebalance was slow to finish, so `b` is only
    // sure to have work once a chunk arrives after it holds its tasks, with the node still down.
    produce_chunk(&brokers, dir.path(), &all, 2, 4);
    b.wait_batches(0, 1);
    kafka.restart_node(coordinator);
    produce_chunk(&brokers, dir.path(), &all, 3, 4);
    check_exactly_once(&dir.path().join("out"), &wanted(&all), &[&a, &b]);
    for m in [b, a] {
        let (status, log) = m.stop();
        assert!(status.success(), "a member failed: {status}\n{log}");
    }
}
