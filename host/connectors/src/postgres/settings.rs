//! A PostgreSQL sink's settings, as `[sink] type = "postgres"` gives them, checked before a run
//! so that a mistake is named with its fix. The connection and the password come from files,
//! never from the pipeline file or a command line, so neither reaches a log or `ps`. Every
//! default is a named constant here and nowhere else.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::Invalid;

/// The table that records, per target table and checkpoint, the last batch delivered (and its
/// rejected rows), unless `deliveries_table` says otherwise. It lives in the target's database
/// so that a batch's rows and its record commit in one transaction.
pub const DEFAULT_DELIVERIES_TABLE: &str = "weir_deliveries";
/// The port when the connection file names none: PostgreSQL's own.
pub const DEFAULT_PORT: u16 = 5432;

/// A table's name: `name`, or `schema.name`, each as the catalog spells it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableName {
    pub schema: Option<String>,
    pub name: String,
}

impl TableName {
    /// The name quoted for SQL (`"public"."user_totals"`), so that no name is read as SQL.
    pub fn quoted(&self) -> String {
        match &self.schema {
            Some(s) => format!("{}.{}", quote(s), quote(&self.name)),
            None => quote(&self.name),
        }
    }

    /// The same table's name for another table beside it (the deliveries table).
    pub fn beside(&self, name: &str) -> TableName {
        TableName { schema: self.schema.clone(), name: name.to_string() }
    }
}

impl std::fmt::Display for TableName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.schema {
            Some(s) => write!(f, "{s}.{}", self.name),
            None => f.write_str(&self.name),
        }
    }
}

/// An identifier quoted for SQL: in double quotes, a double quote doubled.
pub fn quote(ident: &str) -> String {
    format!("\"{}\"", ident.replace('"', "\"\""))
}

/// Where the database is, as the connection file gives it. The password is read from
/// `password_file` when the sink connects, so that a rotated one is used on the next start.
#[derive(Clone)]
pub struct Settings {
    pub connection_file: PathBuf,
    pub password_file: Option<PathBuf>,
    /// The connection file's settings (`host=... port=... dbname=... user=...`).
    pub config: postgres::Config,
    /// `host:port` of the database (for the service's network allow-list and messages).
    pub address: String,
    pub table: TableName,
    /// The columns that identify a row (`ON CONFLICT`); `None`: the table's primary key.
    pub key_columns: Option<Vec<String>>,
    /// The columns written; `None`: every column of the table but generated ones.
    pub columns: Option<Vec<String>>,
    pub deliveries: TableName,
    pub retry_for: Duration,
}

// By hand: the connection's settings may hold a password, which no log may show.
impl std::fmt::Debug for Settings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Settings")
            .field("connection_file", &self.connection_file)
            .field("address", &self.address)
            .field("table", &self.table)
            .field("key_columns", &self.key_columns)
            .field("columns", &self.columns)
            .field("deliveries", &self.deliveries)
            .field("retry_for", &self.retry_for)
            .finish_non_exhaustive()
    }
}

/// A `[sink] type = "postgres"` as the pipeline file gives it (paths already resolved).
#[derive(Debug, Default)]
pub struct Given<'a> {
    pub connection: Option<&'a Path>,
    pub password_file: Option<&'a Path>,
    pub table: Option<&'a str>,
    pub key_columns: Option<Vec<String>>,
    pub columns: Option<Vec<String>>,
    pub deliveries_table: Option<&'a str>,
    pub retry_for: Option<Duration>,
}

impl Settings {
    pub fn new(g: Given<'_>) -> Result<Settings, Invalid> {
        let connection_file = g.connection.map(Path::to_path_buf).ok_or_else(|| {
            Invalid::new(
                "sink.connection",
                "the file with the database's connection settings, e.g. connection = \"pg.conf\" holding \
                 host=127.0.0.1 port=5432 dbname=shop user=weir (the password goes in password_file)",
            )
        })?;
        let config = connection(&connection_file)?;
        if let Some(p) = g.password_file {
            let text = std::fs::read_to_string(p)
                .map_err(|e| Invalid::new("sink.password_file", format!("cannot read {}: {e}", p.display())))?;
            if text.trim_end_matches(['\r', '\n']).is_empty() {
                return Err(Invalid::new(
                    "sink.password_file",
                    format!("{} is empty: write the password in it", p.display()),
                ));
            }
        }
        let table = table_name("sink.table", g.table)?;
        let deliveries = match g.deliveries_table {
            None => table.beside(DEFAULT_DELIVERIES_TABLE),
            Some(d) => table_name("sink.deliveries_table", Some(d))?,
        };
        if deliveries == table {
            return Err(Invalid::new(
                "sink.deliveries_table",
                "is the table the rows go to: name another table for the sink's record of deliveries",
            ));
        }
        names("sink.key_columns", g.key_columns.as_deref())?;
        names("sink.columns", g.columns.as_deref())?;
        let retry_for = crate::retry::retry_for(g.retry_for)?;
        let address = address(&config)?;
        Ok(Settings {
            connection_file,
            password_file: g.password_file.map(Path::to_path_buf),
            config,
            address,
            table,
            key_columns: g.key_columns,
            columns: g.columns,
            deliveries,
            retry_for,
        })
    }

