//! The processor's batch loops: each key's state is decoded, handed to the role with that key's
//! events or due timers, and encoded back, so one key's state never sees another key's input.

use std::sync::OnceLock;

use super::{EventBatch, WitResult, groups, processor, role, unsupported};
use crate::batch::EventBatchView;
use crate::process::{Context, Timer};
use crate::{PluginError, Processor};

fn decode_state<P: Processor>(bytes: Option<&Vec<u8>>) -> Result<Option<P::State>, PluginError> {
    bytes
        .map(|b| serde_json::from_slice(b).map_err(|e| PluginError::BadState(format!("state does not decode: {e}"))))
        .transpose()
}

fn encode_state<P: Processor>(state: &Option<P::State>) -> Result<Option<Vec<u8>>, PluginError> {
    state
        .as_ref()
        .map(|s| serde_json::to_vec(s).map_err(|e| PluginError::Internal(format!("state does not encode: {e}"))))
        .transpose()
}

pub fn process<P: Processor>(
    cell: &OnceLock<P>,
    clock: processor::Clock,
    keys: Vec<processor::Keyed>,
    events: EventBatch,
    members: Vec<u32>,
    group_ends: Vec<u32>,
) -> WitResult<Vec<processor::KeyResult>> {
    if !P::IMPLEMENTED {
        return Err(unsupported("processor"));
    }
    let p = role(cell, P::new)?;
    let view = EventBatchView::new(&events)?;
    if keys.len() != group_ends.len() {
        return Err(PluginError::Internal("one key per group expected".into()).into());
    }
    if members.iter().any(|&m| m as usize >= view.len()) {
        return Err(PluginError::Internal("group member past the end of the events".into()).into());
    }
    let mut ctx = Context::new(&clock);
    let mut out = Vec::with_capacity(keys.len());
    let mut evs = Vec::new();
    for (keyed, range) in keys.iter().zip(groups(&group_ends, members.len())?) {
        let mut state = decode_state::<P>(keyed.state.as_ref())?;
        evs.clear();
        evs.extend(members[range].iter().map(|&m| view.event(m as usize)));
        p.process(&keyed.key, &mut state, &evs, &mut ctx)?;
        out.push(ctx.take(encode_state::<P>(&state)?));
    }
    Ok(out)
}

pub fn on_timers<P: Processor>(
    cell: &OnceLock<P>,
    clock: processor::Clock,
    keys: Vec<processor::Keyed>,
    timers: Vec<processor::Timer>,
    timer_ends: Vec<u32>,
) -> WitResult<Vec<processor::KeyResult>> {
    if !P::IMPLEMENTED {
        return Err(unsupported("processor"));
    }
    let p = role(cell, P::new)?;
    if keys.len() != timer_ends.len() {
        return Err(PluginError::Internal("one key per group of timers expected".into()).into());
    }
    let timers: Vec<Timer> = timers.iter().map(Timer::from_wit).collect();
    let mut ctx = Context::new(&clock);
    let mut out = Vec::with_capacity(keys.len());
    for (keyed, range) in keys.iter().zip(groups(&timer_ends, timers.len())?) {
        let mut state = decode_state::<P>(keyed.state.as_ref())?;
        p.on_timers(&keyed.key, &mut state, &timers[range], &mut ctx)?;
        out.push(ctx.take(encode_state::<P>(&state)?));
    }
    Ok(out)
}

pub fn process_state_version<P: Processor>() -> u32 {
    P::STATE_VERSION
}

pub fn process_migrate<P: Processor>(cell: &OnceLock<P>, from: u32, states: Vec<Vec<u8>>) -> WitResult<Vec<Vec<u8>>> {
    if !P::IMPLEMENTED {
        return Err(unsupported("processor"));
    }
    let p = role(cell, P::new)?;
    let mut out = Vec::with_capacity(states.len());
    for bytes in &states {
        let state = Some(p.migrate(from, bytes)?);
        out.push(encode_state::<P>(&state)?.unwrap_or_default());
    }
    Ok(out)
}
