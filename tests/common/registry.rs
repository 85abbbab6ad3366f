//! A Confluent-compatible schema registry for the tests: Apicurio Registry, the distribution
//! `cargo xtask setup` fetched (`xtask/schema-registry/pom.xml` pins its version), started on
//! loopback on free ports, its log and its storage in the test's own directory.
//!
//! Its storage is an H2 database in a file (not the in-memory one it has by default), so a test
//! can stop the registry mid-run and start it again ([`Registry::restart`]) with the same
//! subjects, schemas and ids. It needs Java 21 or later ([`java`]). A registry dropped while its
//! test panics keeps its log, and says where.
//!
//! One registry serves every test of a binary that wants it cheaply (a start costs about
//! 4 CPU-seconds): such tests use subject names of their own, since ids are shared.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

/// How long a registry may take to answer its first request: as long as a broker
/// (`apache_kafka.rs`); a start on a busy machine has taken over 30 s.
const START_PATIENCE: Duration = Duration::from_secs(90);

/// How long a registry may take to exit on SIGTERM (it takes about 1.5 s) before it is killed.
const STOP_PATIENCE: Duration = Duration::from_secs(30);

/// What the registry prints once its HTTP interface is up (Quarkus's start-up line).
const READY_LINE: &str = "Listening on: ";

/// The JVM options that halve the CPU a start costs (measured in
/// `docs/internals/schema-registry-research.md`): a small heap, the serial collector, and the
/// client compiler only.
const JVM_OPTS: [&str; 4] = ["-Xms64m", "-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1"];

/// Where the Java 21+ this machine has lives, when `WEIR_REGISTRY_JAVA` does not say.
const TEMURIN: &str = "/usr/lib/jvm/temurin-25-jdk-amd64/bin/java";

/// The oldest Java the registry runs on (its classes are Java 21's, version 65).
const JAVA_MIN: u32 = 21;

/// The Content-Type of the Confluent API's requests.
const CONTENT_TYPE: &str = "application/vnd.schemaregistry.v1+json";

/// The registry's distribution (the directory holding `quarkus-run.jar`): `WEIR_SCHEMA_REGISTRY`,
/// which `cargo xtask test` sets to what `cargo xtask setup` fetched.
pub fn registry_home() -> PathBuf {
    let p = PathBuf::from(std::env::var_os("WEIR_SCHEMA_REGISTRY").expect(
        "WEIR_SCHEMA_REGISTRY names the schema registry's distribution: `cargo xtask test` fetches it and sets it \
         (or run `cargo xtask setup` and point WEIR_SCHEMA_REGISTRY at ~/.cache/weir-tools/apicurio-*)",
    ));
    assert!(
        p.join("quarkus-run.jar").is_file(),
        "WEIR_SCHEMA_REGISTRY={} holds no quarkus-run.jar: run `cargo xtask setup`",
        p.display()
    );
    p
}

/// A Java 21 or later: `WEIR_REGISTRY_JAVA` if set (and then only it), else Temurin 25 where this
/// machine has it, else `$JAVA_HOME/bin/java`. Panics naming each one tried and why it would not do.
pub fn java() -> PathBuf {
    static JAVA: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    JAVA.get_or_init(|| {
        let candidates: Vec<(String, Option<PathBuf>)> = match std::env::var_os("WEIR_REGISTRY_JAVA") {
            Some(j) => vec![("WEIR_REGISTRY_JAVA".into(), Some(j.into()))],
            None => vec![
                ("WEIR_REGISTRY_JAVA".into(), None),
                (TEMURIN.into(), Some(TEMURIN.into())),
                ("$JAVA_HOME/bin/java".into(), std::env::var_os("JAVA_HOME").map(|h| Path::new(&h).join("bin/java"))),
            ],
        };
        let mut tried = Vec::new();
        for (name, path) in candidates {
            let Some(path) = path else {
                tried.push(format!("{name}: not set"));
                continue;
            };
            match java_major(&path) {
                Ok(v) if v >= JAVA_MIN => return Ok(path),
                Ok(v) => tried.push(format!("{name} ({}): Java {v}", path.display())),
                Err(e) => tried.push(format!("{name} ({}): {e}", path.display())),
            }
        }
        Err(format!(
            "the schema registry needs Java {JAVA_MIN} or later, and none was found; tried:\n  {}\n\
             install a JDK {JAVA_MIN}+ and set WEIR_REGISTRY_JAVA to its bin/java",
            tried.join("\n  ")
        ))
    })
    .clone()
    .unwrap_or_else(|e| panic!("{e}"))
}