    /// The connection's settings with the password from `password_file`, read now.
    pub fn connect_config(&self) -> std::io::Result<postgres::Config> {
        let mut c = self.config.clone();
        if let Some(p) = &self.password_file {
            let text = std::fs::read_to_string(p)?;
            c.password(text.trim_end_matches(['\r', '\n']));
        }
        Ok(c)
    }
}

/// The connection file: libpq's `key=value` settings, one database host over TCP, no TLS.
fn connection(file: &Path) -> Result<postgres::Config, Invalid> {
    let key = "sink.connection";
    let text =
        std::fs::read_to_string(file).map_err(|e| Invalid::new(key, format!("cannot read {}: {e}", file.display())))?;
    // One line or several: libpq's format separates settings by any whitespace.
    let text = text.lines().map(str::trim).filter(|l| !l.is_empty() && !l.starts_with('#')).collect::<Vec<_>>();
    let config: postgres::Config = text.join(" ").parse().map_err(|e| {
        // Not the text: it may hold a password.
        Invalid::new(
            key,
            format!(
                "{} is not libpq connection settings ({e}): write key=value pairs, e.g. host=127.0.0.1 port=5432 \
                 dbname=shop user=weir",
                file.display()
            ),
        )
    })?;
    if config.get_user().is_none() {
        return Err(Invalid::new(key, format!("{} names no user: add user=NAME", file.display())));
    }
    if config.get_dbname().is_none() {
        return Err(Invalid::new(key, format!("{} names no database: add dbname=NAME", file.display())));
    }
    if config.get_ssl_mode() == postgres::config::SslMode::Require {
        return Err(Invalid::new(
            key,
            format!(
                "{}: sslmode=require, but TLS to PostgreSQL is not built in yet; reach the database over \
                 loopback or a tunnel, and remove sslmode",
                file.display()
            ),
        ));
    }
    Ok(config)
}

/// `host:port` of the one TCP host the connection names.
fn address(config: &postgres::Config) -> Result<String, Invalid> {
    let key = "sink.connection";
    let host = match config.get_hosts() {
        [postgres::config::Host::Tcp(h)] => h.clone(),
        [] => return Err(Invalid::new(key, "names no host: add host=ADDRESS (e.g. host=127.0.0.1)")),
        [_] => return Err(Invalid::new(key, "names a Unix socket: connect over TCP, e.g. host=127.0.0.1")),
        _ => return Err(Invalid::new(key, "names several hosts: name the one database to write to")),
    };
    let port = match config.get_ports() {
        [] => DEFAULT_PORT,
        [p] => *p,
        _ => return Err(Invalid::new(key, "names several ports: name the database's one port")),
    };
    Ok(format!("{host}:{port}"))
}

/// `table` or `schema.table`: a name without quotes or whitespace.
fn table_name(key: &str, given: Option<&str>) -> Result<TableName, Invalid> {
    let given = given
        .filter(|t| !t.is_empty())
        .ok_or_else(|| Invalid::new(key, "the table, as `table` or `schema.table`, e.g. table = \"user_totals\""))?;
    let (schema, name) = match given.split_once('.') {
        Some((s, n)) => (Some(s.to_string()), n.to_string()),
        None => (None, given.to_string()),
    };
    for part in schema.iter().chain([&name]) {
        ident(key, part)?;
    }
    Ok(TableName { schema, name })
}

fn names(key: &str, names: Option<&[String]>) -> Result<(), Invalid> {
    let Some(names) = names else { return Ok(()) };
    if names.is_empty() {
        return Err(Invalid::new(key, "is empty: name at least one column, or remove it"));
    }
    for (i, n) in names.iter().enumerate() {
        ident(key, n)?;
        if names[..i].contains(n) {
            return Err(Invalid::new(key, format!("names {n:?} twice")));
        }
    }
    Ok(())
}

/// A name PostgreSQL takes (at most 63 bytes), written as the catalog spells it.
fn ident(key: &str, name: &str) -> Result<(), Invalid> {
    if name.is_empty() || name.len() > 63 || name.chars().any(|c| c.is_whitespace() || c == '"' || c == '.') {
        return Err(Invalid::new(
            key,
            format!("{name:?} is not a name: 1 to 63 bytes without spaces, quotes or dots, as the catalog spells it"),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests;
