//! Avro binary straight to a JSON row, with no value tree between: the standard library's Avro
//! parser uses it for records read with their writer's schema (no reader schema to resolve to),
//! where building apache-avro's `Value` (a `String` per field name, per record) cost more than
//! the decoding itself. The JSON is exactly what `json.rs` writes for the same record, and the
//! bytes are read as strictly as `decode.rs` reads them (a test holds both to it).
//!
//! It runs a [`Plan`] (`plan.rs`): the writer's schema compiled once, so a record costs its
//! bytes and its JSON, not a walk over the schema. While it writes, it notes where the fields
//! on the plan's wanted paths (the event time, the key fields) are in the row, and their
//! numbers, so the parser need not look them up again.

use std::io::Write;

use super::decode::DecodeError;
use super::plan::{Kind, Node, NodeId, Plan};
use super::read::{MAX_DEPTH, block, err, int, length, long, take};

/// Where a wanted field's value is in the row, and what it is.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Found {
    pub start: usize,
    pub end: usize,
    /// The value, when it is a number (an `int`, `long`, a time or timestamp, a `float` or
    /// `double`).
    pub number: Option<Number>,
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Number {
    /// An `int` or a `long`: epoch milliseconds or seconds, as the parser's `time_unit` says.
    Int(i64),
    /// A timestamp (`timestamp-*`, `local-timestamp-*`), whatever `time_unit` says: (value,
    /// its units per millisecond: 1, 1,000 or 1,000,000).
    Timestamp(i64, i64),
    Float(f64),
    /// A number that is no instant: a `date`, a `time-millis`, a `time-micros`.
    NotATime(i64),
}

impl Plan {
    /// Decodes one record from the front of `bytes` as JSON onto `out` (nothing of it left
    /// there when it does not decode); fills `found[i]` for the plan's wanted path `i`.
    pub fn decode_json(
        &self,
        bytes: &mut &[u8],
        out: &mut Vec<u8>,
        found: &mut [Option<Found>],
    ) -> Result<(), DecodeError> {
        if found.len() < self.wanted {
            return err(format!("{} wanted fields and room for {}", self.wanted, found.len()));
        }
        let start = out.len();
        let mut run = Run { plan: self, found, items: 0 };
        let r = run.value(self.root, bytes, out, 0);
        if r.is_err() {
            out.truncate(start);
        }
        r.map(drop)
    }
}

/// One record's decoding: where its wanted fields are, and how many array and map items it
/// has had so far.
struct Run<'p, 'f> {
    plan: &'p Plan,
    found: &'f mut [Option<Found>],
    items: usize,
}

/// The deepest field a path may name (`a.b.c` is 3): deeper values are written, never noted.
pub const MAX_PATH: usize = 8;

pub(super) fn string(s: &str, out: &mut Vec<u8>) {
    // Most values need no escape: copied as they are, without serde's writer.
    if s.bytes().all(|b| b >= 0x20 && b != b'"' && b != b'\\') {
        out.reserve(s.len() + 2);
        out.push(b'"');
        out.extend_from_slice(s.as_bytes());
        out.push(b'"');
    } else {
        let _ = serde_json::to_writer(&mut *out, s);
    }
}

fn utf8<'b>(bytes: &mut &'b [u8], what: &str) -> Result<&'b str, DecodeError> {
    let n = length(bytes, what)?;
    std::str::from_utf8(take(bytes, n, what)?).or_else(|_| err(format!("{what} is not UTF-8")))
}

fn base64(b: &[u8], out: &mut Vec<u8>) {
    use base64::Engine;
    out.push(b'"');
    let start = out.len();
    out.resize(start + b.len().div_ceil(3) * 4, 0);
    let n = base64::engine::general_purpose::STANDARD.encode_slice(b, &mut out[start..]).unwrap_or(0);
    out.truncate(start + n);
    out.push(b'"');
}

fn number(kind: Kind, n: i64) -> Number {
    match kind {
        Kind::Int => Number::Int(n),
        Kind::NotATime => Number::NotATime(n),
        Kind::Timestamp(per_ms) => Number::Timestamp(n, per_ms),
    }
}

