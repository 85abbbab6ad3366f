//! A registry that goes down mid-run: waited for, or the run stops naming it, losing nothing.

#[allow(unused_imports)]
use super::*;

use std::io::{BufRead, BufReader};
use std::process::{Child, Stdio};

/// Waits for a line of `child`'s standard error that `wanted` accepts; every line read goes to
/// `log`. Panics if the process ends first.
fn wait_for_line(lines: &mut impl Iterator<Item = String>, log: &mut String, mut wanted: impl FnMut(&str) -> bool) {
    for line in lines.by_ref() {
        log.push_str(&line);
        log.push('\n');
        if wanted(&line) {
            return;
        }
    }
    panic!("the run ended before the line awaited:\n{log}");
}

/// Rows out, summed over the run's progress lines until `n`.
fn wait_for_rows(lines: &mut impl Iterator<Item = String>, log: &mut String, n: u64) {
    let mut rows = 0;
    wait_for_line(lines, log, |l| {
        if let Ok(v) = serde_json::from_str::<serde_json::Value>(l) {
            rows += v["numRowsOut"].as_u64().unwrap_or(0);
        }
        rows >= n
    });
}

fn spawn(p: &Path) -> Child {
    weir().arg("run").arg(p).arg("--progress-json").stdout(Stdio::null()).stderr(Stdio::piped()).spawn().unwrap()
}

/// A stateless pipeline from Avro orders to JSON lines in `dir/rows`, running until stopped.
fn passthrough(dir: &Path, brokers: &str, registry: &str, retry_for: &str) -> PathBuf {
    let rows = dir.join("rows");
    std::fs::create_dir_all(&rows).unwrap();
    let text = format!(
        r#"
name = "orders-avro-rows"
[source]
type = "kafka"
topics = ["orders"]
kafka.bootstrap.servers = "{brokers}"
kafka.fetch.wait.max.ms = 10
[trigger]
mode = "processing-time"
interval = "50ms"
[parse]
plugin = "{parser}"
config = {{ time_field = "order_ts" }}
grants.registry = true
[registry]
url = "{registry}"
retry_for = "{retry_for}"
{sink}
[checkpoint]
location = "{checkpoint}"
[dead_letter]
path = "{dead}"
"#,
        parser = component("avro_parser").display(),
        sink = file_sink(&rows),
        checkpoint = dir.join("checkpoint").display(),
        dead = dir.join("dead-letters.jsonl").display(),
    );
    let p = dir.join(format!("pipeline-{retry_for}.toml"));
    std::fs::write(&p, text).unwrap();
    p
}

/// `n` orders encoded with `schema` (Avro JSON text), framed with `id`.
fn encoded_orders(schema: &str, id: u32, from: u64, n: u64) -> Vec<Vec<u8>> {
    let s = weir_schema::avro::parse(schema, &[]).unwrap();
    let enc = weir_schema::avro::Encoder::new(s, vec![]);
    (from..from + n)
        .map(|i| {
            let row = format!(
                r#"{{"order_id":{i},"user_id":7,"status":"OK","amount":1.5,"order_ts":{},"channel":"app"}}"#,
                1_700_000_000_000 + i as i64
            );
            let mut v = Vec::new();
            weir_schema::wire::frame(id, &mut v);
            enc.encode(row.as_bytes(), &mut v).unwrap();
            v
        })
        .collect()
}

/// The registry goes down while records with a schema id Weir has not seen arrive: the run
/// waits for it and goes on when it is back; with a short `retry_for` it stops, naming the
/// registry, and a restart reads everything. No record is lost or dead-lettered.
#[test]
fn a_registry_that_goes_down_mid_run_is_waited_for_or_stops_the_run_losing_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let broker = ApacheKafka::start(&dir.path().join("kafka"));
    let mut registry = Registry::start(&dir.path().join("registry"));
    broker.create_topic("orders", 1);
    let v1 = std::fs::read_to_string(formats("order.avsc")).unwrap();
    let v2 = v1.replace(
        r#"{"name": "order_ts""#,
        r#"{"name": "channel", "type": "string", "default": "web"}, {"name": "order_ts""#,
    );
    let v3 = v2.replace(r#""default": "web""#, r#""default": "store""#);
    let id1 = registry.register("orders-value", "AVRO", &v1);
    let id2 = registry.register("orders-value", "AVRO", &v2);
    let id3 = registry.register("orders-value", "AVRO", &v3);
    produce_raw(&broker.brokers(), "orders", &encoded_orders(&v1, id1, 0, 100));

    let run = dir.path().join("run");
    let p = passthrough(&run, &broker.brokers(), &registry.url(), "5 minutes");
    let mut child = spawn(&p);
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines().map_while(Result::ok);
    let mut log = String::new();
    wait_for_rows(&mut lines, &mut log, 100);

    registry.stop();
    produce_raw(&broker.brokers(), "orders", &encoded_orders(&v2, id2, 100, 50));
    wait_for_line(&mut lines, &mut log, |l| l.contains("retrying") && l.contains(&registry.url()));
    registry.restart();
    wait_for_rows(&mut lines, &mut log, 50);
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    log.extend(lines.map(|l| l + "\n"));
    assert!(child.wait().unwrap().success(), "{log}");

    // Down again, with a short patience: the run stops, naming the registry.
    registry.stop();
    produce_raw(&broker.brokers(), "orders", &encoded_orders(&v3, id3, 150, 10));
    let short = passthrough(&run, &broker.brokers(), &registry.url(), "1s");
    let out = weir().arg("run").arg(&short).output().unwrap();
    let said = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "a failure to run, not a bad file: {said}");
    assert!(said.contains(&format!("schema registry {} cannot be reached", registry.url())), "{said}");
    registry.restart();
    let mut child = spawn(&p);
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines().map_while(Result::ok);
    wait_for_rows(&mut lines, &mut log, 10);
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    assert!(child.wait().unwrap().success());

    let rows = sink_rows(&run.join("rows"));
    let mut ids: Vec<u64> = rows.iter().map(|r| r["order_id"].as_u64().unwrap()).collect();
    ids.sort();
    assert_eq!(ids, (0..160).collect::<Vec<_>>(), "every record once");
    assert!(rows.iter().all(|r| r.get("channel").is_some() == (r["order_id"].as_u64().unwrap() >= 100)));
    assert!(dead_letters(&run).is_empty(), "no record failed for the registry's absence");
}
