//! The session operator's own unit tests: reading format 2's keys, and finding slots by key.
//! The operator's behaviour over batches is tested with the other window kinds', in
//! `aggregate/tests.rs`.

use super::slots::key_hash;
use super::*;
use crate::state::time_key;
use crate::testing::{Count, policy};

#[test]
fn format_2_session_keys_are_read() {
    let mut k = vec![OLD_SESSIONS, 0, 0, 0, 6];
    k.extend_from_slice(b"user-7");
    k.extend_from_slice(&time_key(-42));
    assert_eq!(split_session_key(&k).unwrap(), (b"user-7".to_vec(), -42));
    assert!(split_session_key(b"s\0\0\0\x09ab").is_err());
}

/// Keys inline in their slots or not, found from the right candidate, a wrong one or none,
/// and gone from the map when their slot is freed.
#[test]
fn slots_are_found_by_key_whatever_the_candidate() {
    let mut op = SessionOperator::new(60_000, 0, OutputMode::Append, Box::new(Count), policy());
    let long = [b'k'; INLINE_KEY + 9];
    let keys: [&[u8]; 4] = [b"", b"user-7", &long, &long[..INLINE_KEY]];
    let ids: Vec<u32> = keys.iter().map(|k| op.new_slot(k)).collect();
    for (key, &id) in keys.iter().zip(&ids) {
        assert_eq!(op.slot_of(key), Some(id));
        assert_eq!(op.candidate(key), Some(id));
        for wrong in [None, Some(ids[0]), Some(ids[2])] {
            assert_eq!(op.confirmed(wrong, key), Some(id), "{wrong:?}");
        }
    }
    assert_eq!(op.confirmed(Some(ids[1]), b"user-8"), None);
    // Freed as `sessions_leaving` frees a slot: out of the map, then reused for another key.
    let hash = key_hash(&op.slots[ids[2] as usize].key);
    let Ok(entry) = op.ids.find_entry(hash, |&(other, _)| other == ids[2]) else { panic!("not in the map") };
    entry.remove();
    op.free.push(ids[2]);
    assert_eq!(op.slot_of(&long), None);
    assert_eq!(op.candidate(&long), None);
    assert_eq!(op.new_slot(b"user-9"), ids[2]);
    assert_eq!(op.slot_of(b"user-9"), Some(ids[2]));
    assert_eq!(op.slot_of(&long[..INLINE_KEY]), Some(ids[3]));
}
