//! `[registry]` in a pipeline file: where the schema registry is and how to reach it. Secrets
//! (the credentials, a client key) are named by file and read at start-up, never written in the
//! pipeline file or on a command line, and never logged: only the URL names a registry in
//! errors and logs.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use crate::limits::{DEFAULT_REQUEST_TIMEOUT, DEFAULT_RETRY_FOR, MAX_RETRY_FOR};

/// `[registry]` as written.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RegistryFile {
    /// The Confluent API's base URL, e.g. `https://registry.internal:8081`.
    pub url: Option<String>,
    /// Instead of `url`: a schemas file (`saved.rs`), as `weir record --registry` writes one.
    pub schemas: Option<PathBuf>,
    /// A file whose first line is `USER:PASSWORD` (HTTP basic auth, as Confluent Cloud's API keys).
    pub credentials_file: Option<PathBuf>,
    /// PEM certificates to trust for `https` instead of the Mozilla roots.
    pub ca_file: Option<PathBuf>,
    /// A PEM client certificate chain and its key, for a registry that asks for mutual TLS.
    pub cert_file: Option<PathBuf>,
    pub key_file: Option<PathBuf>,
    /// How long to retry a registry that is down before the run stops.
    pub retry_for: Option<String>,
    /// How long one request may take.
    pub timeout: Option<String>,
}

/// `[registry]`, validated: paths absolute, durations in range.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct RegistryConfig {
    /// Without a trailing `/`; for a schemas file, `file:PATH`. How errors and logs name it.
    pub url: String,
    /// `schemas`: the registry is this file, and no server is reached.
    pub saved: Option<PathBuf>,
    pub credentials_file: Option<PathBuf>,
    pub ca_file: Option<PathBuf>,
    pub client_cert: Option<(PathBuf, PathBuf)>,
    pub retry_for: Duration,
    pub timeout: Duration,
}

/// A bad `[registry]` key: which, and the fix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BadKey {
    pub key: &'static str,
    pub message: String,
}

impl RegistryFile {
    /// Checks the form of every key (nothing is read or reached); relative paths resolve
    /// against `dir`, the pipeline file's directory.
    pub fn validate(self, dir: &Path) -> Result<RegistryConfig, BadKey> {
        let path = |p: Option<PathBuf>| p.map(|p| if p.is_absolute() { p } else { dir.join(p) });
        let raw = match (self.url, path(self.schemas)) {
            (Some(u), None) => u,
            (None, Some(file)) => {
                return Ok(RegistryConfig {
                    url: format!("file:{}", file.display()),
                    saved: Some(file),
                    credentials_file: None,
                    ca_file: None,
                    client_cert: None,
                    retry_for: DEFAULT_RETRY_FOR,
                    timeout: DEFAULT_REQUEST_TIMEOUT,
                });
            }
            (None, None) => {
                return Err(BadKey {
                    key: "url",
                    message: "missing: the registry's base URL, e.g. url = \"http://localhost:8081\" (or schemas = \
                              FILE, a schemas file `weir record --registry` wrote)"
                        .into(),
                });
            }
            (Some(_), Some(_)) => {
                return Err(BadKey {
                    key: "schemas",
                    message: "a registry is a server (url) or a schemas file, not both: remove one".into(),
                });
            }
        };
        let url = raw.trim_end_matches('/').to_string();
        let rest = url.strip_prefix("http://").or_else(|| url.strip_prefix("https://"));
        if rest.is_none_or(|r| r.is_empty() || r.starts_with('/')) {
            return Err(BadKey {
                key: "url",
                message: format!("`{raw}`: write the registry's base URL, e.g. \"http://localhost:8081\""),
            });
        }
        if url.contains('@') {
            return Err(BadKey {
                key: "url",
                message: "credentials do not belong in the URL (it is logged): put `USER:PASSWORD` in a file \
                          and name it with credentials_file"
                    .into(),
            });
        }
        let client_cert = match (path(self.cert_file), path(self.key_file)) {
            (Some(c), Some(k)) => Some((c, k)),
            (None, None) => None,
            (Some(_), None) => return Err(BadKey { key: "key_file", message: "cert_file needs its key_file".into() }),
            (None, Some(_)) => return Err(BadKey { key: "cert_file", message: "key_file needs its cert_file".into() }),
        };
        let retry_for = duration("retry_for", self.retry_for, DEFAULT_RETRY_FOR, Duration::ZERO)?;
        let timeout = duration("timeout", self.timeout, DEFAULT_REQUEST_TIMEOUT, Duration::from_millis(100))?;
        Ok(RegistryConfig {
            url,
            saved: None,
            credentials_file: path(self.credentials_file),
            ca_file: path(self.ca_file),
            client_cert,
            retry_for,
            timeout,
        })
    }
}

fn duration(key: &'static str, text: Option<String>, default: Duration, least: Duration) -> Result<Duration, BadKey> {
    let Some(text) = text else { return Ok(default) };
    let d = humantime::parse_duration(&text).map_err(|e| BadKey {
        key,
        message: format!("`{text}` is not a duration ({e}); write e.g. \"30s\", \"2 minutes\""),
    })?;
    if d < least || d > MAX_RETRY_FOR {
        return Err(BadKey {
            key,
            message: format!(
                "`{text}`: from {} to {}",
                humantime::format_duration(least),
                humantime::format_duration(MAX_RETRY_FOR)
            ),
        });
    }
    Ok(d)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(url: &str) -> RegistryFile {
        RegistryFile {
            url: Some(url.into()),
            schemas: None,
            credentials_file: Some("secrets/registry".into()),
            ca_file: None,
            cert_file: None,
            key_file: None,
            retry_for: None,
            timeout: None,
        }
    }

    #[test]
    fn a_url_is_checked_and_paths_resolve_against_the_file_s_directory() {
        let c = file("http://localhost:8081/").validate(Path::new("/p")).unwrap();
        assert_eq!(c.url, "http://localhost:8081");
        assert_eq!(c.credentials_file.as_deref(), Some(Path::new("/p/secrets/registry")));
        assert_eq!(c.retry_for, DEFAULT_RETRY_FOR);
        for bad in ["localhost:8081", "http://", "ftp://x", "https://user:pw@host"] {
            assert_eq!(file(bad).validate(Path::new("/p")).unwrap_err().key, "url", "{bad}");
        }
        let mut f = file("http://r");
        f.retry_for = Some("soon".into());
        assert!(f.validate(Path::new("/")).unwrap_err().message.contains("not a duration"));
        let mut f = file("http://r");
        f.cert_file = Some("c.pem".into());
        assert_eq!(f.validate(Path::new("/")).unwrap_err().key, "key_file");
    }
}
