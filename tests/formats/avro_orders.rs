//! The worked example: Avro orders from Confluent's serializer, through windows, back to its
//! deserializer; recordings with their schemas; the same through `kill -9`.

#[allow(unused_imports)]
use super::*;

/// The worked example of `docs/formats.md`, with bad records among the good, then the same
/// through repeated `kill -9`.
#[test]
fn avro_orders_from_confluent_s_serializer_become_windows_that_confluent_s_deserializer_reads() {
    let dir = tempfile::tempdir().unwrap();
    let broker = ApacheKafka::start(&dir.path().join("kafka"));
    let registry = Registry::start(&dir.path().join("registry"));
    for topic in ["orders", "windows", "windows-killed"] {
        broker.create_topic(topic, PARTITIONS);
    }
    let events = orders(dir.path(), 20_000, 47);
    assert_eq!(produce_orders(&broker, &registry, &events), 20_000);
    let id = subject_id(&registry, "orders-value", 1);
    // Bad records: an id the registry does not have, a record cut short, JSON (magic byte `{`).
    let bad = [framed(999, &[2]), framed(id, &[2]), br#"{"order_id":1}"#.to_vec()];
    produce_raw(&broker.brokers(), "orders", &bad);
    let (kept, _) = kept_orders(&events);
    let want = sliding_reference(&kept, 1_000, 1_000);
    assert!(want.len() >= 40, "windows enough to lose or repeat some: {}", want.len());

    let straight = dir.path().join("straight");
    let p = avro_pipeline(&straight, &broker.brokers(), &registry.url(), "windows", "");
    let out = ok(weir().env("WEIR_LOG", "warn,weir_schema=info").arg("run").arg(&p).output().unwrap());
    // Each schema id is fetched once by the process, whatever its batches and parsers.
    let said = String::from_utf8_lossy(&out.stderr);
    assert_eq!(said.matches(&format!("fetched schema id {id} ")).count(), 1, "{said}");
    assert_eq!(said.matches("schema id 999 is not in the registry").count(), 1, "{said}");
    let written = read_raw(&broker.brokers(), "windows");
    assert!(written.iter().all(|(_, v)| v[0] == 0), "every value is framed");
    let values: Vec<Vec<u8>> = written.into_iter().map(|(_, v)| v).collect();
    let rows = decode(&registry, dir.path(), "windows", &values);
    assert_eq!(windows_of(&rows), want, "the windows, read back by Confluent's deserializer");
    let dead = dead_letters(&straight);
    let errors: Vec<&str> = dead.iter().map(|d| d["error"].as_str().unwrap()).collect();
    assert_eq!(dead.len(), 3, "{errors:?}");
    assert!(errors.iter().any(|e| e.contains("schema id 999: not in the schema registry")), "{errors:?}");
    assert!(errors.iter().any(|e| e.contains(&format!("schema id {id}: the bytes do not decode"))), "{errors:?}");
    assert!(errors.iter().any(|e| e.contains("magic byte 0x7b")), "{errors:?}");
    assert!(dead.iter().all(|d| d["stage"] == "parse" && d["offset"].as_i64().is_some()), "{dead:?}");
    // The sink registered its schema under the topic's subject.
    let (status, _) = registry.get("/subjects/windows-value/versions/1");
    assert_eq!(status, 200);

    recorded_with_their_schemas_they_replay_with_no_registry(dir.path(), &broker, &registry, id);

    let killed = dir.path().join("killed");
    let p = avro_pipeline(&killed, &broker.brokers(), &registry.url(), "windows-killed", "");
    let kills = kill_repeatedly(&p, 12);
    assert!(kills >= 8, "only {kills} kills landed");
    let values: Vec<Vec<u8>> = read_raw(&broker.brokers(), "windows-killed").into_iter().map(|(_, v)| v).collect();
    let again = decode(&registry, dir.path(), "windows-killed", &values);
    assert_eq!(windows_of(&again), want, "no window lost, none twice, through {kills} kills");
    assert_eq!(dead_letters(&killed).len(), 3, "each bad record dead-lettered once");
}

/// `weir record --registry` saves the schemas of what it recorded beside the recording, and
/// `weir test` replays the recording with them, its pipeline's registry nowhere to be reached.
fn recorded_with_their_schemas_they_replay_with_no_registry(
    dir: &Path,
    broker: &ApacheKafka,
    registry: &Registry,
    id: u32,
) {
    let rec = dir.join("recorded.jsonl");
    let out = weir()
        .args(["record", "--brokers", &broker.brokers(), "--topic", "orders", "--max", "200", "--out"])
        .arg(&rec)
        .args(["--registry", &registry.url(), "--subject", "orders-value"])
        .output()
        .unwrap();
    ok(out);
    let saved: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("recorded.jsonl.schemas.json")).unwrap()).unwrap();
    assert_eq!(saved["schemas"][0]["id"], id, "{saved}");
    assert_eq!(saved["versions"][0]["subject"], "orders-value", "{saved}");
    let p = dir.join("replay.toml");
    let text = format!(
        "name = \"replay\"\n[source]\ntype = \"replay\"\npath = \"none.jsonl\"\n[parse]\nplugin = \"{}\"\n\
         config = {{ time_field = \"order_ts\", reader_subject = \"orders-value\", reader_version = 1 }}\n\
         grants.registry = true\n[registry]\nurl = \"http://127.0.0.1:1\"\nretry_for = \"1s\"\n",
        component("avro_parser").display()
    );
    std::fs::write(&p, text).unwrap();
    // `--events` relative to where the test runs: the schemas file is found beside it there.
    let out = ok(weir().arg("test").arg(&p).args(["--events", "recorded.jsonl"]).current_dir(dir).output().unwrap());
    let rows = json_lines(&String::from_utf8(out.stdout).unwrap());
    assert_eq!(rows.len(), 200, "every recorded record a row");
    assert!(rows.iter().all(|r| r["order_id"].as_u64().is_some() && r["status"].is_string()), "{:?}", rows[0]);
}
