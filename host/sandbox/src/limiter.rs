//! The limits a call runs under, enforced while it runs, each ending the call with a typed
//! [`LimitExceeded`] that says which limit and its key in the pipeline file.
//!
//! - memory and tables: [`MemoryCap`], wasmtime's `ResourceLimiter`, refuses growth past the cap
//!   with a trap that carries the limit (not a failed `memory.grow` the guest might misreport);
//! - the deadline: the epoch callback (`sandbox.rs`) and waits in host calls (`waits.rs`);
//! - fuel: wasmtime's own trap, named here;
//! - output: what the call hands back, checked by the role handles (`roles.rs`) and bounded while
//!   wasmtime copies it out (its hostcall fuel, set per call to twice `limits.max_output_mb`:
//!   `COPY_BUDGET_FACTOR` in `sandbox.rs`, since wasmtime charges each item at its host-side size);
//! - disk: the filesystem wrapper (`disk.rs`);
//! - a processor's state and timers per key: its handle (`processor.rs`) and the keyed-state
//!   operator, which counts a key's timers.

use std::sync::Arc;
use std::time::Duration;

use wasmtime::ResourceLimiter;

use super::metrics::PluginMetrics;
use super::spec::{MAX_INSTANCES, MAX_MEMORIES, MAX_TABLE_ELEMENTS, MAX_TABLES};

/// A limit a call hit: the call's error (its trap carries it), and the message the user reads.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LimitExceeded {
    #[error("call exceeded its deadline of {0:?} (limits.call_timeout)")]
    Deadline(Duration),
    #[error("call exceeded its deadline of {0:?} waiting in the host (limits.call_timeout)")]
    DeadlineWaiting(Duration),
    #[error("memory limit of {} MiB reached (limits.max_memory_mb)", .0 >> 20)]
    Memory(usize),
    #[error("table limit of {0} elements reached")]
    Table(usize),
    #[error("call used up its fuel of {0} (limits.fuel)")]
    Fuel(u64),
    #[error("output of {bytes} bytes exceeds limits.max_output_mb ({} MiB)", .max >> 20)]
    Output { bytes: usize, max: usize },
    #[error("the call returned more data than limits.max_output_mb ({} MiB) lets the host copy", .0 >> 20)]
    Copy(usize),
    #[error("{dir}: disk limit of {} MiB reached (limits.max_disk_mb)", .max >> 20)]
    Disk { dir: String, max: u64 },
    #[error("a key's state of {bytes} bytes exceeds limits.max_state_kb ({} KiB)", .max >> 10)]
    State { bytes: usize, max: usize },
    #[error("a key would have more than {max} timers set (limits.max_timers)")]
    Timers { max: usize },
    #[error("the stage would have more than {max} timers set, all keys together (limits.max_stage_timers)")]
    StageTimers { max: u64 },
    #[error("the stage's state would pass {} MiB, all keys together (limits.max_stage_state_mb)", .max >> 20)]
    StageState { max: u64 },
}

/// Caps linear memory and tables; every refusal traps with the limit it hit.
pub struct MemoryCap {
    pub max: usize,
    pub metrics: Arc<PluginMetrics>,
}

impl ResourceLimiter for MemoryCap {
    fn memory_growing(&mut self, _current: usize, desired: usize, _max: Option<usize>) -> wasmtime::Result<bool> {
        if desired > self.max {
            return Err(LimitExceeded::Memory(self.max).into());
        }
        self.metrics.memory_high_water.fetch_max(desired as u64, std::sync::atomic::Ordering::Relaxed);
        Ok(true)
    }

    fn table_growing(&mut self, _current: usize, desired: usize, _max: Option<usize>) -> wasmtime::Result<bool> {
        if desired > MAX_TABLE_ELEMENTS {
            return Err(LimitExceeded::Table(MAX_TABLE_ELEMENTS).into());
        }
        Ok(true)
    }

    fn instances(&self) -> usize {
        MAX_INSTANCES
    }

    fn tables(&self) -> usize {
        MAX_TABLES
    }

    fn memories(&self) -> usize {
        MAX_MEMORIES
    }
}
