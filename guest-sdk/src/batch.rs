//! Views over the columnar batches the host passes in, and the [`Emitter`] that builds the
//! columnar batch a parser or transformer passes back. Nothing here allocates per record.

use std::borrow::Cow;

use serde::{Deserialize, Serialize};

use crate::scan::{Paths, ScanError};
use crate::{PluginError, RecordError, types};

/// One raw source record, borrowed from the batch.
#[derive(Debug, Clone, Copy)]
pub struct Record<'a> {
    /// The record's value (for Kafka: the message payload).
    pub value: &'a [u8],
    /// The record's key, if it has one.
    pub key: Option<&'a [u8]>,
    /// The source timestamp in epoch milliseconds, if the source has one.
    pub timestamp: Option<i64>,
    /// The partition the record was read from (Kafka partition; 0 for an unpartitioned file).
    pub partition: i32,
    /// The record's offset in its partition (Kafka offset; the line index in a file).
    pub offset: i64,
    headers: &'a [types::Header],
}

impl<'a> Record<'a> {
    /// The value as UTF-8 text.
    pub fn text(&self) -> Result<&'a str, RecordError> {
        std::str::from_utf8(self.value).map_err(|e| RecordError::malformed(format!("value is not UTF-8: {e}")))
    }

    /// The value decoded as JSON into `T` (borrowing strings from the record where `T` does).
    ///
    /// The whole value is checked to be UTF-8 first, fields `T` ignores included, so that a
    /// parser passing the record on as its row never passes on invalid JSON text.
    pub fn json<T: Deserialize<'a>>(&self) -> Result<T, RecordError> {
        Ok(serde_json::from_str(self.text()?)?)
    }

    /// Several fields of the value (a JSON object) in one pass that also checks the whole value
    /// is valid JSON: what a parser needs of a record, cheaper than [`Record::json`] into a
    /// struct. `None` for a field the record does not have.
    ///
    /// ```no_run
    /// # use weir_guest::{Paths, Record, RecordError};
    /// # fn f(record: &Record<'_>, paths: &Paths<2>) -> Result<(), RecordError> {
    /// // `paths` = Paths::new(["order_ts", "customer.id"]), made once in `new`.
    /// let [ts, customer] = record.fields(paths)?;
    /// let ts = ts.ok_or_else(|| RecordError::missing_field("order_ts"))?.as_i64()?;
    /// # Ok(()) }
    /// ```
    pub fn fields<const N: usize>(&self, paths: &Paths<N>) -> Result<[Option<Value<'a>>; N], RecordError> {
        scan_fields(self.value, paths)
    }

    /// The record's headers.
    pub fn headers(&self) -> impl Iterator<Item = Header<'a>> {
        self.headers.iter().map(|h| Header { name: &h.name, value: &h.value })
    }
}

/// A header of a source record.
#[derive(Debug, Clone, Copy)]
pub struct Header<'a> {
    pub name: &'a str,
    pub value: &'a [u8],
}

/// One event, borrowed from the batch.
#[derive(Debug, Clone, Copy)]
pub struct Event<'a> {
    /// Event time, epoch milliseconds.
    pub time: i64,
    /// The event's key, if it has one.
    pub key: Option<&'a [u8]>,
    /// The event's row: a UTF-8 JSON object.
    pub row: &'a [u8],
}

