//! What a plugin stage runs under: its [`StageSpec`], and every limit as a named constant with
//! its key in the pipeline file, its default and its accepted range. [`LimitsFile`] is the
//! `limits` table as written and [`LimitsFile::validate`] the one check of it; the pipeline
//! validator calls it for every stage.
//!
//! Defaults are safe for untrusted code. The ranges stop values that would crash the host or make
//! a limit meaningless (a zero-length deadline, an `Instant` overflow, an output cap past what the
//! batch offsets can address).

use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;

use super::grants::Grants;
use weir_types::Dur;

/// Everything the host needs to run one plugin stage.
#[derive(Debug, Clone)]
pub struct StageSpec {
    /// `pipeline/stage (plugin file)`, used in every log line and error.
    pub name: String,
    pub component: PathBuf,
    /// The stage's `config` table, as JSON.
    pub config_json: String,
    pub grants: Grants,
    pub limits: Limits,
}

/// `limits.call_timeout`: wall-clock time one call may take before it traps, waits in the host
/// included.
pub const DEFAULT_CALL_TIMEOUT: Duration = Duration::from_secs(10);
/// The shortest `limits.call_timeout`: the epoch ticks every 10 ms, so a shorter deadline could
/// not be kept anyway.
pub const MIN_CALL_TIMEOUT: Duration = Duration::from_millis(10);
/// The longest `limits.call_timeout`.
pub const MAX_CALL_TIMEOUT: Duration = Duration::from_secs(3_600);

/// `limits.max_memory_mb`: linear memory an instance may grow to.
pub const DEFAULT_MAX_MEMORY_MB: u64 = 512;
/// A 32-bit linear memory cannot grow past 4 GiB.
pub const MAX_MAX_MEMORY_MB: u64 = 4_096;

/// `limits.max_output_mb`: bytes one call may hand back to the host, everything counted (rows,
/// keys, accumulators, error messages). It is also the budget wasmtime copies out of the guest
/// per call (its "hostcall fuel"), so a plugin cannot make the host allocate more than this per
/// call, however it lays its results out.
pub const DEFAULT_MAX_OUTPUT_MB: u64 = 32;
/// Batches address their bytes with 32-bit offsets; 1 GiB keeps every call's data well inside.
pub const MAX_MAX_OUTPUT_MB: u64 = 1_024;

/// `limits.recycle_after_calls`: calls an instance serves before it is replaced by a fresh one.
/// Linear memory never shrinks, so a plugin that leaks (or only fragments its heap) would
/// otherwise creep up to its memory cap; a fresh instance starts from its initial memory again.
pub const DEFAULT_RECYCLE_AFTER_CALLS: u64 = 1_000;
pub const MAX_RECYCLE_AFTER_CALLS: u64 = 1_000_000_000;

/// `limits.fuel`: Wasm instructions (roughly) one call may burn, a deterministic budget unlike
/// the deadline. Unset: unmetered.
pub const MAX_FUEL: u64 = u64::MAX >> 1;

/// `limits.max_disk_mb`: bytes a plugin may have in each directory it may write, counting what
/// was there when the stage started and everything it writes; deletes give room back.
pub const DEFAULT_MAX_DISK_MB: u64 = 1_024;
pub const MAX_MAX_DISK_MB: u64 = 1 << 20;

/// `limits.max_state_kb`: bytes of state a processor may keep per key. A key's state crosses
/// into the sandbox on every call for that key, so one huge state would make every batch slow.
pub const DEFAULT_MAX_STATE_KB: u64 = 1_024;
pub const MAX_MAX_STATE_KB: u64 = 64 << 10;

/// `limits.max_timers`: timers a processor may have set per key at once. Timers live in the
/// state store; without a cap one key could fill the disk with them.
pub const DEFAULT_MAX_TIMERS: usize = 1_000;
pub const MAX_MAX_TIMERS: u64 = 1_000_000;

/// `limits.max_stage_timers`: timers a processor stage may have set at once, all its keys
/// together. The per-key cap alone lets a stage that sets timers on every key it sees hold
/// millions, and each one set costs host memory (a staged write) until the batch that set it
/// commits. A key whose result would pass it is refused whole: its events become dead letters
/// naming this limit, and the stage runs on. The default keeps a fan-out's memory within a
/// small multiple of the same stage's without timers (`docs/security.md`).
pub const DEFAULT_MAX_STAGE_TIMERS: u64 = 100_000;
pub const MAX_MAX_STAGE_TIMERS: u64 = 1_000_000_000;

/// `limits.max_stage_state_mb`: bytes of plugin state a processor stage may keep, all its keys
/// together. It bounds the checkpoint a stage can grow while it runs, which `weir serve`'s
/// `quotas.max_state_mb` also bounds for the tenant; a key whose new state would pass it is
/// refused whole, as for [`DEFAULT_MAX_STAGE_TIMERS`].
pub const DEFAULT_MAX_STAGE_STATE_MB: u64 = 1_024;
pub const MAX_MAX_STAGE_STATE_MB: u64 = 1 << 20;

