//! Helpers for the tests of `weir serve`: the real binary started on a free port, requests with
//! real HTTP (ureq), tenants, the orders pipeline as a tenant writes it, and its output read back
//! through the files API.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::Duration;

use serde_json::{Value, json};

use super::{component, json_lines, weir};

/// How long a condition the service must reach may take before the test fails.
pub const PATIENCE: Duration = Duration::from_secs(120);

pub struct Server {
    child: Child,
    pub base: String,
    agent: ureq::Agent,
}

impl Server {
    /// Starts `weir serve` on a free port and waits for the line that names it.
    pub fn start(data: &Path, admin_file: &Path, extra: &[&str]) -> Server {
        let mut child = weir()
            .arg("serve")
            .arg("--data")
            .arg(data)
            .args(["--listen", "127.0.0.1:0", "--admin-token-file"])
            .arg(admin_file)
            .args(extra)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
        let base = loop {
            let line = lines.next().expect("weir serve exited before listening").unwrap();
            if let Some(addr) = line.strip_prefix("weir serve: listening on ") {
                break addr.to_string();
            }
        };
        // Keep draining stderr so the service never blocks on a full pipe.
        std::thread::spawn(move || for _ in lines {});
        let agent = ureq::Agent::config_builder().http_status_as_error(false).build().into();
        Server { child, base, agent }
    }

    pub fn call(&self, method: &str, path: &str, token: Option<&str>, body: Option<&[u8]>) -> (u16, Vec<u8>) {
        let url = format!("{}{path}", self.base);
        let auth = token.map(|t| format!("Bearer {t}"));
        macro_rules! go {
            ($req:expr, with_body) => {{
                let mut r = $req;
                if let Some(a) = &auth {
                    r = r.header("Authorization", a);
                }
                r.send(body.unwrap_or(&[]))
            }};
            ($req:expr) => {{
                let mut r = $req;
                if let Some(a) = &auth {
                    r = r.header("Authorization", a);
                }
                r.call()
            }};
        }
        let response = match method {
            "GET" => go!(self.agent.get(&url)),
            "DELETE" => go!(self.agent.delete(&url)),
            "PUT" => go!(self.agent.put(&url), with_body),
            "POST" => go!(self.agent.post(&url), with_body),
            m => panic!("{m}"),
        };
        let mut response = response.unwrap_or_else(|e| panic!("{method} {path}: {e}"));
        let status = response.status().as_u16();
        let bytes = response.body_mut().with_config().limit(1 << 30).read_to_vec().unwrap();
        (status, bytes)
    }

    pub fn json(&self, method: &str, path: &str, token: Option<&str>, body: Option<&[u8]>) -> (u16, Value) {
        let (status, bytes) = self.call(method, path, token, body);
        (status, if bytes.is_empty() { Value::Null } else { serde_json::from_slice(&bytes).unwrap() })
    }

    /// The request must succeed with `want`; returns its JSON.
    pub fn expect(&self, want: u16, method: &str, path: &str, token: Option<&str>, body: Option<&[u8]>) -> Value {
        let (status, v) = self.json(method, path, token, body);
        assert_eq!(status, want, "{method} {path}: {v}");
        v
    }

    /// Waits until the pipeline's state is one of `states`; returns its view.
    /// Waits, on the pipeline's event stream, for a `state` event naming one of `states`;
    /// returns the pipeline's view then.
    pub fn wait_for(&self, token: &str, name: &str, states: &[&str]) -> Value {
        let mut events = self.events(token, name);
        while let Some((kind, data)) = events.next() {
            if kind == "state" && states.contains(&data["state"].as_str().unwrap_or("")) {
                return self.expect(200, "GET", &format!("/v1/pipelines/{name}"), Some(token), None);
            }
        }
        panic!("the events of {name} ended before it reached {states:?}");
    }

    /// Follows the pipeline's server-sent events (`GET .../events`), for at most [`PATIENCE`].
    pub fn events(&self, token: &str, name: &str) -> Events {
        let url = format!("{}/v1/pipelines/{name}/events", self.base);
        let response = self
            .agent
            .get(&url)
            .header("Authorization", &format!("Bearer {token}"))
            .config()
            .timeout_global(Some(PATIENCE))
            .build()
            .call()
            .unwrap();
        assert_eq!(response.status().as_u16(), 200, "{url}");
        Events { lines: BufReader::new(response.into_body().into_reader()).lines() }
    }