impl<'a> Event<'a> {
    /// The row decoded into `T` (borrowing strings from the batch where `T` does).
    pub fn row_as<T: Deserialize<'a>>(&self) -> Result<T, RecordError> {
        Ok(serde_json::from_slice(self.row)?)
    }

    /// One top-level field of the row decoded into `T`, without decoding the rest of the row
    /// (much cheaper than [`Event::row_as`] when a stage needs one or two fields);
    /// `Ok(None)` when the row has no such field.
    pub fn field<T: Deserialize<'a>>(&self, name: &str) -> Result<Option<T>, RecordError> {
        match crate::field::top_level_field(self.row, name).map_err(RecordError::malformed)? {
            Some(raw) => Ok(Some(serde_json::from_slice(raw)?)),
            None => Ok(None),
        }
    }

    /// Whether top-level field `name` is the string `value`: compared as bytes when the field
    /// holds no escapes, so nothing is decoded or validated (an aggregator's filter on a status,
    /// once per event). `Ok(false)` when the field is absent or not a string.
    pub fn field_is(&self, name: &str, value: &str) -> Result<bool, RecordError> {
        match crate::field::top_level_field(self.row, name).map_err(RecordError::malformed)? {
            Some([b'"', inner @ .., b'"']) if !inner.contains(&b'\\') => Ok(inner == value.as_bytes()),
            Some(raw @ [b'"', ..]) => Ok(serde_json::from_slice::<String>(raw)? == value),
            _ => Ok(false),
        }
    }

    /// Several fields of the row in one pass, checking the whole row, as [`Record::fields`].
    pub fn fields<const N: usize>(&self, paths: &Paths<N>) -> Result<[Option<Value<'a>>; N], RecordError> {
        scan_fields(self.row, paths)
    }

    /// A top-level string field, borrowed from the row unless it holds escapes.
    pub fn field_str(&self, name: &str) -> Result<Option<Cow<'a, str>>, RecordError> {
        let Some(raw) = crate::field::top_level_field(self.row, name).map_err(RecordError::malformed)? else {
            return Ok(None);
        };
        match raw {
            [b'"', inner @ .., b'"'] if !inner.contains(&b'\\') => std::str::from_utf8(inner)
                .map(|s| Some(Cow::Borrowed(s)))
                .map_err(|e| RecordError::malformed(format!("field `{name}` is not UTF-8: {e}"))),
            _ => Ok(Some(Cow::Owned(serde_json::from_slice::<String>(raw)?))),
        }
    }
}

fn scan_fields<'a, const N: usize>(json: &'a [u8], paths: &Paths<N>) -> Result<[Option<Value<'a>>; N], RecordError> {
    match crate::scan::scan(json, paths) {
        Ok(found) => Ok(found.map(|raw| raw.map(Value))),
        Err(ScanError::Duplicate(i)) => Err(RecordError::invalid_value(format!("duplicate field `{}`", paths.name(i)))),
        Err(e) => Err(RecordError::malformed(format!("not a JSON object: {e}"))),
    }
}

/// One field's value as it is written in the JSON text (found by [`Record::fields`] or
/// [`Event::fields`], which checked it), read as the type wanted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Value<'a>(&'a [u8]);

impl<'a> Value<'a> {
    /// The JSON text of the value.
    pub fn raw(&self) -> &'a [u8] {
        self.0
    }

    /// An integer in `i64`'s range, written without fraction or exponent.
    pub fn as_i64(&self) -> Result<i64, RecordError> {
        crate::scan::int(self.0).ok_or_else(|| self.wrong("an integer"))
    }

    /// A non-negative integer in `u64`'s range.
    pub fn as_u64(&self) -> Result<u64, RecordError> {
        crate::scan::uint(self.0).ok_or_else(|| self.wrong("a non-negative integer"))
    }

    /// Any number (the JSON grammar is a subset of what `f64` parses; rounding is exact).
    pub fn as_f64(&self) -> Result<f64, RecordError> {
        match self.0.first() {
            Some(b'-' | b'0'..=b'9') => {
                std::str::from_utf8(self.0).ok().and_then(|t| t.parse().ok()).ok_or_else(|| self.wrong("a number"))
            }
            _ => Err(self.wrong("a number")),
        }
    }

    /// A string, borrowed from the text unless it holds escapes.
    pub fn as_str(&self) -> Result<Cow<'a, str>, RecordError> {
        match self.0 {
            [b'"', inner @ .., b'"'] if !inner.contains(&b'\\') => std::str::from_utf8(inner)
                .map(Cow::Borrowed)
                .map_err(|e| RecordError::malformed(format!("not UTF-8: {e}"))),
            [b'"', ..] => Ok(Cow::Owned(serde_json::from_slice::<String>(self.0)?)),
            _ => Err(self.wrong("a string")),
        }
    }

    pub fn as_bool(&self) -> Result<bool, RecordError> {
        match self.0 {
            b"true" => Ok(true),
            b"false" => Ok(false),
            _ => Err(self.wrong("true or false")),
        }
    }

    pub fn is_null(&self) -> bool {
        self.0 == b"null"
    }

    /// The value decoded into `T` (an object or array into a struct or `Vec`, say).
    pub fn decode<T: Deserialize<'a>>(&self) -> Result<T, RecordError> {
        Ok(serde_json::from_slice(self.0)?)
    }

    fn wrong(&self, expected: &str) -> RecordError {
        let shown = String::from_utf8_lossy(&self.0[..self.0.len().min(40)]).into_owned();
        RecordError::invalid_value(format!("expected {expected}, got `{shown}`"))
    }
}

