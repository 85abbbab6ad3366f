//! A tenant's data area: files a pipeline reads and writes, by relative path, never leaving the
//! area through a name or a link.

use std::path::{Path, PathBuf};

use super::*;

impl Service {
    pub fn put_file(
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

    pub fn get_file(&self, tenant: &str, path: &str) -> Result<Vec<u8>, ApiError> {
        check_file_path(path)?;
        let area = self.files(tenant);
        let real = inside(&area, &area.join(path)).ok_or_else(|| ApiError::not_found("file"))?;
        std::fs::read(real).map_err(|_| ApiError::not_found("file"))
    }

    /// Every file in the tenant's data area (or under `prefix`), with its size.
    pub fn list_files(&self, tenant: &str, prefix: Option<&str>) -> Result<serde_json::Value, ApiError> {
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
}

/// `path`'s real location if it exists and is inside `area` (through no link that leaves it).
fn inside(area: &Path, path: &Path) -> Option<PathBuf> {
    let real_area = std::fs::canonicalize(area).ok()?;
    let real = std::fs::canonicalize(path).ok()?;
    real.starts_with(&real_area).then_some(real)
}
