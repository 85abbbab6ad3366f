//! The native transactional Kafka sink on the mock cluster: each batch in one transaction,
//! once per checkpoint identity; every window once through repeated `kill -9`; and a tenant's
//! pipeline on `weir serve` writing through it under the tenant's transactional id. Output is
//! read up to markers produced after it, so a test never waits on a guess.

use std::time::Duration;

use crate::common::kafka::*;
use crate::common::*;
use rdkafka::mocking::MockCluster;

#[test]
fn the_kafka_sink_writes_each_batch_in_a_transaction_once() {
    let cluster = MockCluster::new(1).unwrap();
    cluster.create_topic("orders", 2, 1).unwrap();
    cluster.create_topic("windows", 2, 1).unwrap();
    let brokers = cluster.bootstrap_servers();
    let dir = tempfile::tempdir().unwrap();
    let events = orders(dir.path(), 20_000, 4);
    produce_lines(&brokers, "orders", 2, &events, true);
    let want = {
        let (kept, _) = kept_orders(&events);
        sliding_reference(&kept, 60_000, 60_000)
    };

    let p = to_kafka(dir.path(), &brokers, "checkpoint");
    ok(weir().arg("run").arg(&p).output().unwrap());
    let n = want.len();
    let first = read_topic(&brokers, "windows", |o| o.len() >= n, Duration::from_secs(30));
    let rows: Vec<_> = first.iter().map(|o| o.value.clone()).collect();
    assert_eq!(windows_of(&rows), want);
    assert!(first.iter().all(|o| o.batch.is_some()), "every message carries its batch id");

    // A replay from a fresh checkpoint is other deliveries, not re-deliveries: it writes every
    // window again, under its own checkpoint identity.
    let p = to_kafka(dir.path(), &brokers, "checkpoint-again");
    ok(weir().arg("run").arg(&p).output().unwrap());
    let all = read_to_markers(&brokers);
    assert_eq!(all.len(), 2 * n, "the replay wrote its output");
    let by_checkpoint = per_checkpoint(&all);
    assert_eq!(by_checkpoint.len(), 2);
    for rows in by_checkpoint.values() {
        assert_eq!(windows_of(rows), want);
    }
}

/// The transactional Kafka sink through repeated `kill -9`: every window once. A batch whose
/// transaction committed before the kill, and whose checkpoint did not, is found in the topic
/// under this checkpoint's identity and skipped on the re-run.
#[test]
fn the_kafka_sink_writes_each_window_once_through_repeated_kill_9() {
    let cluster = MockCluster::new(1).unwrap();
    cluster.create_topic("orders", 2, 1).unwrap();
    cluster.create_topic("windows", 2, 1).unwrap();
    let brokers = cluster.bootstrap_servers();
    let dir = tempfile::tempdir().unwrap();
    let events = orders(dir.path(), 20_000, 6);
    produce_lines(&brokers, "orders", 2, &events, true);
    let (kept, _) = kept_orders(&events);
    let p = to_kafka(dir.path(), &brokers, "checkpoint");
    let kills = kill_repeatedly(&p, 12);
    assert!(kills >= 6, "only {kills} kills landed");
    let all = read_to_markers(&brokers);
    let by_checkpoint = per_checkpoint(&all);
    assert_eq!(by_checkpoint.len(), 1, "one checkpoint throughout");
    for rows in by_checkpoint.values() {
        assert_eq!(windows_of(rows), sliding_reference(&kept, 60_000, 60_000), "each window once");
    }
}

/// A tenant's pipeline on `weir serve` from the embedded broker (the mock cluster) into one of
/// its topics through the transactional Kafka sink, under the tenant's transactional id: every
/// window once.
#[test]
fn a_tenant_s_pipeline_on_weir_serve_reads_and_writes_the_embedded_broker() {
    use crate::common::serve::*;
    let cluster = MockCluster::new(1).unwrap();
    cluster.create_topic("orders", 2, 1).unwrap();
    cluster.create_topic("windows", 2, 1).unwrap();
    let brokers = cluster.bootstrap_servers();
    let dir = tempfile::tempdir().unwrap();
    let events = orders(dir.path(), 20_000, 14);
    produce_lines(&brokers, "orders", 2, &events, true);
    let want = {
        let (kept, _) = kept_orders(&events);
        sliding_reference(&kept, 60_000, 60_000)
    };
    let (admin_path, admin) = admin_file(dir.path());
    let s = Server::start(&dir.path().join("data"), &admin_path, &["--allow-network", &brokers]);
    let acme = tenant(&s, &admin, "acme");
    upload_plugins(&s, &acme);
    let text = orders_pipeline("to-kafka", "unused", 2_000);
    let text = text.split("[sink]").next().unwrap().replace(
        "type = \"replay\"\npath = \"unused\"\nmax_offsets_per_trigger = 2000",
        &kafka_source(&brokers, "orders", 2_000),
    ) + &format!("[sink]\ntype = \"kafka\"\ntopic = \"windows\"\nkafka.bootstrap.servers = \"{brokers}\"\n");
    s.expect(201, "PUT", "/v1/pipelines/to-kafka", Some(&acme), Some(text.as_bytes()));
    let done = s.wait_for(&acme, "to-kafka", &["finished", "failed"]);
    assert_eq!(done["state"], "finished", "{done}");
    let out = read_topic(&brokers, "windows", |o| o.len() >= want.len(), Duration::from_secs(30));
    let rows: Vec<_> = out.iter().map(|o| o.value.clone()).collect();
    assert_eq!(windows_of(&rows), want, "every window once");
    // Someone else's transactional id is not the tenant's to take.
    let theirs =
        text.replace("topic = \"windows\"\n", "topic = \"windows\"\nkafka.transactional.id = \"weir-rival--x\"\n");
    let r = s.expect(400, "PUT", "/v1/pipelines/to-kafka", Some(&acme), Some(theirs.as_bytes()));
    assert_eq!(r["field"], "sink.kafka.transactional.id", "{r}");
    s.kill();
}
