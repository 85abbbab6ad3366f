//! The web console in a real browser: Debian's headless Chromium, driven over WebDriver by its
//! ChromeDriver (`cargo xtask test` installs both). A tenant signs in with its token, picks a
//! running pipeline, sees its charts take new points as batches commit, and stops it from the
//! page. Screenshots are saved under the test's output directory
//! (`$CARGO_TARGET_TMPDIR/console/`) for a person to look at.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};

use crate::common::serve::*;
use crate::common::*;
use serde_json::{Value, json};

const CHROMIUM: &str = "/usr/bin/chromium";
const CHROMEDRIVER: &str = "/usr/bin/chromedriver";
const ELEMENT: &str = "element-6066-11e4-a52e-4f735466cecf";

fn agent() -> ureq::Agent {
    ureq::Agent::config_builder().http_status_as_error(false).build().into()
}

/// A WebDriver command: JSON in, JSON out.
fn send(agent: &ureq::Agent, method: &str, url: &str, body: &Value) -> (u16, Value) {
    let response = match method {
        "GET" => agent.get(url).call(),
        "DELETE" => agent.delete(url).call(),
        _ => agent.post(url).send(body.to_string().as_bytes()),
    };
    let mut response = response.unwrap_or_else(|e| panic!("{method} {url}: {e}"));
    let status = response.status().as_u16();
    let bytes = response.body_mut().read_to_vec().unwrap();
    (status, serde_json::from_slice(&bytes).unwrap_or(Value::Null))
}

/// A WebDriver session on a ChromeDriver of its own.
struct Browser {
    driver: Child,
    base: String,
    session: String,
    agent: ureq::Agent,
    _profile: tempfile::TempDir,
}

impl Browser {
    fn start() -> Browser {
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let mut driver = std::process::Command::new(CHROMEDRIVER)
            .arg(format!("--port={port}"))
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("{CHROMEDRIVER}: {e} (cargo xtask test installs chromium-driver)"));
        // It says when it listens.
        let mut lines = BufReader::new(driver.stdout.take().unwrap()).lines();
        loop {
            let line = lines.next().expect("chromedriver exited before it listened").unwrap();
            if line.contains("started successfully") {
                break;
            }
        }
        std::thread::spawn(move || for _ in lines {});
        let base = format!("http://127.0.0.1:{port}");
        let agent = agent();
        let profile = tempfile::tempdir().unwrap();
        // The flags keep Chromium off the network this machine does not have.
        let args = [
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--window-size=1280,1100",
        ]
        .iter()
        .map(|s| s.to_string())
        .chain([format!("--user-data-dir={}", profile.path().display())])
        .collect::<Vec<_>>();
        let caps = json!({"capabilities": {"alwaysMatch": {"browserName": "chrome",
            "goog:chromeOptions": {"binary": CHROMIUM, "args": args}}}});
        let (status, v) = send(&agent, "POST", &format!("{base}/session"), &caps);
        assert_eq!(status, 200, "new session: {v}");
        let session = v["value"]["sessionId"].as_str().unwrap().to_string();
        let b = Browser { driver, base, session, agent, _profile: profile };
        b.cmd("POST", "/timeouts", json!({ "script": PATIENCE.as_millis() as u64 }));
        b
    }

    fn cmd(&self, method: &str, path: &str, body: Value) -> Value {
        let url = format!("{}/session/{}{path}", self.base, self.session);
        let (status, v) = send(&self.agent, method, &url, &body);
        assert_eq!(status, 200, "{method} {path}: {v}");
        v["value"].clone()
    }

    fn go(&self, url: &str) {
        self.cmd("POST", "/url", json!({ "url": url }));
    }

    fn find(&self, css: &str) -> String {
        let v = self.cmd("POST", "/element", json!({"using": "css selector", "value": css}));
        v[ELEMENT].as_str().unwrap().to_string()
    }

    fn type_into(&self, css: &str, text: &str) {
        let e = self.find(css);
        self.cmd("POST", &format!("/element/{e}/value"), json!({ "text": text }));
    }

    fn click(&self, css: &str) {
        let e = self.find(css);
        self.cmd("POST", &format!("/element/{e}/click"), json!({}));
    }

    fn script(&self, js: &str) -> Value {
        self.cmd("POST", "/execute/sync", json!({"script": js, "args": []}))
    }

    /// Waits until `js` returns true: checked in the page now and at each change of the
    /// document (a MutationObserver), for at most [`PATIENCE`].
    fn until(&self, what: &str, js: &str) {
        let script = format!(
            "const done = arguments[0];
             const check = () => {{ try {{ return (function () {{ {js} }})() === true; }} catch (e) {{ return false; }} }};
             if (check()) {{ done(true); return; }}
             const seen = new MutationObserver(() => {{ if (check()) {{ seen.disconnect(); done(true); }} }});
             seen.observe(document, {{ subtree: true, childList: true, characterData: true, attributes: true }});"
        );
        let url = format!("{}/session/{}/execute/async", self.base, self.session);
        let (status, v) = send(&self.agent, "POST", &url, &json!({"script": script, "args": []}));
        assert!(
            status == 200 && v["value"] == true,
            "the page never showed {what} ({v}); it shows: {}",
            self.script("return document.body.innerText")
        );
    }

    fn screenshot(&self, path: &Path) {
        use base64::Engine;
        let v = self.cmd("GET", "/screenshot", Value::Null);
        let png = base64::engine::general_purpose::STANDARD.decode(v.as_str().unwrap()).unwrap();
        std::fs::write(path, png).unwrap();
        eprintln!("screenshot: {}", path.display());
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = self.agent.delete(&format!("{}/session/{}", self.base, self.session)).call();
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}