impl Run<'_, '_> {
    fn value(
        &mut self,
        id: NodeId,
        bytes: &mut &[u8],
        out: &mut Vec<u8>,
        depth: usize,
    ) -> Result<Option<Number>, DecodeError> {
        // A recursive schema's plan loops: its data's depth is bounded here.
        if depth > MAX_DEPTH {
            return err(format!("nested deeper than {MAX_DEPTH}"));
        }
        let plan: &Plan = self.plan;
        let number = match &plan.nodes[id] {
            Node::Union(branches) => {
                let i = long(bytes)?;
                let branch = usize::try_from(i).ok().and_then(|i| branches.get(i));
                let branch = branch.ok_or_else(|| DecodeError(format!("union index {i} of {}", branches.len())))?;
                self.value(*branch, bytes, out, depth + 1)?
            }
            Node::Array(items) => {
                out.push(b'[');
                let mut first = true;
                self.blocks(bytes, |r, bytes| {
                    if !std::mem::take(&mut first) {
                        out.push(b',');
                    }
                    r.value(*items, bytes, out, depth + 1).map(drop)
                })?;
                out.push(b']');
                None
            }
            Node::Map(values) => {
                self.map(*values, bytes, out, depth)?;
                None
            }
            Node::Record(fields) => {
                if fields.is_empty() {
                    out.extend_from_slice(b"{}");
                }
                for f in fields {
                    out.extend_from_slice(&f.prefix);
                    let at = out.len();
                    let n = self
                        .value(f.node, bytes, out, depth + 1)
                        .map_err(|e| DecodeError(format!("field `{}`: {e}", f.name)))?;
                    for &i in &f.notes {
                        self.found[i] = Some(Found { start: at, end: out.len(), number: n });
                    }
                }
                if !fields.is_empty() {
                    out.push(b'}');
                }
                None
            }
            leaf => return leaf_value(leaf, bytes, out),
        };
        Ok(number)
    }

    /// A map, its keys sorted, as `json.rs` writes one: entries first, then the object.
    fn map(&mut self, values: NodeId, bytes: &mut &[u8], out: &mut Vec<u8>, depth: usize) -> Result<(), DecodeError> {
        let mut entries: Vec<(String, Vec<u8>)> = Vec::new();
        self.blocks(bytes, |r, bytes| {
            let k = utf8(bytes, "a map key")?.to_string();
            let mut v = Vec::new();
            r.value(values, bytes, &mut v, depth + 1)?;
            entries.push((k, v));
            Ok(())
        })?;
        entries.sort_by(|a, b| a.0.cmp(&b.0));
        // A key written twice keeps its last value, as a map read into a `Value` does.
        entries.dedup_by(|later, kept| {
            let same = later.0 == kept.0;
            if same {
                std::mem::swap(later, kept);
            }
            same
        });
        out.push(b'{');
        for (i, (k, v)) in entries.iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            string(k, out);
            out.push(b':');
            out.extend_from_slice(v);
        }
        out.push(b'}');
        Ok(())
    }

    fn blocks(
        &mut self,
        bytes: &mut &[u8],
        mut item: impl FnMut(&mut Self, &mut &[u8]) -> Result<(), DecodeError>,
    ) -> Result<(), DecodeError> {
        loop {
            match block(bytes, &mut self.items)? {
                0 => return Ok(()),
                n => (0..n).try_for_each(|_| item(self, bytes))?,
            }
        }
    }
}

