//! The end of a batch: the sessions that leave at the watermark (out of memory, and out of the
//! store if it held them), then the batch's writes to the log: one entry for all its changes,
//! or a snapshot of the open sessions in place of a log grown too long.
//!
//! Invariant: after the batch's writes, the log replays to exactly the open sessions, each
//! marked `stored`, and no session is left marked `changed`.

use super::slots::{PREFETCH_AHEAD, key_hash, prefetch};
use super::{Log, SessionOperator, Slot, size};
use crate::aggregate::{WindowAcc, bound, session_log};
use crate::operator::Scope;
use crate::pipeline::OutputMode;
use crate::state::StateStore;

impl SessionOperator {
    /// The sessions that leave at `watermark` under the output mode (sorted by start, then
    /// key); final ones leave memory and the store. Then the batch's writes: absorbed sessions
    /// deleted, changed ones that are still open written, once each.
    pub(super) fn sessions_leaving(&mut self, watermark: i64, state: &mut StateStore) -> Vec<WindowAcc> {
        let now = bound(watermark, self.lateness);
        let changed = std::mem::take(&mut self.changed);
        // The batch's entry in the log.
        let mut entry = Vec::new();
        let mut out = Vec::new();
        let leaving = self.ends.take_until(now);
        for (i, &(end, id, start)) in leaving.iter().enumerate() {
            prefetch(&self.slots, leaving.get(i + PREFETCH_AHEAD).map(|e| e.1));
            // An entry of a session that has since grown, merged or closed names none.
            let Some(slot) = self.slots.get_mut(id as usize) else { continue };
            let Some(at) = slot.open.iter().position(|o| o.start == start && o.end == end) else { continue };
            let o = slot.open.remove(at);
            if slot.open.is_empty() {
                if let Ok(entry) = self.ids.find_entry(key_hash(&slot.key), |&(other, _)| other == id) {
                    entry.remove();
                }
                self.free.push(id);
            }
            self.live_bytes = self.live_bytes.saturating_sub(size(&slot.key, &o.acc));
            if o.stored {
                session_log::delete(&mut entry, &slot.key, start);
            }
            let take = match self.mode {
                OutputMode::Append | OutputMode::Complete => true,
                OutputMode::Update => o.changed,
            };
            if take {
                out.push(WindowAcc { start, end, key: slot.key.to_vec(), acc: o.acc.into_vec() });
            }
        }
        if self.mode == OutputMode::Complete {
            for slot in &self.slots {
                for o in &slot.open {
                    out.push(WindowAcc { start: o.start, end: o.end, key: slot.key.to_vec(), acc: o.acc.to_vec() });
                }
            }
        }
        // A freed slot still has its key: no slot is reused before the batch's end.
        for (id, start) in self.absorbed.drain(..) {
            if let Some(slot) = self.slots.get(id as usize) {
                session_log::delete(&mut entry, &slot.key, start);
            }
        }
        // Each changed session still open: written once, and emitted in update mode.
        for (i, &(id, start)) in changed.iter().enumerate() {
            prefetch(&self.slots, changed.get(i + PREFETCH_AHEAD).map(|c| c.0));
            let Some(slot) = self.slots.get_mut(id as usize) else { continue };
            let Some(o) = slot.open.iter_mut().find(|o| o.start == start && o.changed) else { continue };
            o.changed = false;
            o.stored = true;
            session_log::put(&mut entry, &slot.key, start, o.end, &o.acc);
            if self.mode == OutputMode::Update {
                out.push(WindowAcc { start, end: o.end, key: slot.key.to_vec(), acc: o.acc.to_vec() });
            }
        }
        let limit = (session_log::REWRITE_FACTOR * self.live_bytes).max(self.rewrite_min);
        if self.log.bytes + entry.len() > limit {
            self.rewrite_log(state);
        } else if !entry.is_empty() {
            self.log.append(state, entry);
        }
        out.sort_by(|a, b| (a.start, &a.key).cmp(&(b.start, &b.key)));
        out
    }

    /// Replaces the log with a snapshot of the open sessions, in entries of at most
    /// `ENTRY_BYTES`, and the deletes of every entry before it: one atomic write at commit.
    pub(super) fn rewrite_log(&mut self, state: &mut StateStore) {
        for seq in self.log.first..self.log.next {
            state.delete(Scope::SessionLog.log_key(seq));
        }
        self.log = Log { first: self.log.next, next: self.log.next, bytes: 0 };
        let mut entry = Vec::new();
        for Slot { key, open } in &mut self.slots {
            for o in open {
                session_log::put(&mut entry, key, o.start, o.end, &o.acc);
                o.stored = true;
                if entry.len() >= session_log::ENTRY_BYTES {
                    self.log.append(state, std::mem::take(&mut entry));
                }
            }
        }
        if !entry.is_empty() {
            self.log.append(state, entry);
        }
    }
}
