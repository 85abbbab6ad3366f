//! The thin client of `weir serve`: `weir --server URL --token-file F deploy|list|status|...`.
//! Each command is one or two API calls (docs/api.md); output is a readable table, or the API's
//! JSON with `--json`. Exit codes: a request the service refused (a `4xx`) is a usage error, a
//! service that failed or cannot be reached is a failure (`exit.rs`).

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, anyhow};
use clap::Subcommand;
use serde_json::Value;

use super::exit::{Exit, Usage};

#[derive(Subcommand)]
pub(super) enum Remote {
    /// Service: upload a plugin component (stored by its sha256, compiled and role-checked).
    Upload { name: String, wasm: PathBuf },
    /// Service: copy a local file into your data area (inputs for replay sources).
    PutFile { local: PathBuf, remote: String },
    /// Service: create a pipeline from its file and start it (--stopped: do not start it).
    Deploy {
        file: PathBuf,
        #[arg(long)]
        stopped: bool,
    },
    /// Service: replace a pipeline's file; a running pipeline goes on from its state, or the
    /// update is refused with the reason and the old file runs on.
    Update { file: PathBuf },
    /// Service: your pipelines and their state.
    List {
        #[arg(long)]
        json: bool,
    },
    /// Service: one pipeline's state and last progress; --watch prints each new batch.
    Status {
        name: String,
        #[arg(long)]
        json: bool,
        #[arg(long)]
        watch: bool,
    },
    /// Service: start a stopped pipeline from its checkpoint.
    Start { name: String },
    /// Service: stop a pipeline after its current batch commits.
    Stop { name: String },
    /// Service: pause a pipeline after its current batch commits.
    Pause { name: String },
    /// Service: resume a paused pipeline from its checkpoint.
    Resume { name: String },
    /// Service: delete a pipeline (--state: its checkpoint too; --outputs: its side outputs).
    Delete {
        name: String,
        #[arg(long)]
        state: bool,
        #[arg(long)]
        outputs: bool,
    },
    /// Service: the last lines a pipeline's plugins logged; or its last dead letters, or late
    /// events, as JSON lines.
    Logs {
        name: String,
        #[arg(long, conflicts_with = "late")]
        dead_letters: bool,
        #[arg(long)]
        late: bool,
        #[arg(short, long, default_value_t = 20)]
        n: usize,
    },
}

/// Where the service is and how to reach it: the global flags.
pub(super) struct Service {
    pub server: Option<String>,
    pub token_file: Option<PathBuf>,
    pub ca_file: Option<PathBuf>,
}

struct Client {
    base: String,
    token: String,
    agent: ureq::Agent,
}

impl Client {
    fn new(server: &str, token_file: &Path, ca_file: Option<&Path>) -> Result<Self> {
        let text = std::fs::read_to_string(token_file)
            .with_context(|| format!("cannot read the token file {}", token_file.display()))?;
        let token = text.lines().next().unwrap_or("").trim().to_string();
        if token.is_empty() {
            return Err(Usage(format!("{}: the first line must be your token", token_file.display())).into());
        }
        let mut config = ureq::Agent::config_builder().http_status_as_error(false);
        if let Some(ca) = ca_file {
            let pem = std::fs::read(ca).with_context(|| format!("cannot read the CA file {}", ca.display()))?;
            let certs: Vec<_> = ureq::tls::parse_pem(&pem)
                .filter_map(|item| match item {
                    Ok(ureq::tls::PemItem::Certificate(c)) => Some(c),
                    _ => None,
                })
                .collect();
            if certs.is_empty() {
                return Err(Usage(format!("{}: no PEM certificate in it", ca.display())).into());
            }
            let roots = ureq::tls::RootCerts::new_with_certs(&certs);
            config = config.tls_config(ureq::tls::TlsConfig::builder().root_certs(roots).build());
        }
        let agent = config.build().into();
        Ok(Self { base: server.trim_end_matches('/').to_string(), token, agent })
    }

