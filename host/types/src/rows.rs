//! The rows of one batch as operators emit them and sinks take them: flat columns, each row
//! with its key and event time. At the bottom because operators make them, sinks deliver them
//! and the scale-out's changelog carries them, and none of those should depend on another for it.

use crate::columns::ColumnFull;

/// Rows of one batch, flat, each with its key: row `i` is `rows[row_ends[i-1]..row_ends[i]]`, a
/// JSON object, and its key `keys[key_ends[i-1]..key_ends[i]]` (empty: none). The operator that
/// made a row gave it its key: a window's is the window and its group key, a processor's the
/// key it ran under, a stateless pipeline's the event's own (`docs/semantics.md`). An empty row
/// is a tombstone: its key's entry no longer exists (`output.tombstones`). `times[i]` is row
/// `i`'s event time: its event's, a window's last millisecond, what a processor gave it, so a
/// dataset keeps it and a flow reading the dataset needs no parser.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Rows {
    pub rows: Vec<u8>,
    pub row_ends: Vec<u32>,
    pub keys: Vec<u8>,
    pub key_ends: Vec<u32>,
    pub times: Vec<i64>,
}

/// Where [`Rows`] stood, to [`Rows::truncate`] back to.
#[derive(Debug, Clone, Copy)]
pub struct RowsMark(usize, usize, usize);

impl Rows {
    /// Appends a row under `key` at event time `time`; both columns checked before either grows.
    #[inline]
    pub fn push(&mut self, key: &[u8], row: &[u8], time: i64) -> Result<(), ColumnFull> {
        crate::columns::end_after(self.keys.len(), key.len())?;
        crate::columns::push(&mut self.rows, &mut self.row_ends, row)?;
        crate::columns::push(&mut self.keys, &mut self.key_ends, key)?;
        self.times.push(time);
        Ok(())
    }

    /// Appends a tombstone for `key`.
    #[inline]
    pub fn push_tombstone(&mut self, key: &[u8], time: i64) -> Result<(), ColumnFull> {
        self.push(key, b"", time)
    }

    #[inline]
    pub fn len(&self) -> usize {
        self.row_ends.len()
    }

    #[inline]
    pub fn is_empty(&self) -> bool {
        self.row_ends.is_empty()
    }

    /// Each row's key and the row (empty: a tombstone).
    #[inline]
    pub fn iter(&self) -> impl Iterator<Item = (&[u8], &[u8])> {
        crate::columns::items(&self.keys, &self.key_ends).zip(crate::columns::items(&self.rows, &self.row_ends))
    }

    #[inline]
    pub fn mark(&self) -> RowsMark {
        RowsMark(self.rows.len(), self.keys.len(), self.row_ends.len())
    }

    /// Empties the columns, keeping their capacity.
    #[inline]
    pub fn clear(&mut self) {
        self.truncate(RowsMark(0, 0, 0));
    }

    #[inline]
    pub fn truncate(&mut self, m: RowsMark) {
        self.rows.truncate(m.0);
        self.keys.truncate(m.1);
        self.row_ends.truncate(m.2);
        self.key_ends.truncate(m.2);
        self.times.truncate(m.2);
    }
}
