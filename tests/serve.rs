//! `weir serve` end to end: the real binary, real HTTP requests (ureq), real plugins uploaded
//! through the API, the orders pipeline run to the oracle's windows; tenants that cannot see
//! each other; requests that are refused with the field to blame; and the service killed with
//! SIGKILL again and again while three pipelines run, each ending with an uninterrupted run's
//! output.

use crate::common::serve::*;
use crate::common::*;
use serde_json::{Value, json};

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

#[test]
fn bad_requests_are_refused_with_the_field_and_the_fix() {
    let (dir, admin, s) = fresh();
    let r = s.expect(400, "POST", "/v1/tenants", Some(&admin), Some(br#"{"name": "acme", "quota": {}}"#));
    assert!(r["error"].as_str().unwrap().contains("unknown field `quota`"), "{r}");
    let r = s.expect(
        400,
        "POST",
        "/v1/tenants",
        Some(&admin),
        Some(br#"{"name": "acme", "quotas": {"max_pipelines": "x"}}"#),
    );
    assert_eq!(r["field"], "quotas.max_pipelines", "{r}");
    let r = s.expect(400, "POST", "/v1/tenants", Some(&admin), Some(br#"{"name": "Bad Name"}"#));
    assert_eq!(r["field"], "name");
    assert!(r["fix"].is_string());
    s.expect(400, "POST", "/v1/tenants", Some(&admin), Some(b"{not json"));
    let quotas = json!({"name": "acme", "quotas": {"max_pipelines": 1}}).to_string();
    s.expect(201, "POST", "/v1/tenants", Some(&admin), Some(quotas.as_bytes()));
    s.expect(409, "POST", "/v1/tenants", Some(&admin), Some(quotas.as_bytes()));
    let acme =
        s.expect(201, "POST", "/v1/tenants/acme/tokens", Some(&admin), None)["token"].as_str().unwrap().to_string();

    // A plugin that is not a component; a pipeline file past the size limit.
    let r = s.expect(422, "PUT", "/v1/plugins/junk", Some(&acme), Some(b"\0asm but not really"));
    assert!(r["fix"].is_string(), "{r}");
    let (status, _) = s.call("PUT", "/v1/pipelines/huge", Some(&acme), Some(&vec![b'#'; 300 << 10]));
    assert_eq!(status, 413, "a pipeline file past 256 KiB");
    let (status, body) = s.json("DELETE", "/v1/files/x", Some(&acme), None);
    assert_eq!(status, 405);
    assert!(body["error"].as_str().unwrap().contains("method"), "JSON like every other error: {body}");
    upload_plugins(&s, &acme);

    // A pipeline file: TOML that does not parse (with its line), an unknown key, a bad value.
    let good = orders_pipeline("p", "orders.jsonl", 1_000);
    let r = s.expect(400, "PUT", "/v1/pipelines/p", Some(&acme), Some(b"name = \"p\"\n[source\n"));
    assert_eq!(r["at"][0], 2, "{r}");
    let r = s.expect(
        400,
        "PUT",
        "/v1/pipelines/p",
        Some(&acme),
        Some(good.replace("[trigger]", "[trigger]\nmoed = \"once\"").as_bytes()),
    );
    assert!(r["field"].as_str().unwrap().contains("moed") || r["error"].as_str().unwrap().contains("moed"), "{r}");
    let r = s.expect(400, "PUT", "/v1/pipelines/p", Some(&acme), Some(good.replace("1 minute", "a minute").as_bytes()));
    assert_eq!(r["field"], "window.size", "{r}");
    let r = s.expect(
        400,
        "PUT",
        "/v1/pipelines/p",
        Some(&acme),
        Some(good.replace("\"error-rate\"", "\"missing\"").as_bytes()),
    );
    assert_eq!(r["field"], "aggregate.plugin", "{r}");
    // A plugin in a role it does not play: the parser as the aggregator. Refused at start.
    let r = s.expect(
        409,
        "PUT",
        "/v1/pipelines/p",
        Some(&acme),
        Some(good.replace("\"error-rate\"", "\"orders-json\"").as_bytes()),
    );
    assert!(!r["error"].as_str().unwrap().contains(dir.path().to_str().unwrap()), "no service paths in errors: {r}");
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
    // A tenant whose state is over its quota cannot start a pipeline again until it frees some.
    let tiny = json!({"name": "tiny", "quotas": {"max_state_mb": 0}}).to_string();
    s.expect(201, "POST", "/v1/tenants", Some(&admin), Some(tiny.as_bytes()));
    let tiny =
        s.expect(201, "POST", "/v1/tenants/tiny/tokens", Some(&admin), None)["token"].as_str().unwrap().to_string();
    upload_plugins(&s, &tiny);
    let events = orders(dir.path(), 2_000, 1);
    s.expect(201, "PUT", "/v1/files/orders.jsonl", Some(&tiny), Some(&std::fs::read(&events).unwrap()));
    s.expect(201, "PUT", "/v1/pipelines/p", Some(&tiny), Some(good.as_bytes()));
    s.wait_for(&tiny, "p", &["finished"]);
    s.expect(200, "POST", "/v1/pipelines/p/stop", Some(&tiny), None);
    let r = s.expect(403, "POST", "/v1/pipelines/p/start", Some(&tiny), None);
    assert!(r["error"].as_str().unwrap().contains("state"), "{r}");
    s.expect(204, "DELETE", "/v1/pipelines/p?state=true", Some(&tiny), None);
    s.expect(201, "PUT", "/v1/pipelines/p", Some(&tiny), Some(good.as_bytes()));
    s.kill();
}

#[test]
fn pause_resume_update_with_state_kept_and_a_refused_update_leaves_the_old_run() {
    let dir = tempfile::tempdir().unwrap();
    let (admin_path, admin) = admin_file(dir.path());
    let data = dir.path().join("data");
    let s = Server::start(&data, &admin_path, &[]);
    let acme = tenant(&s, &admin, "acme");
    upload_plugins(&s, &acme);
    let v2 = std::fs::read(component("versioned_count")).unwrap();
    s.expect(201, "PUT", "/v1/plugins/error-rate-v2", Some(&acme), Some(&v2));
    let events = orders(dir.path(), 30_000, 21);
    s.expect(201, "PUT", "/v1/files/orders.jsonl", Some(&acme), Some(&std::fs::read(&events).unwrap()));
    // A batch of 200 every 100 ms: 15 s of batches, so windows are open throughout the changes
    // below.
    let text = orders_pipeline("errors", "orders.jsonl", 200)
        .replace("mode = \"available-now\"", "mode = \"processing-time\"\ninterval = \"100ms\"");
    s.expect(201, "PUT", "/v1/pipelines/errors", Some(&acme), Some(text.as_bytes()));
    let v = s.expect(200, "POST", "/v1/pipelines/errors/pause", Some(&acme), None);
    assert_eq!((v["desired"].as_str(), v["state"].as_str()), (Some("paused"), Some("idle")), "{v}");
    let v = s.expect(200, "POST", "/v1/pipelines/errors/stop", Some(&acme), None);
    assert_eq!(v["desired"], "stopped");
    s.expect(409, "POST", "/v1/pipelines/errors/resume", Some(&acme), None);
    s.expect(200, "POST", "/v1/pipelines/errors/start", Some(&acme), None);
    s.expect(200, "POST", "/v1/pipelines/errors/pause", Some(&acme), None);
    let v = s.expect(200, "POST", "/v1/pipelines/errors/resume", Some(&acme), None);
    assert_eq!((v["desired"].as_str(), v["state"].as_str()), (Some("running"), Some("running")), "{v}");

    // The aggregator updated mid-run to a build with a new state encoding: the service restarts
    // the pipeline on it without a restart of its own, and the state is migrated.
    let migrated = text.replace("\"error-rate\"", "\"error-rate-v2\"");
    s.expect(200, "PUT", "/v1/pipelines/errors", Some(&acme), Some(migrated.as_bytes()));
    // The stream opened after the update: its first batch is the new build's.
    let mut stream = s.events(&acme, "errors");
    while stream.next().is_some_and(|(kind, _)| kind != "progress") {}
    // Back to the old build, which cannot read the new accumulators: refused with the reason,
    // and the new build runs on.
    let r = s.expect(409, "PUT", "/v1/pipelines/errors", Some(&acme), Some(text.as_bytes()));
    assert!(r["error"].as_str().unwrap().contains("state version 3"), "{r}");
    let file = s.call("GET", "/v1/pipelines/errors/file", Some(&acme), None).1;
    assert_eq!(String::from_utf8(file).unwrap(), migrated, "the registry kept the file that runs");
    assert_eq!(s.expect(200, "GET", "/v1/pipelines/errors", Some(&acme), None)["state"], "running");
    // Nor may an update read another source on this checkpoint.
    s.expect(201, "PUT", "/v1/files/other.jsonl", Some(&acme), Some(b"{}\n"));
    let other = migrated.replace("path = \"orders.jsonl\"", "path = \"other.jsonl\"");
    let r = s.expect(409, "PUT", "/v1/pipelines/errors", Some(&acme), Some(other.as_bytes()));
    assert!(r["error"].as_str().unwrap().contains("cannot start"), "{r}");

    s.wait_for(&acme, "errors", &["finished"]);
    let rows = output_rows(&s, &acme, "errors");
    let local = local_copy(dir.path(), &orders_pipeline("errors", "orders.jsonl", 200), "orders.jsonl", &events);
    assert_eq!(
        windows_of(&rows),
        windows_of(&weir_test(&local, &events)),
        "each window once, across the pauses and the updates"
    );
    s.kill();

    // A restart keeps what was wanted: stopped stays stopped.
    let s = Server::start(&data, &admin_path, &[]);
    s.expect(200, "POST", "/v1/pipelines/errors/stop", Some(&acme), None);
    s.kill();
    let s = Server::start(&data, &admin_path, &[]);
    let v = s.expect(200, "GET", "/v1/pipelines/errors", Some(&acme), None);
    assert_eq!((v["desired"].as_str(), v["state"].as_str()), (Some("stopped"), Some("idle")), "{v}");
    s.kill();
}

/// The kill loop for the service: three pipelines run in one `weir serve`, which is killed with
/// SIGKILL at random moments (after 0 to 2 new progress records of one of them) and started
/// again on the same data directory, up to `kills` times. Each pipeline's output must equal an
/// uninterrupted run's, and the registry must open every time.
#[test]
fn three_pipelines_give_an_uninterrupted_run_s_output_after_the_service_is_killed_again_and_again() {
    // 400 batches each: enough that 20 kills land while they run.
    const BATCH: usize = 250;
    let dir = tempfile::tempdir().unwrap();
    let (admin_path, admin) = admin_file(dir.path());
    let data = dir.path().join("data");
    let s = Server::start(&data, &admin_path, &[]);
    let acme = tenant(&s, &admin, "acme");
    upload_plugins(&s, &acme);
    let names = ["one", "two", "three"];
    let mut inputs = Vec::new();
    for (i, name) in names.iter().enumerate() {
        let sub = dir.path().join(name);
        std::fs::create_dir_all(&sub).unwrap();
        let events = orders(&sub, 100_000, 30 + i as u64);
        s.expect(201, "PUT", &format!("/v1/files/{name}.jsonl"), Some(&acme), Some(&std::fs::read(&events).unwrap()));
        inputs.push(events);
    }
    for name in names {
        let text = orders_pipeline(name, &format!("{name}.jsonl"), BATCH);
        s.expect(201, "PUT", &format!("/v1/pipelines/{name}"), Some(&acme), Some(text.as_bytes()));
    }
    let seed = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos() as u64 | 1;
    eprintln!("kill schedule seed: {seed}");
    let mut rng = seed;
    let mut next = move |n: u64| {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng % n
    };
    let mut server = s;
    let mut kills = 0;
    while kills < 20 {
        // Killed after `wait_for` new batches of one pipeline (0: at once, during start-up),
        // counted on its event stream; one that finishes first hands over to the next.
        let wait_for = next(3);
        let first = next(3) as usize;
        let mut landed = wait_for == 0;
        for name in names.iter().cycle().skip(first).take(names.len()) {
            if landed {
                break;
            }
            let (mut events, mut seen) = (server.events(&acme, name), 0);
            while let Some((kind, data)) = events.next() {
                match (kind.as_str(), data["state"].as_str()) {
                    ("progress", _) => {
                        seen += 1;
                        if seen >= wait_for {
                            landed = true;
                            break;
                        }
                    }
                    ("state", Some("finished")) => break,
                    ("state", Some("failed")) => panic!("{name} failed: {data}"),
                    _ => {}
                }
            }
        }
        if !landed {
            break;
        }
        server.kill();
        kills += 1;
        server = Server::start(&data, &admin_path, &[]);
    }
    eprintln!("{kills} kills");
    assert_eq!(kills, 20, "the pipelines ended before 20 kills landed");
    for (name, events) in names.iter().zip(&inputs) {
        server.wait_for(&acme, name, &["finished"]);
        let rows = output_rows(&server, &acme, name);
        let local = local_copy(
            dir.path(),
            &orders_pipeline(name, &format!("{name}.jsonl"), BATCH),
            &format!("{name}.jsonl"),
            events,
        );
        let expected = weir_test(&local, events);
        assert_eq!(rows, expected, "{name}: the same rows, each once, in the same order");
    }
    server.kill();
}

/// Every route `docs/openapi.json` documents is served: without a token, each answers `401`
/// (health: `200`), never "no such route".
#[test]
fn every_documented_route_is_served() {
    let (_dir, _, s) = fresh();
    let spec: Value =
        serde_json::from_str(&std::fs::read_to_string(root().join("docs/openapi.json")).unwrap()).unwrap();
    for (path, ops) in spec["paths"].as_object().unwrap() {
        let concrete = path.replace("{action}", "start").replace(['{', '}'], "");
        for method in ops.as_object().unwrap().keys() {
            let method = method.to_uppercase();
            let (status, body) = s.call(&method, &concrete, None, Some(b""));
            let want = if path == "/v1/health" { 200 } else { 401 };
            assert_eq!(status, want, "{method} {concrete}: {}", String::from_utf8_lossy(&body));
        }
    }
    let (status, page) = s.call("GET", "/", None, None);
    assert_eq!(status, 200);
    assert!(String::from_utf8(page).unwrap().contains("uPlot"));
    s.kill();
}

/// The thin client in the same binary: upload, put-file, deploy, list, status, stop, delete,
/// with tables, `--json`, and exit codes a script can use.
#[test]
fn the_thin_client_deploys_lists_watches_and_deletes() {
    let (dir, admin, s) = fresh();
    let token = tenant(&s, &admin, "acme");
    let token_file = dir.path().join("token");
    std::fs::write(&token_file, &token).unwrap();
    let client = |args: &[&str]| {
        let out = weir().arg("--server").arg(&s.base).arg("--token-file").arg(&token_file).args(args).output().unwrap();
        (out.status.code(), String::from_utf8(out.stdout).unwrap(), String::from_utf8(out.stderr).unwrap())
    };
    for (name, file) in [("orders-json", "orders_json"), ("error-rate", "error_rate"), ("file-sink", "jsonl_file_sink")]
    {
        let (code, out, err) = client(&["upload", name, component(file).to_str().unwrap()]);
        assert_eq!(code, Some(0), "{err}");
        assert!(out.contains("sha256:"), "{out}");
    }
    let events = orders(dir.path(), 5_000, 3);
    let (code, _, err) = client(&["put-file", events.to_str().unwrap(), "orders.jsonl"]);
    assert_eq!(code, Some(0), "{err}");
    let file = dir.path().join("errors.toml");
    std::fs::write(&file, orders_pipeline("errors", "orders.jsonl", 1_000)).unwrap();
    let (code, out, err) = client(&["deploy", file.to_str().unwrap()]);
    assert_eq!(code, Some(0), "{err}");
    assert!(out.starts_with("errors: running"), "{out}");
    s.wait_for(&token, "errors", &["finished"]);
    let (_, table, _) = client(&["list"]);
    assert!(table.lines().next().unwrap().starts_with("NAME"), "{table}");
    assert!(table.lines().any(|l| l.starts_with("errors") && l.contains("finished")), "{table}");
    // A watch follows the event stream until the service goes away.
    let watch = weir()
        .arg("--server")
        .arg(&s.base)
        .arg("--token-file")
        .arg(&token_file)
        .args(["status", "errors", "--watch"])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let (_, json, _) = client(&["status", "errors", "--json"]);
    let v: Value = serde_json::from_str(&json).unwrap();
    assert_eq!(v["state"], "finished");
    let (code, out, _) = client(&["stop", "errors"]);
    assert_eq!(code, Some(0));
    assert!(out.starts_with("errors: stopped"), "{out}");
    // Refused requests exit 2 with the service's reason; an unreachable service exits 3.
    let (code, _, err) = client(&["status", "nope"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("404"), "{err}");
    let (code, _, _) = client(&["delete", "errors", "--state"]);
    assert_eq!(code, Some(0));
    let (code, _, _) = client(&["status", "errors"]);
    assert_eq!(code, Some(2));
    let out =
        weir().args(["--server", "http://127.0.0.1:9", "--token-file"]).arg(&token_file).arg("list").output().unwrap();
    assert_eq!(out.status.code(), Some(3), "{}", String::from_utf8_lossy(&out.stderr));
    // SIGTERM ends the service even with the watch's stream open, and the watch with it.
    assert_eq!(s.terminate().code(), Some(0));
    let watched = watch.wait_with_output().unwrap();
    assert!(String::from_utf8(watched.stdout).unwrap().starts_with("NAME"));
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

/// `--tls-cert` and `--tls-key`: the same API over HTTPS, checked by curl against the
/// certificate; plain HTTP on that port gets nothing; a key that is not one stops the service at
/// start with the file named.
#[test]
fn the_api_is_served_over_https_with_a_certificate_and_key() {
    let dir = tempfile::tempdir().unwrap();
    // A test CA, and a server certificate for 127.0.0.1 that it signs.
    let (ca, cert, key) = (dir.path().join("ca.pem"), dir.path().join("cert.pem"), dir.path().join("key.pem"));
    let ext = dir.path().join("ext.cnf");
    std::fs::write(
        &ext,
        "subjectAltName=IP:127.0.0.1,DNS:localhost\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n",
    )
    .unwrap();
    let d = dir.path().to_str().unwrap();
    let ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"];
    for args in [
        [
            &["req", "-x509"][..],
            &ec,
            &[
                "-days",
                "1",
                "-subj",
                "/CN=weir-test-ca",
                "-keyout",
                &format!("{d}/ca.key"),
                "-out",
                &format!("{d}/ca.pem"),
            ],
        ]
        .concat(),
        [
            &["req"][..],
            &ec,
            &["-subj", "/CN=localhost", "-keyout", &format!("{d}/key.pem"), "-out", &format!("{d}/leaf.csr")],
        ]
        .concat(),
        vec![
            "x509",
            "-req",
            "-in",
            &format!("{d}/leaf.csr"),
            "-CA",
            &format!("{d}/ca.pem"),
            "-CAkey",
            &format!("{d}/ca.key"),
            "-CAcreateserial",
            "-days",
            "1",
            "-extfile",
            &format!("{d}/ext.cnf"),
            "-out",
            &format!("{d}/cert.pem"),
        ],
    ] {
        let made = std::process::Command::new("openssl").args(&args).output().unwrap();
        assert!(made.status.success(), "openssl {args:?}: {}", String::from_utf8_lossy(&made.stderr));
    }
    let (admin_path, admin) = admin_file(dir.path());
    let tls = ["--tls-cert", cert.to_str().unwrap(), "--tls-key", key.to_str().unwrap()];
    let s = Server::start(&dir.path().join("data"), &admin_path, &tls);
    assert!(s.base.starts_with("https://"), "{}", s.base);
    let curl_with = |url: &str, token: Option<&str>, post: Option<&str>| {
        let mut c = std::process::Command::new("curl");
        c.args(["-sS", "--cacert"]).arg(&ca).arg(url);
        if let Some(t) = token {
            c.args(["-H", &format!("Authorization: Bearer {t}")]);
        }
        if let Some(body) = post {
            c.args(["-X", "POST", "--data-binary", body]);
        }
        c.output().unwrap()
    };
    let curl = |url: &str, token: Option<&str>| curl_with(url, token, None);
    let health = curl(&format!("{}/v1/health", s.base), None);
    assert!(health.status.success(), "{}", String::from_utf8_lossy(&health.stderr));
    assert_eq!(serde_json::from_slice::<Value>(&health.stdout).unwrap()["status"], "ok");
    let tenants = curl(&format!("{}/v1/tenants", s.base), Some(&admin));
    assert_eq!(serde_json::from_slice::<Value>(&tenants.stdout).unwrap()["tenants"], json!([]));
    let plain = curl(&s.base.replace("https://", "http://"), None);
    assert!(!plain.status.success() || plain.stdout.is_empty(), "plain HTTP answered");
    // The thin client over HTTPS, trusting the certificate with --ca-file, and refusing an
    // unknown issuer without it.
    curl_with(&format!("{}/v1/tenants", s.base), Some(&admin), Some(r#"{"name": "acme"}"#));
    let minted = curl_with(&format!("{}/v1/tenants/acme/tokens", s.base), Some(&admin), Some(""));
    let token = serde_json::from_slice::<Value>(&minted.stdout).unwrap()["token"].as_str().unwrap().to_string();
    let token_file = dir.path().join("token");
    std::fs::write(&token_file, token).unwrap();
    let client = |trust: bool| {
        let mut c = weir();
        c.arg("--server").arg(&s.base).arg("--token-file").arg(&token_file);
        if trust {
            c.arg("--ca-file").arg(&ca);
        }
        c.arg("list").output().unwrap()
    };
    let listed = client(true);
    assert_eq!(listed.status.code(), Some(0), "{}", String::from_utf8_lossy(&listed.stderr));
    assert!(String::from_utf8(listed.stdout).unwrap().starts_with("NAME"));
    assert_eq!(client(false).status.code(), Some(3), "an issuer it does not know");
    s.kill();

    let out = weir()
        .arg("serve")
        .arg("--data")
        .arg(dir.path().join("data"))
        .args(["--listen", "127.0.0.1:0", "--admin-token-file"])
        .arg(&admin_path)
        .args(["--tls-cert", cert.to_str().unwrap(), "--tls-key", cert.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("cert.pem"), "{}", String::from_utf8_lossy(&out.stderr));
}
