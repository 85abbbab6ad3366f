//! Requests the service refuses, each with the field to blame and, where there is one, the fix:
//! tenant bodies, plugins, pipeline files, quotas, query flags and file paths. A refusal leaves
//! the service as it was, so the checks run one after another on one service.

use std::path::Path;

use crate::common::serve::*;
use crate::common::*;
use serde_json::json;

#[test]
fn bad_requests_are_refused_with_the_field_and_the_fix() {
    let (dir, admin, s) = fresh();
    refuses_bad_tenant_bodies(&s, &admin);
    let quotas = json!({"name": "acme", "quotas": {"max_pipelines": 1}}).to_string();
    s.expect(201, "POST", "/v1/tenants", Some(&admin), Some(quotas.as_bytes()));
    s.expect(409, "POST", "/v1/tenants", Some(&admin), Some(quotas.as_bytes()));
    let acme = token_of(&s, &admin, "acme");

    // A plugin that is not a component; a pipeline file past the size limit.
    let r = s.expect(422, "PUT", "/v1/plugins/junk", Some(&acme), Some(b"\0asm but not really"));
    assert!(r["fix"].is_string(), "{r}");
    let (status, _) = s.call("PUT", "/v1/pipelines/huge", Some(&acme), Some(&vec![b'#'; 300 << 10]));
    assert_eq!(status, 413, "a pipeline file past 256 KiB");
    let (status, body) = s.json("DELETE", "/v1/files/x", Some(&acme), None);
    assert_eq!(status, 405);
    assert!(body["error"].as_str().unwrap().contains("method"), "JSON like every other error: {body}");
    upload_plugins(&s, &acme);

    let good = orders_pipeline("p", "orders.jsonl", 1_000);
    refuses_bad_pipeline_files(&s, &acme, &good, dir.path());
    // Over the quota of one pipeline.
    s.expect(201, "PUT", "/v1/pipelines/p?start=false", Some(&acme), Some(good.as_bytes()));
    let r = s.expect(
        403,
        "PUT",
        "/v1/pipelines/q?start=false",
        Some(&acme),
        Some(good.replace("\"p\"", "\"q\"").as_bytes()),
    );
    assert!(r["error"].as_str().unwrap().contains("quota"), "{r}");
    // A plugin in use cannot be deleted; a bad query flag is named.
    s.expect(409, "DELETE", "/v1/plugins/orders-json", Some(&acme), None);
    let r = s.expect(400, "DELETE", "/v1/pipelines/p?state=maybe", Some(&acme), None);
    assert_eq!(r["field"], "state");
    // Files: no way out of the data area.
    for path in ["/v1/files/..%2Fregistry.json", "/v1/files/.hidden", "/v1/files/a//b"] {
        let (status, _) = s.call("PUT", path, Some(&acme), Some(b"x"));
        assert!(status == 400 || status == 404, "{path}: {status}");
    }
    assert!(dir.path().join("data/registry.json").exists());
    // The admin token is not a tenant's.
    s.expect(403, "GET", "/v1/pipelines", Some(&admin), None);
    a_tenant_over_its_state_quota_cannot_start_again(&s, &admin, &good, dir.path());
    s.kill();
}

/// A new token of the tenant `name`, minted with the admin token.
fn token_of(s: &Server, admin: &str, name: &str) -> String {
    let t = s.expect(201, "POST", &format!("/v1/tenants/{name}/tokens"), Some(admin), None);
    t["token"].as_str().unwrap().to_string()
}

