//! `quotas.max_state_mb` while pipelines run: a tenant whose running pipeline takes its state
//! past its quota has the pipeline stopped and failed, with the quota named, while another
//! tenant's pipeline runs on.

use crate::common::serve::*;
use crate::common::*;
use serde_json::json;

/// The orders pipeline paced to run for at least 20 s (200 batches of 500, one every 100 ms), far
/// past the quota's check period, so it is running when the check comes.
fn paced(name: &str) -> String {
    orders_pipeline(name, "orders.jsonl", 500)
        .replace("mode = \"available-now\"", "mode = \"processing-time\"\ninterval = \"100ms\"")
}

#[test]
fn a_running_pipeline_that_takes_its_tenant_past_the_state_quota_is_stopped_and_a_neighbour_runs_on() {
    let (dir, admin, s) = fresh();
    let tiny = json!({"name": "tiny", "quotas": {"max_state_mb": 0}}).to_string();
    s.expect(201, "POST", "/v1/tenants", Some(&admin), Some(tiny.as_bytes()));
    let t = s.expect(201, "POST", "/v1/tenants/tiny/tokens", Some(&admin), None);
    let tiny = t["token"].as_str().unwrap().to_string();
    let acme = tenant(&s, &admin, "acme");
    let events = std::fs::read(orders(dir.path(), 100_000, 7)).unwrap();
    for token in [&tiny, &acme] {
        upload_plugins(&s, token);
        s.expect(201, "PUT", "/v1/files/orders.jsonl", Some(token), Some(&events));
    }
    s.expect(201, "PUT", "/v1/pipelines/p", Some(&acme), Some(paced("p").as_bytes()));
    s.wait_for(&acme, "p", &["running"]);
    // No state yet: the start is allowed; the state the run writes is over a quota of 0 MiB.
    s.expect(201, "PUT", "/v1/pipelines/p", Some(&tiny), Some(paced("p").as_bytes()));
    let failed = s.wait_for(&tiny, "p", &["failed"]);
    let error = failed["error"].as_str().unwrap_or_default();
    assert!(error.contains("quotas.max_state_mb") && error.contains("stopped"), "{failed}");
    let neighbour = s.expect(200, "GET", "/v1/pipelines/p", Some(&acme), None);
    assert_eq!(neighbour["state"], "running", "{neighbour}");
    // Stopped, not lost: the refusal to start again names the state and the fix.
    let r = s.expect(403, "POST", "/v1/pipelines/p/start", Some(&tiny), None);
    assert!(r["error"].as_str().unwrap_or_default().contains("state"), "{r}");
    s.kill();
}
