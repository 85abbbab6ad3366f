//! What the API does, apart from HTTP: every operation on the registry, the store, a tenant's
//! files and the supervisor, for one caller. Each change is checked (ownership, quotas,
//! confinement), carried out, saved to the registry and written to the audit log before it is
//! acknowledged.
//!
//! Invariant: every operation on a tenant's things takes the tenant from the caller's token,
//! never from the request; what is not the caller's is "not found".

use std::path::{Path, PathBuf};
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

pub(crate) struct Service {
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
pub(crate) struct Settings {
    pub data: PathBuf,
    pub admin: blake3::Hash,
    pub allow_network: Vec<String>,
}

/// `POST /v1/tenants`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct NewTenant {
    pub name: String,
    #[serde(default)]
    pub quotas: Option<Quotas>,
}

/// A pipeline as the API shows it.
#[derive(Debug, Serialize)]
pub(crate) struct PipelineView {
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
pub(crate) enum Action {
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
pub(crate) fn check_name(what: &str, name: &str) -> Result<(), ApiError> {
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
pub(crate) fn check_file_path(path: &str) -> Result<(), ApiError> {
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
    pub(crate) fn open(settings: Settings, runtime: Arc<crate::plugin::Runtime>) -> Result<Arc<Self>, ApiError> {
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
        Ok(service)
    }

    fn one_at_a_time(&self, tenant: &str) -> Arc<Mutex<()>> {
        let mut locks = self.changes.lock().unwrap_or_else(|e| e.into_inner());
        locks.entry(tenant.to_string()).or_default().clone()
    }

    pub(crate) fn identify(&self, token: &str) -> Option<Caller> {
        tokens::identify(&self.registry(), &self.admin, token)
    }

    pub(crate) fn shutdown(&self) {
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
    pub(crate) fn files(&self, tenant: &str) -> PathBuf {
        self.tenant_dir(tenant).join("files")
    }

    fn checkpoint(&self, key: &Key) -> PathBuf {
        self.tenant_dir(&key.0).join("checkpoints").join(&key.1)
    }

    /// Where a pipeline's dead letters go when its file does not say.
    fn default_dead_letters(&self, key: &Key) -> PathBuf {
        self.files(&key.0).join("dead-letters").join(format!("{}.jsonl", key.1))
    }

    // --- admin ---

    pub(crate) fn create_tenant(&self, caller: &Caller, req: NewTenant) -> Result<serde_json::Value, ApiError> {
        check_tenant_name(&req.name)?;
        let quotas = req.quotas.unwrap_or_default();
        if !(1..=crate::plugin::MAX_CPU_WEIGHT).contains(&u64::from(quotas.cpu_weight)) {
            return Err(ApiError::bad(
                "quotas.cpu_weight",
                format!("{}: allowed 1 to {}", quotas.cpu_weight, crate::plugin::MAX_CPU_WEIGHT),
            ));
        }
        self.change(|r| {
            if r.tenants.contains_key(&req.name) {
                return Err(ApiError::conflict(format!("tenant `{}` exists", req.name)));
            }
            r.tenants.insert(
                req.name.clone(),
                Tenant { quotas, created_ms: now_ms(), plugins: Default::default(), pipelines: Default::default() },
            );
            Ok(())
        })?;
        std::fs::create_dir_all(self.files(&req.name)).map_err(ApiError::internal)?;
        self.audit(caller, "create-tenant", &req.name);
        Ok(serde_json::json!({"name": req.name, "quotas": quotas}))
    }

    pub(crate) fn tenants(&self) -> serde_json::Value {
        let r = self.registry();
        let list: Vec<_> = r
            .tenants
            .iter()
            .map(|(n, t)| {
                serde_json::json!({"name": n, "quotas": t.quotas, "pipelines": t.pipelines.len(), "plugins": t.plugins.len()})
            })
            .collect();
        serde_json::json!({ "tenants": list })
    }

    pub(crate) fn mint_token(&self, caller: &Caller, tenant: &str) -> Result<serde_json::Value, ApiError> {
        let (token, id) = tokens::mint().map_err(ApiError::internal)?;
        self.change(|r| {
            if !r.tenants.contains_key(tenant) {
                return Err(ApiError::not_found("tenant"));
            }
            if r.tokens.len() >= limits::MAX_TOKENS {
                return Err(ApiError::conflict(format!("{} tokens exist; revoke some first", limits::MAX_TOKENS)));
            }
            r.tokens.insert(
                id.clone(),
                TokenRecord {
                    tenant: tenant.to_string(),
                    hash: tokens::hash(&token).to_hex().to_string(),
                    created_ms: now_ms(),
                },
            );
            Ok(())
        })?;
        self.audit(caller, "create-token", &format!("{tenant}/{id}"));
        Ok(serde_json::json!({"id": id, "tenant": tenant, "token": token}))
    }

    pub(crate) fn revoke_token(&self, caller: &Caller, id: &str) -> Result<(), ApiError> {
        self.change(|r| r.tokens.remove(id).map(drop).ok_or_else(|| ApiError::not_found("token")))?;
        self.audit(caller, "revoke-token", id);
        Ok(())
    }

    // --- plugins ---

    pub(crate) fn put_plugin(
        &self,
        caller: &Caller,
        tenant: &str,
        name: &str,
        bytes: &[u8],
    ) -> Result<(StatusCode, serde_json::Value), ApiError> {
        check_name("plugin", name)?;
        {
            let r = self.registry();
            let t = r.tenants.get(tenant).ok_or_else(|| ApiError::not_found("tenant"))?;
            if !t.plugins.contains_key(name) && t.plugins.len() >= limits::MAX_PLUGINS_PER_TENANT {
                return Err(ApiError::quota(format!("at most {} plugins per tenant", limits::MAX_PLUGINS_PER_TENANT)));
            }
        }
        let stored = store::put(&self.data, self.supervisor.runtime(), bytes).map_err(|e| match e {
            store::StoreError::Io { .. } => ApiError::internal(e),
            e => ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, format!("the plugin was refused: {e}")).fix(
                "upload a component built for this version of Weir's WIT contract (cargo xtask build, weir build)",
            ),
        })?;
        let record = PluginRecord {
            digest: stored.digest,
            bytes: bytes.len() as u64,
            roles: stored.roles,
            uploaded_ms: now_ms(),
        };
        let created = self.change(|r| {
            let t = r.tenants.get_mut(tenant).ok_or_else(|| ApiError::not_found("tenant"))?;
            Ok(t.plugins.insert(name.to_string(), record.clone()).is_none())
        })?;
        self.audit(caller, "put-plugin", &format!("{name} {}", record.digest));
        let status = if created { StatusCode::CREATED } else { StatusCode::OK };
        Ok((status, plugin_view(name, &record)))
    }

    pub(crate) fn plugins(&self, tenant: &str) -> serde_json::Value {
        let r = self.registry();
        let list: Vec<_> =
            r.tenants.get(tenant).map_or(Vec::new(), |t| t.plugins.iter().map(|(n, p)| plugin_view(n, p)).collect());
        serde_json::json!({ "plugins": list })
    }

    pub(crate) fn plugin(&self, tenant: &str, name: &str) -> Result<serde_json::Value, ApiError> {
        let r = self.registry();
        let p = r.tenants.get(tenant).and_then(|t| t.plugins.get(name)).ok_or_else(|| ApiError::not_found("plugin"))?;
        Ok(plugin_view(name, p))
    }

    pub(crate) fn delete_plugin(&self, caller: &Caller, tenant: &str, name: &str) -> Result<(), ApiError> {
        let one = self.one_at_a_time(tenant);
        let _one = one.lock().unwrap_or_else(|e| e.into_inner());
        let (digest, pipelines) = {
            let r = self.registry();
            let t = r.tenants.get(tenant).ok_or_else(|| ApiError::not_found("plugin"))?;
            let p = t.plugins.get(name).ok_or_else(|| ApiError::not_found("plugin"))?;
            (p.digest.clone(), t.pipelines.iter().map(|(n, p)| (n.clone(), p.text.clone())).collect::<Vec<_>>())
        };
        // A pipeline whose file names the plugin, by name or digest; one that no longer
        // confines does not run, and holds nothing.
        for (pipeline, text) in &pipelines {
            if self.scope_confine(tenant, pipeline, text).is_ok_and(|c| c.digests.contains(&digest)) {
                return Err(ApiError::conflict(format!("pipeline `{pipeline}` uses plugin `{name}`"))
                    .fix("delete or update that pipeline first"));
            }
        }
        self.change(|r| {
            let t = r.tenants.get_mut(tenant).ok_or_else(|| ApiError::not_found("plugin"))?;
            t.plugins.remove(name).map(drop).ok_or_else(|| ApiError::not_found("plugin"))
        })?;
        self.audit(caller, "delete-plugin", name);
        Ok(())
    }

    // --- files ---

    pub(crate) fn put_file(
        &self,
        caller: &Caller,
        tenant: &str,
        path: &str,
        bytes: &[u8],
    ) -> Result<serde_json::Value, ApiError> {
        check_file_path(path)?;
        let quota = {
            let r = self.registry();
            r.tenants.get(tenant).ok_or_else(|| ApiError::not_found("tenant"))?.quotas.max_files_mb
        };
        let area = self.files(tenant);
        let used = crate::plugin::du(&area);
        if used + bytes.len() as u64 > quota << 20 {
            return Err(ApiError::quota(format!(
                "your data area would pass its quota of {quota} MiB ({} MiB used)",
                used >> 20
            )));
        }
        let target = area.join(path);
        // Checked before a directory is made: a link a plugin left in the area must not lead
        // the service to make directories outside it.
        if !confine::within(&area, &target) {
            return Err(ApiError::not_found("directory"));
        }
        if let Some(parent) = target.parent() {
            std::fs::create_dir_all(parent).map_err(ApiError::internal)?;
            inside(&area, parent).ok_or_else(|| ApiError::not_found("directory"))?;
        }
        crate::own_files::replace(&target, bytes, true)
            .map_err(|e| ApiError::conflict(format!("cannot write `{path}`: {e}")))?;
        self.audit(caller, "put-file", path);
        Ok(serde_json::json!({"path": path, "bytes": bytes.len()}))
    }

    pub(crate) fn get_file(&self, tenant: &str, path: &str) -> Result<Vec<u8>, ApiError> {
        check_file_path(path)?;
        let area = self.files(tenant);
        let real = inside(&area, &area.join(path)).ok_or_else(|| ApiError::not_found("file"))?;
        std::fs::read(real).map_err(|_| ApiError::not_found("file"))
    }

    /// Every file in the tenant's data area (or under `prefix`), with its size.
    pub(crate) fn list_files(&self, tenant: &str, prefix: Option<&str>) -> Result<serde_json::Value, ApiError> {
        let area = self.files(tenant);
        let root = match prefix {
            Some(p) => {
                check_file_path(p)?;
                inside(&area, &area.join(p)).ok_or_else(|| ApiError::not_found("directory"))?
            }
            None => std::fs::canonicalize(&area).map_err(|_| ApiError::not_found("directory"))?,
        };
        let real_area = std::fs::canonicalize(&area).map_err(ApiError::internal)?;
        let mut files = Vec::new();
        let mut stack = vec![root];
        while let Some(dir) = stack.pop() {
            let Ok(entries) = std::fs::read_dir(&dir) else { continue };
            for e in entries.flatten() {
                let Ok(ft) = e.file_type() else { continue };
                if ft.is_dir() {
                    stack.push(e.path());
                } else if ft.is_file() && files.len() < 10_000 {
                    let rel = e.path().strip_prefix(&real_area).map(|p| p.display().to_string()).unwrap_or_default();
                    let bytes = e.metadata().map_or(0, |m| m.len());
                    files.push(serde_json::json!({"path": rel, "bytes": bytes}));
                }
            }
        }
        files.sort_by(|a, b| a["path"].as_str().cmp(&b["path"].as_str()));
        Ok(serde_json::json!({ "files": files }))
    }

    // --- pipelines ---

    /// The tenant's pipeline file confined (`confine.rs`), or `400` naming the key.
    fn scope_confine(&self, tenant: &str, name: &str, text: &str) -> Result<Confined, ApiError> {
        let (plugins, cpu_weight) = {
            let r = self.registry();
            let t = r.tenants.get(tenant).ok_or_else(|| ApiError::not_found("tenant"))?;
            (t.plugins.clone(), t.quotas.cpu_weight)
        };
        let files = self.files(tenant);
        std::fs::create_dir_all(&files).map_err(ApiError::internal)?;
        let scope = Scope {
            tenant,
            name,
            data: &self.data,
            files: &files,
            plugins: &plugins,
            allow_network: &self.allow_network,
            cpu_weight,
        };
        confine::confine(&scope, text)
            .map_err(|r| ApiError { at: r.at.map(|(l, c)| [l, c]), ..ApiError::bad(r.field, r.message) })
    }

    /// Creates or replaces a pipeline. A replaced pipeline that was running is stopped after
    /// its batch and started again on the new file with its state; if the new file cannot run
    /// on that state, the old one runs on and the request is refused with the reason.
    pub(crate) fn put_pipeline(
        &self,
        caller: &Caller,
        tenant: &str,
        name: &str,
        text: &str,
        start: bool,
    ) -> Result<(StatusCode, PipelineView), ApiError> {
        check_name("pipeline", name)?;
        let one = self.one_at_a_time(tenant);
        let _one = one.lock().unwrap_or_else(|e| e.into_inner());
        let confined = self.scope_confine(tenant, name, text)?;
        let key: Key = (tenant.to_string(), name.to_string());
        let (old, quotas, others, count) = {
            let r = self.registry();
            let t = r.tenants.get(tenant).ok_or_else(|| ApiError::not_found("tenant"))?;
            let others: Vec<_> =
                t.pipelines.iter().filter(|(n, _)| *n != name).map(|(n, p)| (n.clone(), p.text.clone())).collect();
            (t.pipelines.get(name).cloned(), t.quotas, others, t.pipelines.len())
        };
        let others_mb: u64 =
            others.iter().map(|(n, text)| self.scope_confine(tenant, n, text).map_or(0, |c| c.memory_mb)).sum();
        if old.is_none() && count as u32 >= quotas.max_pipelines {
            return Err(ApiError::quota(format!("your quota is {} pipelines", quotas.max_pipelines)));
        }
        if others_mb + confined.memory_mb > quotas.max_plugin_memory_mb {
            return Err(ApiError::quota(format!(
                "this pipeline's plugins may use {} MiB of memory and your others {others_mb} MiB; your quota is {} MiB",
                confined.memory_mb, quotas.max_plugin_memory_mb
            ))
            .fix("lower limits.max_memory_mb of its stages, or delete a pipeline"));
        }
        let was_running = old.as_ref().is_some_and(|o| o.desired == Desired::Running);
        let run = start || was_running;
        if run && !was_running {
            self.check_state_quota(tenant)?;
        }
        if !run {
            let data = self.data.display().to_string();
            self.supervisor.probe(&confined.pipeline).map_err(|e| {
                ApiError::conflict(format!("the pipeline cannot start: {}", e.replace(&data, "$DATA")))
                    .fix("fix the file: each plugin must play its stage's role and accept its config")
            })?;
        } else {
            if let Err(e) = self.start_confined(&key, confined) {
                if was_running {
                    // The old file runs on, on the state it kept.
                    let _ = self.run(&key);
                }
                return Err(ApiError::conflict(format!("the pipeline cannot start: {e}"))
                    .fix("fix the file, or keep the plugin build that can read the pipeline's state"));
            }
        }
        let now = now_ms();
        let desired = if run { Desired::Running } else { old.as_ref().map_or(Desired::Stopped, |o| o.desired) };
        let record = PipelineRecord {
            text: text.to_string(),
            desired,
            created_ms: old.as_ref().map_or(now, |o| o.created_ms),
            updated_ms: now,
        };
        self.change(|r| {
            let t = r.tenants.get_mut(tenant).ok_or_else(|| ApiError::not_found("tenant"))?;
            t.pipelines.insert(name.to_string(), record);
            Ok(())
        })?;
        self.audit(caller, if old.is_some() { "update-pipeline" } else { "create-pipeline" }, name);
        let status = if old.is_some() { StatusCode::OK } else { StatusCode::CREATED };
        Ok((status, self.pipeline(tenant, name)?))
    }

    /// `403` when the tenant's checkpoints hold more than its `max_state_mb`.
    fn check_state_quota(&self, tenant: &str) -> Result<(), ApiError> {
        let quota = {
            let r = self.registry();
            r.tenants.get(tenant).ok_or_else(|| ApiError::not_found("tenant"))?.quotas.max_state_mb
        };
        let used = crate::plugin::du(&self.tenant_dir(tenant).join("checkpoints"));
        if used > quota << 20 {
            return Err(ApiError::quota(format!(
                "your pipelines' state holds {} MiB; your quota is {quota} MiB",
                used >> 20
            ))
            .fix("delete a pipeline with its state (DELETE ...?state=true), or ask for a larger quota"));
        }
        Ok(())
    }

    fn start_confined(&self, key: &Key, confined: Confined) -> Result<Started, String> {
        let mut pipeline = confined.pipeline;
        if pipeline.dead_letter.is_none() {
            pipeline.dead_letter = Some(self.default_dead_letters(key));
        }
        let checkpoint = self.checkpoint(key);
        // The service's own paths are not the tenant's business.
        let data = self.data.display().to_string();
        self.supervisor.start(key, pipeline, checkpoint).map_err(|e| e.replace(&data, "$DATA"))
    }

    /// Starts a registered pipeline from its file.
    fn run(&self, key: &Key) -> Result<Started, ApiError> {
        let text = self.record(&key.0, &key.1)?.text;
        let confined = self.scope_confine(&key.0, &key.1, &text)?;
        self.start_confined(key, confined).map_err(|e| ApiError::conflict(format!("the pipeline cannot start: {e}")))
    }

    pub(crate) fn act(
        &self,
        caller: &Caller,
        tenant: &str,
        name: &str,
        action: Action,
    ) -> Result<PipelineView, ApiError> {
        let one = self.one_at_a_time(tenant);
        let _one = one.lock().unwrap_or_else(|e| e.into_inner());
        let key: Key = (tenant.to_string(), name.to_string());
        let desired = self.record(tenant, name)?.desired;
        let set = |d: Desired| {
            self.change(|r| {
                let p = r
                    .tenants
                    .get_mut(tenant)
                    .and_then(|t| t.pipelines.get_mut(name))
                    .ok_or_else(|| ApiError::not_found("pipeline"))?;
                p.desired = d;
                p.updated_ms = now_ms();
                Ok(())
            })
        };
        match action {
            Action::Start | Action::Resume => {
                if action == Action::Resume && desired != Desired::Paused {
                    return Err(ApiError::conflict("the pipeline is not paused").fix("start it instead"));
                }
                self.check_state_quota(tenant)?;
                self.run(&key)?;
                set(Desired::Running)?;
            }
            Action::Stop | Action::Pause => {
                // Saved first: a crash between the two leaves it stopped, as asked.
                set(if action == Action::Stop { Desired::Stopped } else { Desired::Paused })?;
                self.supervisor.stop(&key);
            }
        }
        let verb = match action {
            Action::Start => "start",
            Action::Stop => "stop",
            Action::Pause => "pause",
            Action::Resume => "resume",
        };
        self.audit(caller, &format!("{verb}-pipeline"), name);
        self.pipeline(tenant, name)
    }

    /// Deletes a pipeline; `state`: its checkpoint too (a pipeline created again under the
    /// name starts afresh); `outputs`: its dead letters and late events.
    pub(crate) fn delete_pipeline(
        &self,
        caller: &Caller,
        tenant: &str,
        name: &str,
        state: bool,
        outputs: bool,
    ) -> Result<(), ApiError> {
        let one = self.one_at_a_time(tenant);
        let _one = one.lock().unwrap_or_else(|e| e.into_inner());
        let key: Key = (tenant.to_string(), name.to_string());
        let text = self.record(tenant, name)?.text;
        let sides = self.side_outputs(&key, &text);
        self.change(|r| {
            r.tenants
                .get_mut(tenant)
                .and_then(|t| t.pipelines.remove(name))
                .map(drop)
                .ok_or_else(|| ApiError::not_found("pipeline"))
        })?;
        self.supervisor.remove(&key);
        super::logs::forget(&confine::run_name(tenant, name));
        if state {
            match std::fs::remove_dir_all(self.checkpoint(&key)) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(ApiError::internal(e)),
                _ => {}
            }
        }
        if outputs {
            for p in [Some(sides.0), sides.1].into_iter().flatten() {
                let _ = std::fs::remove_file(p);
            }
        }
        self.audit(caller, "delete-pipeline", name);
        Ok(())
    }

    pub(crate) fn pipelines(&self, tenant: &str) -> Result<serde_json::Value, ApiError> {
        let names: Vec<String> = {
            let r = self.registry();
            r.tenants.get(tenant).map_or(Vec::new(), |t| t.pipelines.keys().cloned().collect())
        };
        let list = names.iter().map(|n| self.pipeline(tenant, n)).collect::<Result<Vec<_>, _>>()?;
        Ok(serde_json::json!({ "pipelines": list }))
    }

    pub(crate) fn pipeline(&self, tenant: &str, name: &str) -> Result<PipelineView, ApiError> {
        let record = self.record(tenant, name)?;
        let key: Key = (tenant.to_string(), name.to_string());
        let progress = self
            .supervisor
            .recent(&key)
            .since(0, 1)
            .pop()
            .or_else(|| {
                std::fs::read_to_string(self.checkpoint(&key).join(crate::progress::PROGRESS_FILE)).ok().map(|s| (0, s))
            })
            .and_then(|(_, s)| serde_json::from_str(&s).ok());
        let plugins = self.scope_confine(tenant, name, &record.text).map_or(Vec::new(), |c| c.digests);
        Ok(PipelineView {
            name: name.to_string(),
            desired: record.desired,
            status: self.supervisor.status(&key),
            plugins,
            created_ms: record.created_ms,
            updated_ms: record.updated_ms,
            progress,
        })
    }

    pub(crate) fn pipeline_text(&self, tenant: &str, name: &str) -> Result<String, ApiError> {
        Ok(self.record(tenant, name)?.text)
    }

    /// The tenant's pipeline of that name, as registered.
    fn record(&self, tenant: &str, name: &str) -> Result<PipelineRecord, ApiError> {
        let r = self.registry();
        r.tenants
            .get(tenant)
            .and_then(|t| t.pipelines.get(name))
            .cloned()
            .ok_or_else(|| ApiError::not_found("pipeline"))
    }

    /// The progress records of the pipeline's runs in this process, after sequence `after`.
    pub(crate) fn progress(&self, tenant: &str, name: &str) -> Result<Arc<super::supervisor::Recent>, ApiError> {
        self.pipeline_text(tenant, name)?;
        Ok(self.supervisor.recent(&(tenant.to_string(), name.to_string())))
    }

    /// (dead letters, late events) files of a pipeline.
    fn side_outputs(&self, key: &Key, text: &str) -> (PathBuf, Option<PathBuf>) {
        let confined = self.scope_confine(&key.0, &key.1, text).ok();
        let dead = confined
            .as_ref()
            .and_then(|c| c.pipeline.dead_letter.clone())
            .unwrap_or_else(|| self.default_dead_letters(key));
        let late = confined
            .and_then(|c| c.pipeline.stateful.map(|s| s.time))
            .map(|t| t.late_path.unwrap_or_else(|| self.checkpoint(key).join("late.jsonl")));
        (dead, late)
    }

    /// The last `n` lines the pipeline's plugins logged, oldest first.
    pub(crate) fn plugin_logs(&self, tenant: &str, name: &str, n: usize) -> Result<Vec<super::logs::Line>, ApiError> {
        self.record(tenant, name)?;
        Ok(super::logs::recent(&confine::run_name(tenant, name), n))
    }

    /// The last `n` dead letters (`late`: late events) of a pipeline, oldest first.
    pub(crate) fn tail(
        &self,
        tenant: &str,
        name: &str,
        late: bool,
        n: usize,
    ) -> Result<Vec<serde_json::Value>, ApiError> {
        let key: Key = (tenant.to_string(), name.to_string());
        let text = self.pipeline_text(tenant, name)?;
        let (dead, late_path) = self.side_outputs(&key, &text);
        let path = if late { late_path } else { Some(dead) };
        Ok(path.map_or(Vec::new(), |p| last_lines(&p, n.min(limits::MAX_TAIL_LINES))))
    }
}

impl Service {
    /// The tenant's pipelines in the Prometheus text format: engine gauges from each one's last
    /// progress record, and its plugins' counters (from the same record, cumulative).
    pub(crate) fn metrics(&self, tenant: &str) -> String {
        use std::fmt::Write;
        type Get = fn(&serde_json::Value, i64) -> Option<f64>;
        let gauges: [(&str, &str, Get); 10] = [
            ("weir_pipeline_input_rows_per_second", "Rows read per second, over the last batch's interval.", |p, _| {
                p["inputRowsPerSecond"].as_f64()
            }),
            ("weir_pipeline_processed_rows_per_second", "Rows per second of the last batch's own duration.", |p, _| {
                p["processedRowsPerSecond"].as_f64()
            }),
            ("weir_pipeline_batch_duration_seconds", "The last batch's duration.", |p, _| {
                Some(p["durationMs"]["totalMs"].as_f64()? / 1e3)
            }),
            ("weir_pipeline_watermark_ms", "The watermark, epoch milliseconds.", |p, _| p["watermark"].as_f64()),
            ("weir_pipeline_watermark_lag_seconds", "Wall-clock time less the watermark.", |p, now| {
                Some((now - p["watermark"].as_i64()?) as f64 / 1e3)
            }),
            ("weir_pipeline_state_keys", "Keys in the pipeline's state.", |p, _| p["stateKeys"].as_f64()),
            ("weir_pipeline_state_bytes", "The state store's size, estimated by RocksDB.", |p, _| {
                p["stateBytes"].as_f64()
            }),
            (
                "weir_pipeline_source_lag_records",
                "Records on the source past the last batch (Kafka consumer lag).",
                |p, _| {
                    Some(
                        p["sources"]
                            .as_array()?
                            .iter()
                            .flat_map(|s| s["lag"].as_object().into_iter().flatten())
                            .filter_map(|(_, v)| v.as_f64())
                            .sum(),
                    )
                },
            ),
            ("weir_pipeline_batch_late_events", "Late events in the last batch.", |p, _| p["numLateEvents"].as_f64()),
            ("weir_pipeline_batch_dead_letters", "Dead letters in the last batch.", |p, _| {
                p["numDeadLetters"].as_f64()
            }),
        ];
        let names: Vec<String> = {
            let r = self.registry();
            r.tenants.get(tenant).map_or(Vec::new(), |t| t.pipelines.keys().cloned().collect())
        };
        let last: Vec<(String, serde_json::Value)> = names
            .into_iter()
            .filter_map(|n| {
                let p = self.supervisor.recent(&(tenant.to_string(), n.clone())).since(0, 1).pop()?;
                Some((n, serde_json::from_str(&p.1).ok()?))
            })
            .collect();
        let now = now_ms();
        let mut out = String::new();
        for (name, help, get) in gauges {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} gauge");
            for (pipeline, p) in &last {
                if let Some(v) = get(p, now) {
                    let _ = writeln!(out, "{name}{{pipeline=\"{pipeline}\"}} {v}");
                }
            }
        }
        let counters = [
            ("calls", "Calls into the plugin."),
            ("errors", "Record errors reported and calls failed."),
            ("fuel", "Fuel burnt."),
            ("memoryHighWaterBytes", "Largest linear memory of any instance."),
        ];
        for (field, help) in counters {
            let name = format!(
                "weir_plugin_{}",
                field
                    .chars()
                    .flat_map(|c| if c.is_ascii_uppercase() { vec!['_', c.to_ascii_lowercase()] } else { vec![c] })
                    .collect::<String>()
            );
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} gauge");
            for (pipeline, p) in &last {
                for (stage, m) in p["plugins"].as_object().into_iter().flatten() {
                    if let Some(v) = m[field].as_f64() {
                        let stage = stage.replace(['\\', '"', '\n'], "_");
                        let _ = writeln!(out, "{name}{{pipeline=\"{pipeline}\",stage=\"{stage}\"}} {v}");
                    }
                }
            }
        }
        out
    }
}

