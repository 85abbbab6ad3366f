//! A client of the Confluent schema registry API (`/schemas/ids/ID`, `/subjects/S/versions`,
//! `/config`), shared by everything in the process that names the same registry.
//!
//! Invariants:
//! - a schema id is immutable in a registry, so each is fetched once per process and kept
//!   (`fetches()` counts the requests made, for the benchmark and the tests); an id the
//!   registry does not have is remembered too, so a topic full of bad ids costs one request
//!   per id, not one per record;
//! - a registry that cannot be reached, or answers 5xx, is retried with backoff for
//!   `retry_for`; only then does a call fail, with [`RegistryError::Unavailable`] naming the
//!   registry's URL. Callers stop the run on it rather than set records aside;
//! - credentials are read from their file when the client is made and sent as a header, never
//!   logged: errors name the URL only.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use serde::Deserialize;

use crate::config::RegistryConfig;

mod offline;
use crate::limits::{FIRST_RETRY_WAIT, MAX_REFERENCES, MAX_RETRY_WAIT, MAX_SCHEMA_BYTES};

/// What a schema is written in (`schemaType`; a registry leaves it out for Avro).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SchemaType {
    Avro,
    Protobuf,
    Json,
}

impl SchemaType {
    fn parse(text: Option<&str>) -> Result<Self, String> {
        match text.unwrap_or("AVRO") {
            "AVRO" => Ok(Self::Avro),
            "PROTOBUF" => Ok(Self::Protobuf),
            "JSON" => Ok(Self::Json),
            other => Err(format!("schemaType {other:?} is none of AVRO, PROTOBUF, JSON")),
        }
    }

    /// As the registry API spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Avro => "AVRO",
            Self::Protobuf => "PROTOBUF",
            Self::Json => "JSON",
        }
    }
}

/// A reference from one schema to another, as the registry lists it.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct SchemaRef {
    pub name: String,
    pub subject: String,
    pub version: u32,
}

/// A schema with everything it references.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Schema {
    pub id: u32,
    pub schema_type: SchemaType,
    pub text: String,
    /// Every schema it references, directly or not, each once, a schema after those it
    /// references: (the name it is referenced by, its text).
    pub references: Vec<(String, String)>,
}

#[derive(Debug, Clone, thiserror::Error)]
pub enum RegistryError {
    #[error("schema registry {registry}: {what} is not there")]
    NotFound { registry: String, what: String },
    #[error("schema registry {registry} cannot be reached (tried for {:.1} s): {message}", .tried.as_secs_f64())]
    Unavailable { registry: String, tried: Duration, message: String },
    #[error("schema registry {registry} refused {what}: {message}")]
    Refused { registry: String, what: String, message: String },
    #[error("schema registry {registry}: {what}: {message}")]
    Invalid { registry: String, what: String, message: String },
    #[error("schema registry {registry}: {message}")]
    Setup { registry: String, message: String },
}

impl RegistryError {
    /// Whether the error is in what the pipeline names (a credentials or TLS file that cannot
    /// be read, a request the registry refuses), not the registry's being away.
    pub fn is_setup(&self) -> bool {
        matches!(self, RegistryError::Setup { .. } | RegistryError::Refused { .. })
    }
}

/// One registry, as the process reaches it.
pub struct Registry {
    config: RegistryConfig,
    agent: ureq::Agent,
    auth: Option<String>,
    ids: Mutex<HashMap<u32, Arc<Schema>>>,
    missing: Mutex<HashSet<u32>>,
    /// (subject, version) to schema id: a subject's version never changes.
    versions: Mutex<HashMap<(String, u32), u32>>,
    /// Held while an id is fetched: parsers side by side that miss the same id wait for one
    /// fetch rather than make one each.
    fetching: Mutex<()>,
    fetches: AtomicU64,
    /// A schemas file's subjects and their versions, oldest first (`[registry] schemas`): set,
    /// the registry is the file and no request is made.
    offline: Option<HashMap<String, Vec<u32>>>,
}

