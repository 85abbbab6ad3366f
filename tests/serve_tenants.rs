//! Two tenants on one `weir serve`, one of them hostile. Its own test binary, one test: the
//! throughput it prints must not share the machine with other tests.

use crate::common::serve::*;
use crate::common::*;

/// Two tenants on one service; one deploys a parser that loops forever on every record. The
/// other's pipeline runs to the end with the output it has alone, and the throughput it keeps is
/// printed (not asserted: a timed assertion fails with the machine, not the code). Run twice:
/// with the looping tenant at the default CPU weight, and at weight 16, which lets its runaway
/// calls take more of the CPU (`limits.cpu_weight`).
#[test]
fn a_tenant_s_pipeline_runs_to_its_own_output_beside_another_tenant_s_infinite_loop() {
    let light = beside_a_loop(1);
    let heavy = beside_a_loop(16);
    assert_eq!(light, heavy, "the same rows whatever the neighbour's weight");
}

/// One service, the good tenant alone and then beside a loop of a tenant of `weight`; returns
/// the good tenant's rows.
fn beside_a_loop(weight: u32) -> Vec<serde_json::Value> {
    let (dir, admin, s) = fresh();
    let good = tenant(&s, &admin, "good");
    let quotas = serde_json::json!({"name": "bad", "quotas": {"cpu_weight": weight}}).to_string();
    s.expect(201, "POST", "/v1/tenants", Some(&admin), Some(quotas.as_bytes()));
    let bad =
        s.expect(201, "POST", "/v1/tenants/bad/tokens", Some(&admin), None)["token"].as_str().unwrap().to_string();
    upload_plugins(&s, &good);
    let events = orders(dir.path(), 1_000_000, 8);
    s.expect(201, "PUT", "/v1/files/orders.jsonl", Some(&good), Some(&std::fs::read(&events).unwrap()));
    let run = |name: &str| {
        let text = orders_pipeline(name, "orders.jsonl", 5_000).replace("[parse]\n", "[parse]\nparallelism = 1\n");
        s.expect(201, "PUT", &format!("/v1/pipelines/{name}"), Some(&good), Some(text.as_bytes()));
        let v = s.wait_for(&good, name, &["finished"]);
        let secs = (v["ended_ms"].as_i64().unwrap() - v["started_ms"].as_i64().unwrap()) as f64 / 1e3;
        (1_000_000.0 / secs, output_rows(&s, &good, name))
    };
    let (solo, solo_rows) = run("solo");

    let hostile = std::fs::read(component("hostile")).unwrap();
    s.expect(201, "PUT", "/v1/plugins/hostile", Some(&bad), Some(&hostile));
    s.expect(
        201,
        "PUT",
        "/v1/plugins/file-sink",
        Some(&bad),
        Some(&std::fs::read(component("jsonl_file_sink")).unwrap()),
    );
    s.expect(201, "PUT", "/v1/files/loops.jsonl", Some(&bad), Some("{\"attack\":\"loop\"}\n".repeat(1_000).as_bytes()));
    let looping = "name = \"loops\"\n[source]\ntype = \"replay\"\npath = \"loops.jsonl\"\n[parse]\nplugin = \"hostile\"\n\
        limits = { call_timeout = \"100ms\" }\n[failure]\nretries = 0\n[sink]\nplugin = \"file-sink\"\n\
        config = { dir = \"/out\" }\ngrants.dirs = [{ host = \"out\", guest = \"/out\", writable = true }]\n";
    s.expect(201, "PUT", "/v1/pipelines/loops", Some(&bad), Some(looping.as_bytes()));
    let (beside, beside_rows) = run("beside");
    eprintln!(
        "good tenant: {solo:.0} rows/s alone, {beside:.0} rows/s beside an infinite loop of weight {weight} ({:.2}×)",
        beside / solo
    );
    assert!(!beside_rows.is_empty());
    assert_eq!(beside_rows, solo_rows, "the good tenant's output changed beside the loop");
    // The loop is still going, failing its own records only, and unseen by the good tenant.
    let v = s.expect(200, "GET", "/v1/pipelines/loops", Some(&bad), None);
    assert_eq!(v["state"], "running", "{v}");
    s.expect(404, "GET", "/v1/pipelines/loops", Some(&good), None);
    s.expect(404, "GET", "/v1/pipelines/beside", Some(&bad), None);
    s.kill();
    beside_rows
}
