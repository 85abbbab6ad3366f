//! An Iceberg sink's settings, as `[sink] type = "iceberg"` gives them, checked before a run so
//! that a mistake is named with its fix: the SQL catalog (SQLite or PostgreSQL), the warehouse
//! (a local directory or `s3://`), the table, its columns (an Avro record schema) and its
//! partitioning. Secrets (the catalog's password, the store's keys) come from files.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use arrow_schema::Schema;

use crate::Invalid;
use crate::partition::Partition;

/// The catalog's name unless `catalog_name` says otherwise: a reader (pyiceberg's `SqlCatalog`,
/// Spark's `spark.sql.catalog.NAME`) must use the same, as the catalog keys its rows by it.
pub const DEFAULT_CATALOG_NAME: &str = "weir";
/// The S3 region unless `s3.region` says otherwise.
pub const DEFAULT_S3_REGION: &str = "us-east-1";

/// The catalog's database.
#[derive(Clone, PartialEq, Eq)]
pub enum CatalogDb {
    /// `sqlite:PATH`: a file, made if missing.
    Sqlite(PathBuf),
    /// `postgres://USER@HOST:PORT/DB`, the password from `catalog_password_file`.
    Postgres { url: String, password_file: Option<PathBuf>, address: String },
}

/// An S3-compatible store's settings; the keys are read from `credentials_file` when the sink
/// opens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct S3 {
    /// `http://host:port` of a store other than AWS (MinIO, moto, Ceph); `None`: AWS.
    pub endpoint: Option<String>,
    pub region: String,
    pub path_style: bool,
    pub credentials_file: Option<PathBuf>,
}

#[derive(Clone)]
pub struct Settings {
    pub catalog: CatalogDb,
    pub catalog_name: String,
    /// `file:///abs/dir` or `s3://bucket/prefix`.
    pub warehouse: String,
    pub s3: Option<S3>,
    pub namespace: String,
    pub table: String,
    /// The Avro schema file the columns were read from.
    pub schema_file: PathBuf,
    /// The rows' columns as the schema gives them (timestamps in its units).
    pub schema: Arc<Schema>,
    pub partition: Option<Partition>,
    pub retry_for: Duration,
}

// By hand: a catalog URL or a store's settings name no secret, but keep the shape deliberate.
impl std::fmt::Debug for Settings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Settings")
            .field("catalog", &self.catalog_label())
            .field("warehouse", &self.warehouse)
            .field("table", &format!("{}.{}", self.namespace, self.table))
            .field("partition", &self.partition)
            .finish_non_exhaustive()
    }
}

/// A `[sink] type = "iceberg"` as the pipeline file gives it (paths already resolved against the
/// file's directory).
#[derive(Debug, Default)]
pub struct Given<'a> {
    pub catalog_uri: Option<&'a str>,
    pub catalog_password_file: Option<&'a Path>,
    pub catalog_name: Option<&'a str>,
    pub warehouse: Option<&'a str>,
    pub table: Option<&'a str>,
    pub schema_file: Option<&'a Path>,
    pub schema: Option<Schema>,
    pub partition_by: Option<&'a str>,
    pub s3: Option<S3>,
    pub retry_for: Option<Duration>,
    /// The pipeline file's directory, which relative paths are read against.
    pub dir: Option<&'a Path>,
}