fn plugin_view(name: &str, p: &PluginRecord) -> serde_json::Value {
    serde_json::json!({"name": name, "digest": p.digest, "bytes": p.bytes, "roles": p.roles, "uploaded_ms": p.uploaded_ms})
}

/// `path`'s real location if it exists and is inside `area` (through no link that leaves it).
fn inside(area: &Path, path: &Path) -> Option<PathBuf> {
    let real_area = std::fs::canonicalize(area).ok()?;
    let real = std::fs::canonicalize(path).ok()?;
    real.starts_with(&real_area).then_some(real)
}

/// The last `n` JSON lines of a side-output file (read from its last [`limits::TAIL_BYTES`]).
fn last_lines(path: &Path, n: usize) -> Vec<serde_json::Value> {
    use std::io::{Read, Seek, SeekFrom};
    let Ok(mut f) = crate::own_files::open(path, std::fs::OpenOptions::new().read(true)) else { return Vec::new() };
    let len = f.metadata().map_or(0, |m| m.len());
    let from = len.saturating_sub(limits::TAIL_BYTES);
    let mut buf = Vec::new();
    if f.seek(SeekFrom::Start(from)).and_then(|_| f.take(limits::TAIL_BYTES).read_to_end(&mut buf)).is_err() {
        return Vec::new();
    }
    let text = String::from_utf8_lossy(&buf);
    let mut lines: Vec<_> =
        text.lines().skip(usize::from(from > 0)).filter_map(|l| serde_json::from_str(l).ok()).collect();
    let skip = lines.len().saturating_sub(n);
    lines.drain(..skip);
    lines
}
