//! The ledger's fold and fencing: the fold's rules on records in any order a partition can
//! hold them (compacted, fetched twice, a zombie's after a newer claim), and an owner's
//! records against a broker (librdkafka's mock).

use super::*;

fn plan(batch_id: u64) -> Planned {
    Planned {
        batch_id,
        start: crate::source::Offsets::Log { next: 0 },
        end: crate::source::Offsets::Log { next: 1 },
        idle: vec![],
        flush: false,
        planned_at_ms: 0,
        side: None,
    }
}

fn rec(epoch: u64, body: Body) -> Record {
    Record { epoch, identity: "id".into(), body }
}

fn claim(epoch: u64) -> Record {
    rec(epoch, Body::Claim { owner: format!("owner {epoch}"), meta: None, side: None, plans: vec![], changelog: None })
}

/// Against a broker (librdkafka's mock, in process): an owner's records fold without being
/// read back while nobody else writes, a newer claim still fences it, and a commit it did
/// not wait for is in the record once the ledger is dropped.
#[test]
fn an_owner_confirms_its_records_and_a_newer_claim_still_fences_it() {
    let cluster = rdkafka::mocking::MockCluster::new(1).unwrap();
    cluster.create_topic("ledger", 1, 1).unwrap();
    let options = vec![("bootstrap.servers".to_string(), cluster.bootstrap_servers())];
    let stop = Arc::new(AtomicBool::new(false));
    let dir = tempfile::tempdir().unwrap();
    let state = StateStore::open(dir.path()).unwrap();
    let open = |owner: &str| KafkaLedger::claim(&options, "ledger", 0, "t", owner, stop.clone()).unwrap();
    let mut a = open("a");
    a.set_side("dir-a".into());
    a.plan(&plan(0)).unwrap();
    a.commit(br#"{"next_batch": 1}"#, &state).unwrap();
    assert!(a.sent.is_empty(), "the first commit naming this directory is waited for");
    a.plan(&plan(1)).unwrap();
    a.commit(br#"{"next_batch": 2}"#, &state).unwrap();
    assert_eq!(a.sent.len(), 1, "later commits are not waited for");
    a.plan(&plan(2)).unwrap();
    assert_eq!((a.fold.epoch, a.fold.next_batch(), a.fold.applied), (1, 2, Some(5)));

    let b = open("b");
    assert_eq!((b.epoch(), b.restored().next_batch()), (2, 2));
    assert_eq!(b.restored().plans.keys().copied().collect::<Vec<_>>(), vec![2], "a's open plan is b's to run");
    match a.plan(&plan(3)) {
        Err(CheckpointError::Fenced { epoch: 1, newer: 2, .. }) => {}
        other => panic!("a wrote after b's claim and was not fenced: {other:?}"),
    }
    drop(b);

    let mut c = open("c");
    c.set_side("dir-c".into());
    c.plan(&plan(2)).unwrap();
    c.commit(br#"{"next_batch": 3}"#, &state).unwrap();
    c.plan(&plan(3)).unwrap();
    c.commit(br#"{"next_batch": 4}"#, &state).unwrap();
    assert_eq!(c.sent.len(), 1);
    drop(c);
    let read = KafkaLedger::read(&options, "ledger", 0, "t", stop.clone()).unwrap();
    assert_eq!((read.restored().epoch, read.restored().next_batch()), (3, 4));
    assert_eq!(read.restored().side.as_deref(), Some("dir-c"));
}

#[test]
fn a_newer_claim_fences_every_later_record_of_the_older_owner() {
    let mut f = Fold::default();
    f.apply(0, claim(1));
    f.apply(1, rec(1, Body::Plan { plan: plan(0) }));
    f.apply(2, rec(1, Body::Commit { meta: serde_json::json!({"next_batch": 1}), side: None, changelog: None }));
    f.apply(3, claim(2));
    // The zombie (epoch 1) goes on: its plan and commit do not count.
    f.apply(4, rec(1, Body::Plan { plan: plan(1) }));
    f.apply(5, rec(1, Body::Commit { meta: serde_json::json!({"next_batch": 2}), side: None, changelog: None }));
    assert_eq!((f.epoch, f.next_batch(), f.plans.len()), (2, 1, 0));
    assert_eq!(f.claim_at, Some(3));
}

#[test]
fn a_claim_that_does_not_raise_the_epoch_does_not_count() {
    let mut f = Fold::default();
    f.apply(0, claim(1));
    f.apply(1, claim(1));
    assert_eq!(f.claim_at, Some(0));
}

#[test]
fn a_plan_made_before_the_new_claim_is_handed_to_the_new_owner() {
    let mut f = Fold::default();
    f.apply(0, claim(1));
    f.apply(1, rec(1, Body::Plan { plan: plan(0) }));
    f.apply(2, claim(2));
    assert_eq!(f.plans.keys().copied().collect::<Vec<_>>(), vec![0]);
}

#[test]
fn records_fetched_twice_are_applied_once_and_compacted_claims_are_implied() {
    let mut f = Fold::default();
    // Compaction removed claim 1 and 2: the first record read is epoch 2's commit.
    f.apply(7, rec(2, Body::Commit { meta: serde_json::json!({"next_batch": 5}), side: None, changelog: None }));
    f.apply(8, rec(2, Body::Plan { plan: plan(5) }));
    f.apply(7, rec(2, Body::Commit { meta: serde_json::json!({"next_batch": 3}), side: None, changelog: None }));
    assert_eq!((f.epoch, f.next_batch(), f.plans.len()), (2, 5, 1));
}

#[test]
fn compaction_keeps_where_the_newest_owner_started() {
    // Epoch 1 committed batch 3 and planned 4; epoch 2 claimed with that; the zombie (1)
    // then committed 4 and planned 5. Compaction keeps only the newest record per key, so
    // of epoch 1 only the zombie's records remain, ahead of them nothing.
    let mut f = Fold::default();
    let started = Body::Claim {
        owner: "b".into(),
        meta: Some(serde_json::json!({"next_batch": 4})),
        side: None,
        plans: vec![plan(4)],
        changelog: None,
    };
    f.apply(10, rec(2, started));
    f.apply(11, rec(1, Body::Commit { meta: serde_json::json!({"next_batch": 5}), side: None, changelog: None }));
    f.apply(12, rec(1, Body::Plan { plan: plan(5) }));
    assert_eq!((f.epoch, f.next_batch()), (2, 4));
    assert_eq!(f.plans.keys().copied().collect::<Vec<_>>(), vec![4]);
    assert_ne!(rec(1, Body::Plan { plan: plan(5) }).key(), rec(2, Body::Plan { plan: plan(5) }).key());
}
