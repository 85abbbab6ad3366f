//! The `processor` role's handle: the calls a keyed processor makes (`process`, `on-timers`,
//! `state-version`, `migrate`), each checked against the contract and the stage's limits before
//! the operator may apply what came back. What a key's result may hold is bounded here, in one
//! place: its state by `limits.max_state_kb`, the timers it sets in one call by
//! `limits.max_timers` (the operator checks the key's total against the same limit), its rows
//! by being valid JSON objects, since they go on to the sink.

use super::bindings::exports::weir::plugin::processor;
use super::error::{PluginError, WitError};
use super::limiter::LimitExceeded;
use super::metrics::bump;
use super::roles::{ProcessorRole, check_count, check_size, contract};
use super::sandbox::Sandbox;
use super::{EventBatch, Runtime, StageSpec};
use crate::json;

pub use processor::{Clock, KeyResult, Keyed, TimeDomain, Timer};

/// What the keyed-state operator needs of a processor: the Wasm [`Processor`], or host code in
/// tests.
pub trait ProcessFns: Send {
    /// One result per key: key `k`'s events are `events[members[j]]`, `j` in its group.
    fn process(
        &mut self,
        clock: Clock,
        keys: &[Keyed],
        events: &EventBatch,
        members: &[u32],
        group_ends: &[u32],
    ) -> Result<Vec<KeyResult>, PluginError>;
    /// One result per key: key `k`'s fired timers are `timers[..]` in its group.
    fn on_timers(
        &mut self,
        clock: Clock,
        keys: &[Keyed],
        timers: &[Timer],
        timer_ends: &[u32],
    ) -> Result<Vec<KeyResult>, PluginError>;
    fn stage(&self) -> &str;
    /// Bytes one call may hand back: callers cut their calls well below.
    fn max_call_bytes(&self) -> usize {
        usize::MAX
    }
    /// Timers one key may have set at once (`limits.max_timers`).
    fn max_timers(&self) -> usize {
        super::spec::DEFAULT_MAX_TIMERS
    }
    /// What the stage may hold, all keys together (`limits.max_stage_timers`,
    /// `limits.max_stage_state_mb`).
    fn stage_budget(&self) -> super::spec::StageBudget {
        super::spec::StageBudget::default()
    }
    fn state_version(&mut self) -> Result<u32, PluginError> {
        Ok(1)
    }
    fn migrate(&mut self, from: u32, _states: &[Vec<u8>]) -> Result<Vec<Vec<u8>>, PluginError> {
        Err(PluginError::Failed {
            stage: self.stage().to_string(),
            error: WitError::Unsupported(format!("no migration from state version {from}")),
        })
    }
}

/// A processor stage.
pub struct Processor(Sandbox<ProcessorRole>);

impl Processor {
    pub fn new(runtime: &Runtime, spec: StageSpec) -> Result<Self, PluginError> {
        Sandbox::new(runtime, spec).map(Self)
    }

    /// Checks one call's results: one per key, each within the limits and the contract.
    fn accept(&self, what: &str, keys: usize, out: Vec<KeyResult>) -> Result<Vec<KeyResult>, PluginError> {
        let stage = self.0.stage();
        check_count(stage, what, out.len(), keys)?;
        let limits = self.0.limits();
        let timer_bytes = |r: &KeyResult| (r.set_timers.len() + r.delete_timers.len()) * size_of::<Timer>();
        let bytes: usize = out
            .iter()
            .map(|r| r.rows.len() + r.state.as_ref().map_or(0, Vec::len) + r.times.len() * 8 + timer_bytes(r))
            .sum();
        check_size(&self.0, bytes)?;
        for r in &out {
            if let Some(s) = &r.state
                && s.len() > limits.max_state
            {
                let limit = LimitExceeded::State { bytes: s.len(), max: limits.max_state };
                return Err(PluginError::Limit { stage: stage.to_string(), limit });
            }
            if r.set_timers.len() > limits.max_timers {
                let limit = LimitExceeded::Timers { max: limits.max_timers };
                return Err(PluginError::Limit { stage: stage.to_string(), limit });
            }
            check_rows(stage, r)?;
        }
        bump(&self.0.metrics().records_out, out.iter().map(|r| r.times.len() as u64).sum());
        Ok(out)
    }
}

/// A key's rows: as many times as rows, offsets that fit the data, each one a JSON object.
fn check_rows(stage: &str, r: &KeyResult) -> Result<(), PluginError> {
    let ends_ok = r.row_ends.windows(2).all(|w| w[0] <= w[1])
        && r.row_ends.last().map_or(r.rows.is_empty(), |&e| e as usize == r.rows.len());
    if r.times.len() != r.row_ends.len() || !ends_ok {
        return Err(contract(stage, "returned rows whose offsets or times do not match their data".into()));
    }
    // The rows go to the sink from here: each one checked in full, as pass-through rows are.
    for (i, row) in crate::columns::items(&r.rows, &r.row_ends).enumerate() {
        json::check_object(row)
            .map_err(|why| contract(stage, format!("returned row {i}, which is not one JSON object: {why}")))?;
    }
    Ok(())
}

impl ProcessFns for Processor {
    fn process(
        &mut self,
        clock: Clock,
        keys: &[Keyed],
        events: &EventBatch,
        members: &[u32],
        group_ends: &[u32],
    ) -> Result<Vec<KeyResult>, PluginError> {
        self.0.recycle_if_due();
        let out = self.0.call(|g, s| g.call_process(s, clock, keys, events, members, group_ends))?;
        bump(&self.0.metrics().records_in, members.len() as u64);
        self.accept("process", keys.len(), out)
    }

    fn on_timers(
        &mut self,
        clock: Clock,
        keys: &[Keyed],
        timers: &[Timer],
        timer_ends: &[u32],
    ) -> Result<Vec<KeyResult>, PluginError> {
        self.0.recycle_if_due();
        let out = self.0.call(|g, s| g.call_on_timers(s, clock, keys, timers, timer_ends))?;
        self.accept("on-timers", keys.len(), out)
    }

    fn stage(&self) -> &str {
        self.0.stage()
    }

    fn max_call_bytes(&self) -> usize {
        self.0.limits().max_output
    }

    fn max_timers(&self) -> usize {
        self.0.limits().max_timers
    }

    fn stage_budget(&self) -> super::spec::StageBudget {
        self.0.limits().stage
    }

    fn state_version(&mut self) -> Result<u32, PluginError> {
        self.0.call(|g, s| g.call_state_version(s).map(Ok))
    }

    fn migrate(&mut self, from: u32, states: &[Vec<u8>]) -> Result<Vec<Vec<u8>>, PluginError> {
        let out = self.0.call(|g, s| g.call_migrate(s, from, states))?;
        check_count(self.0.stage(), "migrate", out.len(), states.len())?;
        let max = self.0.limits().max_state;
        if let Some(s) = out.iter().find(|s| s.len() > max) {
            let limit = LimitExceeded::State { bytes: s.len(), max };
            return Err(PluginError::Limit { stage: self.0.stage().to_string(), limit });
        }
        Ok(out)
    }
}
