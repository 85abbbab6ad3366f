//! The orders medallion (`tests/project.rs`) with its datasets in topics of the mock cluster:
//! checked against the naive reference through `weir query` and `weir test`; the example's own
//! `kafka.toml` as shipped; a table queried while its project runs; and a full refresh that
//! begins datasets after their old records, which stay in the topics.

use std::process::Stdio;
use std::time::Duration;

use crate::common::kafka::*;
use crate::common::*;
use rdkafka::mocking::MockCluster;

/// The medallion example in `dir`, every dataset in a topic `medallion-DATASET` of two
/// partitions (a table's fold must follow each key to its partition) on `cluster`.
fn kafka_medallion<C: rdkafka::ClientContext>(
    dir: &std::path::Path,
    cluster: &MockCluster<'_, C>,
) -> std::path::PathBuf {
    let datasets = [("bronze", "stream"), ("silver", "stream"), ("error_rate", "table"), ("user_orders", "table")];
    for (d, _) in datasets {
        cluster.create_topic(&format!("medallion-{d}"), 2, 1).unwrap();
    }
    let brokers = cluster.bootstrap_servers();
    let edits: Vec<(String, String)> = datasets
        .iter()
        .map(|(d, kind)| {
            let kafka = format!(
                "storage = \"kafka\"\ntopic = \"medallion-{d}\"\nkafka = {{ \"bootstrap.servers\" = \"{brokers}\" }}"
            );
            (format!("[datasets.{d}]\nkind = \"{kind}\""), format!("[datasets.{d}]\nkind = \"{kind}\"\n{kafka}"))
        })
        .collect();
    let edits: Vec<(&str, &str, &str)> = edits.iter().map(|(a, b)| ("weir.toml", a.as_str(), b.as_str())).collect();
    crate::common::medallion::medallion(dir, &edits)
}

/// The orders medallion (`tests/project.rs`) with every dataset in a Kafka topic, written in
/// transactions: each checked against the reference through `weir query`, which reads the
/// topics (a table folded by key); and `weir test` on the same project, which runs it on the
/// embedded log instead.
#[test]
fn the_medallion_runs_with_kafka_backed_datasets() {
    use crate::common::medallion::*;
    let cluster = MockCluster::new(1).unwrap();
    let brokers = cluster.bootstrap_servers();
    let dir = tempfile::tempdir().unwrap();
    let events = dirty_orders(dir.path(), 10_000, 3);
    let project = kafka_medallion(dir.path(), &cluster);
    let out = ok(weir().arg("validate").arg(&project).output().unwrap());
    assert!(String::from_utf8_lossy(&out.stdout).contains("dataset bronze (stream, kafka topic medallion-bronze)"));
    ok(weir().arg("run").arg(&project).arg("--flush").output().unwrap());

    let r = reference(&events);
    // The topics hold each row once (a transactional reader's view), as weir query shows them.
    let bronze = read_topic(&brokers, "medallion-bronze", |m| m.len() >= r.bronze.len(), Duration::from_secs(60));
    assert_eq!(bronze.len(), r.bronze.len());
    check_against_reference(&project, &r);
    // Nothing of the project's was written to the embedded log.
    assert!(!project.join(".weir/datasets").exists());
    // A key's row, read from the topic; a key with none is exit 1.
    let (user, orders) = r.user_orders.iter().next().unwrap();
    let row = ok(weir().arg("query").arg(&project).arg("user_orders").arg(user.trim_matches('"')).output().unwrap());
    let row: serde_json::Value = serde_json::from_slice(&row.stdout).unwrap();
    assert_eq!(row["orders"].as_u64(), Some(*orders));
    let none = weir().arg("query").arg(&project).arg("user_orders").arg("no-such-user").output().unwrap();
    assert_eq!(none.status.code(), Some(1));

    // weir test needs no broker: the cluster is gone, and the project's datasets are in the
    // scratch state's embedded log.
    drop(cluster);
    let users: Vec<String> =
        r.user_orders.iter().map(|(u, n)| format!("{{\"user_id\":{u:?},\"orders\":{n}}}")).collect();
    let expected = dir.path().join("users.jsonl");
    std::fs::write(&expected, users.join("\n") + "\n").unwrap();
    let test = weir()
        .arg("test")
        .arg(&project)
        .arg("--events")
        .arg(format!("bronze={}", events.display()))
        .arg("--expect")
        .arg(format!("user_orders={}", expected.display()))
        .output()
        .unwrap();
    assert!(test.status.success(), "{}", String::from_utf8_lossy(&test.stderr));
}

