//! The Parquet sink: a batch's rows decoded into Arrow columns (arrow-json, against the
//! declared schema), spread over their partitions' directories, and written one file per
//! partition per delivery. See `mod.rs` for why that is exactly-once.
//!
//! A row that does not fit the columns (a missing column, a string where a number goes) is
//! rejected with arrow's reason, which names the column, and the engine dead-letters it; the
//! batch's other rows are written. A tombstone is rejected too: files are only appended to.

use std::collections::BTreeMap;
use std::fs::File;
use std::path::{Path, PathBuf};

use arrow_array::RecordBatch;
use arrow_schema::{DataType, TimeUnit};
use parquet::arrow::ArrowWriter;
use parquet::basic::{Compression as Codec, GzipLevel, ZstdLevel};
use parquet::file::properties::WriterProperties;
use weir_types::Delivery;
use weir_types::rows::Rows;

use super::settings::{Compression, Partition, Settings};
use crate::{ConnectorError, TableSink};

/// The directory Hive-style readers take a missing partition value from.
const NULL_PARTITION: &str = "__HIVE_DEFAULT_PARTITION__";

pub struct ParquetSink {
    s: Settings,
    props: WriterProperties,
    rejected: Vec<(usize, String)>,
}

impl ParquetSink {
    pub fn open(s: &Settings) -> Result<Self, ConnectorError> {
        std::fs::create_dir_all(&s.path).map_err(ConnectorError::io(format!("cannot make {}", s.path.display())))?;
        let codec = match s.compression {
            Compression::None => Codec::UNCOMPRESSED,
            Compression::Snappy => Codec::SNAPPY,
            Compression::Zstd => Codec::ZSTD(ZstdLevel::default()),
            Compression::Gzip => Codec::GZIP(GzipLevel::default()),
            Compression::Lz4 => Codec::LZ4_RAW,
        };
        let props = WriterProperties::builder()
            .set_compression(codec)
            .set_max_row_group_row_count(Some(s.row_group_rows))
            .build();
        Ok(ParquetSink { s: s.clone(), props, rejected: Vec::new() })
    }

    /// Writes `batch` as `dir/name`: under a hidden name, synced, then renamed into place.
    fn write(&self, dir: &Path, name: &str, batch: &RecordBatch) -> Result<(), ConnectorError> {
        std::fs::create_dir_all(dir).map_err(ConnectorError::io(format!("cannot make {}", dir.display())))?;
        let staged = dir.join(format!(".{name}.tmp"));
        let what = || format!("cannot write {}", staged.display());
        let file = File::create(&staged).map_err(ConnectorError::io(what()))?;
        let parquet = |e: parquet::errors::ParquetError| ConnectorError::Parquet(format!("{}: {e}", what()));
        let mut w = ArrowWriter::try_new(file, self.s.schema.clone(), Some(self.props.clone())).map_err(parquet)?;
        w.write(batch).map_err(parquet)?;
        let file = w.into_inner().map_err(parquet)?;
        file.sync_all().map_err(ConnectorError::io(what()))?;
        let done = dir.join(name);
        std::fs::rename(&staged, &done).map_err(ConnectorError::io(format!("cannot rename {}", staged.display())))?;
        // The rename is durable once the directory is.
        File::open(dir).and_then(|d| d.sync_all()).map_err(ConnectorError::io(format!("cannot sync {}", dir.display())))
    }
}

