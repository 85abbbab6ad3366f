//! Avro binary to values, strictly: every byte a schema asks for must be there, every varint
//! end within 10 bytes, every count and length fit in what is left, every union index and enum
//! symbol exist. apache-avro's own decoder reads a record cut short at some fields as `null`s,
//! which would make a truncated record a plausible row; a stream processor must dead-letter it.
//!
//! What comes out is apache-avro's `Value`, so its schema resolution (writer to reader) and
//! `json.rs` apply unchanged.

use apache_avro::schema::{InnerDecimalSchema, UuidSchema};
use apache_avro::types::Value;
use apache_avro::{Decimal, Schema};

use super::Names;
use super::read::{MAX_DEPTH, block, err, int, length, long, take};

/// Why bytes are not a value of the schema.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct DecodeError(pub String);

/// Decodes one value of `schema` from the front of `bytes`, leaving the rest.
pub fn decode(schema: &Schema, names: &Names, bytes: &mut &[u8]) -> Result<Value, DecodeError> {
    let mut items = 0;
    Reader { names, items: &mut items }.value(schema, bytes, 0)
}

struct Reader<'a> {
    names: &'a Names,
    items: &'a mut usize,
}

impl Reader<'_> {
    fn value(&mut self, s: &Schema, bytes: &mut &[u8], depth: usize) -> Result<Value, DecodeError> {
        if depth > MAX_DEPTH {
            return err(format!("nested deeper than {MAX_DEPTH}"));
        }
        Ok(match s {
            Schema::Null => Value::Null,
            Schema::Boolean => match take(bytes, 1, "a boolean")?[0] {
                0 => Value::Boolean(false),
                1 => Value::Boolean(true),
                b => return err(format!("a boolean is 0 or 1, not {b}")),
            },
            Schema::Int => Value::Int(int(bytes)?),
            Schema::Date => Value::Date(int(bytes)?),
            Schema::TimeMillis => Value::TimeMillis(int(bytes)?),
            Schema::Long => Value::Long(long(bytes)?),
            Schema::TimeMicros => Value::TimeMicros(long(bytes)?),
            Schema::TimestampMillis => Value::TimestampMillis(long(bytes)?),
            Schema::TimestampMicros => Value::TimestampMicros(long(bytes)?),
            Schema::TimestampNanos => Value::TimestampNanos(long(bytes)?),
            Schema::LocalTimestampMillis => Value::LocalTimestampMillis(long(bytes)?),
            Schema::LocalTimestampMicros => Value::LocalTimestampMicros(long(bytes)?),
            Schema::LocalTimestampNanos => Value::LocalTimestampNanos(long(bytes)?),
            Schema::Float => Value::Float(f32::from_le_bytes(take(bytes, 4, "a float")?.try_into().unwrap_or([0; 4]))),
            Schema::Double => {
                Value::Double(f64::from_le_bytes(take(bytes, 8, "a double")?.try_into().unwrap_or([0; 8])))
            }
            Schema::Bytes => {
                let n = length(bytes, "bytes")?;
                Value::Bytes(take(bytes, n, "bytes")?.to_vec())
            }
            Schema::String => Value::String(self.string(bytes)?),
            Schema::Uuid(UuidSchema::String) => {
                let t = self.string(bytes)?;
                Value::Uuid(apache_avro::Uuid::parse_str(&t).or_else(|e| err(format!("uuid {t:?}: {e}")))?)
            }
            Schema::Uuid(UuidSchema::Bytes) => {
                let n = length(bytes, "a uuid")?;
                uuid(take(bytes, n, "a uuid")?)?
            }
            Schema::Uuid(UuidSchema::Fixed(f)) => uuid(take(bytes, f.size, "a uuid")?)?,
            Schema::Fixed(f) => Value::Fixed(f.size, take(bytes, f.size, &format!("fixed {}", f.name))?.to_vec()),
            Schema::Duration(_) => {
                let b: [u8; 12] = take(bytes, 12, "a duration")?.try_into().unwrap_or([0; 12]);
                Value::Duration(apache_avro::Duration::from(b))
            }
            Schema::Decimal(d) => {
                let b = match &d.inner {
                    InnerDecimalSchema::Bytes => {
                        let n = length(bytes, "a decimal")?;
                        take(bytes, n, "a decimal")?
                    }
                    InnerDecimalSchema::Fixed(f) => take(bytes, f.size, "a decimal")?,
                };
                Value::Decimal(Decimal::from(b))
            }
            Schema::BigDecimal => return err("big-decimal values are not read yet"),
            Schema::Enum(e) => {
                let i = int(bytes)?;
                let symbol = usize::try_from(i).ok().and_then(|i| e.symbols.get(i));
                let symbol = symbol.ok_or_else(|| DecodeError(format!("enum {}: no symbol {i}", e.name)))?;
                Value::Enum(i as u32, symbol.clone())
            }
            Schema::Union(u) => {
                let i = long(bytes)?;
                let branch = usize::try_from(i).ok().and_then(|i| u.variants().get(i));
                let branch = branch.ok_or_else(|| DecodeError(format!("union index {i} of {}", u.variants().len())))?;
                Value::Union(i as u32, Box::new(self.value(branch, bytes, depth + 1)?))
            }
            Schema::Array(a) => {
                let mut items = Vec::new();
                self.blocks(bytes, |r, bytes| {
                    items.push(r.value(&a.items, bytes, depth + 1)?);
                    Ok(())
                })?;
                Value::Array(items)
            }
            Schema::Map(m) => {
                let mut entries = std::collections::HashMap::new();
                self.blocks(bytes, |r, bytes| {
                    let k = r.string(bytes)?;
                    let v = r.value(&m.types, bytes, depth + 1)?;
                    entries.insert(k, v);
                    Ok(())
                })?;
                Value::Map(entries)
            }
            Schema::Record(r) => {
                let mut fields = Vec::with_capacity(r.fields.len());
                for f in &r.fields {
                    let v = self
                        .value(&f.schema, bytes, depth + 1)
                        .map_err(|e| DecodeError(format!("field `{}`: {e}", f.name)))?;
                    fields.push((f.name.clone(), v));
                }
                Value::Record(fields)
            }
            Schema::Ref { name } => {
                let names = self.names;
                let s = names.get(name).ok_or_else(|| DecodeError(format!("the schema names {name}, undefined")))?;
                self.value(s, bytes, depth + 1)?
            }
        })
    }

    fn string(&mut self, bytes: &mut &[u8]) -> Result<String, DecodeError> {
        let n = length(bytes, "a string")?;
        let b = take(bytes, n, "a string")?;
        String::from_utf8(b.to_vec()).or_else(|_| err("a string is not UTF-8"))
    }

    /// Array and map blocks: `item` for each item, until a count of 0.
    fn blocks(
        &mut self,
        bytes: &mut &[u8],
        mut item: impl FnMut(&mut Self, &mut &[u8]) -> Result<(), DecodeError>,
    ) -> Result<(), DecodeError> {
        loop {
            match block(bytes, self.items)? {
                0 => return Ok(()),
                n => (0..n).try_for_each(|_| item(self, bytes))?,
            }
        }
    }
}

