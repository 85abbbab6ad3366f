//! Apache Iceberg tables: each batch appended as Parquet data files in one snapshot, through a
//! SQL catalog (SQLite or PostgreSQL) that pyiceberg, Spark, Trino and DuckDB read, with the
//! warehouse in a local directory or an S3-compatible store. `docs/iceberg.md` is the user's
//! page.
//!
//! Exactly-once per delivery: the commit that appends a batch's files also sets the table
//! property `weir.delivered.<checkpoint>` to the batch's id, and tags the snapshot's summary
//! with the checkpoint and the batch (`weir.checkpoint`, `weir.batch`). The catalog swaps the
//! table's metadata atomically, so the files and the record land together or not at all. A
//! batch delivered again after a crash loads the table, finds the record at or past it, and
//! commits nothing; one whose commit never landed writes its files again under the same names
//! (no reader saw them: only committed files are in the table) and commits. A checkpoint's
//! batches are delivered in order, so a record at a batch means every earlier one is in.

mod settings;
mod sink;
mod table;

pub use settings::{CatalogDb, DEFAULT_CATALOG_NAME, DEFAULT_S3_REGION, Given, S3, Settings};
pub use sink::{DELIVERED_PREFIX, IcebergSink, SUMMARY_BATCH, SUMMARY_CHECKPOINT};
