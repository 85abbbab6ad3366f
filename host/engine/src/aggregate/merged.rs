//! Stage 2 of a group's aggregation (`docs/scale-out.md`): the window operators run unchanged
//! over partials instead of events. Each partial arrives as an event at its window's (or
//! session's) start, under its group key, its row the end and accumulator that stage 1 made
//! (`partials.rs`); this aggregator "accumulates" a group's partials by merging them, with the
//! stored accumulator first, through the plugin's own `merge`. Everything else (`merge`,
//! `finish`, versions) is the plugin's, so the rows are those one process would emit.
//!
//! Sessions need a partial's end as well as its start: `sessions/` reads it from the row
//! ([`crate::shuffle::split_row`]) when built over partials.

use crate::columns;
use crate::plugin::{AggregateFns, EventBatch, PluginError};
use crate::shuffle::split_row;

pub struct Merged(pub Box<dyn AggregateFns>);

impl AggregateFns for Merged {
    fn accumulate(
        &mut self,
        accs: &[Vec<u8>],
        events: &EventBatch,
        members: &[u32],
        group_ends: &[u32],
    ) -> Result<Vec<Vec<u8>>, PluginError> {
        // Groups of one partial and no stored accumulator are that partial: no call.
        let mut out: Vec<Option<Vec<u8>>> = Vec::with_capacity(accs.len());
        let mut flat: Vec<Vec<u8>> = Vec::new();
        let mut ends: Vec<u32> = Vec::new();
        let mut start = 0usize;
        for (acc, &end) in accs.iter().zip(group_ends) {
            let parts = &members[start..end as usize];
            start = end as usize;
            let partial = |m: u32| {
                let row = columns::item(&events.rows, &events.row_ends, m as usize);
                split_row(row).map(|(_, acc)| acc.to_vec()).ok_or_else(|| self.bad(m))
            };
            match (acc.is_empty(), parts) {
                (true, [only]) => out.push(Some(partial(*only)?)),
                _ => {
                    if !acc.is_empty() {
                        flat.push(acc.clone());
                    }
                    for &m in parts {
                        flat.push(partial(m)?);
                    }
                    ends.push(flat.len() as u32);
                    out.push(None);
                }
            }
        }
        let mut merged = if ends.is_empty() { Vec::new() } else { self.0.merge(&flat, &ends)? }.into_iter();
        out.into_iter()
            .map(|o| match o {
                Some(acc) => Ok(acc),
                None => merged.next().ok_or_else(|| self.short()),
            })
            .collect()
    }

    fn merge(&mut self, accs: &[Vec<u8>], group_ends: &[u32]) -> Result<Vec<Vec<u8>>, PluginError> {
        self.0.merge(accs, group_ends)
    }

    fn finish(&mut self, accs: &[Vec<u8>]) -> Result<Vec<Vec<u8>>, PluginError> {
        self.0.finish(accs)
    }

    fn stage(&self) -> &str {
        self.0.stage()
    }

    fn max_call_bytes(&self) -> usize {
        self.0.max_call_bytes()
    }

    fn state_version(&mut self) -> Result<u32, PluginError> {
        self.0.state_version()
    }

    fn migrate(&mut self, from: u32, accs: &[Vec<u8>]) -> Result<Vec<Vec<u8>>, PluginError> {
        self.0.migrate(from, accs)
    }
}

impl Merged {
    fn bad(&self, m: u32) -> PluginError {
        let message = format!("partial {m} is too short to hold an end and an accumulator");
        PluginError::Contract { stage: self.0.stage().to_string(), message }
    }

    fn short(&self) -> PluginError {
        let message = "merge gave fewer accumulators than groups".to_string();
        PluginError::Contract { stage: self.0.stage().to_string(), message }
    }
}
