//! Rows (JSON objects) to Avro binary under a writer's schema, for the Kafka sink.
//!
//! Mapping, the inverse of the parser's (`docs/formats.md`): a record from an object, by field
//! name (a missing field takes the schema's default, else the row does not fit); `int`/`long`
//! from integers in range; `float`/`double` from numbers; `string` from a string; `bytes` and
//! `fixed` from base64 text; an `enum` from one of its symbols; arrays and maps from arrays and
//! objects; a union from the first branch the value fits (`null` for JSON null); logical types
//! from their underlying type (a `timestamp-millis` from epoch milliseconds, a `decimal` from a
//! number or a decimal string, scaled to the schema's scale, a `uuid` from its text).
//!
//! A value that does not fit is a [`Misfit`] naming its field's path (`items[2].price`), so the
//! row's dead letter says what to fix; nothing is written for it.

use std::collections::HashMap;

use apache_avro::Schema;
use apache_avro::schema::{InnerDecimalSchema, Name, RecordSchema};
use serde_json::Value;

/// Why a row does not fit the schema: the field's path and what is wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("field `{field}`: {message}")]
pub struct Misfit {
    pub field: String,
    pub message: String,
}

/// A writer's schema, ready to encode rows.
pub struct Encoder {
    schema: Schema,
    /// Named types by full name, for `Ref`s.
    names: super::Names,
    /// Each field default, encoded once (by record and field name): a default is written in
    /// Avro's JSON encoding (bytes as code points, a union's as its first branch), not as rows
    /// are, so apache-avro encodes it.
    defaults: HashMap<(Name, String), Result<Vec<u8>, String>>,
}

/// How deep values may nest: a row deeper than this does not fit (a recursive schema would
/// otherwise let one row take the stack).
const MAX_DEPTH: usize = 64;

impl Encoder {
    pub fn new(schema: Schema, references: Vec<Schema>) -> Self {
        let names = super::Names::of(references.iter().chain(std::iter::once(&schema)));
        let all: Vec<&Schema> = std::iter::once(&schema).chain(&references).collect();
        let mut defaults = HashMap::new();
        for s in names.values() {
            let Schema::Record(r) = s else { continue };
            for f in &r.fields {
                if let Some(d) = &f.default {
                    defaults.insert((r.name.clone(), f.name.clone()), encode_default(&f.schema, d, &all));
                }
            }
        }
        Self { schema, names, defaults }
    }

    pub fn schema(&self) -> &Schema {
        &self.schema
    }

    /// Appends `row` (JSON text) encoded to `out`; on a misfit `out` is as it was.
    pub fn encode(&self, row: &[u8], out: &mut Vec<u8>) -> Result<(), Misfit> {
        let value: Value = serde_json::from_slice(row)
            .map_err(|e| Misfit { field: String::new(), message: format!("the row is not JSON: {e}") })?;
        let start = out.len();
        let mut path = Vec::new();
        let r = self.write(&self.schema, &value, out, &mut path);
        if r.is_err() {
            out.truncate(start);
        }
        r
    }

