//! Avro values to JSON text, the rows the standard library's Avro parser emits: the inverse of
//! `encode.rs`. A union is its branch's value (no `{"type": ...}` wrapper), an enum its
//! symbol, `bytes` and `fixed` base64 text, a `decimal` its exact decimal text (so no digit is
//! lost to a float), a float that is not finite `null`, and logical types their underlying
//! value (a `timestamp-millis` epoch milliseconds, so it can be a `time_field`).

use std::collections::HashMap;

use apache_avro::Schema;
use apache_avro::schema::Name;
use apache_avro::types::Value;

use super::float::float;

/// Named types by full name, for the `Ref`s inside a schema.
pub struct Names(HashMap<Name, Schema>);

impl Names {
    /// The named types of `schema` and of the schemas it references.
    pub fn of<'a>(schemas: impl IntoIterator<Item = &'a Schema>) -> Self {
        let mut names = HashMap::new();
        for s in schemas {
            collect(s, &mut names);
        }
        Self(names)
    }

    pub fn get(&self, name: &Name) -> Option<&Schema> {
        self.0.get(name)
    }

    /// As apache-avro's resolution takes them (`Value::resolve_with_names`).
    pub fn map(&self) -> &HashMap<Name, Schema> {
        &self.0
    }

    pub(super) fn values(&self) -> impl Iterator<Item = &Schema> {
        self.0.values()
    }
}

/// Named types inside `s`, by full name.
fn collect(s: &Schema, names: &mut HashMap<Name, Schema>) {
    match s {
        Schema::Record(r) => {
            names.insert(r.name.clone(), s.clone());
            for f in &r.fields {
                collect(&f.schema, names);
            }
        }
        Schema::Enum(e) => {
            names.insert(e.name.clone(), s.clone());
        }
        Schema::Fixed(f) => {
            names.insert(f.name.clone(), s.clone());
        }
        Schema::Array(a) => collect(&a.items, names),
        Schema::Map(m) => collect(&m.types, names),
        Schema::Union(u) => u.variants().iter().for_each(|b| collect(b, names)),
        _ => {}
    }
}

/// Appends `value`, which conforms to `schema`, as JSON text.
pub fn write_json(schema: &Schema, names: &Names, value: &Value, out: &mut Vec<u8>) {
    let schema = match schema {
        Schema::Ref { name } => match names.get(name) {
            Some(s) => s,
            None => return write_plain(value, out),
        },
        s => s,
    };
    match (schema, value) {
        (Schema::Union(u), Value::Union(i, v)) => match u.variants().get(*i as usize) {
            Some(branch) => write_json(branch, names, v, out),
            None => write_plain(v, out),
        },
        (Schema::Record(r), Value::Record(fields)) => {
            out.push(b'{');
            for (i, (name, v)) in fields.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                string(name, out);
                out.push(b':');
                match r.lookup.get(name).and_then(|&k| r.fields.get(k)) {
                    Some(f) => write_json(&f.schema, names, v, out),
                    None => write_plain(v, out),
                }
            }
            out.push(b'}');
        }
        (Schema::Array(a), Value::Array(items)) => {
            out.push(b'[');
            for (i, v) in items.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_json(&a.items, names, v, out);
            }
            out.push(b']');
        }
        (Schema::Map(m), Value::Map(entries)) => {
            out.push(b'{');
            // Sorted, so the same record always makes the same row.
            let mut keys: Vec<&String> = entries.keys().collect();
            keys.sort();
            for (i, k) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                string(k, out);
                out.push(b':');
                write_json(&m.types, names, &entries[k], out);
            }
            out.push(b'}');
        }
        (Schema::Decimal(d), Value::Decimal(dec)) => {
            let bytes: Vec<u8> = Vec::try_from(dec.clone()).unwrap_or_default();
            string(&decimal_text(&bytes, d.scale), out);
        }
        _ => write_plain(value, out),
    }
}

/// A value whose schema adds nothing to how it is written.
fn write_plain(value: &Value, out: &mut Vec<u8>) {
    use std::io::Write;
    match value {
        Value::Null => out.extend_from_slice(b"null"),
        Value::Boolean(b) => out.extend_from_slice(if *b { b"true" } else { b"false" }),
        Value::Int(n) | Value::Date(n) | Value::TimeMillis(n) => {
            let _ = write!(out, "{n}");
        }
        Value::Long(n)
        | Value::TimeMicros(n)
        | Value::TimestampMillis(n)
        | Value::TimestampMicros(n)
        | Value::TimestampNanos(n)
        | Value::LocalTimestampMillis(n)
        | Value::LocalTimestampMicros(n)
        | Value::LocalTimestampNanos(n) => {
            let _ = write!(out, "{n}");
        }
        Value::Float(f) => float(f64::from(*f), out),
        Value::Double(f) => float(*f, out),
        Value::Bytes(b) | Value::Fixed(_, b) => string(&base64(b), out),
        Value::String(s) | Value::Enum(_, s) => string(s, out),
        Value::Uuid(u) => string(&u.to_string(), out),
        Value::BigDecimal(d) => string(&d.to_string(), out),
        Value::Decimal(d) => {
            let bytes: Vec<u8> = Vec::try_from(d.clone()).unwrap_or_default();
            string(&decimal_text(&bytes, 0), out);
        }
        Value::Duration(d) => {
            let _ = write!(
                out,
                r#"{{"months":{},"days":{},"millis":{}}}"#,
                u32::from(d.months()),
                u32::from(d.days()),
                u32::from(d.millis())
            );
        }
        Value::Union(_, v) => write_plain(v, out),
        Value::Array(items) => {
            out.push(b'[');
            for (i, v) in items.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_plain(v, out);
            }
            out.push(b']');
        }
        Value::Map(entries) => {
            let mut keys: Vec<&String> = entries.keys().collect();
            keys.sort();
            out.push(b'{');
            for (i, k) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                string(k, out);
                out.push(b':');
                write_plain(&entries[k], out);
            }
            out.push(b'}');
        }
        Value::Record(fields) => {
            out.push(b'{');
            for (i, (k, v)) in fields.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                string(k, out);
                out.push(b':');
                write_plain(v, out);
            }
            out.push(b'}');
        }
    }
}

