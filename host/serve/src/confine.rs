//! A tenant's pipeline file, made into a pipeline the service may run: every capability the file
//! asks for is checked here, in one place, against what the tenant owns and what the admin
//! allows. The engine's own validation (`host/config/src/validate/`) has already refused anything
//! malformed; this refuses what is well formed but not the tenant's to have.
//!
//! - `plugin = "NAME"` or `plugin = "sha256:HEX"` names one of the tenant's uploaded plugins;
//!   nothing else may be a plugin (no paths).
//! - Every host path (the replay file, grant directories, dead letters, late events) resolves
//!   inside the tenant's data area, through no link that leaves it. Relative paths are relative
//!   to that area.
//! - The checkpoint is the service's: the file may not place it.
//! - Network addresses (Kafka brokers, `grants.network`, `grants.http`, the schema registry)
//!   must be on the admin's allow-list; Kafka options that read or run files on the service's
//!   machine are refused. The registry's credentials and TLS files, and a sink's schema files,
//!   are host paths like any other.
//! - Nothing of the service's own process reaches a plugin: no `grants.env`, no `grants.stdout`.
//! - Every stage runs with the tenant's CPU weight (`limits.cpu_weight`), which the file may not
//!   set.
//!
//! Invariant: a pipeline that leaves here refers to no file outside its tenant's data area but
//! the tenant's own components in the store.

use std::collections::BTreeMap;
use std::path::{Component, Path, PathBuf};

use super::registry::PluginRecord;
use super::store;
use crate::pipeline::{Join, Pipeline, PipelineError, SinkConfig, SourceKind};

/// Why a pipeline file was refused: the key (`sink.grants.dirs[0].host`), what is wrong and
/// what to write instead.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub field: String,
    pub message: String,
    /// Line and column of the key in the file, when the parser knows them.
    pub at: Option<(usize, usize)>,
}

fn refuse(field: impl Into<String>, message: impl Into<String>) -> Refusal {
    Refusal { field: field.into(), message: message.into(), at: None }
}

/// What the service knows when it confines a tenant's file.
pub struct Scope<'a> {
    pub tenant: &'a str,
    /// The name in the request's path; the file's `name` must be the same.
    pub name: &'a str,
    pub data: &'a Path,
    /// The tenant's data area: relative paths resolve here, and every path must stay inside.
    pub files: &'a Path,
    pub plugins: &'a BTreeMap<String, PluginRecord>,
    /// `host:port` entries a pipeline may connect to.
    pub allow_network: &'a [String],
    /// The tenant's `quotas.cpu_weight`, which every stage gets as its `limits.cpu_weight`.
    pub cpu_weight: u32,
}

/// A confined pipeline, ready to run.
#[derive(Debug)]
pub struct Confined {
    pub pipeline: Pipeline,
    /// Linear memory its plugin instances may grow to, all counted, in MiB.
    pub memory_mb: u64,
    /// The digests of the plugins it uses.
    pub digests: Vec<String>,
}

/// The name a tenant's pipeline runs under in the process (metric labels, Kafka group and
/// transactional ids): tenant names have no `--`, so the first one splits it.
pub fn run_name(tenant: &str, name: &str) -> String {
    format!("{tenant}--{name}")
}

/// Kafka options a tenant may not set: each reads a file, loads a library or runs a command on
/// the service's machine.
fn host_reaching_option(key: &str) -> bool {
    key.ends_with(".location")
        || key.contains("path")
        || key.contains("keytab")
        || key.contains("kinit")
        || key.contains("library")
        || key.contains(".cmd")
}

/// `text`, a tenant's pipeline file, confined to `scope`. The first check that fails is the
/// refusal, so the order of the checks is the order the tenant meets them in.
pub fn confine(scope: &Scope, text: &str) -> Result<Confined, Refusal> {
    let table = named_table(scope, text)?;
    read_at_validation(scope, &table)?;
    let mut digests = Vec::new();
    let pipeline = resolved_pipeline(scope, table, &mut digests)?;
    check_sources(scope, &pipeline)?;
    check_sink(scope, &pipeline)?;
    check_registry(scope, &pipeline)?;
    if let Some(p) = &pipeline.dead_letter {
        confine_path(scope.files, "dead_letter.path", p)?;
    }
    if let Some(p) = pipeline.stateful.as_ref().and_then(|s| s.time.late_path.as_ref()) {
        confine_path(scope.files, "watermark.late_path", p)?;
    }
    let mut memory_mb = check_stages(scope, &pipeline)?;
    if let Some(parse) = &pipeline.parse {
        memory_mb += (parse.limits.max_memory >> 20) as u64 * (pipeline.parser_instances() as u64 - 1);
    }
    digests.sort();
    digests.dedup();
    Ok(Confined { pipeline, memory_mb, digests })
}