    fn write(&self, s: &Schema, v: &Value, out: &mut Vec<u8>, path: &mut Vec<String>) -> Result<(), Misfit> {
        if path.len() > MAX_DEPTH {
            return Err(misfit(path, format!("nested deeper than {MAX_DEPTH}")));
        }
        let wrong = |path: &[String], want: &str| misfit(path, format!("{} is not {want}", kind(v)));
        match s {
            Schema::Null => v.is_null().then_some(()).ok_or_else(|| wrong(path, "null")),
            Schema::Boolean => {
                let b = v.as_bool().ok_or_else(|| wrong(path, "a boolean"))?;
                out.push(u8::from(b));
                Ok(())
            }
            Schema::Int | Schema::Date | Schema::TimeMillis => {
                let n =
                    v.as_i64().and_then(|n| i32::try_from(n).ok()).ok_or_else(|| wrong(path, "a 32-bit integer"))?;
                zigzag(i64::from(n), out);
                Ok(())
            }
            Schema::Long
            | Schema::TimeMicros
            | Schema::TimestampMillis
            | Schema::TimestampMicros
            | Schema::TimestampNanos
            | Schema::LocalTimestampMillis
            | Schema::LocalTimestampMicros
            | Schema::LocalTimestampNanos => {
                zigzag(v.as_i64().ok_or_else(|| wrong(path, "a 64-bit integer"))?, out);
                Ok(())
            }
            Schema::Float => {
                let f = v.as_f64().ok_or_else(|| wrong(path, "a number"))?;
                out.extend_from_slice(&(f as f32).to_le_bytes());
                Ok(())
            }
            Schema::Double => {
                out.extend_from_slice(&v.as_f64().ok_or_else(|| wrong(path, "a number"))?.to_le_bytes());
                Ok(())
            }
            Schema::String | Schema::Uuid(apache_avro::schema::UuidSchema::String) => {
                let t = v.as_str().ok_or_else(|| wrong(path, "a string"))?;
                bytes(t.as_bytes(), out);
                Ok(())
            }
            Schema::Bytes | Schema::BigDecimal | Schema::Uuid(apache_avro::schema::UuidSchema::Bytes) => {
                bytes(&base64_of(v, path)?, out);
                Ok(())
            }
            Schema::Fixed(f) | Schema::Duration(f) | Schema::Uuid(apache_avro::schema::UuidSchema::Fixed(f)) => {
                let b = base64_of(v, path)?;
                if b.len() != f.size {
                    return Err(misfit(path, format!("{} bytes, but fixed {} holds {}", b.len(), f.name, f.size)));
                }
                out.extend_from_slice(&b);
                Ok(())
            }
            Schema::Decimal(d) => {
                let unscaled = decimal(v, d.scale, path)?;
                let b = twos_complement(unscaled);
                match &d.inner {
                    InnerDecimalSchema::Bytes => bytes(&b, out),
                    InnerDecimalSchema::Fixed(f) => {
                        if b.len() > f.size {
                            return Err(misfit(path, format!("does not fit fixed {} of {} bytes", f.name, f.size)));
                        }
                        let pad = if unscaled < 0 { 0xff } else { 0 };
                        out.extend(std::iter::repeat_n(pad, f.size - b.len()));
                        out.extend_from_slice(&b);
                    }
                }
                Ok(())
            }
            Schema::Enum(e) => {
                let t = v.as_str().ok_or_else(|| wrong(path, "a string (an enum symbol)"))?;
                let i = e.symbols.iter().position(|s| s == t).ok_or_else(|| {
                    misfit(path, format!("{t:?} is not a symbol of enum {} ({})", e.name, e.symbols.join(", ")))
                })?;
                zigzag(i as i64, out);
                Ok(())
            }
            Schema::Array(a) => {
                let items = v.as_array().ok_or_else(|| wrong(path, "an array"))?;
                if !items.is_empty() {
                    zigzag(items.len() as i64, out);
                    for (i, item) in items.iter().enumerate() {
                        path.push(format!("[{i}]"));
                        self.write(&a.items, item, out, path)?;
                        path.pop();
                    }
                }
                out.push(0);
                Ok(())
            }
            Schema::Map(m) => {
                let entries = v.as_object().ok_or_else(|| wrong(path, "an object (a map)"))?;
                if !entries.is_empty() {
                    zigzag(entries.len() as i64, out);
                    for (k, item) in entries {
                        bytes(k.as_bytes(), out);
                        path.push(format!(".{k}"));
                        self.write(&m.types, item, out, path)?;
                        path.pop();
                    }
                }
                out.push(0);
                Ok(())
            }
            Schema::Union(u) => self.write_union(u.variants(), v, out, path),
            Schema::Record(r) => self.write_record(r, v, out, path),
            Schema::Ref { name } => {
                let s =
                    self.names.get(name).ok_or_else(|| misfit(path, format!("the schema names {name}, undefined")))?;
                self.write(s, v, out, path)
            }
        }
    }

    fn write_record(
        &self,
        r: &RecordSchema,
        v: &Value,
        out: &mut Vec<u8>,
        path: &mut Vec<String>,
    ) -> Result<(), Misfit> {
        let obj =
            v.as_object().ok_or_else(|| misfit(path, format!("{} is not an object (record {})", kind(v), r.name)))?;
        for f in &r.fields {
            path.push(if path.is_empty() { f.name.clone() } else { format!(".{}", f.name) });
            match obj.get(&f.name) {
                Some(x) => self.write(&f.schema, x, out, path)?,
                None => match self.defaults.get(&(r.name.clone(), f.name.clone())) {
                    Some(Ok(d)) => out.extend_from_slice(d),
                    Some(Err(e)) => {
                        return Err(misfit(path, format!("missing, and its default cannot be written: {e}")));
                    }
                    None => return Err(misfit(path, "missing, and the schema gives it no default".into())),
                },
            }
            path.pop();
        }
        Ok(())
    }

