//! A tenant's pipeline through the API, run to the oracle's windows and deleted with its state;
//! and what another tenant finds of it: nothing at any endpoint, not its files, not its plugin
//! logs. Every request names its tenant's token, so each check is one request.

use crate::common::serve::*;
use crate::common::*;

#[test]
fn a_tenant_deploys_the_orders_pipeline_through_the_api_and_gets_the_oracle_s_windows() {
    let (dir, admin, s) = fresh();
    let acme = tenant(&s, &admin, "acme");
    upload_plugins(&s, &acme);
    let events = orders(dir.path(), 30_000, 5);
    s.expect(201, "PUT", "/v1/files/orders.jsonl", Some(&acme), Some(&std::fs::read(&events).unwrap()));

    let text = orders_pipeline("errors", "orders.jsonl", 2_000);
    let v = s.expect(201, "PUT", "/v1/pipelines/errors", Some(&acme), Some(text.as_bytes()));
    assert_eq!(v["desired"], "running", "{v}");
    let done = s.wait_for(&acme, "errors", &["finished"]);
    assert!(done["progress"]["batchId"].as_u64().is_some(), "the last batch's progress: {done}");

    let rows = output_rows(&s, &acme, "errors");
    assert!(!rows.is_empty());
    assert_eq!(oracle_shape(&rows), Oracle::find().windows_in_batches_of(&events, 2_000), "the oracle's windows");
    // The same file through `weir test` gives the same rows.
    let local = local_copy(dir.path(), &text, "orders.jsonl", &events);
    let expected = weir_test(&local, &events);
    assert_eq!(windows_of(&rows), windows_of(&expected));

    let progress = s.expect(200, "GET", "/v1/pipelines/errors/progress", Some(&acme), None);
    let records = progress["progress"].as_array().unwrap();
    assert!(records.len() >= 15, "one record per batch: {}", records.len());
    for r in records {
        for field in
            ["id", "runId", "batchId", "numInputRows", "inputRowsPerSecond", "processedRowsPerSecond", "durationMs"]
        {
            assert!(r.get(field).is_some(), "{field} missing in {r}");
        }
    }
    let (status, metrics) = s.call("GET", "/v1/metrics", Some(&acme), None);
    assert_eq!(status, 200);
    let metrics = String::from_utf8(metrics).unwrap();
    assert!(metrics.contains("weir_pipeline_processed_rows_per_second{pipeline=\"errors\"}"), "{metrics}");
    assert!(metrics.contains("weir_plugin_calls{pipeline=\"errors\""), "{metrics}");

    // Delete with its state and outputs: a pipeline made again under the name starts afresh.
    s.expect(204, "DELETE", "/v1/pipelines/errors?state=true&outputs=true", Some(&acme), None);
    s.expect(404, "GET", "/v1/pipelines/errors", Some(&acme), None);
    assert!(!dir.path().join("data/tenants/acme/checkpoints/errors").exists());
    assert_eq!(s.terminate().code(), Some(0));
}