impl std::fmt::Debug for Registry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The URL only: the credentials stay out of every log line.
        f.debug_struct("Registry").field("url", &self.config.url).finish_non_exhaustive()
    }
}

/// A registry's JSON body for a schema (by id, or a subject's version).
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct SchemaBody {
    id: Option<u32>,
    version: Option<u32>,
    schema: String,
    schema_type: Option<String>,
    #[serde(default)]
    references: Vec<SchemaRef>,
}

/// The process's clients, by configuration: tenants naming the same registry with the same
/// credentials share a cache.
fn clients() -> &'static Mutex<HashMap<RegistryConfig, Arc<Registry>>> {
    static CLIENTS: OnceLock<Mutex<HashMap<RegistryConfig, Arc<Registry>>>> = OnceLock::new();
    CLIENTS.get_or_init(Default::default)
}

impl Registry {
    /// The process's client of the registry `config` names, made on first use: its credentials
    /// and TLS files are read here.
    pub fn shared(config: &RegistryConfig) -> Result<Arc<Registry>, RegistryError> {
        let mut all = clients().lock().unwrap_or_else(|p| p.into_inner());
        if let Some(r) = all.get(config) {
            return Ok(r.clone());
        }
        let r = Arc::new(Self::new(config.clone())?);
        all.insert(config.clone(), r.clone());
        Ok(r)
    }

    fn new(config: RegistryConfig) -> Result<Self, RegistryError> {
        let url = config.url.clone();
        let setup = |message: String| RegistryError::Setup { registry: url.clone(), message };
        let auth = match &config.credentials_file {
            Some(f) => {
                let text = std::fs::read_to_string(f)
                    .map_err(|e| setup(format!("cannot read credentials_file {}: {e}", f.display())))?;
                let line = text.lines().next().unwrap_or("").trim();
                if !line.contains(':') {
                    return Err(setup(format!(
                        "credentials_file {}: its first line must be USER:PASSWORD",
                        f.display()
                    )));
                }
                use base64::Engine;
                Some(format!("Basic {}", base64::engine::general_purpose::STANDARD.encode(line)))
            }
            None => None,
        };
        let tls = crate::tls::config(&config).map_err(setup)?;
        let mut builder =
            ureq::Agent::config_builder().http_status_as_error(false).timeout_global(Some(config.timeout));
        if let Some(tls) = tls {
            builder = builder.tls_config(tls);
        }
        let agent = builder.build().into();
        let mut r = Self {
            config,
            agent,
            auth,
            ids: Mutex::default(),
            missing: Mutex::default(),
            versions: Mutex::default(),
            fetching: Mutex::default(),
            fetches: AtomicU64::new(0),
            offline: None,
        };
        if let Some(file) = &r.config.saved {
            let saved = crate::saved::Saved::load(file).map_err(setup)?;
            r.load(saved).map_err(setup)?;
        }
        Ok(r)
    }

    /// The registry's URL: how errors and logs name it.
    pub fn url(&self) -> &str {
        &self.config.url
    }

    /// Requests made so far (each schema id costs one, plus one per reference).
    pub fn fetches(&self) -> u64 {
        self.fetches.load(Ordering::Relaxed)
    }

    /// The schema `id` if it was fetched before: `Some(None)` if the registry said it has none.
    pub fn cached(&self, id: u32) -> Option<Option<Arc<Schema>>> {
        if let Some(s) = self.ids.lock().unwrap_or_else(|p| p.into_inner()).get(&id) {
            return Some(Some(s.clone()));
        }
        self.missing.lock().unwrap_or_else(|p| p.into_inner()).contains(&id).then_some(None)
    }