/// The rows of one sink batch.
#[derive(Debug, Clone, Copy)]
pub struct Rows<'a> {
    rows: &'a [u8],
    ends: &'a [u32],
}

impl<'a> Rows<'a> {
    pub(crate) fn new(rows: &'a [u8], ends: &'a [u32]) -> Result<Self, PluginError> {
        check_ends(ends, rows.len(), "rows")?;
        Ok(Self { rows, ends })
    }

    /// How many rows the batch has.
    pub fn len(&self) -> usize {
        self.ends.len()
    }

    /// Whether the batch has no rows.
    pub fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }

    /// Each row: a UTF-8 JSON object.
    pub fn iter(&self) -> impl Iterator<Item = &'a [u8]> + 'a {
        let (rows, ends) = (self.rows, self.ends);
        (0..ends.len()).map(move |i| &rows[span(ends, i)])
    }
}

/// Which delivery a sink's batch is: the identity of the checkpoint that planned it (a UUID,
/// later checkpoints sorting after earlier ones) and its batch id there. An exactly-once sink
/// keeps each delivery once, keyed on both.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Delivery<'a> {
    pub checkpoint: &'a str,
    pub batch_id: u64,
}

impl Delivery<'_> {
    /// A name for the delivery that sorts by checkpoint, then batch: `CHECKPOINT-BATCHID`, the
    /// batch id zero-padded to 20 digits.
    pub fn key(&self) -> String {
        format!("{}-{:020}", self.checkpoint, self.batch_id)
    }
}

/// The range of item `i` in a column whose item ends are `ends`. Callers check `ends` first.
fn span(ends: &[u32], i: usize) -> std::ops::Range<usize> {
    let start = if i == 0 { 0 } else { ends[i - 1] as usize };
    start..ends[i] as usize
}

/// The host promises well-formed columns; a component must still never panic on a bad one.
fn check_ends(ends: &[u32], len: usize, what: &str) -> Result<(), PluginError> {
    let mut prev = 0u32;
    for &e in ends {
        if e < prev {
            return Err(PluginError::Internal(format!("{what}: offsets go backwards")));
        }
        prev = e;
    }
    if prev as usize > len {
        return Err(PluginError::Internal(format!("{what}: offsets past the end of the data")));
    }
    Ok(())
}

pub(crate) struct RawBatchView<'a> {
    b: &'a types::RawBatch,
    header_cursor: usize,
}

impl<'a> RawBatchView<'a> {
    pub(crate) fn new(b: &'a types::RawBatch) -> Result<Self, PluginError> {
        let n = b.value_ends.len();
        if b.key_ends.len() != n || b.timestamps.len() != n || b.partitions.len() != n || b.offsets.len() != n {
            return Err(PluginError::Internal("raw batch columns differ in length".into()));
        }
        check_ends(&b.value_ends, b.values.len(), "values")?;
        check_ends(&b.key_ends, b.keys.len(), "keys")?;
        if b.headers.windows(2).any(|w| w[0].index > w[1].index) {
            return Err(PluginError::Internal("headers are not in record order".into()));
        }
        Ok(Self { b, header_cursor: 0 })
    }

    pub(crate) fn len(&self) -> usize {
        self.b.value_ends.len()
    }

    /// Records must be visited in order (headers are walked with a cursor).
    pub(crate) fn record(&mut self, i: usize) -> Record<'a> {
        let b = self.b;
        let key = &b.keys[span(&b.key_ends, i)];
        let ts = b.timestamps[i];
        let hs = &b.headers[self.header_cursor..];
        let before = hs.iter().take_while(|h| (h.index as usize) < i).count();
        let hs = &hs[before..];
        let mine = hs.iter().take_while(|h| h.index as usize == i).count();
        self.header_cursor += before + mine;
        Record {
            value: &b.values[span(&b.value_ends, i)],
            key: (!key.is_empty()).then_some(key),
            timestamp: (ts >= 0).then_some(ts),
            partition: b.partitions[i],
            offset: b.offsets[i],
            headers: &hs[..mine],
        }
    }
}

pub(crate) struct EventBatchView<'a> {
    b: &'a types::EventBatch,
}

impl<'a> EventBatchView<'a> {
    pub(crate) fn new(b: &'a types::EventBatch) -> Result<Self, PluginError> {
        let n = b.times.len();
        if b.key_ends.len() != n || b.row_ends.len() != n {
            return Err(PluginError::Internal("event batch columns differ in length".into()));
        }
        check_ends(&b.key_ends, b.keys.len(), "keys")?;
        check_ends(&b.row_ends, b.rows.len(), "rows")?;
        Ok(Self { b })
    }

