//! A tenant's pipelines: confined, checked against the quotas, saved, started and stopped by the
//! supervisor; their status, progress, plugin logs and side outputs as the API shows them.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::*;

impl Service {
    /// The tenant's pipeline file confined (`confine.rs`), or `400` naming the key.
    pub(super) fn scope_confine(&self, tenant: &str, name: &str, text: &str) -> Result<Confined, ApiError> {
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
    pub fn put_pipeline(
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
        schemas_fit(&confined.pipeline)?;
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
    pub(super) fn run(&self, key: &Key) -> Result<Started, ApiError> {
        let text = self.record(&key.0, &key.1)?.text;
        let confined = self.scope_confine(&key.0, &key.1, &text)?;
        self.start_confined(key, confined).map_err(|e| ApiError::conflict(format!("the pipeline cannot start: {e}")))
    }

    pub fn act(&self, caller: &Caller, tenant: &str, name: &str, action: Action) -> Result<PipelineView, ApiError> {
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
    pub fn delete_pipeline(
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
        crate::logs::forget(&confine::run_name(tenant, name));
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

    pub fn pipelines(&self, tenant: &str) -> Result<serde_json::Value, ApiError> {
        let names: Vec<String> = {
            let r = self.registry();
            r.tenants.get(tenant).map_or(Vec::new(), |t| t.pipelines.keys().cloned().collect())
        };
        let list = names.iter().map(|n| self.pipeline(tenant, n)).collect::<Result<Vec<_>, _>>()?;
        Ok(serde_json::json!({ "pipelines": list }))
    }

    pub fn pipeline(&self, tenant: &str, name: &str) -> Result<PipelineView, ApiError> {
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

    pub fn pipeline_text(&self, tenant: &str, name: &str) -> Result<String, ApiError> {
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
    pub fn progress(&self, tenant: &str, name: &str) -> Result<Arc<crate::supervisor::Recent>, ApiError> {
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
    pub fn plugin_logs(&self, tenant: &str, name: &str, n: usize) -> Result<Vec<crate::logs::Line>, ApiError> {
        self.record(tenant, name)?;
        Ok(crate::logs::recent(&confine::run_name(tenant, name), n))
    }

    /// The last `n` dead letters (`late`: late events) of a pipeline, oldest first.
    pub fn tail(&self, tenant: &str, name: &str, late: bool, n: usize) -> Result<Vec<serde_json::Value>, ApiError> {
        let key: Key = (tenant.to_string(), name.to_string());
        let text = self.pipeline_text(tenant, name)?;
        let (dead, late_path) = self.side_outputs(&key, &text);
        let path = if late { late_path } else { Some(dead) };
        Ok(path.map_or(Vec::new(), |p| last_lines(&p, n.min(limits::MAX_TAIL_LINES))))
    }
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

/// The pipeline's schemas against its registry, before it is deployed: an incompatible schema
/// is refused under the key that names it (`docs/formats.md`).
fn schemas_fit(pipeline: &crate::pipeline::Pipeline) -> Result<(), ApiError> {
    use weir_engine::schemas::{SchemaError, check};
    check(pipeline).map_err(|e| {
        let field = match &e {
            SchemaError::Sink(_) => "sink.schema".to_string(),
            SchemaError::Reader { stage, .. } => {
                let key = stage.split_once('/').map_or(stage.as_str(), |(_, rest)| rest);
                format!("{}.config.reader_version", key.split(" (").next().unwrap_or(key))
            }
        };
        if e.is_config() {
            ApiError::bad(field, e.to_string())
        } else {
            // The registry did not answer: nothing is wrong with the file; try again later.
            ApiError::new(axum::http::StatusCode::SERVICE_UNAVAILABLE, e.to_string())
                .fix("deploy again once the schema registry answers")
        }
    })
}