    /// Schema `id` with its references, from the cache or the registry.
    pub fn by_id(&self, id: u32) -> Result<Arc<Schema>, RegistryError> {
        let cached = |r: &Self| match r.cached(id) {
            Some(Some(s)) => Some(Ok(s)),
            Some(None) => Some(Err(r.not_found(format!("schema id {id}")))),
            None => None,
        };
        if let Some(r) = cached(self) {
            return r;
        }
        let _one = self.fetching.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(r) = cached(self) {
            return r;
        }
        let body: SchemaBody = match self.get_json(&format!("/schemas/ids/{id}"), &format!("schema id {id}")) {
            Err(RegistryError::NotFound { registry, what }) => {
                tracing::info!(registry = %self.config.url, "schema id {id} is not in the registry (remembered)");
                self.missing.lock().unwrap_or_else(|p| p.into_inner()).insert(id);
                return Err(RegistryError::NotFound { registry, what });
            }
            r => r?,
        };
        let schema = Arc::new(self.complete(id, body)?);
        tracing::info!(registry = %self.config.url, "fetched schema id {id} ({})", schema.schema_type.as_str());
        self.ids.lock().unwrap_or_else(|p| p.into_inner()).insert(id, schema.clone());
        Ok(schema)
    }

    /// Version `version` of `subject` (`None`: the latest), with its version number.
    pub fn by_version(&self, subject: &str, version: Option<u32>) -> Result<(u32, Arc<Schema>), RegistryError> {
        if let Some(v) = version {
            let known = self.versions.lock().unwrap_or_else(|p| p.into_inner()).get(&(subject.to_string(), v)).copied();
            if let Some(Some(s)) = known.and_then(|id| self.cached(id)) {
                return Ok((v, s));
            }
        }
        let v = version.map_or("latest".to_string(), |v| v.to_string());
        let what = format!("subject {subject:?} version {v}");
        let body: SchemaBody = self.get_json(&format!("/subjects/{}/versions/{v}", escape(subject)), &what)?;
        let invalid = |m: &str| self.invalid(&what, m.to_string());
        let id = body.id.ok_or_else(|| invalid("the answer has no id"))?;
        let version = body.version.or(version).ok_or_else(|| invalid("the answer has no version"))?;
        self.versions.lock().unwrap_or_else(|p| p.into_inner()).insert((subject.to_string(), version), id);
        if let Some(Some(s)) = self.cached(id) {
            return Ok((version, s));
        }
        let schema = Arc::new(self.complete(id, body)?);
        self.ids.lock().unwrap_or_else(|p| p.into_inner()).insert(id, schema.clone());
        Ok((version, schema))
    }

    /// The versions `subject` has, oldest first (none if the subject does not exist).
    pub fn versions(&self, subject: &str) -> Result<Vec<u32>, RegistryError> {
        if let Some(subjects) = &self.offline {
            return Ok(subjects.get(subject).cloned().unwrap_or_default());
        }
        match self.get_json(&format!("/subjects/{}/versions", escape(subject)), &format!("subject {subject:?}")) {
            Err(RegistryError::NotFound { .. }) => Ok(vec![]),
            r => r,
        }
    }

    /// The compatibility level in force for `subject`: its own, else the registry's.
    pub fn compatibility(&self, subject: &str) -> Result<String, RegistryError> {
        if self.offline.is_some() {
            return Ok("NONE".into());
        }
        #[derive(Deserialize)]
        #[serde(rename_all = "camelCase")]
        struct Level {
            compatibility_level: String,
        }
        let own =
            self.get_json::<Level>(&format!("/config/{}", escape(subject)), &format!("subject {subject:?}'s config"));
        match own {
            Ok(l) => Ok(l.compatibility_level),
            Err(RegistryError::NotFound { .. }) => {
                Ok(self.get_json::<Level>("/config", "the registry's config")?.compatibility_level)
            }
            Err(e) => Err(e),
        }
    }

    /// Registers `text` under `subject` (or finds it there already); its id.
    pub fn register(&self, subject: &str, schema_type: SchemaType, text: &str) -> Result<u32, RegistryError> {
        if self.offline.is_some() {
            return Err(RegistryError::Refused {
                registry: self.config.url.clone(),
                what: format!("registering a schema under subject {subject:?}"),
                message: "a schemas file registers nothing: write to a registry server (url)".into(),
            });
        }
        #[derive(Deserialize)]
        struct Id {
            id: u32,
        }
        let mut body = serde_json::json!({ "schema": text });
        if schema_type != SchemaType::Avro {
            body["schemaType"] = schema_type.as_str().into();
        }
        let what = format!("registering a schema under subject {subject:?}");
        let id: Id = self.send("POST", &format!("/subjects/{}/versions", escape(subject)), Some(&body), &what)?;
        Ok(id.id)
    }

