//! `partition_by` of a table sink (Parquet files, an Iceberg table): a column's value, or the
//! day or hour of a timestamp column, checked against the sink's columns so that a mistake is
//! named before a run, with its fix.

use arrow_schema::{DataType, Schema};

use crate::Invalid;

/// How rows are spread over partitions: by a column's value, or by the day or hour (UTC) of a
/// timestamp column. Parquet files lay them out as Hive-style directories (`COLUMN=VALUE/`,
/// `COLUMN_day=2026-11-01/`, `COLUMN_hour=2026-11-01-13/`); an Iceberg table as its partition
/// spec (`identity`, `day`, `hour`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Partition {
    Value(String),
    Day(String),
    Hour(String),
}

impl Partition {
    pub fn column(&self) -> &str {
        match self {
            Partition::Value(c) | Partition::Day(c) | Partition::Hour(c) => c,
        }
    }
}

/// `"COLUMN"`, `"day(COLUMN)"` or `"hour(COLUMN)"` of `schema`'s columns; `long_times`: a long
/// of epoch milliseconds may be partitioned by day or hour too (Parquet's directories; an
/// Iceberg transform takes a timestamp only).
pub fn parse(text: &str, schema: &Schema, long_times: bool) -> Result<Partition, Invalid> {
    let key = "sink.partition_by";
    let inner = |f: &str| text.strip_prefix(f).and_then(|r| r.strip_prefix('(')).and_then(|r| r.strip_suffix(')'));
    let p = match (inner("day"), inner("hour")) {
        (Some(c), _) => Partition::Day(c.trim().to_string()),
        (_, Some(c)) => Partition::Hour(c.trim().to_string()),
        _ => Partition::Value(text.trim().to_string()),
    };
    let Ok(field) = schema.field_with_name(p.column()) else {
        let names: Vec<&str> = schema.fields().iter().map(|f| f.name().as_str()).collect();
        return Err(Invalid::new(
            key,
            format!(
                "{:?} is not a column of sink.schema (its columns: {}); name one of them",
                p.column(),
                names.join(", ")
            ),
        ));
    };
    let t = field.data_type();
    let time = matches!(t, DataType::Timestamp(..)) || (long_times && *t == DataType::Int64);
    match &p {
        Partition::Day(_) | Partition::Hour(_) if !time => {
            let long =
                if long_times { " (or a long of epoch milliseconds)" } else { " (timestamp-millis in the schema)" };
            Err(Invalid::new(key, format!("{:?} is {t}: day() and hour() take a timestamp{long}", p.column())))
        }
        Partition::Value(_)
            if !matches!(
                t,
                DataType::Utf8 | DataType::Int32 | DataType::Int64 | DataType::Boolean | DataType::Date32
            ) =>
        {
            Err(Invalid::new(
                key,
                format!(
                    "{:?} is {t}: partition by a string, integer, boolean or date column, or by day(COLUMN) or hour(COLUMN) of a timestamp",
                    p.column()
                ),
            ))
        }
        _ => Ok(p),
    }
}
