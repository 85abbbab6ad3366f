//! What the API does, apart from HTTP: every operation on the registry, the store, a tenant's
//! files and the supervisor, for one caller. Each change is checked (ownership, quotas,
//! confinement), carried out, saved to the registry and written to the audit log before it is
//! acknowledged.
//!
//! Invariant: every operation on a tenant's things takes the tenant from the caller's token,
//! never from the request; what is not the caller's is "not found".

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use axum::http::StatusCode;
use serde::{Deserialize, Serialize};

use super::confine::{self, Confined, Scope};
use super::error::ApiError;
use super::limits;
use super::registry::{Desired, PipelineRecord, PluginRecord, Quotas, Registry, Tenant, TokenRecord, now_ms};
use super::store;
use super::supervisor::{Key, Started, Status, Supervisor};
use super::tokens::{self, Caller};

mod files;
mod metrics;
mod pipelines;
mod plugins;
mod quota;
mod tenants;

pub struct Service {
    data: PathBuf,
    admin: blake3::Hash,
    allow_network: Vec<String>,
    registry: Mutex<Registry>,
    /// One per tenant, held across a change to its pipelines or plugins (the check, the start
    /// or stop, the save), so two requests cannot both pass a quota check or start the same
    /// run; per tenant, so one tenant's slow start never holds up another's requests.
    changes: Mutex<std::collections::HashMap<String, Arc<Mutex<()>>>>,
    supervisor: Supervisor,
}

/// How the service starts.
pub struct Settings {
    pub data: PathBuf,
    pub admin: blake3::Hash,
    pub allow_network: Vec<String>,
}

/// `POST /v1/tenants`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NewTenant {
    pub name: String,
    #[serde(default)]
    pub quotas: Option<Quotas>,
}

/// A pipeline as the API shows it.
#[derive(Debug, Serialize)]
pub struct PipelineView {
    pub name: String,
    pub desired: Desired,
    #[serde(flatten)]
    pub status: Status,
    pub plugins: Vec<String>,
    pub created_ms: i64,
    pub updated_ms: i64,
    /// The last batch's progress record.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub progress: Option<serde_json::Value>,
}

/// What a pipeline action asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    Start,
    Stop,
    Pause,
    Resume,
}

/// A tenant name: lowercase letters, digits and single `-`, starting with a letter (it is a
/// directory, and `--` separates it from a pipeline name in run names).
fn check_tenant_name(name: &str) -> Result<(), ApiError> {
    let ok = !name.is_empty()
        && name.len() <= limits::MAX_NAME
        && name.starts_with(|c: char| c.is_ascii_lowercase())
        && name.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        && !name.contains("--")
        && !name.ends_with('-');
    if ok {
        Ok(())
    } else {
        Err(ApiError::bad("name", format!("`{name}` is not a tenant name")).fix(format!(
            "lowercase letters, digits and single `-`, starting with a letter, at most {} characters",
            limits::MAX_NAME
        )))
    }
}

/// A plugin or pipeline name: what the pipeline file's `name` accepts.
pub fn check_name(what: &str, name: &str) -> Result<(), ApiError> {
    let ok = !name.is_empty()
        && name.len() <= limits::MAX_NAME
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
    if ok {
        Ok(())
    } else {
        Err(ApiError::bad("name", format!("`{name}` is not a {what} name"))
            .fix(format!("letters, digits, `-` and `_`, at most {} characters", limits::MAX_NAME)))
    }
}