    pub(crate) fn len(&self) -> usize {
        self.b.times.len()
    }

    pub(crate) fn event(&self, i: usize) -> Event<'a> {
        let b = self.b;
        let key = &b.keys[span(&b.key_ends, i)];
        Event { time: b.times[i], key: (!key.is_empty()).then_some(key), row: &b.rows[span(&b.row_ends, i)] }
    }
}

/// Collects the events a parser or transformer produces for the current input record.
///
/// If the plugin returns an error for a record, everything it emitted for that record is taken
/// back, so a record yields either all of its events or a dead letter, never half.
pub struct Emitter {
    batch: types::EventBatch,
    origin: u32,
}

pub(crate) struct Mark {
    events: usize,
    keys: usize,
    rows: usize,
}

impl Emitter {
    pub(crate) fn with_capacity(events: usize, row_bytes: usize) -> Self {
        Self {
            batch: types::EventBatch {
                times: Vec::with_capacity(events),
                keys: Vec::new(),
                key_ends: Vec::with_capacity(events),
                rows: Vec::with_capacity(row_bytes),
                row_ends: Vec::with_capacity(events),
                origins: Vec::with_capacity(events),
            },
            origin: 0,
        }
    }

    /// Emits an event whose row is `row` serialized as a JSON object.
    pub fn emit<T: Serialize + ?Sized>(&mut self, time: i64, key: Option<&[u8]>, row: &T) -> Result<(), RecordError> {
        let start = self.batch.rows.len();
        if let Err(e) = serde_json::to_writer(&mut self.batch.rows, row) {
            self.batch.rows.truncate(start);
            return Err(RecordError::invalid_value(format!("row does not serialize: {e}")));
        }
        self.push(time, key)
    }

    /// Emits an event whose row is already a JSON object (such as the input record's value).
    pub fn emit_json(&mut self, time: i64, key: Option<&[u8]>, row: &[u8]) -> Result<(), RecordError> {
        self.batch.rows.extend_from_slice(row);
        self.push(time, key)
    }

    /// Emits the deletion of `key` (a tombstone): an event without a row. A stateless pipeline
    /// with `output.tombstones = true` passes it to the sink, which deletes the key's row (a
    /// PostgreSQL table, a compacted Kafka topic); anywhere else it is a dead letter.
    pub fn emit_deletion(&mut self, time: i64, key: &[u8]) -> Result<(), RecordError> {
        if key.is_empty() {
            return Err(RecordError::invalid_value("a deletion needs a key: nothing says what to delete"));
        }
        self.push(time, Some(key))
    }

    fn push(&mut self, time: i64, key: Option<&[u8]>) -> Result<(), RecordError> {
        let (Ok(row_end), Ok(key_end)) =
            (u32::try_from(self.batch.rows.len()), u32::try_from(self.batch.keys.len() + key.map_or(0, <[u8]>::len)))
        else {
            return Err(RecordError::invalid_value("batch output exceeds 4 GiB"));
        };
        self.batch.keys.extend_from_slice(key.unwrap_or_default());
        self.batch.times.push(time);
        self.batch.key_ends.push(key_end);
        self.batch.row_ends.push(row_end);
        self.batch.origins.push(self.origin);
        Ok(())
    }

    pub(crate) fn begin(&mut self, origin: u32) -> Mark {
        self.origin = origin;
        Mark { events: self.batch.times.len(), keys: self.batch.keys.len(), rows: self.batch.rows.len() }
    }

    pub(crate) fn rollback(&mut self, m: Mark) {
        let b = &mut self.batch;
        b.times.truncate(m.events);
        b.key_ends.truncate(m.events);
        b.row_ends.truncate(m.events);
        b.origins.truncate(m.events);
        b.keys.truncate(m.keys);
        b.rows.truncate(m.rows);
    }

    pub(crate) fn finish(self) -> types::EventBatch {
        self.batch
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn field_is_compares_strings_escaped_or_not_and_nothing_else() {
        let is = |row: &str| Event { time: 0, key: None, row: row.as_bytes() }.field_is("status", "ERROR").unwrap();
        assert!(is(r#"{"id":1,"status":"ERROR"}"#));
        assert!(is(r#"{"status":"ERR\u004fR"}"#));
        assert!(!is(r#"{"status":"OK"}"#));
        assert!(!is(r#"{"status":1}"#));
        assert!(!is(r#"{"nested":{"status":"ERROR"}}"#));
    }
}
