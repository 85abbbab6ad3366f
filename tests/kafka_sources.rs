//! The Kafka source on Apache Kafka, where it starts and what it refuses: `earliest`, `latest`
//! and a timestamp; chosen partitions; a missing topic, which fails at once naming it; and
//! checkpointed offsets that retention deleted, which stop the run as data loss (exit 3) rather
//! than skip records. Each run passes the orders through to the file sink, whose rows say
//! exactly what was read.

use std::path::{Path, PathBuf};

use crate::common::apache_kafka::ApacheKafka;
use crate::common::kafka::*;
use crate::common::*;

/// A broker with `orders` on two partitions holding the `n` orders of `seed` (line `i` on
/// partition `i % 2`, its `order_ts` as timestamp); the orders' lines.
fn broker_with(dir: &Path, n: u64, seed: u64) -> (ApacheKafka, Vec<serde_json::Value>) {
    let broker = ApacheKafka::start(&dir.join("kafka"));
    broker.create_topic("orders", 2);
    let events = orders(dir, n, seed);
    produce_lines(&broker.brokers(), "orders", 2, &events, true);
    (broker, json_lines(&std::fs::read_to_string(events).unwrap()))
}

/// A pass-through pipeline from `orders` with `start` in its `[source]`, into `dir/NAME/out`.
fn passing(dir: &Path, name: &str, brokers: &str, start: &str) -> (PathBuf, PathBuf) {
    let out = dir.join(name).join("out");
    std::fs::create_dir_all(&out).unwrap();
    let text = format!(
        "name = \"{name}\"\n[source]\n{}\n{start}\n[trigger]\nmode = \"available-now\"\n[parse]\nplugin = \"{}\"\n\
         {}[checkpoint]\nlocation = \"{}\"\n",
        kafka_source(brokers, "orders", 5_000),
        component("orders_json").display(),
        file_sink(&out),
        dir.join(name).join("checkpoint").display()
    );
    let p = dir.join(format!("{name}.toml"));
    std::fs::write(&p, text).unwrap();
    (p, out)
}

/// The `order_ts` of each row, sorted.
fn times(rows: &[serde_json::Value]) -> Vec<i64> {
    let mut t: Vec<i64> = rows.iter().map(|r| r["order_ts"].as_i64().unwrap()).collect();
    t.sort_unstable();
    t
}

#[test]
fn earliest_latest_a_timestamp_and_chosen_partitions_start_where_they_say() {
    let dir = tempfile::tempdir().unwrap();
    let (broker, lines) = broker_with(dir.path(), 4_000, 31);
    let brokers = broker.brokers();
    let all = times(&lines);

    let (p, out) = passing(dir.path(), "earliest", &brokers, "starting_offsets = \"earliest\"");
    ok(weir().arg("run").arg(&p).output().unwrap());
    assert_eq!(times(&sink_rows(&out)), all);

    // `latest`: nothing of what is there. (A run that reads nothing records no position: the
    // next run on its checkpoint starts at `latest` again, `docs/kafka.md`.)
    let (p, out) = passing(dir.path(), "latest", &brokers, "starting_offsets = \"latest\"");
    ok(weir().arg("run").arg(&p).output().unwrap());
    assert!(sink_rows(&out).is_empty());
    let more = orders(&dir.path().join("more"), 1_000, 32);
    produce_lines(&brokers, "orders", 2, &more, true);

    // A timestamp: the first record of each partition at or after it, and everything after.
    let at = all[all.len() / 2];
    let (p, out) = passing(dir.path(), "timestamp", &brokers, &format!("starting_timestamp = {at}"));
    ok(weir().arg("run").arg(&p).output().unwrap());
    let got = times(&sink_rows(&out));
    let first_per_partition =
        |part: usize| lines.iter().skip(part).step_by(2).position(|l| l["order_ts"].as_i64() >= Some(at));
    let want: usize = (0..2).map(|part| lines.len() / 2 - first_per_partition(part).unwrap()).sum::<usize>() + 1_000;
    assert_eq!(got.len(), want, "from the first record at or after the timestamp, in each partition");

    // Chosen partitions: partition 1 only, the odd lines (and the `more` ones there).
    let (p, out) = passing(dir.path(), "chosen", &brokers, "partitions = [\"orders:1\"]");
    ok(weir().arg("run").arg(&p).output().unwrap());
    let odd: Vec<serde_json::Value> = lines.iter().skip(1).step_by(2).cloned().collect();
    let odd_more: Vec<serde_json::Value> =
        json_lines(&std::fs::read_to_string(&more).unwrap()).into_iter().skip(1).step_by(2).collect();
    assert_eq!(times(&sink_rows(&out)), times(&[odd, odd_more].concat()));
}

#[test]
fn a_missing_topic_fails_at_once_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let broker = ApacheKafka::start(&dir.path().join("kafka"));
    let (p, _) = passing(dir.path(), "missing", &broker.brokers(), "");
    let text = std::fs::read_to_string(&p).unwrap().replace("topics = [\"orders\"]", "topics = [\"no-such-topic\"]");
    std::fs::write(&p, text).unwrap();
    let out = weir().arg("run").arg(&p).output().unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("no-such-topic"), "{err}");
}

#[test]
fn checkpointed_offsets_that_retention_deleted_stop_the_run_as_data_loss() {
    let dir = tempfile::tempdir().unwrap();
    let (broker, _) = broker_with(dir.path(), 2_000, 33);
    let brokers = broker.brokers();
    let (p, out) = passing(dir.path(), "loss", &brokers, "");
    ok(weir().arg("run").arg(&p).output().unwrap());
    let before = sink_rows(&out).len();
    // 1,000 more per partition, and then the first half of those gone, as retention would.
    let more = orders(&dir.path().join("more"), 2_000, 34);
    produce_lines(&brokers, "orders", 2, &more, true);
    for partition in 0..2 {
        broker.delete_records("orders", partition, 1_500);
    }
    let run = weir().arg("run").arg(&p).output().unwrap();
    let err = String::from_utf8_lossy(&run.stderr);
    assert_eq!(run.status.code(), Some(3), "{err}");
    assert!(err.contains("no longer on the broker") && err.contains("orders"), "{err}");
    assert_eq!(sink_rows(&out).len(), before, "nothing skipped, nothing more delivered");
}