/// The example's own `kafka.toml`, as shipped but for its broker (the mock's): bronze and silver
/// in topics, the gold tables in the embedded log, every dataset as the reference has it.
#[test]
fn the_medallion_s_kafka_toml_runs_as_shipped() {
    use crate::common::medallion::*;
    let cluster = MockCluster::new(1).unwrap();
    for d in ["bronze", "silver"] {
        cluster.create_topic(&format!("medallion-{d}"), 2, 1).unwrap();
    }
    let brokers = cluster.bootstrap_servers();
    let tmp = tempfile::tempdir().unwrap();
    let events = dirty_orders(tmp.path(), 10_000, 6);
    let edits = [
        ("kafka.toml", "127.0.0.1:9092", brokers.as_str()),
        // Its state beside the test's files, not in the checkout's `out/`.
        ("kafka.toml", "state = \"../../out/orders-medallion-kafka\"", "state = \".weir-kafka\""),
    ];
    let project = medallion(tmp.path(), &edits).join("kafka.toml");
    let out = ok(weir().arg("validate").arg(&project).output().unwrap());
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(said.contains("dataset silver (stream, kafka topic medallion-silver)"), "{said}");
    ok(weir().arg("run").arg(&project).arg("--flush").output().unwrap());
    let r = reference(&events);
    check_against_reference(&project, &r);
    let bronze = read_topic(&brokers, "medallion-bronze", |m| m.len() >= r.bronze.len(), Duration::from_secs(60));
    assert_eq!(bronze.len(), r.bronze.len(), "bronze's rows, in its topic, each once");
}

/// `weir query` answers from a table while its project runs, without stopping it (Kafka
/// Streams' interactive queries). The medallion's bronze reads a topic here, so the project
/// never ends on its own; its per-user table, on the embedded log, is queried until it holds
/// every user's count, and the project is still running then. The orders are in event-time
/// order, so none is late whatever the batches, and the reference is exact.
#[test]
fn a_table_is_queried_while_its_project_runs() {
    use crate::common::medallion::*;
    let cluster = MockCluster::new(1).unwrap();
    cluster.create_topic("orders", 1, 1).unwrap();
    let brokers = cluster.bootstrap_servers();
    let dir = tempfile::tempdir().unwrap();
    let events = orders(dir.path(), 5_000, 13);
    let mut lines: Vec<String> = std::fs::read_to_string(&events).unwrap().lines().map(str::to_string).collect();
    lines.sort_by_key(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()["order_ts"].as_i64().unwrap());
    std::fs::write(&events, lines.join("\n") + "\n").unwrap();
    produce_lines(&brokers, "orders", 1, &events, true);
    let want = reference(&events).user_orders;
    assert!(want.len() > 100, "many users");
    let source = kafka_source(&brokers, "orders", 1_000);
    let project = medallion(dir.path(), &[("bronze.toml", "type = \"replay\"\npath = \"orders.jsonl\"", &source)]);

    // Its log goes to a file: a pipe nobody reads while it runs could fill and stall it.
    let log = dir.path().join("run.log");
    let mut child = weir()
        .arg("run")
        .arg(&project)
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        // Before the flow's first commit the table may not exist yet: `query` then exits 1.
        let out = weir().arg("query").arg(&project).arg("user_orders").output().unwrap();
        let got: std::collections::BTreeMap<String, u64> = String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(|l| {
                let v: serde_json::Value = serde_json::from_str(l).unwrap();
                (v["user_id"].as_str().unwrap().to_string(), v["orders"].as_u64().unwrap())
            })
            .collect();
        if got == want {
            break;
        }
        if let Some(status) = child.try_wait().unwrap() {
            panic!("the project stopped on its own ({status}):\n{}", std::fs::read_to_string(&log).unwrap());
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the table never held every count: {} of {} users",
            got.len(),
            want.len()
        );
    }
    let (user, n) = want.iter().next().unwrap();
    let row = ok(weir().arg("query").arg(&project).args(["user_orders", user]).output().unwrap());
    let row: serde_json::Value = serde_json::from_slice(&row.stdout).unwrap();
    assert_eq!(row["orders"].as_u64(), Some(*n));
    assert!(child.try_wait().unwrap().is_none(), "the project still runs after the queries");

    ok(std::process::Command::new("kill").args(["-TERM", &child.id().to_string()]).output().unwrap());
    let status = child.wait().unwrap();
    assert!(status.success(), "SIGTERM exits 0, got {status}:\n{}", std::fs::read_to_string(&log).unwrap());
}