/// Tenant bodies: an unknown key, a quota of the wrong type (named by its path), a name the
/// service does not take (with the fix), and JSON that does not parse.
fn refuses_bad_tenant_bodies(s: &Server, admin: &str) {
    let r = s.expect(400, "POST", "/v1/tenants", Some(admin), Some(br#"{"name": "acme", "quota": {}}"#));
    assert!(r["error"].as_str().unwrap().contains("unknown field `quota`"), "{r}");
    let r = s.expect(
        400,
        "POST",
        "/v1/tenants",
        Some(admin),
        Some(br#"{"name": "acme", "quotas": {"max_pipelines": "x"}}"#),
    );
    assert_eq!(r["field"], "quotas.max_pipelines", "{r}");
    let r = s.expect(400, "POST", "/v1/tenants", Some(admin), Some(br#"{"name": "Bad Name"}"#));
    assert_eq!(r["field"], "name");
    assert!(r["fix"].is_string());
    s.expect(400, "POST", "/v1/tenants", Some(admin), Some(b"{not json"));
}

/// Variants of the pipeline file `good`, each refused as `p` by the tenant `acme`, whose service
/// keeps its data in `dir`: no error names a path of the service's.
fn refuses_bad_pipeline_files(s: &Server, acme: &str, good: &str, dir: &Path) {
    // A pipeline file: TOML that does not parse (with its line), an unknown key, a bad value.
    let r = s.expect(400, "PUT", "/v1/pipelines/p", Some(acme), Some(b"name = \"p\"\n[source\n"));
    assert_eq!(r["at"][0], 2, "{r}");
    let r = s.expect(
        400,
        "PUT",
        "/v1/pipelines/p",
        Some(acme),
        Some(good.replace("[trigger]", "[trigger]\nmoed = \"once\"").as_bytes()),
    );
    assert!(r["field"].as_str().unwrap().contains("moed") || r["error"].as_str().unwrap().contains("moed"), "{r}");
    let r = s.expect(400, "PUT", "/v1/pipelines/p", Some(acme), Some(good.replace("1 minute", "a minute").as_bytes()));
    assert_eq!(r["field"], "window.size", "{r}");
    let r = s.expect(
        400,
        "PUT",
        "/v1/pipelines/p",
        Some(acme),
        Some(good.replace("\"error-rate\"", "\"missing\"").as_bytes()),
    );
    assert_eq!(r["field"], "aggregate.plugin", "{r}");
    // A plugin in a role it does not play: the parser as the aggregator. Refused at start.
    let r = s.expect(
        409,
        "PUT",
        "/v1/pipelines/p",
        Some(acme),
        Some(good.replace("\"error-rate\"", "\"orders-json\"").as_bytes()),
    );
    assert!(!r["error"].as_str().unwrap().contains(dir.to_str().unwrap()), "no service paths in errors: {r}");
}

/// A tenant whose state is over its quota cannot start a pipeline again until it frees some:
/// `tiny`, allowed no state, runs `good` over orders in `dir` once, then is refused a restart
/// until it deletes that state.
fn a_tenant_over_its_state_quota_cannot_start_again(s: &Server, admin: &str, good: &str, dir: &Path) {
    let tiny = json!({"name": "tiny", "quotas": {"max_state_mb": 0}}).to_string();
    s.expect(201, "POST", "/v1/tenants", Some(admin), Some(tiny.as_bytes()));
    let tiny = token_of(s, admin, "tiny");
    upload_plugins(s, &tiny);
    let events = orders(dir, 2_000, 1);
    s.expect(201, "PUT", "/v1/files/orders.jsonl", Some(&tiny), Some(&std::fs::read(&events).unwrap()));
    s.expect(201, "PUT", "/v1/pipelines/p", Some(&tiny), Some(good.as_bytes()));
    s.wait_for(&tiny, "p", &["finished"]);
    s.expect(200, "POST", "/v1/pipelines/p/stop", Some(&tiny), None);
    let r = s.expect(403, "POST", "/v1/pipelines/p/start", Some(&tiny), None);
    assert!(r["error"].as_str().unwrap().contains("state"), "{r}");
    s.expect(204, "DELETE", "/v1/pipelines/p?state=true", Some(&tiny), None);
    s.expect(201, "PUT", "/v1/pipelines/p", Some(&tiny), Some(good.as_bytes()));
}
