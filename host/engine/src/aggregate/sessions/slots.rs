//! The open sessions' slots in memory: finding a key's slot by its hash, making one for a new
//! key, and asking for a batch's slots ahead of their use.
//!
//! Invariant: `ids` holds exactly the slots with open sessions, each once, under its key's
//! [`key_hash`] with that hash's high half ([`tag`]) beside it; a free slot is out of `ids` and
//! on the free list, its key kept until the slot is reused.

use std::hash::BuildHasher;

use rustc_hash::FxBuildHasher;
use smallvec::SmallVec;

use super::{Key, SessionOperator, Slot};

impl SessionOperator {
    /// A slot for `key`, which has none: a free one, or a new one.
    #[inline]
    pub(super) fn new_slot(&mut self, key: &[u8]) -> u32 {
        let id = match self.free.pop() {
            Some(id) => {
                self.slots[id as usize].key = Key::from_slice(key);
                id
            }
            None => {
                self.slots.push(Slot { key: Key::from_slice(key), open: SmallVec::new() });
                self.slots.len() as u32 - 1
            }
        };
        let slots = &self.slots;
        let hash = key_hash(key);
        self.ids.insert_unique(hash, (id, tag(hash)), |&(id, _)| key_hash(&slots[id as usize].key));
        id
    }

    /// The slot of `key`, if it has open sessions.
    #[inline]
    pub(super) fn slot_of(&self, key: &[u8]) -> Option<u32> {
        self.ids.find(key_hash(key), |&(id, _)| *self.slots[id as usize].key == *key).map(|&(id, _)| id)
    }

    /// The slot that is most likely `key`'s, found by its hash alone, without reading a slot:
    /// [`Self::confirmed`] says whether it is. Finding every key of a batch this way first lets
    /// the walk that reads the slots ask for them ahead.
    #[inline]
    pub(super) fn candidate(&self, key: &[u8]) -> Option<u32> {
        let hash = key_hash(key);
        self.ids.find(hash, |&(_, t)| t == tag(hash)).map(|&(id, _)| id)
    }

    /// `key`'s slot, given its [`Self::candidate`] (found since the map last changed: a freed
    /// slot keeps its key until reused): that one when it holds `key`, else looked up again in
    /// full (two keys whose hashes share a high half).
    #[inline]
    pub(super) fn confirmed(&self, candidate: Option<u32>, key: &[u8]) -> Option<u32> {
        match candidate {
            Some(id) if *self.slots[id as usize].key == *key => Some(id),
            _ => self.slot_of(key),
        }
    }
}

/// How many slots ahead the loops over a batch's slots ask for them ([`prefetch`]).
pub(super) const PREFETCH_AHEAD: usize = 8;

/// Asks for a slot's cache lines ahead of its use. The walks over a batch's slots (matching its
/// keys with their open sessions, applying the plugin's results, taking the sessions that leave,
/// writing the changed ones) know every slot number up front, and each slot is a miss: its key
/// was last seen minutes of event time before.
#[inline]
pub(super) fn prefetch(slots: &[Slot], id: Option<u32>) {
    #[cfg(target_arch = "x86_64")]
    if let Some(slot) = id.and_then(|id| slots.get(id as usize)) {
        use std::arch::x86_64::{_MM_HINT_T0, _mm_prefetch};
        let first = (slot as *const Slot).cast::<i8>();
        // SAFETY: a prefetch is a hint: it reads nothing the program sees and never faults, and
        // SSE, which it needs, is part of every x86-64 target.
        unsafe {
            _mm_prefetch::<_MM_HINT_T0>(first);
            _mm_prefetch::<_MM_HINT_T0>(first.wrapping_add(std::mem::size_of::<Slot>() - 1));
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (slots, id);
}

/// The hash the slots are found by.
#[inline]
pub(super) fn key_hash(key: &[u8]) -> u64 {
    FxBuildHasher.hash_one(key)
}

/// The high half of a key's hash, kept beside its slot number.
#[inline]
fn tag(hash: u64) -> u32 {
    (hash >> 32) as u32
}
