//! A tenant's plugins: uploaded components, checked for the roles they play, kept by digest in
//! the store and named per tenant; one still used by a pipeline cannot be deleted.

use super::*;

impl Service {
    pub fn put_plugin(
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

    pub fn plugins(&self, tenant: &str) -> serde_json::Value {
        let r = self.registry();
        let list: Vec<_> =
            r.tenants.get(tenant).map_or(Vec::new(), |t| t.plugins.iter().map(|(n, p)| plugin_view(n, p)).collect());
        serde_json::json!({ "plugins": list })
    }

    pub fn plugin(&self, tenant: &str, name: &str) -> Result<serde_json::Value, ApiError> {
        let r = self.registry();
        let p = r.tenants.get(tenant).and_then(|t| t.plugins.get(name)).ok_or_else(|| ApiError::not_found("plugin"))?;
        Ok(plugin_view(name, p))
    }

    pub fn delete_plugin(&self, caller: &Caller, tenant: &str, name: &str) -> Result<(), ApiError> {
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
}

fn plugin_view(name: &str, p: &PluginRecord) -> serde_json::Value {
    serde_json::json!({"name": name, "digest": p.digest, "bytes": p.bytes, "roles": p.roles, "uploaded_ms": p.uploaded_ms})
}
