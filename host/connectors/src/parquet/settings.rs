//! A Parquet sink's settings, as `[sink] type = "parquet"` gives them, each checked against the
//! schema so that a mistake is named before a run, with its fix. Every default is a named
//! constant here and nowhere else.

use std::path::PathBuf;
use std::sync::Arc;

use arrow_schema::Schema;

use crate::Invalid;
pub use crate::partition::Partition;

/// Rows per row group unless `row_group_rows` says otherwise: the parquet crate's own default,
/// which readers that skip row groups by their statistics are tuned for.
pub const DEFAULT_ROW_GROUP_ROWS: usize = 1024 * 1024;
/// The most `row_group_rows` may be: a row group is held in memory until it is written.
pub const MAX_ROW_GROUP_ROWS: usize = 64 * 1024 * 1024;
/// The compression unless `compression` says otherwise: Snappy, as Spark and Flink write by
/// default, cheap to write and read by every reader.
pub const DEFAULT_COMPRESSION: Compression = Compression::Snappy;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Compression {
    None,
    Snappy,
    Zstd,
    Gzip,
    Lz4,
}

#[derive(Debug, Clone)]
pub struct Settings {
    /// The directory the files go under (made if missing).
    pub path: PathBuf,
    /// The Avro schema file the columns were read from.
    pub schema_file: PathBuf,
    pub schema: Arc<Schema>,
    pub compression: Compression,
    pub row_group_rows: usize,
    pub partition: Option<Partition>,
}

impl Settings {
    /// The settings of a pipeline file's `[sink]`: `schema` is the columns (from the Avro
    /// schema `sink.schema` names), the rest as written there.
    pub fn new(
        path: Option<PathBuf>,
        schema_file: PathBuf,
        schema: Schema,
        compression: Option<&str>,
        row_group_rows: Option<i64>,
        partition_by: Option<&str>,
    ) -> Result<Settings, Invalid> {
        let path = path.filter(|p| !p.as_os_str().is_empty()).ok_or_else(|| {
            Invalid::new("sink.path", "the directory to write the Parquet files under, e.g. path = \"out/windows\"")
        })?;
        let compression = match compression {
            None => DEFAULT_COMPRESSION,
            Some("none") => Compression::None,
            Some("snappy") => Compression::Snappy,
            Some("zstd") => Compression::Zstd,
            Some("gzip") => Compression::Gzip,
            Some("lz4") => Compression::Lz4,
            Some(other) => {
                return Err(Invalid::new(
                    "sink.compression",
                    format!(
                        "{other:?} is not a compression: use \"snappy\" (the default), \"zstd\", \"gzip\", \"lz4\" or \"none\""
                    ),
                ));
            }
        };
        let row_group_rows = match row_group_rows {
            None => DEFAULT_ROW_GROUP_ROWS,
            Some(n) if n >= 1 && n as u64 <= MAX_ROW_GROUP_ROWS as u64 => n as usize,
            Some(n) => {
                return Err(Invalid::new(
                    "sink.row_group_rows",
                    format!(
                        "{n} rows: a row group holds 1 to {MAX_ROW_GROUP_ROWS} rows (default {DEFAULT_ROW_GROUP_ROWS})"
                    ),
                ));
            }
        };
        let partition = partition_by.map(|p| crate::partition::parse(p, &schema, true)).transpose()?;
        Ok(Settings { path, schema_file, schema: Arc::new(schema), compression, row_group_rows, partition })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::avro_arrow::UTC;
    use arrow_schema::{DataType, Field, TimeUnit};

    fn schema() -> Schema {
        Schema::new(vec![
            Field::new("window_start", DataType::Timestamp(TimeUnit::Millisecond, Some(UTC.into())), false),
            Field::new("status", DataType::Utf8, false),
            Field::new("rate", DataType::Float64, false),
        ])
    }

    fn new(compression: Option<&str>, rows: Option<i64>, by: Option<&str>) -> Result<Settings, Invalid> {
        Settings::new(Some("out".into()), "w.avsc".into(), schema(), compression, rows, by)
    }

    #[test]
    fn defaults_are_the_named_ones() {
        let s = new(None, None, None).unwrap();
        assert_eq!((s.compression, s.row_group_rows, s.partition), (DEFAULT_COMPRESSION, DEFAULT_ROW_GROUP_ROWS, None));
        assert_eq!(
            new(None, None, Some("day(window_start)")).unwrap().partition,
            Some(Partition::Day("window_start".into()))
        );
        assert_eq!(new(None, None, Some("status")).unwrap().partition, Some(Partition::Value("status".into())));
    }

    #[test]
    fn a_bad_setting_names_its_key_and_the_fix() {
        let e = new(Some("brotli"), None, None).unwrap_err();
        assert_eq!(e.key, "sink.compression");
        assert!(e.why.contains("\"zstd\""), "{e}");
        assert_eq!(new(None, Some(0), None).unwrap_err().key, "sink.row_group_rows");
        let e = new(None, None, Some("day(nope)")).unwrap_err();
        assert!(e.why.contains("window_start, status, rate"), "{e}");
        assert!(new(None, None, Some("day(status)")).unwrap_err().why.contains("take a timestamp"));
        assert!(new(None, None, Some("rate")).unwrap_err().why.contains("partition by a string"));
        let e = Settings::new(None, "w.avsc".into(), schema(), None, None, None).unwrap_err();
        assert_eq!(e.key, "sink.path");
    }
}