/// A full refresh of a Kafka-backed silver, after silver's logic changed: the topics keep their
/// records (Weir deletes none), silver and gold begin after the old ones and hold what the new
/// logic gives, through `weir query` and through the flows that read them; bronze's topic and
/// checkpoint are as they were.
#[test]
fn a_full_refresh_of_kafka_backed_datasets_begins_them_after_their_old_records() {
    use crate::common::medallion::*;
    let cluster = MockCluster::new(1).unwrap();
    let brokers = cluster.bootstrap_servers();
    let dir = tempfile::tempdir().unwrap();
    let events = dirty_orders(dir.path(), 10_000, 4);
    let project = kafka_medallion(dir.path(), &cluster);
    ok(weir().arg("run").arg(&project).arg("--flush").output().unwrap());
    let r = reference(&events);
    check_against_reference(&project, &r);
    let identity = |flow: &str| identity(&project, flow);
    let bronze_identity = identity("bronze");

    drop_pending_in_silver(&project);
    let out = ok(weir().arg("run").arg(&project).args(["--flush", "--full-refresh", "silver"]).output().unwrap());
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(said.contains("reset error_rate, silver, user_orders"), "{said}");
    let new = without_pending(reference(&events));
    assert!(new.silver.len() < r.silver.len(), "the change drops orders");
    check_against_reference(&project, &new);
    assert_eq!(identity("bronze"), bronze_identity, "bronze's checkpoint untouched");

    // Every record is still in the topics: bronze's once, silver's old rows and then the new.
    let all = |topic: &str, n: usize| read_topic(&brokers, topic, |m| m.len() >= n, Duration::from_secs(60)).len();
    assert_eq!(all("medallion-bronze", r.bronze.len()), r.bronze.len(), "bronze was not written again");
    let both = r.silver.len() + new.silver.len();
    assert_eq!(all("medallion-silver", both), both, "silver's old records stay, the new follow");
    let bases: serde_json::Value =
        serde_json::from_slice(&std::fs::read(project.join(".weir/bases.json")).unwrap()).unwrap();
    let names: Vec<&String> = bases.as_object().unwrap().keys().collect();
    assert_eq!(names, ["error_rate", "silver", "user_orders"]);
    assert_eq!(bases["silver"]["topic"], "medallion-silver");

    // A second run adds nothing, and a refresh of bronze now begins everything again.
    ok(weir().arg("run").arg(&project).arg("--flush").output().unwrap());
    check_against_reference(&project, &new);
    ok(weir().arg("run").arg(&project).args(["--flush", "--full-refresh", "bronze"]).output().unwrap());
    check_against_reference(&project, &new);
    assert_ne!(identity("bronze"), bronze_identity, "bronze's checkpoint was reset");
}
