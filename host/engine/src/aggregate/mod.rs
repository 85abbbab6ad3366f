//! Windowed aggregation: accumulate a batch's events into per-(window, key) accumulators held in
//! the state store, and emit a row per window when the output mode says it leaves. One operator
//! per window kind, each a file: `panes.rs` (tumbling and sliding windows) and `sessions/`.
//! What they share lives here (grouping events by index for `accumulate`, the lateness bound,
//! migrating accumulators between plugin state versions) and in `emit.rs` (the `merge` and
//! `finish` calls when windows leave, under the failure policy).
//!
//! Both call the aggregator once per batch for all groups, never per event or per window, and
//! never copy a row to group it.
//!
//! A group (`scale/`) cuts the aggregation in two stages around a shuffle: `partials.rs` folds
//! each input task's batch into partial accumulators, and the same window operators, over
//! `merged.rs`, merge them into the windows ([`merging`]).

mod emit;
mod merged;
mod panes;
mod partials;
mod session_ends;
mod session_log;
mod sessions;

use crate::isolate::Policy;
use crate::operator::{Opened, Operator, OperatorError};
use crate::pipeline::{EventTime, Windowed};
use crate::plugin::AggregateFns;
use crate::state::StateStore;
use crate::window::WindowSpec;

/// The operator for a windowed aggregation, over `agg` (the Wasm aggregator, or a native one).
pub fn operator(w: &Windowed, time: &EventTime, agg: Box<dyn AggregateFns>, policy: Policy) -> Box<dyn Operator> {
    let lateness = time.allowed_lateness_ms;
    match w.window {
        WindowSpec::Panes { size, slide, offset } => {
            let panes = crate::window::Panes { size, slide, offset };
            Box::new(panes::PaneOperator::new(panes, lateness, w.output, agg, policy).with_tombstones(w.tombstones))
        }
        WindowSpec::Session { gap } => Box::new(sessions::SessionOperator::new(gap, lateness, w.output, agg, policy)),
    }
}

/// Stage 1 of a group's aggregation: each batch's partial accumulators, per (pane, key) or
/// (session, key), out as rows for the shuffle (`partials.rs`).
pub fn partials(w: &Windowed, agg: Box<dyn AggregateFns>) -> Box<dyn Operator> {
    Box::new(partials::Partials::new(w.window, agg))
}

/// Stage 2 of a group's aggregation: [`operator`] over partials, which it merges into its
/// windows with the aggregator's `merge` (`merged.rs`); everything else as in one process.
pub fn merging(w: &Windowed, time: &EventTime, agg: Box<dyn AggregateFns>, policy: Policy) -> Box<dyn Operator> {
    let agg = Box::new(merged::Merged(agg));
    let lateness = time.allowed_lateness_ms;
    match w.window {
        WindowSpec::Panes { .. } => operator(w, time, agg, policy),
        WindowSpec::Session { gap } => {
            Box::new(sessions::SessionOperator::new(gap, lateness, w.output, agg, policy).over_partials())
        }
    }
}

/// A window's result before `finish`: the accumulator and where it belongs.
#[derive(Debug, Clone, PartialEq, Eq)]
struct WindowAcc {
    start: i64,
    end: i64,
    key: Vec<u8>,
    acc: Vec<u8>,
}

/// Slice equality that skips `memcmp` for the common case of empty keys: `==` on two empty
/// slices still calls glibc's `bcmp`, and at once per event that call dominated the aggregate
/// step.
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && (a.is_empty() || a == b)
}

/// Lays out `members`/`group_ends` for `accumulate` from each event's group (`u32::MAX`: none).
fn group_members(event_group: &[u32], groups: usize) -> (Vec<u32>, Vec<u32>) {
    let mut ends = vec![0u32; groups];
    for &g in event_group.iter().filter(|&&g| g != u32::MAX) {
        ends[g as usize] += 1;
    }
    let mut acc = 0;
    for e in ends.iter_mut() {
        acc += *e;
        *e = acc;
    }
    let mut next: Vec<u32> = std::iter::once(0).chain(ends.iter().copied()).take(groups).collect();
    let mut members = vec![0u32; acc as usize];
    for (i, &g) in event_group.iter().enumerate() {
        if g != u32::MAX {
            members[next[g as usize] as usize] = i as u32;
            next[g as usize] += 1;
        }
    }
    (members, ends)
}

/// The window bound a watermark implies: windows ending at or before it are final.
fn bound(watermark: i64, lateness: i64) -> i64 {
    watermark.saturating_sub(lateness)
}

/// The watermark that makes a window ending at `end` final: the inverse of [`bound`].
fn final_at(end: i64, lateness: i64) -> i64 {
    end.saturating_add(lateness)
}

/// Opens an aggregation's state: asks the plugin build for its state version and, when the
/// checkpoint holds another, rewrites the accumulators stored under `prefix` through the
/// plugin's `migrate` (each value's first `skip` bytes are the operator's own and kept). Staged,
/// so the conversion commits atomically with the record of the new version.
fn open_accumulators(
    agg: &mut dyn AggregateFns,
    state: &mut StateStore,
    restored_version: Option<u32>,
    prefix: u8,
    skip: usize,
) -> Result<Opened, OperatorError> {
    let to = agg.state_version()?;
    match restored_version {
        Some(from) if from != to => {}
        _ => return Ok(Opened { state_version: Some(to), migrated: None }),
    }
    let from = restored_version.unwrap_or(to);
    let entries = state.range(&[prefix], &[prefix + 1])?;
    for chunk in entries.chunks(MIGRATE_CHUNK) {
        let accs: Vec<Vec<u8>> = chunk.iter().map(|(_, v)| v.get(skip..).unwrap_or_default().to_vec()).collect();
        let migrated = agg.migrate(from, &accs).map_err(|source| OperatorError::Migrate { from, to, source })?;
        for ((k, v), acc) in chunk.iter().zip(migrated) {
            let mut value = v[..skip.min(v.len())].to_vec();
            value.extend_from_slice(&acc);
            state.put(k.clone(), value);
        }
    }
    Ok(Opened { state_version: Some(to), migrated: Some(entries.len()) })
}

/// Accumulators per `migrate` call.
const MIGRATE_CHUNK: usize = 1_000;

#[cfg(test)]
mod tests;