/// A value that holds no other: its JSON onto `out`, and its number when it is one.
fn leaf_value(node: &Node, bytes: &mut &[u8], out: &mut Vec<u8>) -> Result<Option<Number>, DecodeError> {
    Ok(match node {
        Node::Null => {
            out.extend_from_slice(b"null");
            None
        }
        Node::Boolean => {
            match take(bytes, 1, "a boolean")?[0] {
                0 => out.extend_from_slice(b"false"),
                1 => out.extend_from_slice(b"true"),
                b => return err(format!("a boolean is 0 or 1, not {b}")),
            }
            None
        }
        Node::Int(kind) => {
            let n = i64::from(int(bytes)?);
            out.extend_from_slice(itoa::Buffer::new().format(n).as_bytes());
            Some(number(*kind, n))
        }
        Node::Long(kind) => {
            let n = long(bytes)?;
            out.extend_from_slice(itoa::Buffer::new().format(n).as_bytes());
            Some(number(*kind, n))
        }
        Node::Float => {
            let f = f64::from(f32::from_le_bytes(take(bytes, 4, "a float")?.try_into().unwrap_or([0; 4])));
            super::float::float(f, out);
            Some(Number::Float(f))
        }
        Node::Double => {
            let f = f64::from_le_bytes(take(bytes, 8, "a double")?.try_into().unwrap_or([0; 8]));
            super::float::float(f, out);
            Some(Number::Float(f))
        }
        Node::String => {
            string(utf8(bytes, "a string")?, out);
            None
        }
        Node::Bytes => {
            let n = length(bytes, "bytes")?;
            base64(take(bytes, n, "bytes")?, out);
            None
        }
        Node::UuidBytes => {
            let n = length(bytes, "a uuid")?;
            uuid(take(bytes, n, "a uuid")?, out)?;
            None
        }
        Node::UuidFixed(size) => {
            uuid(take(bytes, *size, "a uuid")?, out)?;
            None
        }
        Node::Fixed(size) => {
            base64(take(bytes, *size, "fixed")?, out);
            None
        }
        Node::Duration => {
            let b = take(bytes, 12, "a duration")?;
            let part = |i: usize| u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
            let _ = write!(out, r#"{{"months":{},"days":{},"millis":{}}}"#, part(0), part(4), part(8));
            None
        }
        Node::Decimal { fixed, scale } => {
            let b = match fixed {
                None => {
                    let n = length(bytes, "a decimal")?;
                    take(bytes, n, "a decimal")?
                }
                Some(size) => take(bytes, *size, "a decimal")?,
            };
            string(&super::json::decimal_text(b, *scale), out);
            None
        }
        Node::Enum(name, symbols) => {
            let i = int(bytes)?;
            let symbol = usize::try_from(i).ok().and_then(|i| symbols.get(i));
            out.extend_from_slice(symbol.ok_or_else(|| DecodeError(format!("enum {name}: no symbol {i}")))?);
            None
        }
        Node::Union(_) | Node::Array(_) | Node::Map(_) | Node::Record(_) => {
            return err("a value that holds others is no leaf");
        }
    })
}

fn uuid(b: &[u8], out: &mut Vec<u8>) -> Result<(), DecodeError> {
    let b: [u8; 16] = b.try_into().or_else(|_| err(format!("a uuid is 16 bytes, not {}", b.len())))?;
    string(&apache_avro::Uuid::from_bytes(b).to_string(), out);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::avro::Names;
    use proptest::prelude::*;

    const SCHEMA: &str = r#"{"type":"record","name":"R","fields":[
        {"name":"id","type":"string"},{"name":"n","type":["null","long"]},{"name":"ok","type":"boolean"},
        {"name":"at","type":{"type":"long","logicalType":"timestamp-micros"}},
        {"name":"inner","type":{"type":"record","name":"I","fields":[{"name":"x","type":"double"}]}},
        {"name":"again","type":["null","I"]},
        {"name":"tags","type":{"type":"array","items":"string"}},
        {"name":"m","type":{"type":"map","values":"int"}},
        {"name":"e","type":{"type":"enum","name":"E","symbols":["A","B"]}},
        {"name":"price","type":{"type":"bytes","logicalType":"decimal","precision":9,"scale":2}},
        {"name":"raw","type":"bytes"}]}"#;

    fn encode(row: &serde_json::Value) -> Option<Vec<u8>> {
        let s = crate::avro::parse(SCHEMA, &[]).unwrap();
        let mut out = Vec::new();
        crate::avro::Encoder::new(s, vec![]).encode(row.to_string().as_bytes(), &mut out).ok().map(|()| out)
    }

    fn both(bytes: &[u8]) -> (Result<Vec<u8>, DecodeError>, Result<Vec<u8>, DecodeError>) {
        let s = crate::avro::parse(SCHEMA, &[]).unwrap();
        let names = Names::of([&s]);
        let mut direct = Vec::new();
        let paths = vec![vec!["at".to_string()], vec!["inner".to_string(), "x".to_string()]];
        let plan = Plan::new(&s, &names, &paths).unwrap();
        let mut found = [None, None];
        let mut input = bytes;
        let d = plan
            .decode_json(&mut input, &mut direct, &mut found)
            .and_then(|()| if input.is_empty() { Ok(direct) } else { Err(DecodeError("left over".into())) });
        let mut input = bytes;
        let v = crate::avro::decode(&s, &names, &mut input).and_then(|v| {
            if !input.is_empty() {
                return Err(DecodeError("left over".into()));
            }
            let mut out = Vec::new();
            crate::avro::write_json(&s, &names, &v, &mut out);
            Ok(out)
        });
        (d, v)
    }

    #[test]
    fn the_row_is_the_one_the_value_tree_gives_and_wanted_fields_are_found() {
        let row = serde_json::json!({"id":"a\"b","n":5,"ok":true,"at":1700000000123456_i64,"inner":{"x":1.5},
            "again":{"x":2.0},"tags":["t"],"m":{"b":2,"a":1},"e":"B","price":"-1.25","raw":"AAE="});
        let bytes = encode(&row).unwrap();
        let (d, v) = both(&bytes);
        assert_eq!(d.as_ref().unwrap(), v.as_ref().unwrap(), "{}", String::from_utf8_lossy(d.as_ref().unwrap()));
        let s = crate::avro::parse(SCHEMA, &[]).unwrap();
        let names = Names::of([&s]);
        let (mut out, mut found) = (Vec::new(), [None, None]);
        let paths = vec![vec!["at".to_string()], vec!["inner".to_string(), "x".to_string()]];
        Plan::new(&s, &names, &paths).unwrap().decode_json(&mut &bytes[..], &mut out, &mut found).unwrap();
        assert_eq!(found[0].unwrap().number, Some(Number::Timestamp(1_700_000_000_123_456, 1_000)));
        assert_eq!(found[1].unwrap().number, Some(Number::Float(1.5)));
        let f = found[1].unwrap();
        assert_eq!(&out[f.start..f.end], b"1.5");
        for cut in 0..bytes.len() {
            assert!(both(&bytes[..cut]).0.is_err(), "cut at {cut}");
        }
    }

    fn json() -> impl Strategy<Value = serde_json::Value> {
        (any::<String>(), proptest::option::of(any::<i64>()), any::<bool>(), any::<i64>(), any::<f64>(),
         proptest::collection::vec("[a-z]{0,4}", 0..3), proptest::collection::btree_map("[a-c]{1,2}", any::<i32>(), 0..4),
         any::<bool>(), -99_999_999i64..99_999_999, proptest::collection::vec(any::<u8>(), 0..5))
            .prop_map(|(id, n, ok, at, x, tags, m, e, cents, raw)| {
                use base64::Engine;
                serde_json::json!({"id": id, "n": n, "ok": ok, "at": at, "inner": {"x": if x.is_finite() { x } else { 0.0 }},
                    "again": null, "tags": tags, "m": m, "e": if e { "A" } else { "B" },
                    "price": format!("{}.{:02}", cents / 100, (cents % 100).abs()),
                    "raw": base64::engine::general_purpose::STANDARD.encode(raw)})
            })
    }

    proptest! {
        /// Whatever a record holds, both readers give the same row; any bytes at all are read
        /// the same way by both, or refused by both.
        #[test]
        fn direct_and_tree_agree(row in json(), noise in proptest::collection::vec(any::<u8>(), 0..64)) {
            if let Some(bytes) = encode(&row) {
                let (d, v) = both(&bytes);
                prop_assert_eq!(d.unwrap(), v.unwrap());
            }
            let (d, v) = both(&noise);
            prop_assert_eq!(d.is_ok(), v.is_ok());
            if let (Ok(d), Ok(v)) = (d, v) {
                prop_assert_eq!(d, v);
            }
        }
    }
}