/// The files a pipeline's validation reads (a Parquet sink's `schema`, whose columns are
/// checked then; a PostgreSQL sink's connection and password files), confined before the file
/// is validated: read first, a file outside the area would tell the tenant whether it exists.
fn read_at_validation(scope: &Scope, table: &toml::Table) -> Result<(), Refusal> {
    let Some(sink) = table.get("sink").and_then(|s| s.as_table()) else { return Ok(()) };
    let keys: &[&str] = match sink.get("type").and_then(|t| t.as_str()) {
        Some("parquet") => &["schema"],
        Some("postgres") => &["connection", "password_file"],
        Some("iceberg") => &["schema", "catalog_password_file"],
        _ => return Ok(()),
    };
    for key in keys {
        if let Some(file) = sink.get(*key).and_then(|s| s.as_str()) {
            confine_path(scope.files, &format!("sink.{key}"), &scope.files.join(file))?;
        }
    }
    let s3_keys = sink.get("s3").and_then(|s| s.get("credentials_file")).and_then(|f| f.as_str());
    if let Some(file) = s3_keys {
        confine_path(scope.files, "sink.s3.credentials_file", &scope.files.join(file))?;
    }
    Ok(())
}

/// The file as a table, its `name` the request's and replaced by the run name, and with no
/// `[checkpoint]` of its own.
fn named_table(scope: &Scope, text: &str) -> Result<toml::Table, Refusal> {
    let mut table: toml::Table = text.parse().map_err(|e: toml::de::Error| Refusal {
        field: "(file)".into(),
        message: e.message().to_string(),
        at: e.span().map(|s| line_col(text, s.start)),
    })?;
    match table.get("name").and_then(|v| v.as_str()) {
        Some(n) if n == scope.name => {}
        Some(n) => {
            return Err(refuse(
                "name",
                format!("`{n}`: the file's name must be the one in the request's path, `{}`", scope.name),
            ));
        }
        None => return Err(refuse("name", "missing: give the pipeline its name, e.g. name = \"orders\"")),
    }
    table.insert("name".into(), toml::Value::String(run_name(scope.tenant, scope.name)));
    if table.contains_key("checkpoint") {
        return Err(refuse(
            "checkpoint",
            "the service keeps each pipeline's checkpoint itself: remove the [checkpoint] table",
        ));
    }
    Ok(table)
}

/// The pipeline the engine reads from `table` once its plugins are the tenant's components
/// (their digests pushed onto `digests`), refused under the engine's own key when invalid.
fn resolved_pipeline(scope: &Scope, table: toml::Table, digests: &mut Vec<String>) -> Result<Pipeline, Refusal> {
    let mut value = toml::Value::Table(table);
    resolve_plugins(scope, &mut value, "", digests)?;
    let text = toml::to_string(&value).map_err(|e| refuse("(file)", e.to_string()))?;
    Pipeline::parse(&text, &scope.files.join("pipeline.toml")).map_err(|e| match e {
        PipelineError::Invalid { key, message, .. } => refuse(key, message),
        PipelineError::Read { .. } => refuse("(file)", e.to_string()),
    })
}

