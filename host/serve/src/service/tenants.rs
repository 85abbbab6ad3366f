//! Tenants and their tokens: an administrator creates a tenant (with its quotas) and mints or
//! revokes its tokens; a token is shown once, and only its hash is kept.

use super::*;

impl Service {
    pub fn create_tenant(&self, caller: &Caller, req: NewTenant) -> Result<serde_json::Value, ApiError> {
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

    pub fn tenants(&self) -> serde_json::Value {
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

    pub fn mint_token(&self, caller: &Caller, tenant: &str) -> Result<serde_json::Value, ApiError> {
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

    pub fn revoke_token(&self, caller: &Caller, id: &str) -> Result<(), ApiError> {
        self.change(|r| r.tokens.remove(id).map(drop).ok_or_else(|| ApiError::not_found("token")))?;
        self.audit(caller, "revoke-token", id);
        Ok(())
    }
}