#[test]
fn another_tenant_finds_nothing_of_acme_s_at_any_endpoint() {
    let (dir, admin, s) = fresh();
    let acme = tenant(&s, &admin, "acme");
    let rival = tenant(&s, &admin, "rival");
    upload_plugins(&s, &acme);
    let events = orders(dir.path(), 3_000, 9);
    s.expect(201, "PUT", "/v1/files/orders.jsonl", Some(&acme), Some(&std::fs::read(&events).unwrap()));
    s.expect(
        201,
        "PUT",
        "/v1/pipelines/errors?start=false",
        Some(&acme),
        Some(orders_pipeline("errors", "orders.jsonl", 1_000).as_bytes()),
    );

    // Every route that names a thing, with acme's names and rival's token.
    let pipeline = orders_pipeline("errors", "orders.jsonl", 1_000);
    let walks: &[(&str, &str, Option<&[u8]>)] = &[
        ("GET", "/v1/plugins/orders-json", None),
        ("DELETE", "/v1/plugins/orders-json", None),
        ("GET", "/v1/files/orders.jsonl", None),
        ("GET", "/v1/pipelines/errors", None),
        ("GET", "/v1/pipelines/errors/file", None),
        ("GET", "/v1/pipelines/errors/progress", None),
        ("GET", "/v1/pipelines/errors/events", None),
        ("GET", "/v1/pipelines/errors/dead-letters", None),
        ("GET", "/v1/pipelines/errors/late-events", None),
        ("POST", "/v1/pipelines/errors/start", None),
        ("POST", "/v1/pipelines/errors/stop", None),
        ("POST", "/v1/pipelines/errors/pause", None),
        ("POST", "/v1/pipelines/errors/resume", None),
        ("DELETE", "/v1/pipelines/errors", None),
        ("GET", "/v1/tenants", None),
        ("POST", "/v1/tenants/acme/tokens", None),
    ];
    for (method, path, body) in walks {
        let (status, v) = s.json(method, path, Some(&rival), *body);
        assert_eq!(status, 404, "{method} {path} with another tenant's token: {v}");
    }
    // Rival's own pipeline naming acme's plugin or files: refused, naming the key.
    upload_plugins(&s, &rival);
    let r = s.expect(
        400,
        "PUT",
        "/v1/pipelines/x",
        Some(&rival),
        Some(
            pipeline.replace("\"errors\"", "\"x\"").replace("orders.jsonl", "../../acme/files/orders.jsonl").as_bytes(),
        ),
    );
    assert_eq!(r["field"], "source.path", "{r}");
    // Lists show only one's own.
    let mine = s.expect(200, "GET", "/v1/pipelines", Some(&rival), None);
    assert_eq!(mine["pipelines"].as_array().unwrap().len(), 0);
    let files = s.expect(200, "GET", "/v1/files", Some(&rival), None);
    assert_eq!(files["files"].as_array().unwrap().len(), 0, "{files}");
    // No token, a bad token, a revoked token: 401.
    s.expect(401, "GET", "/v1/pipelines", None, None);
    s.expect(401, "GET", "/v1/pipelines", Some("weir_nope_nope"), None);
    let t = s.expect(201, "POST", "/v1/tenants/rival/tokens", Some(&admin), None);
    let (id, second) = (t["id"].as_str().unwrap(), t["token"].as_str().unwrap());
    s.expect(200, "GET", "/v1/pipelines", Some(second), None);
    s.expect(204, "DELETE", &format!("/v1/tokens/{id}"), Some(&admin), None);
    s.expect(401, "GET", "/v1/pipelines", Some(second), None);
    // Acme still has everything.
    s.expect(200, "GET", "/v1/pipelines/errors", Some(&acme), None);
    s.expect(200, "GET", "/v1/plugins/orders-json", Some(&acme), None);
    // The registry holds hashes, never a token.
    let registry = std::fs::read_to_string(dir.path().join("data/registry.json")).unwrap();
    assert!(!registry.contains(&acme) && !registry.contains(&admin));
    s.kill();
}

/// A plugin's log lines reach its pipeline's `logs`, escaped so that none forges a line of the
/// service's own log, and no other tenant's.
#[test]
fn a_pipeline_s_plugin_log_lines_are_its_tenant_s_to_read() {
    let (dir, admin, s) = fresh();
    let acme = tenant(&s, &admin, "acme");
    let rival = tenant(&s, &admin, "rival");
    upload_plugins(&s, &acme);
    s.expect(201, "PUT", "/v1/plugins/forger", Some(&acme), Some(&std::fs::read(component("forger")).unwrap()));
    let events = orders(dir.path(), 1_000, 2);
    let mut input = std::fs::read_to_string(&events).unwrap();
    input.push_str("{\"forge\":\"log-forge\",\"order_ts\":1793491200000}\n");
    s.expect(201, "PUT", "/v1/files/orders.jsonl", Some(&acme), Some(input.as_bytes()));
    let text =
        orders_pipeline("forged", "orders.jsonl", 500).replace("plugin = \"orders-json\"", "plugin = \"forger\"");
    s.expect(201, "PUT", "/v1/pipelines/forged", Some(&acme), Some(text.as_bytes()));
    s.wait_for(&acme, "forged", &["finished", "failed"]);
    let logs = s.expect(200, "GET", "/v1/pipelines/forged/logs", Some(&acme), None);
    let lines = logs["logs"].as_array().unwrap();
    let forged = lines
        .iter()
        .find(|l| l["message"].as_str().unwrap_or("").starts_with("innocent"))
        .unwrap_or_else(|| panic!("{logs}"));
    assert_eq!(forged["level"], "WARN");
    assert!(forged["stage"].as_str().unwrap().starts_with("acme--forged/parse"), "{forged}");
    assert!(!forged["message"].as_str().unwrap().contains('\n'), "escaped: {forged}");
    s.expect(404, "GET", "/v1/pipelines/forged/logs", Some(&rival), None);
    s.kill();
}