/// The main source and a join's other side: a replay file inside the data area, Kafka options
/// the tenant may set, and no kind of source the service does not host.
fn check_sources(scope: &Scope, pipeline: &Pipeline) -> Result<(), Refusal> {
    let sources = std::iter::once(("source", &pipeline.source.kind)).chain(match &pipeline.join {
        Some(Join::Table(t)) => Some(("join.table", &t.table.kind)),
        Some(Join::Interval(j)) => Some(("streams", &j.source.kind)),
        None => None,
    });
    for (field, kind) in sources {
        match kind {
            SourceKind::Replay { path, .. } => confine_path(scope.files, &format!("{field}.path"), path)?,
            SourceKind::Kafka(k) => kafka_options(scope, &format!("{field}.kafka"), &k.options)?,
            SourceKind::Dataset(_) => {
                return Err(refuse(
                    format!("{field}.type"),
                    "datasets belong to projects, which the service does not host yet",
                ));
            }
            // Made by a group's process, never by a file.
            SourceKind::Repartition(_) => {
                return Err(refuse(format!("{field}.type"), "not a source a pipeline file can name"));
            }
        }
    }
    Ok(())
}

/// A sink the service can run for a tenant: Kafka with the tenant's transactional id, a
/// plugin, Parquet files in the tenant's data area, a PostgreSQL database on the allow-list, or
/// an Iceberg table whose files and catalog stay in the area or on the allow-list; never a
/// dataset or none.
fn check_sink(scope: &Scope, pipeline: &Pipeline) -> Result<(), Refusal> {
    match &pipeline.sink {
        Some(SinkConfig::Kafka(k)) => {
            kafka_options(scope, "sink.kafka", &k.options)?;
            let own = format!("weir-{}", run_name(scope.tenant, ""));
            if !k.transactional_id.starts_with(&own) {
                return Err(refuse(
                    "sink.kafka.transactional.id",
                    format!("must start with `{own}` (or leave it out)"),
                ));
            }
        }
        Some(SinkConfig::Dataset { .. }) => {
            return Err(refuse("sink.type", "datasets belong to projects, which the service does not host yet"));
        }
        Some(SinkConfig::Wasm(_)) => {}
        Some(SinkConfig::Parquet(p)) => confine_path(scope.files, "sink.path", &p.path)?,
        Some(SinkConfig::Postgres(p)) => {
            confine_path(scope.files, "sink.connection", &p.connection_file)?;
            if let Some(f) = &p.password_file {
                confine_path(scope.files, "sink.password_file", f)?;
            }
            if !scope.allow_network.contains(&p.address) {
                return Err(refuse(
                    "sink.connection",
                    format!("`{}` is not on the service's network allow-list; ask the admin to add it", p.address),
                ));
            }
        }
        Some(SinkConfig::Iceberg(i)) => confine_iceberg(scope, i)?,
        None => {
            return Err(refuse("sink", "the service has no console for a pipeline's rows: give the pipeline a [sink]"));
        }
    }
    Ok(())
}

/// An Iceberg sink: its catalog file and a local warehouse in the tenant's area, its catalog
/// database and store on the allow-list.
fn confine_iceberg(scope: &Scope, i: &weir_connectors::iceberg::Settings) -> Result<(), Refusal> {
    use weir_connectors::iceberg::CatalogDb;
    match &i.catalog {
        CatalogDb::Sqlite(p) => confine_path(scope.files, "sink.catalog_uri", p)?,
        CatalogDb::Postgres { password_file: Some(p), .. } => {
            confine_path(scope.files, "sink.catalog_password_file", p)?
        }
        CatalogDb::Postgres { .. } => {}
    }
    if let Some(dir) = i.warehouse.strip_prefix("file://") {
        confine_path(scope.files, "sink.warehouse", Path::new(dir))?;
    }
    if let Some(f) = i.s3.as_ref().and_then(|s| s.credentials_file.as_ref()) {
        confine_path(scope.files, "sink.s3.credentials_file", f)?;
    }
    if i.s3.as_ref().is_some_and(|s| s.endpoint.is_none()) {
        return Err(refuse(
            "sink.s3.endpoint",
            "the service reaches only addresses on its allow-list: name the store's endpoint",
        ));
    }
    for address in i.addresses() {
        if !scope.allow_network.contains(&address) {
            return Err(refuse(
                "sink",
                format!("`{address}` is not on the service's network allow-list; ask the admin to add it"),
            ));
        }
    }
    Ok(())
}