    /// The first branch `v` fits: its index, then the value.
    fn write_union(
        &self,
        branches: &[Schema],
        v: &Value,
        out: &mut Vec<u8>,
        path: &mut Vec<String>,
    ) -> Result<(), Misfit> {
        let start = out.len();
        let mut last = None;
        for (i, b) in branches.iter().enumerate() {
            zigzag(i as i64, out);
            match self.write(b, v, out, path) {
                Ok(()) => return Ok(()),
                Err(e) => {
                    out.truncate(start);
                    last = Some(e);
                }
            }
        }
        let names: Vec<String> = branches.iter().map(branch_name).collect();
        Err(match (branches.len(), last) {
            (1, Some(e)) => e,
            _ => misfit(path, format!("{} fits no branch of the union [{}]", kind(v), names.join(", "))),
        })
    }
}

/// A field's default in Avro binary.
fn encode_default(schema: &Schema, default: &Value, all: &[&Schema]) -> Result<Vec<u8>, String> {
    use apache_avro::types::Value as Avro;
    use apache_avro::writer::datum::GenericDatumWriter;
    let v = Avro::try_from(default.clone())
        .map_err(|e| e.to_string())?
        .resolve_schemata(schema, all.to_vec())
        .map_err(|e| e.to_string())?;
    let w = GenericDatumWriter::builder(schema).schemata(all.to_vec()).map_err(|e| e.to_string())?.build();
    w.map_err(|e| e.to_string())?.write_value_to_vec(v).map_err(|e| e.to_string())
}

fn branch_name(s: &Schema) -> String {
    match s.name() {
        Some(n) => n.fullname(None),
        None => format!("{:?}", apache_avro::schema::SchemaKind::from(s)).to_lowercase(),
    }
}

fn misfit(path: &[String], message: String) -> Misfit {
    let field = if path.is_empty() { "(the row)".to_string() } else { path.concat() };
    Misfit { field, message }
}

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "an integer",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

fn zigzag(n: i64, out: &mut Vec<u8>) {
    let mut z = ((n << 1) ^ (n >> 63)) as u64;
    while z >= 0x80 {
        out.push((z as u8) | 0x80);
        z >>= 7;
    }
    out.push(z as u8);
}

fn bytes(b: &[u8], out: &mut Vec<u8>) {
    zigzag(b.len() as i64, out);
    out.extend_from_slice(b);
}

fn base64_of(v: &Value, path: &[String]) -> Result<Vec<u8>, Misfit> {
    use base64::Engine;
    let t = v.as_str().ok_or_else(|| misfit(path, format!("{} is not a string (bytes are base64 text)", kind(v))))?;
    base64::engine::general_purpose::STANDARD
        .decode(t)
        .map_err(|e| misfit(path, format!("{t:?} is not base64 ({e}); bytes are written as base64 text")))
}

/// The unscaled value of a decimal number or string at `scale` digits after the point.
fn decimal(v: &Value, scale: usize, path: &[String]) -> Result<i128, Misfit> {
    let text = match v {
        Value::Number(n) => n.to_string(),
        Value::String(s) => s.clone(),
        _ => return Err(misfit(path, format!("{} is not a decimal (a number or its text)", kind(v)))),
    };
    let bad = |why: &str| misfit(path, format!("{text:?}: {why}"));
    let (neg, digits) = match text.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, text.as_str()),
    };
    let (whole, frac) = digits.split_once('.').unwrap_or((digits, ""));
    if whole.is_empty() || !whole.bytes().chain(frac.bytes()).all(|b| b.is_ascii_digit()) {
        return Err(bad("not a decimal number"));
    }
    let frac = frac.trim_end_matches('0');
    if frac.len() > scale {
        return Err(bad(&format!("more than the schema's {scale} digits after the point")));
    }
    let mut unscaled: i128 = 0;
    for b in whole.bytes().chain(frac.bytes()).chain(std::iter::repeat_n(b'0', scale - frac.len())) {
        unscaled = unscaled
            .checked_mul(10)
            .and_then(|u| u.checked_add(i128::from(b - b'0')))
            .ok_or_else(|| bad("too large"))?;
    }
    Ok(if neg { -unscaled } else { unscaled })
}

/// The shortest big-endian two's complement bytes of `n`.
fn twos_complement(n: i128) -> Vec<u8> {
    let all = n.to_be_bytes();
    let pad = if n < 0 { 0xff } else { 0 };
    let mut start = 0;
    while start < 15 && all[start] == pad && (all[start + 1] & 0x80 == pad & 0x80) {
        start += 1;
    }
    all[start..].to_vec()
}

#[cfg(test)]
mod tests;
