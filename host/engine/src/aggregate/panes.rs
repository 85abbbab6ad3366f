//! Tumbling and sliding windows as panes (`window.rs`): each event is accumulated once, into its
//! slide-long pane per key; a window's result is the merge of the panes it covers, made when the
//! window is emitted. Tumbling is one pane per window, with no merge.
//!
//! State: `p` + pane start + key → accumulator. A pane is deleted once the last window covering
//! it is final. The panes in state are also kept in memory (loaded at open), which answers every
//! read: each batch's lookups of the panes its events fall in, and the scan for the windows that
//! leave. Read from RocksDB, those are a large share of the CPU of windows per user (point
//! lookups in the memtable, and scans stepping over the deletes of every pane already emitted);
//! RocksDB stays the record, and every change is written to it. In update mode with
//! `output.tombstones`, a window that had state and became final leaves a tombstone after its
//! last row: its entry in the changelog is gone.

use std::collections::{BTreeMap, BTreeSet};

use rustc_hash::FxHashMap;

use super::emit;
use super::{WindowAcc, bound, final_at, group_members, open_accumulators, same};
use crate::columns;
use crate::isolate::Policy;
use crate::operator::{Advanced, Opened, Operator, OperatorError, Processed};
use crate::pipeline::OutputMode;
use crate::plugin::{AggregateFns, EventBatch};
use crate::rows::Rows;
use crate::state::{StateStore, time_from_key, time_key};
use crate::window::Panes;

const PREFIX: u8 = crate::operator::Scope::Panes as u8;

pub(super) struct PaneOperator {
    panes: Panes,
    lateness: i64,
    mode: OutputMode,
    agg: Box<dyn AggregateFns>,
    policy: Policy,
    /// (pane, key) changed in the current batch, for update mode.
    changed: Vec<(i64, Vec<u8>)>,
    /// The state's panes: pane start → key → accumulator.
    open: BTreeMap<i64, FxHashMap<Vec<u8>, Vec<u8>>>,
    /// Update mode: a tombstone for each window that becomes final.
    tombstones: bool,
}

impl PaneOperator {
    pub(super) fn new(
        panes: Panes,
        lateness: i64,
        mode: OutputMode,
        agg: Box<dyn AggregateFns>,
        policy: Policy,
    ) -> Self {
        Self { panes, lateness, mode, agg, policy, changed: Vec::new(), open: BTreeMap::new(), tombstones: false }
    }

    /// Tombstones for windows that become final (`output.tombstones`; update mode only).
    pub(super) fn with_tombstones(mut self, on: bool) -> Self {
        self.tombstones = on && self.mode == OutputMode::Update;
        self
    }
}

fn pane_key(pane: i64, key: &[u8]) -> Vec<u8> {
    let mut k = Vec::with_capacity(9 + key.len());
    k.push(PREFIX);
    k.extend_from_slice(&time_key(pane));
    k.extend_from_slice(key);
    k
}

fn split_pane_key(k: &[u8]) -> (i64, &[u8]) {
    (time_from_key(&k[1..9]), &k[9..])
}

impl Operator for PaneOperator {
    fn open(&mut self, state: &mut StateStore, restored_version: Option<u32>) -> Result<Opened, OperatorError> {
        let opened = open_accumulators(self.agg.as_mut(), state, restored_version, PREFIX, 0)?;
        // After a migration: the converted accumulators, staged.
        self.open.clear();
        for (k, acc) in state.range(&[PREFIX], &[PREFIX + 1])? {
            let (pane, key) = split_pane_key(&k);
            self.open.entry(pane).or_default().insert(key.to_vec(), acc);
        }
        Ok(opened)
    }

    fn stage(&self) -> &str {
        "aggregate"
    }

    fn fingerprint(&self) -> String {
        let Panes { size, slide, offset } = self.panes;
        format!("{:?}/{:?}", crate::window::WindowSpec::Panes { size, slide, offset }, self.mode)
    }

    fn mark(&self) -> usize {
        self.changed.len()
    }

    fn rollback(&mut self, mark: usize) {
        self.changed.truncate(mark);
    }

    fn process(
        &mut self,
        events: &EventBatch,
        watermark: i64,
        state: &mut StateStore,
        _out: &mut Rows,
    ) -> Result<Processed, OperatorError> {
        let closed_before = bound(watermark, self.lateness);
        let mut set_aside = Processed::default();
        let mut index: FxHashMap<(i64, &[u8]), u32> = FxHashMap::default();
        let mut groups: Vec<(i64, &[u8])> = Vec::new();
        let mut event_group = Vec::with_capacity(events.times.len());
        // Events arrive nearly in time order, so most belong to one of the last two groups
        // (two around a window boundary): check those before hashing.
        let mut recent: [Option<(i64, &[u8], u32)>; 2] = [None, None];
        for (i, &t) in events.times.iter().enumerate() {
            let Some(pane) = self.panes.pane_of(t) else {
                set_aside
                    .invalid
                    .push((i as u32, format!("event time {t}: its windows would fall outside the timeline")));
                event_group.push(u32::MAX);
                continue;
            };
            if self.panes.last_window_end(pane) <= closed_before {
                set_aside.late.push(i as u32);
                event_group.push(u32::MAX);
                continue;
            }
            let key = columns::item(&events.keys, &events.key_ends, i);
            let g = match recent {
                [Some((p, k, g)), _] if p == pane && same(k, key) => g,
                [first, Some((p, k, g))] if p == pane && same(k, key) => {
                    recent = [Some((p, k, g)), first];
                    g
                }
                [first, _] => {
                    let g = *index.entry((pane, key)).or_insert_with(|| {
                        groups.push((pane, key));
                        groups.len() as u32 - 1
                    });
                    recent = [Some((pane, key, g)), first];
                    g
                }
            };
            event_group.push(g);
        }
        if groups.is_empty() {
            return Ok(set_aside);
        }
        let (members, ends) = group_members(&event_group, groups.len());
        let accs: Vec<Vec<u8>> = groups
            .iter()
            .map(|&(p, k)| self.open.get(&p).and_then(|keys| keys.get(k)).cloned().unwrap_or_default())
            .collect();
        let updated = self.agg.accumulate(&accs, events, &members, &ends)?;
        // Nothing below fails: memory and the staged state change together, or neither does.
        for (acc, &(pane, key)) in updated.into_iter().zip(&groups) {
            state.put(pane_key(pane, key), acc.clone());
            self.open.entry(pane).or_default().insert(key.to_vec(), acc);
            self.changed.push((pane, key.to_vec()));
        }
        Ok(set_aside)
    }