/// The schema registry: its address on the allow-list, its secrets and a sink's schema files in
/// the data area (a credentials file elsewhere would send the first line of any file on the
/// service's machine to a URL the tenant chose).
fn check_registry(scope: &Scope, pipeline: &Pipeline) -> Result<(), Refusal> {
    if let Some(r) = &pipeline.registry
        && let Some(file) = &r.saved
    {
        confine_path(scope.files, "registry.schemas", file)?;
    } else if let Some(r) = &pipeline.registry {
        let authority = r.url.split_once("://").map_or("", |(_, rest)| rest.split('/').next().unwrap_or(""));
        let port = if r.url.starts_with("https://") { "443" } else { "80" };
        let authority = if authority.contains(':') { authority.to_string() } else { format!("{authority}:{port}") };
        if !scope.allow_network.contains(&authority) {
            return Err(refuse(
                "registry.url",
                format!("`{authority}` is not on the service's network allow-list; ask the admin to add it"),
            ));
        }
        let files = [
            ("registry.credentials_file", r.credentials_file.as_ref()),
            ("registry.ca_file", r.ca_file.as_ref()),
            ("registry.cert_file", r.client_cert.as_ref().map(|(c, _)| c)),
            ("registry.key_file", r.client_cert.as_ref().map(|(_, k)| k)),
        ];
        for (field, path) in files {
            if let Some(p) = path {
                confine_path(scope.files, field, p)?;
            }
        }
    }
    if let Some(SinkConfig::Kafka(k)) = &pipeline.sink
        && let Some(a) = &k.encoded
    {
        confine_path(scope.files, "sink.schema", &a.schema)?;
        if let Some(p) = &a.key_schema {
            confine_path(scope.files, "sink.key_schema", p)?;
        }
    }
    Ok(())
}

/// Every plugin stage: its component from the store, its grants inside the data area and the
/// allow-list, no fuel. Returns the linear memory the stages may grow to, in MiB.
fn check_stages(scope: &Scope, pipeline: &Pipeline) -> Result<u64, Refusal> {
    let store_dir = store::path(scope.data, &format!("{}{}", store::DIGEST_PREFIX, "0".repeat(64)))
        .and_then(|p| p.parent().map(Path::to_path_buf));
    let mut memory_mb = 0;
    for stage in pipeline.stages() {
        // A stage is named `PIPELINE/KEY (FILE)`: its key in the file names it here.
        let key = stage.name.split_once('/').map_or(stage.name.as_str(), |(_, rest)| rest);
        let key = key.split(" (").next().unwrap_or(key).to_string();
        let field = |k: &str| format!("{key}.{k}");
        if stage.component.parent() != store_dir.as_deref() {
            return Err(refuse(field("plugin"), "a plugin must be one of the tenant's uploaded plugins"));
        }
        let g = &stage.grants;
        for (i, d) in g.dirs.iter().enumerate() {
            confine_path(scope.files, &field(&format!("grants.dirs[{i}].host")), &d.host)?;
        }
        if !g.env.is_empty() {
            return Err(refuse(
                field("grants.env"),
                "the service's environment is not the tenant's: pass values in `config`",
            ));
        }
        if g.stdout {
            return Err(refuse(
                field("grants.stdout"),
                "the service's standard output is not the tenant's: write to a granted directory",
            ));
        }
        for (key, list) in [("grants.network", &g.network), ("grants.http", &g.http)] {
            if let Some(a) = list.iter().find(|a| !scope.allow_network.contains(a)) {
                return Err(refuse(
                    field(key),
                    format!("`{a}` is not on the service's network allow-list; ask the admin to add it"),
                ));
            }
        }
        if stage.limits.fuel.is_some() {
            return Err(refuse(
                field("limits.fuel"),
                "the service runs without fuel metering; bound calls with limits.call_timeout",
            ));
        }
        memory_mb += (stage.limits.max_memory >> 20) as u64;
    }
    Ok(memory_mb)
}