fn string(s: &str, out: &mut Vec<u8>) {
    let _ = serde_json::to_writer(&mut *out, s);
}

fn base64(b: &[u8]) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(b)
}

/// Big-endian two's complement `unscaled` at `scale` digits after the point, as decimal text.
pub(super) fn decimal_text(unscaled: &[u8], scale: usize) -> String {
    // Up to 16 bytes fit an i128 exactly; longer ones (precision over 38) are rare enough to
    // be written digit by digit through a bigint-free long division.
    let negative = unscaled.first().is_some_and(|b| b & 0x80 != 0);
    let mut magnitude: Vec<u8> = if negative { negate(unscaled) } else { unscaled.to_vec() };
    let mut digits = Vec::new();
    while magnitude.iter().any(|&b| b != 0) {
        let mut rem: u32 = 0;
        for b in magnitude.iter_mut() {
            let cur = (rem << 8) | u32::from(*b);
            *b = (cur / 10) as u8;
            rem = cur % 10;
        }
        digits.push(b'0' + rem as u8);
    }
    while digits.len() <= scale {
        digits.push(b'0');
    }
    digits.reverse();
    let (whole, frac) = digits.split_at(digits.len() - scale);
    let mut text = String::with_capacity(digits.len() + 2);
    if negative {
        text.push('-');
    }
    text.push_str(std::str::from_utf8(whole).unwrap_or("0"));
    if scale > 0 {
        text.push('.');
        text.push_str(std::str::from_utf8(frac).unwrap_or(""));
    }
    text
}

/// The magnitude of a negative two's complement number.
fn negate(bytes: &[u8]) -> Vec<u8> {
    let mut out: Vec<u8> = bytes.iter().map(|b| !b).collect();
    for b in out.iter_mut().rev() {
        let (v, carry) = b.overflowing_add(1);
        *b = v;
        if !carry {
            break;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decimals_read_as_exact_text() {
        assert_eq!(decimal_text(&[0x04, 0xd2], 2), "12.34");
        assert_eq!(decimal_text(&[0xff], 2), "-0.01");
        assert_eq!(decimal_text(&[0x00], 0), "0");
        assert_eq!(decimal_text(&[0x7f, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff], 3), "2361183241434822606.847");
    }

    /// What the encoder writes, the reader and this writer give back as the same JSON.
    #[test]
    fn rows_round_trip_through_avro() {
        let schema = crate::avro::parse(
            r#"{"type":"record","name":"R","fields":[
                {"name":"id","type":"string"},{"name":"amount","type":"double"},
                {"name":"note","type":["null","string"]},
                {"name":"status","type":{"type":"enum","name":"S","symbols":["OK","ERROR"]}},
                {"name":"price","type":{"type":"bytes","logicalType":"decimal","precision":9,"scale":2}},
                {"name":"attrs","type":{"type":"map","values":"long"}},
                {"name":"raw","type":"bytes"}]}"#,
            &[],
        )
        .unwrap();
        let row = r#"{"id":"a\"b","amount":12.0,"note":null,"status":"OK","price":"-3.05","attrs":{"b":2,"a":1},"raw":"AAE="}"#;
        let enc = crate::avro::Encoder::new(schema.clone(), vec![]);
        let mut bytes = Vec::new();
        enc.encode(row.as_bytes(), &mut bytes).unwrap();
        let reader = apache_avro::reader::datum::GenericDatumReader::builder(&schema).build().unwrap();
        let v = reader.read_value(&mut &bytes[..]).unwrap();
        let mut out = Vec::new();
        write_json(&schema, &Names::of([&schema]), &v, &mut out);
        let back: serde_json::Value = serde_json::from_slice(&out).unwrap();
        let mut want: serde_json::Value = serde_json::from_str(row).unwrap();
        want["attrs"] = serde_json::json!({"a":1,"b":2});
        assert_eq!(back, want, "{}", String::from_utf8_lossy(&out));
    }
}