impl Settings {
    pub fn new(g: Given<'_>) -> Result<Settings, Invalid> {
        let dir = g.dir.unwrap_or(Path::new("."));
        let catalog = catalog(g.catalog_uri, g.catalog_password_file, dir)?;
        let warehouse = warehouse(g.warehouse, dir)?;
        if warehouse.starts_with("s3://") != g.s3.is_some() {
            let why = if g.s3.is_some() {
                "[sink.s3] is for a warehouse in S3 (s3://bucket/prefix); remove it, or put the warehouse there"
            } else {
                "a warehouse in S3 needs [sink.s3], e.g. s3 = { endpoint = \"http://127.0.0.1:9000\", \
                 path_style = true, credentials_file = \"s3.keys\" } (no endpoint for AWS)"
            };
            return Err(Invalid::new("sink.s3", why));
        }
        let (namespace, table) = table_name(g.table)?;
        let schema_file = g.schema_file.map(Path::to_path_buf).ok_or_else(|| {
            Invalid::new(
                "sink.schema",
                "the columns, as an Avro record schema: name its file, e.g. schema = \"windows.avsc\"",
            )
        })?;
        let schema = g.schema.ok_or_else(|| Invalid::new("sink.schema", "the schema file has no columns"))?;
        let partition = g.partition_by.map(|p| crate::partition::parse(p, &schema, false)).transpose()?;
        let retry_for = crate::retry::retry_for(g.retry_for)?;
        let catalog_name = g.catalog_name.unwrap_or(DEFAULT_CATALOG_NAME).to_string();
        if catalog_name.trim().is_empty() {
            return Err(Invalid::new("sink.catalog_name", "is empty: name the catalog, or leave it out (\"weir\")"));
        }
        if let Some(f) = g.s3.as_ref().and_then(|s| s.credentials_file.as_ref()) {
            credentials(f).map_err(|why| Invalid::new("sink.s3.credentials_file", why))?;
        }
        Ok(Settings {
            catalog,
            catalog_name,
            warehouse,
            s3: g.s3,
            namespace,
            table,
            schema_file,
            schema: Arc::new(schema),
            partition,
            retry_for,
        })
    }

    /// The catalog as messages name it (never with a password).
    pub fn catalog_label(&self) -> String {
        match &self.catalog {
            CatalogDb::Sqlite(p) => format!("sqlite:{}", p.display()),
            CatalogDb::Postgres { url, .. } => url.clone(),
        }
    }

    /// `host:port` the sink connects to, for the service's allow-list: the catalog's database
    /// and the store's endpoint.
    pub fn addresses(&self) -> Vec<String> {
        let mut out = Vec::new();
        if let CatalogDb::Postgres { address, .. } = &self.catalog {
            out.push(address.clone());
        }
        if let Some(e) = self.s3.as_ref().and_then(|s| s.endpoint.as_ref()) {
            out.push(authority(e));
        }
        out
    }
}

/// `ACCESS_KEY_ID:SECRET_ACCESS_KEY` on the file's first line.
pub fn credentials(file: &Path) -> Result<(String, String), String> {
    let text = std::fs::read_to_string(file).map_err(|e| format!("cannot read {}: {e}", file.display()))?;
    let line = text.lines().next().unwrap_or_default().trim();
    match line.split_once(':') {
        Some((id, secret)) if !id.is_empty() && !secret.is_empty() => Ok((id.to_string(), secret.to_string())),
        _ => Err(format!("{}: its first line must be ACCESS_KEY_ID:SECRET_ACCESS_KEY", file.display())),
    }
}

/// `host:port` of an endpoint URL (the scheme's port when it names none).
fn authority(url: &str) -> String {
    let (scheme, rest) = url.split_once("://").unwrap_or(("http", url));
    let host = rest.split('/').next().unwrap_or_default();
    if host.contains(':') { host.to_string() } else { format!("{host}:{}", if scheme == "https" { 443 } else { 80 }) }
}