    /// Whether `text` may join `subject` under its compatibility level, as the registry itself
    /// judges (`Err` inside: the registry's reasons). A subject with no versions takes any.
    pub fn compatible(
        &self,
        subject: &str,
        schema_type: SchemaType,
        text: &str,
    ) -> Result<Result<(), Vec<String>>, RegistryError> {
        #[derive(Deserialize)]
        struct Verdict {
            is_compatible: bool,
            #[serde(default)]
            messages: Vec<String>,
        }
        if self.offline.is_some() {
            return Ok(Ok(()));
        }
        let mut body = serde_json::json!({ "schema": text });
        if schema_type != SchemaType::Avro {
            body["schemaType"] = schema_type.as_str().into();
        }
        let path = format!("/compatibility/subjects/{}/versions/latest?verbose=true", escape(subject));
        let what = format!("checking a schema against subject {subject:?}");
        match self.send::<Verdict>("POST", &path, Some(&body), &what) {
            Ok(v) if v.is_compatible => Ok(Ok(())),
            Ok(v) => Ok(Err(v.messages)),
            Err(RegistryError::NotFound { .. }) => Ok(Ok(())),
            Err(e) => Err(e),
        }
    }

    /// The id `text` has under `subject`, if it is registered there.
    pub fn lookup(&self, subject: &str, schema_type: SchemaType, text: &str) -> Result<Option<u32>, RegistryError> {
        let mut body = serde_json::json!({ "schema": text });
        if schema_type != SchemaType::Avro {
            body["schemaType"] = schema_type.as_str().into();
        }
        let what = format!("looking up a schema under subject {subject:?}");
        match self.send::<SchemaBody>("POST", &format!("/subjects/{}", escape(subject)), Some(&body), &what) {
            Ok(b) => Ok(b.id),
            Err(RegistryError::NotFound { .. }) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// A fetched schema with its references resolved (each fetched by subject and version).
    fn complete(&self, id: u32, body: SchemaBody) -> Result<Schema, RegistryError> {
        let what = format!("schema id {id}");
        let schema_type = SchemaType::parse(body.schema_type.as_deref()).map_err(|m| self.invalid(&what, m))?;
        let mut references = Vec::new();
        let mut seen = HashSet::new();
        self.references(&body.references, &mut references, &mut seen, &what)?;
        Ok(Schema { id, schema_type, text: body.schema, references })
    }

    fn references(
        &self,
        refs: &[SchemaRef],
        out: &mut Vec<(String, String)>,
        seen: &mut HashSet<String>,
        what: &str,
    ) -> Result<(), RegistryError> {
        for r in refs {
            if !seen.insert(r.name.clone()) {
                continue;
            }
            if seen.len() > MAX_REFERENCES {
                return Err(self.invalid(what, format!("it references more than {MAX_REFERENCES} schemas")));
            }
            let path = format!("/subjects/{}/versions/{}", escape(&r.subject), r.version);
            let body: SchemaBody =
                self.get_json(&path, &format!("reference {:?} (subject {:?})", r.name, r.subject))?;
            self.references(&body.references, out, seen, what)?;
            out.push((r.name.clone(), body.schema));
        }
        Ok(())
    }

    fn not_found(&self, what: String) -> RegistryError {
        RegistryError::NotFound { registry: self.config.url.clone(), what }
    }

    fn invalid(&self, what: &str, message: String) -> RegistryError {
        RegistryError::Invalid { registry: self.config.url.clone(), what: what.to_string(), message }
    }

    fn get_json<T: for<'de> Deserialize<'de>>(&self, path: &str, what: &str) -> Result<T, RegistryError> {
        self.send("GET", path, None, what)
    }

    /// One request, retried while the registry is unreachable or failing (5xx), for `retry_for`.
    fn send<T: for<'de> Deserialize<'de>>(
        &self,
        method: &str,
        path: &str,
        body: Option<&serde_json::Value>,
        what: &str,
    ) -> Result<T, RegistryError> {
        if self.offline.is_some() {
            // The file holds all there is.
            return Err(self.not_found(what.to_string()));
        }
        let started = Instant::now();
        let mut wait = FIRST_RETRY_WAIT;
        loop {
            match self.once(method, path, body, what) {
                Err(Attempt::Passing(message)) => {
                    if started.elapsed() + wait > self.config.retry_for {
                        return Err(RegistryError::Unavailable {
                            registry: self.config.url.clone(),
                            tried: started.elapsed(),
                            message,
                        });
                    }
                    tracing::warn!(registry = %self.config.url, "{what}: {message}; retrying in {wait:?}");
                    std::thread::sleep(wait);
                    wait = (wait * 2).min(MAX_RETRY_WAIT);
                }
                Err(Attempt::Final(e)) => return Err(e),
                Ok(text) => {
                    return serde_json::from_str(&text)
                        .map_err(|e| self.invalid(what, format!("an answer not understood: {e}")));
                }
            }
        }
    }

    fn once(&self, method: &str, path: &str, body: Option<&serde_json::Value>, what: &str) -> Result<String, Attempt> {
        self.fetches.fetch_add(1, Ordering::Relaxed);
        let url = format!("{}{path}", self.config.url);
        const JSON: &str = "application/vnd.schemaregistry.v1+json";
        let sent = match body {
            None => {
                let mut r = self.agent.get(&url).header("Accept", JSON);
                if let Some(a) = &self.auth {
                    r = r.header("Authorization", a);
                }
                r.call()
            }
            Some(b) => {
                let mut r = if method == "PUT" { self.agent.put(&url) } else { self.agent.post(&url) };
                r = r.header("Accept", JSON).header("Content-Type", JSON);
                if let Some(a) = &self.auth {
                    r = r.header("Authorization", a);
                }
                r.send(b.to_string().as_bytes())
            }
        };
        let mut response = sent.map_err(|e| Attempt::Passing(e.to_string()))?;
        let status = response.status().as_u16();
        let text =
            response.body_mut().with_config().limit(MAX_SCHEMA_BYTES as u64 * 2).read_to_string().map_err(|e| {
                match e {
                    // Larger than any schema Weir takes: asking again gets the same answer.
                    ureq::Error::BodyExceedsLimit(_) => Attempt::Final(self.invalid(
                        what,
                        format!("an answer over {} bytes, larger than a schema may be", MAX_SCHEMA_BYTES * 2),
                    )),
                    e => Attempt::Passing(format!("reading its answer: {e}")),
                }
            })?;
        match status {
            200..=299 => Ok(text),
            404 => Err(Attempt::Final(self.not_found(what.to_string()))),
            408 | 429 | 500..=599 => Err(Attempt::Passing(format!("HTTP {status}: {}", message_of(&text)))),
            _ => Err(Attempt::Final(RegistryError::Refused {
                registry: self.config.url.clone(),
                what: what.to_string(),
                message: format!("HTTP {status}: {}", message_of(&text)),
            })),
        }
    }
}

enum Attempt {
    /// Worth trying again: the registry is down, slow or failing.
    Passing(String),
    Final(RegistryError),
}

/// The `message` of a registry's error body, else the body (cut short).
fn message_of(text: &str) -> String {
    let m = serde_json::from_str::<serde_json::Value>(text)
        .ok()
        .and_then(|v| v["message"].as_str().map(String::from))
        .unwrap_or_else(|| text.to_string());
    m.chars().take(500).collect()
}

/// A subject for a URL path: unreserved characters as they are, the rest percent-encoded.
fn escape(subject: &str) -> String {
    let mut out = String::with_capacity(subject.len());
    for b in subject.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests;
