//! The stage's budget (`limits.max_stage_timers`, `limits.max_stage_state_mb`): the totals over
//! every key, read at the start of each call of the operator and written at its end, so a call
//! the failure policy rolls back takes its changes to them along with the rest of the state.
//!
//! A key whose result would pass the budget is refused whole, and nothing of it is applied; a
//! result that only lowers a total (cancelling timers, shrinking state) is never refused, so a
//! stage at its budget can always work its way down.

use super::layout::{self, Entry, Totals};
use super::{OperatorError, corrupt};
use crate::plugin::{LimitExceeded, PluginError, StageBudget};
use crate::state::StateStore;

/// The totals as the store holds them.
pub(super) fn read(state: &StateStore) -> Result<Totals, OperatorError> {
    let k = Totals::key();
    match state.get(&k)? {
        Some(v) => Totals::decode(&v).map_err(|m| corrupt(&k, m)),
        None => Ok(Totals::default()),
    }
}

/// Stages `now` if it differs from `was`, what [`read`] gave at the start of the call.
pub(super) fn write(state: &mut StateStore, was: Totals, now: Totals) {
    if now != was {
        state.put(Totals::key(), now.encode());
    }
}

/// Counts the totals over every key's entry and stages them: after a migration changed the
/// states, and at `open` for a store that has keys but no totals (written before they were
/// kept). Totals of nothing are not written: [`read`] gives them for a missing entry.
pub(super) fn recount(state: &mut StateStore) -> Result<Totals, OperatorError> {
    let (from, to) = layout::all_keys();
    let mut totals = Totals::default();
    for (k, v) in state.range(&from, &to)? {
        let entry = Entry::decode(&v).map_err(|m| corrupt(&k, m))?;
        totals = totals.with(Totals::default(), entry.footprint());
    }
    write(state, Totals::default(), totals);
    Ok(totals)
}

/// [`recount`], unless the store holds the totals.
pub(super) fn count_if_missing(state: &mut StateStore) -> Result<(), OperatorError> {
    if state.get(&Totals::key())?.is_none() {
        recount(state)?;
    }
    Ok(())
}

/// Whether the totals may go from `totals` to `next` as a key's footprint goes from `before` to
/// `after`; the limit it would pass, if not.
pub(super) fn check(
    budget: StageBudget,
    totals: Totals,
    before: Totals,
    after: Totals,
) -> Result<Totals, LimitExceeded> {
    let next = totals.with(before, after);
    if after.timers > before.timers && next.timers > budget.timers {
        return Err(LimitExceeded::StageTimers { max: budget.timers });
    }
    if after.state_bytes > before.state_bytes && next.state_bytes > budget.state_bytes {
        return Err(LimitExceeded::StageState { max: budget.state_bytes });
    }
    Ok(next)
}

/// Whether `e` is a refusal by the stage's budget, which fails only the key, not the call.
pub(super) fn refused_by_budget(e: &PluginError) -> bool {
    matches!(e, PluginError::Limit { limit: LimitExceeded::StageTimers { .. } | LimitExceeded::StageState { .. }, .. })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_result_that_raises_a_total_past_the_budget_is_refused() {
        let budget = StageBudget { timers: 10, state_bytes: 100 };
        let t = |timers, state_bytes| Totals { timers, state_bytes };
        assert_eq!(check(budget, t(8, 50), t(0, 0), t(2, 10)), Ok(t(10, 60)));
        assert_eq!(check(budget, t(8, 50), t(0, 0), t(3, 0)), Err(LimitExceeded::StageTimers { max: 10 }));
        assert_eq!(check(budget, t(8, 95), t(1, 0), t(1, 6)), Err(LimitExceeded::StageState { max: 100 }));
        // Over the budget already (it was lowered): what lowers a total goes through.
        assert_eq!(check(budget, t(20, 500), t(5, 50), t(1, 10)), Ok(t(16, 460)));
    }
}