/// `limits.cpu_weight`: the stage's weight in the fair share of CPU between pipelines. A call
/// that runs past its fair slice while other pipelines share the process sleeps three ticks for
/// each tick it runs, divided by its weight: weight 1 gets a quarter of a core, 3 a half.
/// `weir serve` sets it from the tenant's `quotas.cpu_weight` and refuses it in a tenant's file.
pub const DEFAULT_CPU_WEIGHT: u32 = 1;
pub const MAX_CPU_WEIGHT: u64 = 16;

/// Bytes of `host.log` messages one call may write; past it, messages are dropped and counted.
pub const LOG_BYTES_PER_CALL: usize = 16 << 10;
/// Bytes of `host.log` messages a stage may write per minute; past it, messages are dropped and
/// counted.
pub const LOG_BYTES_PER_MINUTE: usize = 1 << 20;

/// Bytes of one error message (a record error, a failure) the host keeps; the rest is cut, so a
/// plugin cannot make one record's dead letter large.
pub const MAX_ERROR_MESSAGE: usize = 1 << 10;

/// Bytes of a plugin's stderr kept to explain a trap (a Rust panic message lands there). A
/// plugin that writes more has its further writes fail; stdout goes nowhere.
pub const STDERR_CAPTURE: usize = 16 << 10;

/// Elements a plugin's tables may grow to (function references, mostly).
pub const MAX_TABLE_ELEMENTS: usize = 100_000;
/// A component is a handful of core instances, tables and memories; a store holds one component.
/// These caps stop a component that declares thousands from getting them.
pub const MAX_INSTANCES: usize = 64;
pub const MAX_TABLES: usize = 64;
pub const MAX_MEMORIES: usize = 16;

/// A stage's limits, validated.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub call_timeout: Duration,
    /// Bytes.
    pub max_memory: usize,
    /// Bytes.
    pub max_output: usize,
    pub recycle_after_calls: u64,
    pub fuel: Option<u64>,
    /// Bytes, per writable directory.
    pub max_disk: u64,
    /// Bytes of a processor's state per key.
    pub max_state: usize,
    /// A processor's timers per key.
    pub max_timers: usize,
    /// A processor stage's timers and state, all keys together.
    pub stage: StageBudget,
    pub cpu_weight: u32,
}

/// What a processor stage may hold, all keys together (`limits.max_stage_timers`,
/// `limits.max_stage_state_mb`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StageBudget {
    pub timers: u64,
    /// Bytes of plugin state.
    pub state_bytes: u64,
}

impl Default for StageBudget {
    fn default() -> Self {
        Self { timers: DEFAULT_MAX_STAGE_TIMERS, state_bytes: DEFAULT_MAX_STAGE_STATE_MB << 20 }
    }
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            call_timeout: DEFAULT_CALL_TIMEOUT,
            max_memory: mb(DEFAULT_MAX_MEMORY_MB),
            max_output: mb(DEFAULT_MAX_OUTPUT_MB),
            recycle_after_calls: DEFAULT_RECYCLE_AFTER_CALLS,
            fuel: None,
            max_disk: DEFAULT_MAX_DISK_MB << 20,
            max_state: (DEFAULT_MAX_STATE_KB << 10) as usize,
            max_timers: DEFAULT_MAX_TIMERS,
            stage: StageBudget::default(),
            cpu_weight: DEFAULT_CPU_WEIGHT,
        }
    }
}

fn mb(n: u64) -> usize {
    usize::try_from(n << 20).unwrap_or(usize::MAX)
}

/// A stage's `limits` table, as written.
#[derive(Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LimitsFile {
    call_timeout: Option<Dur>,
    max_memory_mb: Option<u64>,
    max_output_mb: Option<u64>,
    recycle_after_calls: Option<u64>,
    fuel: Option<u64>,
    max_disk_mb: Option<u64>,
    max_state_kb: Option<u64>,
    max_timers: Option<u64>,
    max_stage_timers: Option<u64>,
    max_stage_state_mb: Option<u64>,
    cpu_weight: Option<u64>,
}

/// A limit out of its range: the key under `limits` and what is allowed.
#[derive(Debug, PartialEq, Eq)]
pub struct BadLimit {
    pub key: &'static str,
    pub message: String,
}

fn in_range(key: &'static str, v: u64, min: u64, max: u64) -> Result<u64, BadLimit> {
    if (min..=max).contains(&v) {
        Ok(v)
    } else {
        Err(BadLimit { key, message: format!("{v}: allowed {min} to {max}") })
    }
}