impl TableSink for ParquetSink {
    fn deliver(&mut self, delivery: &Delivery, rows: &Rows) -> Result<(), ConnectorError> {
        self.rejected.clear();
        let all: Vec<&[u8]> = rows.iter().map(|(_, r)| r).collect();
        // Rows by partition: by the raw value or the hour or day, so a directory's name is made
        // once per partition, not once per row.
        let mut parts: BTreeMap<Key, Vec<usize>> = BTreeMap::new();
        for (i, row) in all.iter().enumerate() {
            if row.is_empty() {
                self.rejected
                    .push((i, "a tombstone: Parquet files are only appended to, so a row cannot be deleted".into()));
                continue;
            }
            match self.s.partition.as_ref().map(|p| key(p, &self.s.schema, row)).transpose() {
                Ok(k) => parts.entry(k.unwrap_or(Key::None)).or_default().push(i),
                Err(why) => self.rejected.push((i, why)),
            }
        }
        let name = format!("part-{}-{:020}.parquet", delivery.checkpoint, delivery.batch_id);
        // Two values written differently (`"a"`, `"\u0061"`) are one directory, and one file.
        let mut dirs: BTreeMap<PathBuf, Vec<usize>> = BTreeMap::new();
        for (k, idx) in parts {
            let dir = match self.s.partition.as_ref().map(|p| directory(p, &k)).transpose() {
                Ok(Some(d)) => self.s.path.join(d),
                Ok(None) => self.s.path.clone(),
                Err(why) => {
                    self.rejected.extend(idx.into_iter().map(|i| (i, why.clone())));
                    continue;
                }
            };
            dirs.entry(dir).or_default().extend(idx);
        }
        for (dir, mut idx) in dirs {
            idx.sort_unstable();
            // Decoded even when the file is there, so that its rows that do not fit are
            // rejected again: the dead letters of a batch cut off by a crash were not kept.
            let batch = crate::arrow_rows::decode(&self.s.schema, &all, &idx, "Parquet", &mut self.rejected)?;
            if dir.join(&name).exists() {
                continue; // written before a crash: the same delivery's rows are the same rows
            }
            if let Some(batch) = batch.filter(|b| b.num_rows() > 0) {
                self.write(&dir, &name, &batch)?;
            }
        }
        Ok(())
    }

    fn rejected(&mut self) -> Vec<(usize, String)> {
        std::mem::take(&mut self.rejected)
    }
}

/// What a row's partition is: its column's JSON text, or the hour or day its time falls in.
#[derive(Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Key<'r> {
    /// No partitioning.
    None,
    /// The column's value as written (`None`: missing or `null`), borrowed from the row.
    Value(Option<&'r [u8]>),
    /// Hours or days since 1970-01-01 UTC.
    Bucket(i64),
}

fn key<'r>(p: &Partition, schema: &arrow_schema::Schema, row: &'r [u8]) -> Result<Key<'r>, String> {
    let column = p.column();
    let raw = weir_json_scan::field::top_level_field(row, column).map_err(|e| format!("not a JSON object: {e}"))?;
    let raw = raw.filter(|r| *r != b"null");
    let per = match p {
        Partition::Value(_) => return Ok(Key::Value(raw)),
        Partition::Day(_) => 86_400_000,
        Partition::Hour(_) => 3_600_000,
    };
    let raw = raw.ok_or_else(|| format!("`{column}` is missing: its day or hour is the row's partition"))?;
    let n = weir_json_scan::scan::int(raw)
        .ok_or_else(|| format!("`{column}` is {}, not a whole number of epoch time", String::from_utf8_lossy(raw)))?;
    let ms = match schema.field_with_name(column).map(|f| f.data_type()) {
        Ok(DataType::Timestamp(TimeUnit::Microsecond, _)) => n.div_euclid(1_000),
        _ => n,
    };
    Ok(Key::Bucket(ms.div_euclid(per)))
}

/// A partition's directory (`status=PAID`, `window_start_day=2026-11-01`), or why its rows
/// have none (a string value whose escapes do not read).
fn directory(p: &Partition, k: &Key<'_>) -> Result<PathBuf, String> {
    let column = p.column();
    let dir = match (p, k) {
        (_, Key::None) => String::new(),
        (_, Key::Value(None)) => format!("{column}={NULL_PARTITION}"),
        (_, Key::Value(Some(v))) => {
            let text: String = match v.first() {
                Some(b'"') => serde_json::from_slice(v).map_err(|e| format!("`{column}` is not a JSON string: {e}"))?,
                _ => String::from_utf8_lossy(v).into_owned(),
            };
            format!("{column}={}", escape(&text))
        }
        (Partition::Hour(_), Key::Bucket(h)) => {
            let (y, m, d) = civil(h.div_euclid(24));
            format!("{column}_hour={y:04}-{m:02}-{d:02}-{:02}", h.rem_euclid(24))
        }
        (_, Key::Bucket(day)) => {
            let (y, m, d) = civil(*day);
            format!("{column}_day={y:04}-{m:02}-{d:02}")
        }
    };
    Ok(PathBuf::from(dir))
}

/// A partition value as a directory name: what is not a letter, digit, `-` or `_` as `%XX`, so
/// no value can name another directory (`..`, `/`).
fn escape(v: &str) -> String {
    let mut out = String::with_capacity(v.len());
    for b in v.bytes() {
        if b.is_ascii_alphanumeric() || b == b'-' || b == b'_' {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    if out.is_empty() { "%00".into() } else { out }
}

/// The civil date of a day count from 1970-01-01 (Howard Hinnant's `civil_from_days`).
fn civil(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

#[cfg(test)]
mod tests;
