//! The service's registry: tenants and their quotas, token hashes, each tenant's plugins (by
//! name, pointing at a digest in the content store) and pipelines (their file as written and the
//! state the tenant wants them in). One JSON file, `registry.json` in the data directory,
//! replaced whole and synced on every change before the change is acknowledged, so after a
//! `kill -9` it is the last acknowledged registry, never a torn one.
//!
//! Invariant: what a tenant owns is found only under its own entry; nothing here is looked up
//! by a name without the tenant it belongs to.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::limits;

/// The registry's format; a newer one is refused rather than misread.
const FORMAT: u32 = 1;
const FILE: &str = "registry.json";

#[derive(Debug, thiserror::Error)]
pub enum RegistryError {
    #[error("cannot read or write {}: {source}", path.display())]
    Io { path: PathBuf, source: std::io::Error },
    #[error("{} is not a registry this version of Weir reads: {message}", path.display())]
    Unreadable { path: PathBuf, message: String },
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Registry {
    format: u32,
    pub tenants: BTreeMap<String, Tenant>,
    /// By token id (the part of a token before its secret).
    pub tokens: BTreeMap<String, TokenRecord>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Tenant {
    pub quotas: Quotas,
    pub created_ms: i64,
    #[serde(default)]
    pub plugins: BTreeMap<String, PluginRecord>,
    #[serde(default)]
    pub pipelines: BTreeMap<String, PipelineRecord>,
}

/// What a tenant may use. Set by the admin when creating the tenant; any left out takes its
/// default from `limits.rs`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Quotas {
    #[serde(default = "default_max_pipelines")]
    pub max_pipelines: u32,
    #[serde(default = "default_max_plugin_memory_mb")]
    pub max_plugin_memory_mb: u64,
    #[serde(default = "default_max_files_mb")]
    pub max_files_mb: u64,
    #[serde(default = "default_max_state_mb")]
    pub max_state_mb: u64,
    /// Every stage of the tenant's pipelines runs with this `limits.cpu_weight`.
    #[serde(default = "default_cpu_weight")]
    pub cpu_weight: u32,
}

fn default_max_pipelines() -> u32 {
    limits::DEFAULT_MAX_PIPELINES
}
fn default_max_plugin_memory_mb() -> u64 {
    limits::DEFAULT_MAX_PLUGIN_MEMORY_MB
}
fn default_max_files_mb() -> u64 {
    limits::DEFAULT_MAX_FILES_MB
}
fn default_max_state_mb() -> u64 {
    limits::DEFAULT_MAX_STATE_MB
}
fn default_cpu_weight() -> u32 {
    crate::plugin::DEFAULT_CPU_WEIGHT
}

impl Default for Quotas {
    fn default() -> Self {
        Self {
            max_pipelines: default_max_pipelines(),
            max_plugin_memory_mb: default_max_plugin_memory_mb(),
            max_files_mb: default_max_files_mb(),
            max_state_mb: default_max_state_mb(),
            cpu_weight: default_cpu_weight(),
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TokenRecord {
    pub tenant: String,
    /// BLAKE3 of the whole token; the token itself is never stored.
    pub hash: String,
    pub created_ms: i64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PluginRecord {
    /// `sha256:` and the hex digest of the component's bytes: its name in the content store.
    pub digest: String,
    pub bytes: u64,
    /// The roles the component exports (`parser`, `aggregator`, ...).
    pub roles: Vec<String>,
    pub uploaded_ms: i64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PipelineRecord {
    /// The pipeline file as the tenant wrote it.
    pub text: String,
    pub desired: Desired,
    pub created_ms: i64,
    pub updated_ms: i64,
}

/// The state a tenant wants a pipeline in; the service brings it there at start-up too.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Desired {
    Running,
    Paused,
    Stopped,
}

impl Registry {
    /// The registry in `data`, or an empty one if there is none yet.
    pub fn open(data: &Path) -> Result<Self, RegistryError> {
        let path = data.join(FILE);
        let text = match std::fs::read(&path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Ok(Self { format: FORMAT, ..Self::default() });
            }
            Err(e) => return Err(RegistryError::Io { path, source: e }),
        };
        let r: Registry = serde_json::from_slice(&text)
            .map_err(|e| RegistryError::Unreadable { path: path.clone(), message: e.to_string() })?;
        if r.format != FORMAT {
            return Err(RegistryError::Unreadable {
                path,
                message: format!("format {} (this version reads {FORMAT})", r.format),
            });
        }
        Ok(r)
    }

    /// Replaces the registry in `data` with this one, synced.
    pub fn save(&self, data: &Path) -> Result<(), RegistryError> {
        let path = data.join(FILE);
        let bytes = serde_json::to_vec_pretty(self)
            .map_err(|e| RegistryError::Io { path: path.clone(), source: std::io::Error::other(e) })?;
        crate::own_files::replace(&path, &bytes, true).map_err(|e| RegistryError::Io { path, source: e })
    }
}

/// Now, in epoch milliseconds.
pub fn now_ms() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_saved_registry_reads_back_and_a_torn_or_foreign_one_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let mut r = Registry::open(dir.path()).unwrap();
        assert!(r.tenants.is_empty());
        r.tenants.insert(
            "acme".into(),
            Tenant { quotas: Quotas::default(), created_ms: 1, plugins: BTreeMap::new(), pipelines: BTreeMap::new() },
        );
        r.save(dir.path()).unwrap();
        let back = Registry::open(dir.path()).unwrap();
        assert_eq!(back.tenants.keys().collect::<Vec<_>>(), ["acme"]);
        assert!(!dir.path().join("registry.json.tmp").exists());

        let text = std::fs::read_to_string(dir.path().join(FILE)).unwrap();
        std::fs::write(dir.path().join(FILE), &text[..text.len() / 2]).unwrap();
        assert!(matches!(Registry::open(dir.path()), Err(RegistryError::Unreadable { .. })));
        std::fs::write(dir.path().join(FILE), text.replace("\"format\": 1", "\"format\": 9")).unwrap();
        let e = Registry::open(dir.path()).unwrap_err().to_string();
        assert!(e.contains("format 9"), "{e}");
    }
}