fn catalog(uri: Option<&str>, password_file: Option<&Path>, dir: &Path) -> Result<CatalogDb, Invalid> {
    let key = "sink.catalog_uri";
    let uri = uri.filter(|u| !u.is_empty()).ok_or_else(|| {
        Invalid::new(
            key,
            "the catalog's database: sqlite:PATH (e.g. catalog_uri = \"sqlite:lake/catalog.db\") or \
             postgres://USER@HOST:PORT/DB",
        )
    })?;
    if let Some(path) = uri.strip_prefix("sqlite:") {
        if password_file.is_some() {
            return Err(Invalid::new("sink.catalog_password_file", "a SQLite catalog has no password; remove it"));
        }
        let path = path.trim_start_matches("//");
        if path.is_empty() {
            return Err(Invalid::new(key, "sqlite: names no file, e.g. sqlite:lake/catalog.db"));
        }
        return Ok(CatalogDb::Sqlite(dir.join(path)));
    }
    let rest = uri.strip_prefix("postgres://").or_else(|| uri.strip_prefix("postgresql://")).ok_or_else(|| {
        Invalid::new(
            key,
            "is neither sqlite:PATH nor postgres://USER@HOST:PORT/DB: the SQL catalog keeps its tables in one",
        )
    })?;
    let (userinfo, hostpart) = rest.split_once('@').ok_or_else(|| {
        Invalid::new(key, "names no user: postgres://USER@HOST:PORT/DB (the password goes in catalog_password_file)")
    })?;
    if userinfo.contains(':') {
        return Err(Invalid::new(
            key,
            "holds a password, which a pipeline file must not: put it alone in a file and name it in \
             catalog_password_file",
        ));
    }
    let address = hostpart.split(['/', '?']).next().unwrap_or_default();
    let address = if address.contains(':') { address.to_string() } else { format!("{address}:5432") };
    if !hostpart.contains('/') {
        return Err(Invalid::new(key, "names no database: postgres://USER@HOST:PORT/DB"));
    }
    if let Some(p) = password_file {
        let text = std::fs::read_to_string(p)
            .map_err(|e| Invalid::new("sink.catalog_password_file", format!("cannot read {}: {e}", p.display())))?;
        if text.trim_end_matches(['\r', '\n']).is_empty() {
            return Err(Invalid::new("sink.catalog_password_file", format!("{} is empty", p.display())));
        }
    }
    Ok(CatalogDb::Postgres { url: uri.to_string(), password_file: password_file.map(Path::to_path_buf), address })
}

/// The warehouse as a URL: `s3://bucket/prefix`, or a local directory (relative to the pipeline
/// file) as `file:///abs/dir`.
fn warehouse(given: Option<&str>, dir: &Path) -> Result<String, Invalid> {
    let key = "sink.warehouse";
    let w = given.filter(|w| !w.is_empty()).ok_or_else(|| {
        Invalid::new(key, "where the table's files go: a directory (e.g. warehouse = \"lake\") or s3://bucket/prefix")
    })?;
    if let Some(rest) = w.strip_prefix("s3://") {
        if rest.split('/').next().is_none_or(|b| b.len() < 3) {
            return Err(Invalid::new(key, "s3:// names no bucket (at least 3 characters): s3://bucket/prefix"));
        }
        return Ok(w.trim_end_matches('/').to_string());
    }
    if w.contains("://") {
        return Err(Invalid::new(key, "a directory or s3://bucket/prefix; other stores are not built in"));
    }
    let path = dir.join(w.strip_prefix("file://").unwrap_or(w));
    let path = std::path::absolute(&path).map_err(|e| Invalid::new(key, format!("{}: {e}", path.display())))?;
    Ok(format!("file://{}", path.display()))
}

/// `namespace.table`.
fn table_name(given: Option<&str>) -> Result<(String, String), Invalid> {
    let key = "sink.table";
    let given = given
        .filter(|t| !t.is_empty())
        .ok_or_else(|| Invalid::new(key, "the table as NAMESPACE.TABLE, e.g. table = \"shop.order_windows\""))?;
    match given.split_once('.') {
        Some((ns, t)) if name_ok(ns) && name_ok(t) => Ok((ns.to_string(), t.to_string())),
        _ => Err(Invalid::new(
            key,
            format!("{given:?} is not NAMESPACE.TABLE (letters, digits and _ each, e.g. shop.order_windows)"),
        )),
    }
}

fn name_ok(n: &str) -> bool {
    !n.is_empty() && n.len() <= 128 && n.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

#[cfg(test)]
mod tests;