    fn send(&self, method: &str, path: &str, body: Option<&[u8]>) -> Result<Value> {
        let url = format!("{}{path}", self.base);
        let auth = format!("Bearer {}", self.token);
        let sent = match (method, body) {
            ("GET", _) => self.agent.get(&url).header("Authorization", &auth).call(),
            ("DELETE", _) => self.agent.delete(&url).header("Authorization", &auth).call(),
            ("PUT", b) => self.agent.put(&url).header("Authorization", &auth).send(b.unwrap_or(&[])),
            (_, b) => self.agent.post(&url).header("Authorization", &auth).send(b.unwrap_or(&[])),
        };
        let mut response = sent.map_err(|e| anyhow!("cannot reach {}: {e}", self.base))?;
        let status = response.status().as_u16();
        let text = response.body_mut().read_to_string().unwrap_or_default();
        let value: Value =
            if text.is_empty() { Value::Null } else { serde_json::from_str(&text).unwrap_or(Value::String(text)) };
        match status {
            200..=299 => Ok(value),
            400..=499 => {
                let mut m = value["error"].as_str().unwrap_or("refused").to_string();
                if let Some(f) = value["field"].as_str() {
                    m = format!("{f}: {m}");
                }
                if let Some(fix) = value["fix"].as_str() {
                    m = format!("{m} ({fix})");
                }
                Err(Usage(format!("{method} {path}: {status}: {m}")).into())
            }
            _ => Err(anyhow!("{method} {path}: {status}: {}", value["error"].as_str().unwrap_or("the service failed"))),
        }
    }
}

/// The `name` a pipeline file gives itself, for the URL it is deployed at.
fn file_name(text: &str, file: &Path) -> Result<String> {
    let table: toml::Table = text.parse().map_err(|e| Usage(format!("{}: {e}", file.display())))?;
    table
        .get("name")
        .and_then(|v| v.as_str())
        .map(String::from)
        .ok_or_else(|| Usage(format!("{}: name: missing; give the pipeline its name", file.display())).into())
}

pub(super) fn run(service: Service, cmd: Remote) -> Result<Exit> {
    let server = service.server.ok_or_else(|| Usage("give the service with --server URL (or WEIR_SERVER)".into()))?;
    let token_file = service
        .token_file
        .ok_or_else(|| Usage("give your token with --token-file FILE (or WEIR_TOKEN_FILE)".into()))?;
    let c = Client::new(&server, &token_file, service.ca_file.as_deref())?;
    match cmd {
        Remote::Upload { name, wasm } => {
            let bytes = std::fs::read(&wasm).with_context(|| format!("cannot read {}", wasm.display()))?;
            let v = c.send("PUT", &format!("/v1/plugins/{name}"), Some(&bytes))?;
            println!("{name}  {}  roles: {}", v["digest"].as_str().unwrap_or(""), roles(&v));
        }
        Remote::PutFile { local, remote } => {
            let bytes = std::fs::read(&local).with_context(|| format!("cannot read {}", local.display()))?;
            c.send("PUT", &format!("/v1/files/{remote}"), Some(&bytes))?;
            println!("{remote}  {} bytes", bytes.len());
        }
        Remote::Deploy { file, stopped } => deploy(&c, &file, !stopped)?,
        Remote::Update { file } => deploy(&c, &file, false)?,
        Remote::List { json } => {
            let v = c.send("GET", "/v1/pipelines", None)?;
            if json {
                println!("{v}");
            } else {
                header();
                for p in v["pipelines"].as_array().into_iter().flatten() {
                    row(p);
                }
            }
        }
        Remote::Status { name, json, watch } => {
            let v = c.send("GET", &format!("/v1/pipelines/{name}"), None)?;
            if json {
                println!("{v}");
            } else {
                header();
                row(&v);
                if let Some(e) = v["error"].as_str() {
                    println!("error: {e}");
                }
            }
            if watch {
                follow(&c, &name, json)?;
            }
        }
        Remote::Start { name } => act(&c, &name, "start")?,
        Remote::Stop { name } => act(&c, &name, "stop")?,
        Remote::Pause { name } => act(&c, &name, "pause")?,
        Remote::Resume { name } => act(&c, &name, "resume")?,
        Remote::Delete { name, state, outputs } => {
            c.send("DELETE", &format!("/v1/pipelines/{name}?state={state}&outputs={outputs}"), None)?;
            println!("{name}: deleted");
        }
        Remote::Logs { name, dead_letters, late, n } => {
            let (path, field) = match (dead_letters, late) {
                (true, _) => ("dead-letters", "dead_letters"),
                (_, true) => ("late-events", "late_events"),
                _ => ("logs", "logs"),
            };
            let v = c.send("GET", &format!("/v1/pipelines/{name}/{path}?n={n}"), None)?;
            for line in v[field].as_array().into_iter().flatten() {
                match field {
                    "logs" => println!(
                        "{} {:<5} {}: {}",
                        crate::progress::show_time(line["ms"].as_i64().unwrap_or(0)),
                        line["level"].as_str().unwrap_or(""),
                        line["stage"].as_str().unwrap_or(""),
                        line["message"].as_str().unwrap_or("")
                    ),
                    _ => println!("{line}"),
                }
            }
        }
    }
    Ok(Exit::Done)
}

