//! The columns of a table sink, from an Avro record schema (`.avsc`, the same file a Kafka sink
//! writes Avro with, or a registry's): each field a column of the Arrow type that holds what
//! the Avro parser and the Kafka sink put in a JSON row for it.
//!
//! Invariant: every Avro type that maps is mapped one way, so the same schema gives the same
//! columns to Parquet files and to Iceberg tables; a type that does not map is refused with the
//! field's path and what to use instead.

use std::sync::Arc;

use apache_avro::Schema;
use apache_avro::schema::{RecordField, UnionSchema};
use arrow_schema::{DataType, Field, Fields, TimeUnit};
use weir_schema::avro::Names;

/// The time zone of a timestamp column: as an offset, which arrow reads without a zone
/// database; a Parquet file marks the column as UTC either way.
pub const UTC: &str = "+00:00";

/// The Arrow schema of an Avro record schema's rows; `Err` names the field that has no column
/// type, and why.
pub fn arrow_schema(avro: &Schema, names: &Names) -> Result<arrow_schema::Schema, String> {
    let Schema::Record(r) = resolve(avro, names)? else {
        return Err("the schema is not a record: a table's rows are records, one field per column".into());
    };
    Ok(arrow_schema::Schema::new(fields(&r.fields, names, "", 0)?))
}

fn resolve<'s>(s: &'s Schema, names: &'s Names) -> Result<&'s Schema, String> {
    match s {
        Schema::Ref { name } => names.get(name).ok_or_else(|| format!("the schema names {name}, undefined")),
        s => Ok(s),
    }
}

fn fields(fields: &[RecordField], names: &Names, path: &str, depth: usize) -> Result<Fields, String> {
    if depth > 32 {
        return Err(format!("`{path}`: records nested deeper than 32 (a recursive schema has no columns)"));
    }
    let mut out = Vec::with_capacity(fields.len());
    for f in fields {
        let at = if path.is_empty() { f.name.clone() } else { format!("{path}.{}", f.name) };
        let (t, nullable) = column(&f.schema, names, &at, depth)?;
        out.push(Field::new(&f.name, t, nullable));
    }
    Ok(out.into())
}

/// A field's column type, and whether it may be null (`["null", T]`).
fn column(s: &Schema, names: &Names, at: &str, depth: usize) -> Result<(DataType, bool), String> {
    let s = resolve(s, names)?;
    if let Schema::Union(u) = s {
        return Ok((nullable(u, names, at, depth)?, true));
    }
    let t = match s {
        Schema::Boolean => DataType::Boolean,
        Schema::Int => DataType::Int32,
        Schema::Long => DataType::Int64,
        Schema::Float => DataType::Float32,
        Schema::Double => DataType::Float64,
        Schema::String | Schema::Enum(_) | Schema::Uuid(_) => DataType::Utf8,
        Schema::Date => DataType::Date32,
        Schema::TimestampMillis => DataType::Timestamp(TimeUnit::Millisecond, Some(UTC.into())),
        Schema::TimestampMicros => DataType::Timestamp(TimeUnit::Microsecond, Some(UTC.into())),
        Schema::LocalTimestampMillis => DataType::Timestamp(TimeUnit::Millisecond, None),
        Schema::LocalTimestampMicros => DataType::Timestamp(TimeUnit::Microsecond, None),
        Schema::Decimal(d) if d.precision <= 38 => DataType::Decimal128(d.precision as u8, d.scale as i8),
        Schema::Array(a) => {
            let (item, null) = column(&a.items, names, &format!("{at}[]"), depth + 1)?;
            DataType::List(Arc::new(Field::new("item", item, null)))
        }
        Schema::Record(r) => DataType::Struct(fields(&r.fields, names, at, depth + 1)?),
        other => {
            return Err(format!(
                "`{at}` is {}, which has no column type here: use a long, int, double, float, boolean, \
                 string, enum, date, timestamp, decimal (precision up to 38), array or record",
                kind(other)
            ));
        }
    };
    Ok((t, false))
}

fn nullable(u: &UnionSchema, names: &Names, at: &str, depth: usize) -> Result<DataType, String> {
    let v = u.variants();
    match v {
        [Schema::Null, t] | [t, Schema::Null] => Ok(column(t, names, at, depth)?.0),
        _ => Err(format!(
            "`{at}` is a union of {} branches: a column takes one type, or [\"null\", TYPE] when it may be missing",
            v.len()
        )),
    }
}

fn kind(s: &Schema) -> String {
    format!("{:?}", apache_avro::schema::SchemaKind::from(s)).to_lowercase()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn schema(text: &str) -> Result<arrow_schema::Schema, String> {
        let s = weir_schema::avro::parse(text, &[]).map_err(|e| e.to_string())?;
        arrow_schema(&s, &Names::of([&s]))
    }

    #[test]
    fn a_window_schema_becomes_its_columns() {
        let s = schema(
            r#"{"type":"record","name":"W","fields":[
            {"name":"window_start","type":{"type":"long","logicalType":"timestamp-millis"}},
            {"name":"status","type":["null","string"]},{"name":"count","type":"long"},
            {"name":"rate","type":"double"},{"name":"tags","type":{"type":"array","items":"string"}}]}"#,
        )
        .unwrap();
        let f = s.field_with_name("window_start").unwrap();
        assert_eq!(f.data_type(), &DataType::Timestamp(TimeUnit::Millisecond, Some(UTC.into())));
        assert!(!f.is_nullable());
        assert!(s.field_with_name("status").unwrap().is_nullable());
        assert_eq!(s.field_with_name("count").unwrap().data_type(), &DataType::Int64);
        assert!(matches!(s.field_with_name("tags").unwrap().data_type(), DataType::List(_)));
    }

    #[test]
    fn a_type_without_a_column_is_refused_naming_the_field() {
        let e = schema(r#"{"type":"record","name":"W","fields":[{"name":"m","type":{"type":"map","values":"long"}}]}"#)
            .unwrap_err();
        assert!(e.contains("`m` is map"), "{e}");
        let e = schema(r#"{"type":"record","name":"W","fields":[{"name":"u","type":["long","string"]}]}"#).unwrap_err();
        assert!(e.contains("`u` is a union of 2"), "{e}");
        assert!(schema(r#""long""#).unwrap_err().contains("not a record"));
    }
}
