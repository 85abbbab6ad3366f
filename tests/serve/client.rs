//! The routes and the thin client: every route `docs/openapi.json` documents answers (never
//! "no such route"), and `weir --server` deploys, lists, watches and deletes with exit codes a
//! script can use.

use crate::common::serve::*;
use crate::common::*;
use serde_json::Value;

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