fn uuid(b: &[u8]) -> Result<Value, DecodeError> {
    let b: [u8; 16] = b.try_into().or_else(|_| err(format!("a uuid is 16 bytes, not {}", b.len())))?;
    Ok(Value::Uuid(apache_avro::Uuid::from_bytes(b)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const SCHEMA: &str = r#"{"type":"record","name":"R","fields":[
        {"name":"id","type":"string"},{"name":"n","type":"long"},{"name":"ok","type":"boolean"},
        {"name":"note","type":["null","string"]},{"name":"tags","type":{"type":"array","items":"null"}},
        {"name":"m","type":{"type":"map","values":"double"}},
        {"name":"e","type":{"type":"enum","name":"E","symbols":["A","B"]}}]}"#;

    fn schema() -> Schema {
        crate::avro::parse(SCHEMA, &[]).unwrap()
    }

    #[test]
    fn what_apache_avro_reads_this_reads_and_a_record_cut_short_is_refused() {
        let s = schema();
        let enc = crate::avro::Encoder::new(s.clone(), vec![]);
        let mut bytes = Vec::new();
        let row = r#"{"id":"x","n":-5,"ok":true,"note":"hello","tags":[null,null],"m":{"a":1.5},"e":"B"}"#;
        enc.encode(row.as_bytes(), &mut bytes).unwrap();
        let theirs = apache_avro::reader::datum::GenericDatumReader::builder(&s)
            .build()
            .unwrap()
            .read_value(&mut &bytes[..])
            .unwrap();
        let names = Names::of([&s]);
        let mut input = &bytes[..];
        assert_eq!(decode(&s, &names, &mut input).unwrap(), theirs);
        assert!(input.is_empty());
        for cut in 0..bytes.len() {
            let mut short = &bytes[..cut];
            assert!(decode(&s, &names, &mut short).is_err(), "cut at {cut} of {}", bytes.len());
        }
    }

    #[test]
    fn counts_cannot_ask_for_unbounded_memory() {
        let s = crate::avro::parse(r#"{"type":"array","items":"null"}"#, &[]).unwrap();
        let mut bytes = vec![];
        // A count of 2^40 nulls, which take no bytes.
        let z = (1u64 << 41) as i64;
        let mut n = z as u64;
        while n >= 0x80 {
            bytes.push((n as u8) | 0x80);
            n >>= 7;
        }
        bytes.push(n as u8);
        let e = decode(&s, &Names::of([&s]), &mut &bytes[..]).unwrap_err();
        assert!(e.0.contains("items"), "{e}");
    }

    proptest! {
        /// Any bytes decode or are refused; nothing panics or allocates without bound.
        #[test]
        fn any_bytes_decode_or_are_refused(bytes in proptest::collection::vec(any::<u8>(), 0..256)) {
            let s = schema();
            let _ = decode(&s, &Names::of([&s]), &mut &bytes[..]);
        }
    }
}
