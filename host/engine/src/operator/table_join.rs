//! The stream-table join (`[join]`), in front of another operator: each event is looked up by
//! key in a table, and the joined row (the event's row with the table's row under `join.as`)
//! goes on. The table is built from a keyed source, a topic (a compacted one, or any changelog)
//! or a recorded-events file: each record upserts its key's row, and one with an empty value (a
//! tombstone) deletes it. Kafka Streams' stream-table join and Spark's stream-static join are the
//! models; unlike Spark's static side, the table moves while the stream runs.
//!
//! Exactly-once rests on the plan: the table's source is the operator's side input
//! (`side_input.rs`), read as far as it goes when a batch is planned ([`Operator::plan_side`]),
//! its end in the plan; the batch applies those records before its events are looked up
//! ([`Operator::take_side`]), and a re-run after a crash reads the table's source to the same
//! place. So a batch's events always meet the same
//! table, and the table (in RocksDB, under [`Scope::Table`]) and its position (under
//! [`Scope::TablePosition`]) commit with the batch's state. Lookups are answered from a copy of
//! the table in memory, loaded from RocksDB at start: a lookup per event in RocksDB's memtable
//! (a skip-list walk) cost more than everything else the join does; the copy costs memory in
//! proportion to the table.
//!
//! A table record without a key, with a value that is not a JSON object, or that its source
//! could not decode is a dead letter (stage `join`), and the table keeps what it had for the key.

use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use super::join_rows::JoinRows;
use super::side_input::{SideInput, Taken};
use super::{Opened, Operator, OperatorError, Passing, Processed, Scope};
use rustc_hash::FxHashMap;

use crate::columns;
use crate::pipeline::{JoinKind, TableJoin as Spec};
use crate::plugin::EventBatch;
use crate::rows::Rows;
use crate::side_output::SideLetter;
use crate::source::Offsets;
use crate::state::StateStore;

pub struct TableJoin {
    spec: Spec,
    /// The table's source, opened at the position the state holds.
    table: SideInput,
    /// The key of each event, and its joined row (`join_rows.rs`).
    join: JoinRows,
    /// The table as committed, plus what this batch's records changed: key → row.
    rows: FxHashMap<Vec<u8>, Vec<u8>>,
    /// The operator the joined events go on to.
    next: Box<dyn Operator>,
}

impl TableJoin {
    pub fn new(spec: Spec, to_the_end: bool, stop: Arc<AtomicBool>, next: Box<dyn Operator>) -> Self {
        let table = SideInput::new(spec.table.clone(), to_the_end, stop);
        let join = JoinRows::new(spec.on.as_deref(), &spec.field);
        Self { spec, table, join, rows: FxHashMap::default(), next }
    }

    /// Upserts and deletes the records taken into the table; returns the records it could not
    /// take.
    fn apply(&mut self, taken: &Taken, state: &mut StateStore) -> Vec<SideLetter> {
        let mut bad = taken.undecodable();
        let r = &taken.batch.records;
        for i in 0..taken.batch.positions.len() {
            let key = columns::item(&r.keys, &r.key_ends, i);
            let value = columns::item(&r.values, &r.value_ends, i);
            let why = if key.is_empty() {
                Some("a table record needs a key (the message key, or `key` in an envelope)".to_string())
            } else if value.is_empty() {
                state.delete(table_key(key));
                self.rows.remove(key);
                None
            } else {
                match crate::json::check_object(value) {
                    Ok(()) => {
                        state.put(table_key(key), value.trim_ascii().to_vec());
                        self.rows.insert(key.to_vec(), value.trim_ascii().to_vec());
                        None
                    }
                    Err(why) => Some(format!("a table row must be a JSON object: {why}")),
                }
            };
            if let Some(error) = why {
                bad.push(taken.letter("invalid-value", error, i));
            }
        }
        bad
    }
}

fn table_key(key: &[u8]) -> Vec<u8> {
    let mut k = Scope::Table.key(key.len());
    k.extend_from_slice(key);
    k
}

/// What the position entry is called in an error.
const POSITION: &str = "join table position";

fn position_key() -> Vec<u8> {
    Scope::TablePosition.key(0)
}

// The rest is the next operator's: the table holds nothing to emit (`horizon`), and the stage
// and marks are the next one's.
impl super::Wrapping for TableJoin {
    fn next(&self) -> &dyn Operator {
        self.next.as_ref()
    }

    fn next_mut(&mut self) -> &mut dyn Operator {
        self.next.as_mut()
    }

    fn open(&mut self, state: &mut StateStore, restored_version: Option<u32>) -> Result<Opened, OperatorError> {
        let at: Option<Offsets> = super::load_json(state, &position_key(), POSITION)?;
        self.table.open(at.as_ref())?;
        let scope = Scope::Table as u8;
        self.rows = state.range(&[scope], &[scope + 1])?.into_iter().map(|(k, v)| (k[1..].to_vec(), v)).collect();
        self.next.open(state, restored_version)
    }

    fn plan_side(&mut self) -> Result<Option<Offsets>, OperatorError> {
        self.table.plan().map(Some)
    }

    fn take_side(
        &mut self,
        end: Option<&Offsets>,
        _watermark: i64,
        state: &mut StateStore,
    ) -> Result<Vec<SideLetter>, OperatorError> {
        let Some(end) = end else { return Ok(Vec::new()) };
        let taken = self.table.take(end)?;
        let bad = self.apply(&taken, state);
        super::save_json(state, position_key(), end, POSITION)?;
        self.table.recycle(taken);
        Ok(bad)
    }

    fn process(
        &mut self,
        events: &EventBatch,
        watermark: i64,
        state: &mut StateStore,
        out: &mut Rows,
    ) -> Result<Processed, OperatorError> {
        let mut set_aside = Processed::default();
        let mut passed = Passing::default();
        for i in 0..events.times.len() {
            let key = match self.join.key(events, i) {
                Ok(key) => key,
                Err(why) => {
                    set_aside.invalid.push((i as u32, why));
                    continue;
                }
            };
            let found = self.rows.get(&key).map(Vec::as_slice);
            if found.is_none() && self.spec.kind == JoinKind::Inner {
                set_aside.unmatched += 1;
                continue;
            }
            let row = columns::item(&events.rows, &events.row_ends, i);
            passed.push_built(events, i, |out| self.join.splice(row, found, out))?;
        }
        passed.forward(self.next.as_mut(), watermark, state, out, &mut set_aside)?;
        Ok(set_aside)
    }

    fn fingerprint(&self) -> String {
        let on = self.spec.on.as_deref().map_or_else(|| "event key".to_string(), |f| format!("{f:?}"));
        format!(
            "{:?} join on {on} as {:?} with table {}, then {}",
            self.spec.kind,
            self.spec.field,
            self.table.identity(),
            self.next.fingerprint()
        )
    }
}