fn deploy(c: &Client, file: &Path, start: bool) -> Result<()> {
    let text = std::fs::read_to_string(file).with_context(|| format!("cannot read {}", file.display()))?;
    let name = file_name(&text, file)?;
    let v = c.send("PUT", &format!("/v1/pipelines/{name}?start={start}"), Some(text.as_bytes()))?;
    println!("{name}: {} ({})", v["desired"].as_str().unwrap_or(""), v["state"].as_str().unwrap_or(""));
    Ok(())
}

fn act(c: &Client, name: &str, action: &str) -> Result<()> {
    let v = c.send("POST", &format!("/v1/pipelines/{name}/{action}"), None)?;
    println!("{name}: {} ({})", v["desired"].as_str().unwrap_or(""), v["state"].as_str().unwrap_or(""));
    Ok(())
}

fn roles(v: &Value) -> String {
    v["roles"].as_array().into_iter().flatten().filter_map(Value::as_str).collect::<Vec<_>>().join(", ")
}

fn header() {
    println!("{:<24} {:<10} {:<10} {:>12} {:<26} {:>8}", "NAME", "WANTED", "STATE", "ROWS/S", "WATERMARK", "BATCH");
}

/// One pipeline's line under [`header`].
fn row(p: &Value) {
    let g = &p["progress"];
    println!(
        "{:<24} {:<10} {:<10} {:>12} {:<26} {:>8}",
        p["name"].as_str().unwrap_or(""),
        p["desired"].as_str().unwrap_or(""),
        p["state"].as_str().unwrap_or(""),
        g["inputRowsPerSecond"].as_f64().map_or(String::new(), |r| format!("{r:.0}")),
        g["watermarkTime"].as_str().unwrap_or(""),
        g["batchId"].as_u64().map_or(String::new(), |b| b.to_string()),
    );
}

/// Follows the pipeline's server-sent events: a line per batch until the stream ends.
fn follow(c: &Client, name: &str, json: bool) -> Result<()> {
    let url = format!("{}/v1/pipelines/{name}/events", c.base);
    let mut response = c
        .agent
        .get(&url)
        .header("Authorization", &format!("Bearer {}", c.token))
        .call()
        .map_err(|e| anyhow!("cannot reach {}: {e}", c.base))?;
    if !response.status().is_success() {
        return Err(Usage(format!("{url}: {}", response.status())).into());
    }
    let reader = BufReader::new(response.body_mut().as_reader().take(u64::MAX));
    for line in reader.lines() {
        let line = line.context("the event stream broke")?;
        let Some(data) = line.strip_prefix("data:") else { continue };
        if json {
            println!("{}", data.trim());
            continue;
        }
        let p: Value = serde_json::from_str(data.trim()).unwrap_or(Value::Null);
        println!(
            "batch {:>6}  {:>10} rows  {:>10.0} rows/s  {:>8.1} ms  watermark {}",
            p["batchId"].as_u64().unwrap_or(0),
            p["numInputRows"].as_u64().unwrap_or(0),
            p["processedRowsPerSecond"].as_f64().unwrap_or(0.0),
            p["durationMs"]["totalMs"].as_f64().unwrap_or(0.0),
            p["watermarkTime"].as_str().unwrap_or("-"),
        );
    }
    Ok(())
}
