//! Parquet files: each batch's rows written under a directory, as one file per batch (or one
//! per partition the batch's rows fall in), in the columns an Avro record schema declares, with
//! the compression and row-group size asked for. `docs/parquet.md` is the user's page.
//!
//! Exactly-once per delivery: a file's name is its delivery's
//! (`part-<checkpoint>-<batch>.parquet`), it is written under a hidden name, synced, and renamed
//! into place, so a reader never sees a partial file, and a batch delivered again after a crash
//! finds its files and writes only those it lacks. A replay from a fresh checkpoint writes
//! files of its own, as the rows may differ.

mod settings;
mod sink;

pub use settings::{Compression, DEFAULT_COMPRESSION, DEFAULT_ROW_GROUP_ROWS, MAX_ROW_GROUP_ROWS, Partition, Settings};
pub use sink::ParquetSink;