    fn advance(
        &mut self,
        from: i64,
        to: i64,
        state: &mut StateStore,
        out: &mut Rows,
    ) -> Result<Advanced, OperatorError> {
        let mut failed = Vec::new();
        let mut finals = BTreeSet::new();
        let windows = self.windows_leaving(from, to, state, &mut failed, &mut finals)?;
        let emitted = emit::finish(windows, self.agg.as_mut(), &self.policy, out, &mut failed)?;
        let size = self.panes.size;
        for (start, key) in finals {
            let end = start.saturating_add(size);
            out.push_tombstone(&emit::window_key(start, end, &key), end.saturating_sub(1))?;
        }
        Ok(Advanced { emitted, failed })
    }

    fn horizon(&self, _state: &StateStore) -> Result<Option<i64>, OperatorError> {
        let last = self.open.last_key_value().map(|(pane, _)| *pane);
        Ok(last.map(|pane| final_at(self.panes.last_window_end(pane), self.lateness)))
    }
}

impl PaneOperator {
    /// The windows that leave as the watermark moves from `previous` to `watermark` (sorted by
    /// start, then key), their panes merged (windows whose merge fails go to `failed`); drops the
    /// panes no window needs any more. With tombstones, `finals` gets the windows with state
    /// that became final.
    fn windows_leaving(
        &mut self,
        previous: i64,
        watermark: i64,
        state: &mut StateStore,
        failed: &mut Vec<crate::side_output::FailedWindow>,
        finals: &mut BTreeSet<(i64, Vec<u8>)>,
    ) -> Result<Vec<WindowAcc>, OperatorError> {
        let (was, now) = (bound(previous, self.lateness), bound(watermark, self.lateness));
        let size = self.panes.size;
        let mode = self.mode;
        // Windows to emit, each with the panes it covers that hold state.
        let mut windows: BTreeMap<(i64, Vec<u8>), Vec<Vec<u8>>> = BTreeMap::new();
        // Update mode: the still-open windows over the panes this batch changed.
        let mut wanted: BTreeSet<(i64, Vec<u8>)> = BTreeSet::new();
        if mode == OutputMode::Update {
            for (pane, key) in std::mem::take(&mut self.changed) {
                for s in self.panes.windows_of(pane) {
                    if s.saturating_add(size) > was {
                        wanted.insert((s, key.clone()));
                    }
                }
            }
        }
        self.changed.clear();
        // Panes that may matter: append needs panes of windows ending by `now`; the others need
        // every pane in state. In pane order, so a window's panes are merged in time order.
        let upper = match mode {
            OutputMode::Append => now,
            _ => i64::MAX,
        };
        let mut gone = Vec::new();
        for (&pane, keys) in self.open.range(..upper) {
            for (key, acc) in keys {
                for s in self.panes.windows_of(pane) {
                    let end = s.saturating_add(size);
                    let take = match mode {
                        OutputMode::Append => end > was && end <= now,
                        OutputMode::Update => wanted.contains(&(s, key.clone())),
                        OutputMode::Complete => end > was,
                    };
                    if take {
                        windows.entry((s, key.clone())).or_default().push(acc.clone());
                    }
                    if self.tombstones && end > was && end <= now {
                        finals.insert((s, key.clone()));
                    }
                }
            }
            if self.panes.last_window_end(pane) <= now {
                gone.push(pane);
            }
        }
        for pane in gone {
            for key in self.open.remove(&pane).into_iter().flat_map(|keys| keys.into_keys()) {
                state.delete(pane_key(pane, &key));
            }
        }
        if self.panes.one_pane_per_window() {
            let mut out: Vec<WindowAcc> = Vec::with_capacity(windows.len());
            for ((start, key), mut accs) in windows {
                let acc = accs.pop().unwrap_or_default();
                out.push(WindowAcc { start, end: start.saturating_add(size), key, acc });
            }
            return Ok(out);
        }
        let groups = windows.into_iter().map(|((start, key), accs)| emit::Unmerged {
            start,
            end: start.saturating_add(size),
            key,
            accs,
        });
        emit::merge(groups.collect(), self.agg.as_mut(), &self.policy, failed)
    }
}
