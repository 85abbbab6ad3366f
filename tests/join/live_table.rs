//! A table topic updated while the stream runs: a pipeline in processing-time mode reads the
//! orders and the users table from the mock cluster as both grow, and the orders after an
//! update meet the updated rows. The test waits on the sink's committed files, never on a
//! guessed sleep.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::common::kafka::*;
use crate::common::*;
use serde_json::Value;

use super::support::{apply, join_pipeline, kafka_table, reference, users_of, users_v1, users_v2, write_lines};

/// Produces table records (key, value; `""` a tombstone: no value) to `topic` and waits for
/// every acknowledgement.
fn produce_table(brokers: &str, topic: &str, lines: &[Value]) {
    use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
    let producer: BaseProducer = rdkafka::ClientConfig::new().set("bootstrap.servers", brokers).create().unwrap();
    for l in lines {
        let Some(key) = l["key"].as_str() else { continue };
        let value = match &l["value"] {
            Value::String(s) if s.is_empty() => None,
            v @ Value::Object(_) => Some(v.to_string()),
            v => Some(v.to_string()),
        };
        let mut record = BaseRecord::<str, str>::to(topic).key(key);
        if let Some(v) = &value {
            record = record.payload(v);
        }
        while let Err((_, r)) = producer.send(record) {
            record = r;
            producer.poll(Duration::from_millis(5));
        }
    }
    producer.flush(Duration::from_secs(30)).unwrap();
}

/// The rows the file sink has committed into `dir` so far (its staging files are skipped).
fn committed_rows(dir: &Path) -> Vec<Value> {
    let Ok(entries) = std::fs::read_dir(dir) else { return Vec::new() };
    let mut files: Vec<PathBuf> = entries
        .map(|e| e.unwrap().path())
        .filter(|p| p.file_name().is_some_and(|n| n.to_string_lossy().starts_with("batch-")))
        .collect();
    files.sort();
    files.iter().flat_map(|f| json_lines(&std::fs::read_to_string(f).unwrap())).collect()
}

/// Waits, without sleeping on a guess, until the sink in `dir` has committed `n` rows: polls
/// the directory while `child` runs; panics if it exits or takes over a minute.
fn wait_for_rows(dir: &Path, n: usize, child: &mut std::process::Child) -> Vec<Value> {
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        let rows = committed_rows(dir);
        if rows.len() >= n {
            return rows;
        }
        assert!(child.try_wait().unwrap().is_none(), "weir exited with {} of {n} rows", rows.len());
        assert!(std::time::Instant::now() < deadline, "{} of {n} rows after a minute", rows.len());
        std::thread::yield_now();
    }
}

#[test]
fn a_table_topic_updated_while_the_stream_runs_reaches_the_events_after_the_update() {
    let cluster = rdkafka::mocking::MockCluster::new(1).unwrap();
    cluster.create_topic("orders", 2, 1).unwrap();
    cluster.create_topic("users", 1, 1).unwrap();
    let brokers = cluster.bootstrap_servers();
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let generated = orders(d, 6_000, 51);
    let all = json_lines(&std::fs::read_to_string(&generated).unwrap());
    let users = users_of(&all);
    let (first, second) = all.split_at(all.len() / 2);
    let (first_file, second_file) = (d.join("first.jsonl"), d.join("second.jsonl"));
    write_lines(&first_file, first, false);
    write_lines(&second_file, second, false);

    // A pipeline that runs until told to stop, reading both topics as they grow.
    let p = join_pipeline(d, &generated, &kafka_table(&brokers, "users"), "left");
    let text = std::fs::read_to_string(&p).unwrap().replace(
        &format!("type = \"replay\"\npath = \"{}\"\nmax_offsets_per_trigger = 1500", generated.display()),
        &kafka_source(&brokers, "orders", 1_500),
    );
    let text = text.replace("mode = \"available-now\"", "mode = \"processing-time\"");
    std::fs::write(&p, text).unwrap();
    produce_table(&brokers, "users", &users_v1(&users));
    produce_lines(&brokers, "orders", 2, &first_file, false);
    let mut child = weir().arg("run").arg(&p).stdout(std::process::Stdio::null()).spawn().unwrap();
    let out = d.join("out");
    wait_for_rows(&out, first.len(), &mut child);
    // Every order of the first half is out; now the table changes, then more orders come.
    produce_table(&brokers, "users", &users_v2(&users));
    produce_lines(&brokers, "orders", 2, &second_file, false);
    let rows = wait_for_rows(&out, all.len(), &mut child);
    ok(std::process::Command::new("kill").args(["-TERM", &child.id().to_string()]).output().unwrap());
    assert!(child.wait().unwrap().success());

    let mut table = HashMap::new();
    apply(&mut table, &users_v1(&users));
    let mut want = reference(first, &table, false);
    apply(&mut table, &users_v2(&users));
    want.extend(reference(second, &table, false));
    let by_id = |rows: &[Value]| {
        let mut rows = rows.to_vec();
        rows.sort_by_key(|r| r["order_id"].as_i64().unwrap());
        rows
    };
    assert_eq!(rows.len(), want.len());
    assert!(by_id(&rows) == by_id(&want), "the joined rows differ from the reference");
}