/// Replaces every `plugin = "NAME"` (in any table, at any depth) with the path of the tenant's
/// component of that name or digest.
fn resolve_plugins(scope: &Scope, v: &mut toml::Value, at: &str, digests: &mut Vec<String>) -> Result<(), Refusal> {
    match v {
        toml::Value::Table(t) => {
            for (k, v) in t.iter_mut() {
                let here = if at.is_empty() { k.clone() } else { format!("{at}.{k}") };
                if k == "limits" && v.get("cpu_weight").is_some() {
                    return Err(refuse(
                        format!("{here}.cpu_weight"),
                        "the service sets each stage's CPU weight from your quota: remove it",
                    ));
                }
                if k == "plugin" {
                    let Some(name) = v.as_str() else {
                        return Err(refuse(here, "must be the name or digest of an uploaded plugin"));
                    };
                    let record = scope.plugins.get(name).or_else(|| scope.plugins.values().find(|p| p.digest == name));
                    let Some(path) = record.and_then(|r| store::path(scope.data, &r.digest)) else {
                        return Err(refuse(
                            here,
                            format!("`{name}` is not one of your plugins: upload it first (PUT /v1/plugins/{{name}})"),
                        ));
                    };
                    if let Some(r) = record {
                        digests.push(r.digest.clone());
                    }
                    *v = toml::Value::String(path.to_string_lossy().into_owned());
                } else {
                    resolve_plugins(scope, v, &here, digests)?;
                }
            }
            // A plugin's stage: it runs with the tenant's weight.
            if t.contains_key("plugin") {
                let limits = t.entry("limits").or_insert_with(|| toml::Value::Table(toml::Table::new()));
                if let Some(l) = limits.as_table_mut() {
                    l.insert("cpu_weight".into(), toml::Value::Integer(i64::from(scope.cpu_weight)));
                }
            }
        }
        toml::Value::Array(items) => {
            for (i, item) in items.iter_mut().enumerate() {
                resolve_plugins(scope, item, &format!("{at}[{i}]"), digests)?;
            }
        }
        _ => {}
    }
    Ok(())
}

/// `path` with `.` and `..` taken out without touching the filesystem.
fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            c => out.push(c),
        }
    }
    out
}

/// Whether `path` is inside `area`, by its words and through every link in the part of it that
/// exists.
pub fn within(area: &Path, path: &Path) -> bool {
    let p = normalize(path);
    if !p.starts_with(area) {
        return false;
    }
    let mut existing = p.as_path();
    while !existing.exists() {
        match existing.parent() {
            Some(parent) => existing = parent,
            None => return false,
        }
    }
    match (std::fs::canonicalize(area), std::fs::canonicalize(existing)) {
        (Ok(real_area), Ok(real)) => real.starts_with(real_area),
        _ => false,
    }
}

/// Refuses a path outside `area`, naming the key.
fn confine_path(area: &Path, field: &str, path: &Path) -> Result<(), Refusal> {
    if within(area, path) {
        Ok(())
    } else {
        Err(refuse(field, format!("`{}` is outside your data area: use a path relative to it", shown(area, path))))
    }
}

/// A path as the tenant wrote it: relative to its area when inside, else as given.
fn shown(area: &Path, path: &Path) -> String {
    path.strip_prefix(area).unwrap_or(path).display().to_string()
}

fn kafka_options(scope: &Scope, field: &str, options: &[(String, String)]) -> Result<(), Refusal> {
    for (k, v) in options {
        if host_reaching_option(k) {
            return Err(refuse(
                format!("{field}.{k}"),
                "this option reads or runs files on the service's machine; the service does not let a tenant set it",
            ));
        }
        if k == "group.id" && !v.starts_with(&format!("weir-{}", run_name(scope.tenant, ""))) {
            return Err(refuse(
                format!("{field}.group.id"),
                format!("must start with `weir-{}` (or leave it out)", run_name(scope.tenant, "")),
            ));
        }
        if (k == "bootstrap.servers" || k == "metadata.broker.list")
            && let Some(a) = v.split(',').map(str::trim).find(|a| !scope.allow_network.iter().any(|x| x == a))
        {
            return Err(refuse(
                format!("{field}.{k}"),
                format!("`{a}` is not on the service's network allow-list; ask the admin to add it"),
            ));
        }
    }
    Ok(())
}

fn line_col(text: &str, at: usize) -> (usize, usize) {
    let before = text.get(..at).unwrap_or(text);
    let line = before.matches('\n').count() + 1;
    let col = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    (line, col)
}

#[cfg(test)]
mod tests;