    pub fn kill(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// SIGTERM, and the exit status.
    pub fn terminate(mut self) -> std::process::ExitStatus {
        send_sigterm(self.child.id());
        self.child.wait().unwrap()
    }
}

fn send_sigterm(pid: u32) {
    let status = std::process::Command::new("kill").arg("-TERM").arg(pid.to_string()).status().unwrap();
    assert!(status.success());
}

pub fn admin_file(dir: &Path) -> (PathBuf, String) {
    let token = "admin-token-for-this-test-0123456789".to_string();
    let path = dir.join("admin-token");
    std::fs::write(&path, format!("{token}\n")).unwrap();
    (path, token)
}

/// A pipeline's event stream, event by event.
pub struct Events {
    lines: std::io::Lines<BufReader<ureq::BodyReader<'static>>>,
}

impl Events {
    /// The next event's kind (`state`, `progress`) and data; `None` when the stream ends.
    pub fn next(&mut self) -> Option<(String, Value)> {
        let (mut kind, mut data) = (String::new(), String::new());
        for line in self.lines.by_ref() {
            let line = line.ok()?;
            if let Some(k) = line.strip_prefix("event:") {
                kind = k.trim().to_string();
            } else if let Some(d) = line.strip_prefix("data:") {
                data.push_str(d.trim_start());
            } else if line.is_empty() && !kind.is_empty() {
                return Some((kind, serde_json::from_str(&data).unwrap_or(Value::Null)));
            }
        }
        None
    }
}

/// A service on a data directory of its own: the directory, the admin token, the service.
pub fn fresh() -> (tempfile::TempDir, String, Server) {
    let dir = tempfile::tempdir().unwrap();
    let (admin_path, admin) = admin_file(dir.path());
    let s = Server::start(&dir.path().join("data"), &admin_path, &[]);
    (dir, admin, s)
}

/// Creates a tenant and returns a token of its.
pub fn tenant(s: &Server, admin: &str, name: &str) -> String {
    s.expect(201, "POST", "/v1/tenants", Some(admin), Some(json!({ "name": name }).to_string().as_bytes()));
    let t = s.expect(201, "POST", &format!("/v1/tenants/{name}/tokens"), Some(admin), None);
    t["token"].as_str().unwrap().to_string()
}

pub fn upload_plugins(s: &Server, token: &str) {
    for (name, file) in [("orders-json", "orders_json"), ("error-rate", "error_rate"), ("file-sink", "jsonl_file_sink")]
    {
        let bytes = std::fs::read(component(file)).unwrap();
        let v = s.expect(201, "PUT", &format!("/v1/plugins/{name}"), Some(token), Some(&bytes));
        assert!(v["digest"].as_str().unwrap().starts_with("sha256:"), "{v}");
    }
}

/// The orders error-rate pipeline over `input` in the tenant's data area, writing windows to
/// `out/NAME` there.
pub fn orders_pipeline(name: &str, input: &str, batch: usize) -> String {
    format!(
        r#"name = "{name}"
[source]
type = "replay"
path = "{input}"
max_offsets_per_trigger = {batch}
[trigger]
mode = "available-now"
[parse]
plugin = "orders-json"
[watermark]
delay = "10 minutes"
flush_at_end = true
[window]
type = "tumbling"
size = "1 minute"
[aggregate]
plugin = "error-rate"
[sink]
plugin = "file-sink"
config = {{ dir = "/out" }}
grants.dirs = [{{ host = "out/{name}", guest = "/out", writable = true }}]
"#
    )
}

/// The same pipeline for `weir test` on this machine: the components by path, the input by
/// path, and no sink (`weir test` prints the rows).
pub fn local_copy(dir: &Path, text: &str, input: &str, events: &Path) -> PathBuf {
    let text = text
        .split("[sink]")
        .next()
        .unwrap()
        .replace("\"orders-json\"", &format!("{:?}", component("orders_json").display().to_string()))
        .replace("\"error-rate\"", &format!("{:?}", component("error_rate").display().to_string()))
        .replace(&format!("path = \"{input}\""), &format!("path = {:?}", events.display().to_string()));
    let path = dir.join(format!("local-{}.toml", std::process::id()));
    std::fs::write(&path, text).unwrap();
    path
}

/// The rows the file sink committed under `out/NAME`, read through the files API.
pub fn output_rows(s: &Server, token: &str, name: &str) -> Vec<Value> {
    let list = s.expect(200, "GET", &format!("/v1/files?prefix=out/{name}"), Some(token), None);
    let mut rows = Vec::new();
    for f in list["files"].as_array().unwrap() {
        let path = f["path"].as_str().unwrap();
        let (status, bytes) = s.call("GET", &format!("/v1/files/{path}"), Some(token), None);
        assert_eq!(status, 200, "{path}");
        rows.extend(json_lines(&String::from_utf8(bytes).unwrap()));
    }
    rows
}