fn shots() -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("console");
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[test]
fn a_tenant_signs_in_sees_a_running_pipeline_s_charts_move_and_stops_it_from_the_page() {
    let (dir, admin, server) = fresh();
    let api = server.base.clone();
    let token = tenant(&server, &admin, "acme");
    upload_plugins(&server, &token);
    let events = orders(dir.path(), 60_000, 4);
    server.expect(201, "PUT", "/v1/files/orders.jsonl", Some(&token), Some(&std::fs::read(&events).unwrap()));
    // A batch of 200 every 200 ms: a minute of batches, so the pipeline is running throughout.
    let pipeline = orders_pipeline("errors", "orders.jsonl", 200)
        .replace("mode = \"available-now\"", "mode = \"processing-time\"\ninterval = \"200ms\"");
    server.expect(201, "PUT", "/v1/pipelines/errors", Some(&token), Some(pipeline.as_bytes()));

    let b = Browser::start();
    b.go(&format!("{api}/"));
    b.until("the sign-in form", "return !!document.getElementById('token')");
    b.type_into("#token", &token);
    b.click("#signin");
    b.until("the pipeline list", "return !!document.querySelector('#pipelines tr.pick[data-name=errors]')");
    b.click("#pipelines tr.pick[data-name=errors]");
    b.until("charts with points", "return Number(document.getElementById('detail').dataset.points || 0) >= 2");
    let before: u64 = b.script("return Number(document.getElementById('detail').dataset.points)").as_u64().unwrap();
    b.until(
        "the charts moving",
        &format!("return Number(document.getElementById('detail').dataset.points) > {before}"),
    );
    b.until("four charts drawn", "return document.querySelectorAll('.chart canvas').length === 4");
    b.until("the plugins' metrics", "return document.querySelectorAll('#plugins tbody tr').length >= 2");
    b.screenshot(&shots().join("running.png"));

    b.click("#stop");
    b.until("the stop", "return document.getElementById('action-result').textContent.startsWith('stop: stopped')");
    let v = server.expect(200, "GET", "/v1/pipelines/errors", Some(&token), None);
    assert_eq!(v["desired"], "stopped", "{v}");
    assert_ne!(v["state"], "running", "{v}");
    b.until(
        "the list showing it stopped",
        "return document.querySelector('#pipelines tr.pick[data-name=errors]').innerText.includes('stopped')",
    );
    b.screenshot(&shots().join("stopped.png"));

    // A wrong token is told so on the page and shows nothing.
    let other = Browser::start();
    other.go(&format!("{api}/"));
    other.until("the sign-in form", "return !!document.getElementById('token')");
    other.type_into("#token", "weir_wrong_token");
    other.click("#signin");
    other.until("the refusal", "return document.getElementById('error').textContent.includes('bearer token')");
    assert_eq!(other.script("return document.getElementById('app').hidden"), true);
    server.kill();
}