/// The major version `java -version` reports (`version "25.0.1"`, `version "17.0.13"`).
fn java_major(java: &Path) -> Result<u32, String> {
    let out = Command::new(java).arg("-version").output().map_err(|e| format!("cannot run it: {e}"))?;
    let text = String::from_utf8_lossy(&out.stderr);
    let version = text.split_once("version \"").map(|(_, v)| v).ok_or_else(|| format!("no version in {text:?}"))?;
    let major: String = version.chars().take_while(char::is_ascii_digit).collect();
    major.parse().map_err(|_| format!("no version in {text:?}"))
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// Apicurio Registry on loopback, its Confluent API at [`Registry::url`].
pub struct Registry {
    child: Option<Child>,
    /// Rings once when the running registry has started (`READY_LINE`).
    ready: Option<std::sync::mpsc::Receiver<()>>,
    dir: PathBuf,
    /// The API's port.
    port: u16,
    /// The management interface's (health, metrics): 3.x always opens one, so it gets a free
    /// port of its own rather than the default 9000.
    management: u16,
    agent: ureq::Agent,
}

impl Registry {
    /// A registry with its storage and log in `dir` (made if missing); returns once its
    /// Confluent API answers.
    pub fn start(dir: &Path) -> Registry {
        // What it runs on, first: a test without them fails saying so, with no log to point at.
        registry_home();
        java();
        std::fs::create_dir_all(dir).unwrap();
        // H2 wants an absolute path for a file database.
        let dir = std::path::absolute(dir).unwrap();
        let agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(Duration::from_secs(30)))
            .build()
            .into();
        let mut r = Registry { child: None, ready: None, dir, port: free_port(), management: free_port(), agent };
        let started = Instant::now();
        r.spawn();
        r.wait_ready();
        eprintln!("schema registry: up on {} after {:?}", r.url(), started.elapsed());
        r
    }

    /// The base of the Confluent API: `http://127.0.0.1:PORT/apis/ccompat/v7`.
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}/apis/ccompat/v7", self.port)
    }

    /// The registry's log (both its runs, if it was restarted).
    pub fn log(&self) -> PathBuf {
        self.dir.join("registry.log")
    }

    fn spawn(&mut self) {
        let home = registry_home();
        let log = std::fs::OpenOptions::new().create(true).append(true).open(self.log()).unwrap();
        let mut child = Command::new(java())
            .args(JVM_OPTS)
            .arg("-Dquarkus.http.host=127.0.0.1")
            .arg(format!("-Dquarkus.http.port={}", self.port))
            .arg("-Dquarkus.management.host=127.0.0.1")
            .arg(format!("-Dquarkus.management.port={}", self.management))
            .arg("-Dquarkus.http.access-log.enabled=false")
            // A file, where the default is `jdbc:h2:mem:…`: what a restart finds again.
            .arg(format!("-Dapicurio.datasource.url=jdbc:h2:file:{}", self.dir.join("registry-db").display()))
            .arg("-jar")
            .arg(home.join("quarkus-run.jar"))
            .current_dir(&self.dir)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(log.try_clone().unwrap())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {} for the schema registry: {e}", java().display()));
        // Its console goes to the log, line by line; the start-up line rings `ready`. The
        // channel closes when the process's output ends (it exited).
        let (ready, rx) = std::sync::mpsc::channel();
        let out = child.stdout.take().unwrap();
        std::thread::spawn(move || {
            use std::io::{BufRead, Write};
            let mut log = log;
            for line in std::io::BufReader::new(out).lines().map_while(Result::ok) {
                let _ = writeln!(log, "{line}");
                if line.contains(READY_LINE) {
                    let _ = ready.send(());
                }
            }
        });
        self.ready = Some(rx);
        self.child = Some(child);
    }

    /// Waits for the registry's start-up line, then checks that `GET /subjects` answers 200;
    /// panics, naming the log, if the registry exits first or takes longer than
    /// [`START_PATIENCE`].
    fn wait_ready(&mut self) {
        use std::sync::mpsc::RecvTimeoutError;
        let rx = self.ready.take().expect("the registry was started");
        match rx.recv_timeout(START_PATIENCE) {
            Ok(()) => {}
            Err(RecvTimeoutError::Timeout) => {
                panic!("the schema registry was not ready after {START_PATIENCE:?}; see {}", self.log().display())
            }
            Err(RecvTimeoutError::Disconnected) => {
                let status = self.child.as_mut().expect("the registry runs").wait().unwrap();
                panic!("the schema registry exited ({status}) before it was ready; see {}", self.log().display());
            }
        }
        let url = format!("{}/subjects", self.url());
        let status = self.agent.get(&url).call().map(|r| r.status().as_u16());
        assert!(
            matches!(status, Ok(200)),
            "GET {url} once the registry started: {status:?}; see {}",
            self.log().display()
        );
    }

    /// SIGTERM, then waits until it has exited (SIGKILL after [`STOP_PATIENCE`]). Its storage
    /// stays: [`Registry::restart`] finds it again.
    pub fn stop(&mut self) {
        let Some(mut child) = self.child.take() else { return };
        let pid = child.id() as i32;
        unsafe { libc::kill(pid, libc::SIGTERM) };
        let (tx, rx) = std::sync::mpsc::channel();
        let waiter = std::thread::spawn(move || {
            let _ = tx.send(child.wait());
        });
        if rx.recv_timeout(STOP_PATIENCE).is_err() {
            // Not reaped yet (the waiter has not returned), so the pid is still this process's.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
        waiter.join().unwrap();
    }

    /// Stops the registry if it runs and starts it again on the same ports with the same
    /// storage; returns once it answers.
    pub fn restart(&mut self) {
        self.stop();
        self.spawn();
        self.wait_ready();
    }

    /// `GET {url}{path}` (`path` starts with `/`): the status and the body.
    pub fn get(&self, path: &str) -> (u16, String) {
        let url = format!("{}{path}", self.url());
        let mut r = self.agent.get(&url).call().unwrap_or_else(|e| panic!("GET {url}: {e}"));
        (r.status().as_u16(), r.body_mut().read_to_string().unwrap())
    }

    fn send(&self, method: &str, path: &str, body: &Value) -> (u16, Value) {
        let url = format!("{}{path}", self.url());
        let request = match method {
            "PUT" => self.agent.put(&url),
            "POST" => self.agent.post(&url),
            m => panic!("{m}"),
        };
        let mut r = request
            .header("Content-Type", CONTENT_TYPE)
            .send(body.to_string())
            .unwrap_or_else(|e| panic!("{method} {url}: {e}"));
        let status = r.status().as_u16();
        let text = r.body_mut().read_to_string().unwrap();
        (status, serde_json::from_str(&text).unwrap_or(Value::String(text)))
    }

    /// Sets `subject`'s compatibility level (`BACKWARD`, `FULL`, `NONE`, …).
    pub fn set_compatibility(&self, subject: &str, level: &str) {
        let (status, body) = self.send("PUT", &format!("/config/{subject}"), &json!({ "compatibility": level }));
        assert_eq!(status, 200, "PUT /config/{subject} {level}: {body}");
    }

    /// Registers `schema` (its text) under `subject` as `schema_type` (`AVRO`, `PROTOBUF` or
    /// `JSON`); returns its id (the one it already had if it was registered before). Panics on
    /// any other answer, an incompatible schema's 409 among them.
    pub fn register(&self, subject: &str, schema_type: &str, schema: &str) -> u32 {
        let body = json!({ "schema": schema, "schemaType": schema_type });
        let (status, answer) = self.send("POST", &format!("/subjects/{subject}/versions"), &body);
        assert_eq!(status, 200, "registering a {schema_type} schema under {subject}: {answer}");
        let id = answer["id"].as_u64().unwrap_or_else(|| panic!("no id in {answer}"));
        u32::try_from(id).unwrap()
    }
}

impl Drop for Registry {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
        if std::thread::panicking() {
            // The test's directory goes with it: keep the log in the temp directory.
            let keep = std::env::temp_dir().join(format!("weir-registry-{}-{}.log", std::process::id(), self.port));
            if std::fs::copy(self.log(), &keep).is_ok() {
                eprintln!("the schema registry's log is kept: {}", keep.display());
            }
        }
    }
}