/// A path inside a tenant's data area, as the files API takes it: relative, made of plain
/// names.
pub fn check_file_path(path: &str) -> Result<(), ApiError> {
    let ok = !path.is_empty()
        && path.len() <= limits::MAX_FILE_PATH
        && path.split('/').all(|part| {
            !part.is_empty()
                && !part.starts_with('.')
                && part.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        });
    if ok {
        Ok(())
    } else {
        Err(ApiError::bad("path", format!("`{path}` is not a path in your data area"))
            .fix("a relative path of names made of letters, digits, `-`, `_` and `.`, none starting with `.`"))
    }
}
impl Service {
    /// Opens the data directory and brings every pipeline to the state its tenant wanted:
    /// those that were running resume from their checkpoints.
    pub fn open(settings: Settings, runtime: Arc<crate::plugin::Runtime>) -> Result<Arc<Self>, ApiError> {
        std::fs::create_dir_all(&settings.data).map_err(ApiError::internal)?;
        let registry = Registry::open(&settings.data)?;
        let service = Arc::new(Self {
            data: settings.data,
            admin: settings.admin,
            allow_network: settings.allow_network,
            registry: Mutex::new(registry),
            changes: Mutex::default(),
            supervisor: Supervisor::new(runtime),
        });
        let running: Vec<Key> = {
            let r = service.registry();
            r.tenants
                .iter()
                .flat_map(|(t, ten)| {
                    ten.pipelines
                        .iter()
                        .filter(|(_, p)| p.desired == Desired::Running)
                        .map(move |(n, _)| (t.clone(), n.clone()))
                })
                .collect()
        };
        for key in running {
            let s = service.clone();
            // A thread each: tenants resume side by side, so one slow to recover holds back no
            // other tenant; a tenant's own resume one at a time, under its lock.
            std::thread::spawn(move || {
                let one = s.one_at_a_time(&key.0);
                let _one = one.lock().unwrap_or_else(|e| e.into_inner());
                if let Err(e) = s.run(&key) {
                    tracing::warn!("pipeline {} of {} did not resume: {}", key.1, key.0, e.error);
                }
            });
        }
        quota::watch(Arc::downgrade(&service));
        Ok(service)
    }

    fn one_at_a_time(&self, tenant: &str) -> Arc<Mutex<()>> {
        let mut locks = self.changes.lock().unwrap_or_else(|e| e.into_inner());
        locks.entry(tenant.to_string()).or_default().clone()
    }

    pub fn identify(&self, token: &str) -> Option<Caller> {
        tokens::identify(&self.registry(), &self.admin, token)
    }

    pub fn shutdown(&self) {
        self.supervisor.stop_all();
    }

    fn registry(&self) -> std::sync::MutexGuard<'_, Registry> {
        self.registry.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Applies `change` to a copy of the registry, saves it, and only then makes it the
    /// registry: a change that cannot be saved is not made.
    fn change<T>(&self, change: impl FnOnce(&mut Registry) -> Result<T, ApiError>) -> Result<T, ApiError> {
        let mut r = self.registry();
        let mut next = r.clone();
        let out = change(&mut next)?;
        next.save(&self.data)?;
        *r = next;
        Ok(out)
    }

    fn audit(&self, caller: &Caller, action: &str, target: &str) {
        use std::io::Write;
        let who = match caller {
            Caller::Admin => "admin".to_string(),
            Caller::Tenant(t) => format!("tenant:{t}"),
        };
        let line = serde_json::json!({"ms": now_ms(), "caller": who, "action": action, "target": target});
        let path = self.data.join("audit.jsonl");
        let written = crate::own_files::open(&path, std::fs::OpenOptions::new().create(true).append(true))
            .and_then(|mut f| writeln!(f, "{line}").and_then(|()| f.sync_data()));
        if let Err(e) = written {
            tracing::error!("cannot write the audit log {}: {e}", path.display());
        }
    }

    fn tenant_dir(&self, tenant: &str) -> PathBuf {
        self.data.join("tenants").join(tenant)
    }

    /// The tenant's data area: its inputs and outputs.
    pub fn files(&self, tenant: &str) -> PathBuf {
        self.tenant_dir(tenant).join("files")
    }

    fn checkpoint(&self, key: &Key) -> PathBuf {
        self.tenant_dir(&key.0).join("checkpoints").join(&key.1)
    }

    /// Where a pipeline's dead letters go when its file does not say.
    fn default_dead_letters(&self, key: &Key) -> PathBuf {
        self.files(&key.0).join("dead-letters").join(format!("{}.jsonl", key.1))
    }
}
