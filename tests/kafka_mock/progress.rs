//! Progress in Spark's shape from a Kafka source on the mock cluster: ids across runs, offsets
//! per partition with their lag, event times; and `weir inspect --json` giving the last batch's
//! record as `--progress-json` printed it.

use crate::common::kafka::*;
use crate::common::*;
use rdkafka::mocking::MockCluster;

/// Progress in Spark's shape: each batch names the checkpoint (`id`, the same across runs) and
/// the run (`runId`, new at each start), and gives its source's start, end and latest offsets
/// per partition, with the lag between them, and its events' earliest and latest event time.
#[test]
fn progress_gives_offsets_lag_event_times_and_ids_in_spark_s_shape() {
    let cluster = MockCluster::new(1).unwrap();
    cluster.create_topic("orders", 2, 1).unwrap();
    cluster.create_topic("windows", 2, 1).unwrap();
    let brokers = cluster.bootstrap_servers();
    let dir = tempfile::tempdir().unwrap();
    let events = orders(dir.path(), 20_000, 4);
    let p = to_kafka(dir.path(), &brokers, "checkpoint");
    let batches = |out: std::process::Output| -> Vec<serde_json::Value> {
        let out = ok(out);
        String::from_utf8_lossy(&out.stderr)
            .lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .filter(|v| v.get("batchId").is_some())
            .collect()
    };
    // Line i of the file goes to partition i % 2; each production adds as many again.
    let lines = produce_lines(&brokers, "orders", 2, &events, true) as i64;
    let per_partition = |produced: i64, partition: i64| produced / 2 + (produced % 2) * i64::from(partition == 0);
    let check = |run: &[serde_json::Value], produced: i64| {
        let mut rows = 0;
        for (i, b) in run.iter().enumerate() {
            assert_eq!((&b["id"], &b["runId"]), (&run[0]["id"], &run[0]["runId"]), "one checkpoint, one run");
            let s = &b["sources"][0];
            assert_eq!(s["description"], "kafka orders");
            if i > 0 {
                assert_eq!(s["startOffset"], run[i - 1]["sources"][0]["endOffset"], "batches follow on");
            }
            for end in s["endOffset"]["partitions"].as_array().unwrap() {
                let partition = end["partition"].as_i64().unwrap();
                let latest = s["latestOffset"]["partitions"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .find(|l| l["partition"] == end["partition"])
                    .unwrap()["offset"]
                    .as_i64()
                    .unwrap();
                assert_eq!(latest, per_partition(produced, partition), "the latest offset is the topic's end");
                let lag = s["lag"][format!("orders/{partition}")].as_i64();
                assert_eq!(lag, Some(latest - end["offset"].as_i64().unwrap()), "batch {i}: {s}");
            }
            rows += s["numInputRows"].as_i64().unwrap();
            if b["numEvents"].as_u64() > Some(0) {
                let t = &b["eventTime"];
                assert!(t["min"].as_str().unwrap() <= t["max"].as_str().unwrap(), "{t}");
            }
            assert!(b["inputRowsPerSecond"].as_f64().is_some() && b["stateBytes"].as_u64().is_some());
        }
        let last = &run[run.len() - 1]["sources"][0]["lag"];
        assert!(last.as_object().unwrap().values().all(|l| l == 0), "read to the end: {last}");
        rows
    };
    let first = batches(weir().arg("run").arg(&p).arg("--progress-json").output().unwrap());
    assert!(first.len() > 2, "several batches");
    assert_eq!(check(&first, lines), lines, "every record in one batch");

    // The same checkpoint again, with as many records more: the same id, a new run id, and
    // reading from where the first run ended.
    produce_lines(&brokers, "orders", 2, &events, true);
    let second = batches(weir().arg("run").arg(&p).arg("--progress-json").output().unwrap());
    assert_eq!(second[0]["id"], first[0]["id"]);
    assert_ne!(second[0]["runId"], first[0]["runId"]);
    assert_eq!(second[0]["sources"][0]["startOffset"], first[first.len() - 1]["sources"][0]["endOffset"]);
    assert_eq!(check(&second, 2 * lines), lines);

    // weir inspect --json: the checkpoint, its last commit, and the last batch's record as
    // --progress-json printed it.
    let out = ok(weir().arg("inspect").arg(dir.path().join("checkpoint")).arg("--json").output().unwrap());
    let inspected: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let last = &second[second.len() - 1];
    assert_eq!(&inspected["lastProgress"], last);
    assert_eq!(inspected["id"], first[0]["id"]);
    assert_eq!(inspected["lastCommit"]["batchId"], last["batchId"]);
    assert_eq!(inspected["nextBatch"].as_u64(), last["batchId"].as_u64().map(|b| b + 1));
    assert_eq!(inspected["position"], last["sources"][0]["endOffset"]);
    assert!(inspected["lastCommit"]["ageMs"].as_i64() >= Some(0));
}