impl LimitsFile {
    /// The limits, each unset one at its default; the first out of its range is refused.
    pub fn validate(self) -> Result<Limits, BadLimit> {
        let d = Limits::default();
        let call_timeout = match self.call_timeout {
            None => d.call_timeout,
            Some(Dur(t)) if (MIN_CALL_TIMEOUT..=MAX_CALL_TIMEOUT).contains(&t) => t,
            Some(Dur(t)) => {
                return Err(BadLimit {
                    key: "call_timeout",
                    message: format!(
                        "{t:?}: allowed {} to {}",
                        humantime::format_duration(MIN_CALL_TIMEOUT),
                        humantime::format_duration(MAX_CALL_TIMEOUT)
                    ),
                });
            }
        };
        let max_memory = match self.max_memory_mb {
            None => d.max_memory,
            Some(v) => mb(in_range("max_memory_mb", v, 1, MAX_MAX_MEMORY_MB)?),
        };
        let max_output = match self.max_output_mb {
            None => d.max_output,
            Some(v) => mb(in_range("max_output_mb", v, 1, MAX_MAX_OUTPUT_MB)?),
        };
        let recycle_after_calls = match self.recycle_after_calls {
            None => d.recycle_after_calls,
            Some(v) => in_range("recycle_after_calls", v, 1, MAX_RECYCLE_AFTER_CALLS)?,
        };
        let fuel = self.fuel.map(|v| in_range("fuel", v, 1, MAX_FUEL)).transpose()?;
        let max_disk = match self.max_disk_mb {
            None => d.max_disk,
            Some(v) => in_range("max_disk_mb", v, 1, MAX_MAX_DISK_MB)? << 20,
        };
        let max_state = match self.max_state_kb {
            None => d.max_state,
            Some(v) => (in_range("max_state_kb", v, 1, MAX_MAX_STATE_KB)? << 10) as usize,
        };
        let max_timers = match self.max_timers {
            None => d.max_timers,
            Some(v) => in_range("max_timers", v, 1, MAX_MAX_TIMERS)? as usize,
        };
        let stage = StageBudget {
            timers: match self.max_stage_timers {
                None => d.stage.timers,
                Some(v) => in_range("max_stage_timers", v, 1, MAX_MAX_STAGE_TIMERS)?,
            },
            state_bytes: match self.max_stage_state_mb {
                None => d.stage.state_bytes,
                Some(v) => in_range("max_stage_state_mb", v, 1, MAX_MAX_STAGE_STATE_MB)? << 20,
            },
        };
        let cpu_weight = match self.cpu_weight {
            None => d.cpu_weight,
            Some(v) => in_range("cpu_weight", v, 1, MAX_CPU_WEIGHT)? as u32,
        };
        Ok(Limits {
            call_timeout,
            max_memory,
            max_output,
            recycle_after_calls,
            fuel,
            max_disk,
            max_state,
            max_timers,
            stage,
            cpu_weight,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(toml: &str) -> Result<Limits, BadLimit> {
        toml::from_str::<LimitsFile>(toml).unwrap().validate()
    }

    #[test]
    fn unset_limits_are_the_defaults_and_set_ones_are_checked_against_their_range() {
        let l = limits("").unwrap();
        assert_eq!((l.call_timeout, l.max_output), (DEFAULT_CALL_TIMEOUT, 32 << 20));
        assert_eq!(limits("call_timeout = \"500us\"").unwrap_err().key, "call_timeout");
        assert_eq!(limits("call_timeout = \"500000000000 years\"").unwrap_err().key, "call_timeout");
        assert_eq!(
            limits("max_output_mb = 4096").unwrap_err(),
            BadLimit { key: "max_output_mb", message: "4096: allowed 1 to 1024".into() }
        );
        assert_eq!(limits("max_memory_mb = 0").unwrap_err().key, "max_memory_mb");
        assert_eq!(limits("max_disk_mb = 5").unwrap().max_disk, 5 << 20);
        assert_eq!(limits("fuel = 0").unwrap_err().key, "fuel");
        assert_eq!(limits("max_state_kb = 2").unwrap().max_state, 2 << 10);
        assert_eq!(limits("max_state_kb = 0").unwrap_err().key, "max_state_kb");
        assert_eq!(limits("max_timers = 5").unwrap().max_timers, 5);
        assert_eq!(limits("max_timers = 2000000").unwrap_err().key, "max_timers");
        assert_eq!(limits("max_stage_timers = 5").unwrap().stage.timers, 5);
        assert_eq!(limits("max_stage_timers = 0").unwrap_err().key, "max_stage_timers");
        assert_eq!(limits("max_stage_state_mb = 2").unwrap().stage.state_bytes, 2 << 20);
        assert_eq!(limits("max_stage_state_mb = 2000000").unwrap_err().key, "max_stage_state_mb");
        assert_eq!(limits("").unwrap().cpu_weight, 1);
        assert_eq!(limits("cpu_weight = 3").unwrap().cpu_weight, 3);
        assert_eq!(limits("cpu_weight = 17").unwrap_err().key, "cpu_weight");
    }
}
