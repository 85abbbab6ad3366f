//! `quotas.max_state_mb` while pipelines run. A start is refused when the tenant's checkpoints
//! already hold more (`pipelines.rs`); a pipeline that grows them past it while it runs is
//! caught here, every [`STATE_QUOTA_CHECK`]: each running pipeline of that tenant is stopped
//! after its current batch commits, and shows as failed with the quota and the fix. Other
//! tenants' pipelines are not touched. Nothing is lost: a start resumes a stopped one from its
//! checkpoint, once the tenant is under its quota again.

use std::sync::Weak;

use super::Service;
use crate::limits::STATE_QUOTA_CHECK;
use crate::supervisor::{Key, RunState};

/// Checks the quotas every [`STATE_QUOTA_CHECK`] for as long as the service lives, on a thread
/// of its own.
pub(super) fn watch(service: Weak<Service>) {
    let spawned = std::thread::Builder::new().name("weir-quota".into()).spawn(move || {
        loop {
            std::thread::sleep(STATE_QUOTA_CHECK);
            let Some(s) = service.upgrade() else { return };
            s.enforce_state_quotas();
        }
    });
    if let Err(e) = spawned {
        tracing::warn!("the state quota is checked only at starts: cannot start its thread: {e}");
    }
}

impl Service {
    /// Stops the running pipelines of every tenant whose checkpoints hold more than its
    /// `quotas.max_state_mb`.
    fn enforce_state_quotas(&self) {
        let tenants: Vec<(String, u64, Vec<Key>)> = {
            let r = self.registry();
            r.tenants
                .iter()
                .map(|(t, ten)| {
                    let keys = ten.pipelines.keys().map(|n| (t.clone(), n.clone())).collect();
                    (t.clone(), ten.quotas.max_state_mb, keys)
                })
                .collect()
        };
        for (tenant, quota, keys) in tenants {
            let running: Vec<Key> = keys
                .into_iter()
                .filter(|k| matches!(self.supervisor.status(k).state, RunState::Running | RunState::Starting))
                .collect();
            if running.is_empty() {
                continue;
            }
            let used = crate::plugin::du(&self.tenant_dir(&tenant).join("checkpoints"));
            if used <= quota << 20 {
                continue;
            }
            let why = format!(
                "stopped: your pipelines' state holds {} MiB, over your quota of {quota} MiB (quotas.max_state_mb); \
                 delete a pipeline with its state (DELETE ...?state=true), or ask for a larger quota, then start it again",
                used >> 20
            );
            for key in running {
                tracing::warn!("pipeline {} of {}: {why}", key.1, key.0);
                self.supervisor.stop_failed(&key, why.clone());
            }
        }
    }
}
