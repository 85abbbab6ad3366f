//! The Iceberg sink: a batch's rows decoded into the pipeline's columns (arrow-json), cast to
//! the table's (timestamps to microseconds, a column the schema lacks as nulls), written as
//! Parquet data files split by the table's partition spec (a large batch in chunks, one writer
//! per core), and appended in one snapshot whose commit also records the delivery in the
//! table's properties. See `mod.rs` for why that is exactly-once.
//!
//! A row that does not fit the columns is rejected with arrow's reason, which names the column,
//! and the engine dead-letters it; the batch's other rows are written. A tombstone is rejected
//! too: the table is only appended to.

use std::collections::HashMap;

use arrow_array::RecordBatch;
use iceberg::arrow::RecordBatchPartitionSplitter;
use iceberg::spec::{DataFile, DataFileFormat};
use iceberg::table::Table;
use iceberg::transaction::{ApplyTransactionAction, Transaction};
use iceberg::writer::base_writer::data_file_writer::DataFileWriterBuilder;
use iceberg::writer::file_writer::ParquetWriterBuilder;
use iceberg::writer::file_writer::location_generator::{DefaultFileNameGenerator, DefaultLocationGenerator};
use iceberg::writer::file_writer::rolling_writer::RollingFileWriterBuilder;
use iceberg::writer::partitioning::PartitioningWriter;
use iceberg::writer::partitioning::fanout_writer::FanoutWriter;
use iceberg::writer::{IcebergWriter, IcebergWriterBuilder};
use iceberg::{Catalog, NamespaceIdent, TableIdent};
use iceberg_catalog_sql::SqlCatalog;
use parquet::basic::Compression;
use parquet::file::properties::WriterProperties;
use weir_types::Delivery;
use weir_types::rows::Rows;

use super::settings::Settings;
use super::table::{self, ice};
use crate::retry::Patience;
use crate::{ConnectorError, TableSink};

/// The snapshot summary's keys that name the delivery a snapshot holds.
pub const SUMMARY_CHECKPOINT: &str = "weir.checkpoint";
pub const SUMMARY_BATCH: &str = "weir.batch";
/// The table property, per checkpoint, that holds the last batch committed
/// (`weir.delivered.<checkpoint>`): it survives the expiry of old snapshots.
pub const DELIVERED_PREFIX: &str = "weir.delivered.";

/// The fewest rows a writer gets: below this, one writer is faster than splitting.
const MIN_CHUNK_ROWS: usize = 16 * 1024;

/// Writers a batch is split over: one per core.
fn writers() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

pub struct IcebergSink {
    s: Settings,
    rt: tokio::runtime::Runtime,
    /// `None` after a failure, so the next attempt reconnects.
    catalog: Option<SqlCatalog>,
    ident: TableIdent,
    props: WriterProperties,
    rejected: Vec<(usize, String)>,
}

impl IcebergSink {
    pub fn open(s: &Settings) -> Result<Self, ConnectorError> {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(writers())
            .thread_name("weir-iceberg")
            .enable_all()
            .build()
            .map_err(ConnectorError::io("cannot start the Iceberg sink's runtime"))?;
        let mut patience = Patience::new("Iceberg", &s.catalog_label(), s.retry_for);
        let catalog = loop {
            let opened = rt.block_on(async {
                let c = table::catalog(s).await?;
                table::open(&c, s).await?;
                Ok(c)
            });
            match opened {
                Ok(c) => break c,
                Err(e) => patience.wait(e)?,
            }
        };
        let props = WriterProperties::builder().set_compression(Compression::SNAPPY).build();
        let ident = TableIdent::new(NamespaceIdent::new(s.namespace.clone()), s.table.clone());
        Ok(IcebergSink { s: s.clone(), rt, catalog: Some(catalog), ident, props, rejected: Vec::new() })
    }
}

impl TableSink for IcebergSink {
    fn deliver(&mut self, delivery: &Delivery, rows: &Rows) -> Result<(), ConnectorError> {
        self.rejected.clear();
        let all: Vec<&[u8]> = rows.iter().map(|(_, r)| r).collect();
        let mut idx = Vec::with_capacity(all.len());
        for (i, row) in all.iter().enumerate() {
            if row.is_empty() {
                self.rejected.push((i, "a tombstone: this Iceberg table is only appended to".into()));
            } else {
                idx.push(i);
            }
        }
        // Decoded on every delivery, a re-run's too, so that its rejected rows are rejected
        // again: the dead letters of a batch cut off by a crash were not kept. In chunks, one
        // per core, each written as files of its own, as a cluster's writers would.
        let chunks: Vec<&[usize]> = idx.chunks(idx.len().div_ceil(writers()).max(MIN_CHUNK_ROWS)).collect();
        let schema = &self.s.schema;
        let decoded = std::thread::scope(|scope| {
            let handles: Vec<_> = chunks
                .iter()
                .map(|chunk| {
                    let all = &all;
                    scope.spawn(move || {
                        let mut rejected = Vec::new();
                        crate::arrow_rows::decode(schema, all, chunk, "Iceberg", &mut rejected).map(|b| (b, rejected))
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p))).collect::<Vec<_>>()
        });
        let mut batches = Vec::with_capacity(decoded.len());
        for d in decoded {
            let (batch, rejected) = d?;
            self.rejected.extend(rejected);
            batches.extend(batch.filter(|b| b.num_rows() > 0));
        }
        self.rejected.sort_unstable_by_key(|r| r.0);
        if batches.is_empty() {
            return Ok(());
        }
        let mut patience = Patience::new("Iceberg", &self.s.catalog_label(), self.s.retry_for);
        loop {
            let attempt =
                self.rt.block_on(attempt(&self.s, &mut self.catalog, &self.ident, &self.props, delivery, &batches));
            match attempt {
                Ok(()) => return Ok(()),
                Err(e) => {
                    self.catalog = None;
                    patience.wait(e)?;
                }
            }
        }
    }

    fn rejected(&mut self) -> Vec<(usize, String)> {
        std::mem::take(&mut self.rejected)
    }
}

/// One attempt at a delivery: unless the table records it, its files written and appended in
/// one commit with the record.
async fn attempt(
    s: &Settings,
    catalog: &mut Option<SqlCatalog>,
    ident: &TableIdent,
    props: &WriterProperties,
    d: &Delivery<'_>,
    batches: &[RecordBatch],
) -> Result<(), ConnectorError> {
    if catalog.is_none() {
        *catalog = Some(table::catalog(s).await?);
    }
    let Some(catalog) = catalog.as_ref() else { unreachable!("opened above") };
    // Loaded afresh: the record, the schema and the partition spec as committed now.
    let table = catalog.load_table(ident).await.map_err(ice("cannot load the table"))?;
    let key = format!("{DELIVERED_PREFIX}{}", d.checkpoint);
    let done = table.metadata().properties().get(&key).and_then(|b| b.parse::<u64>().ok());
    if done.is_some_and(|b| b >= d.batch_id) {
        return Ok(()); // committed before a crash: the same delivery's rows are the same rows
    }
    let write = table::write_schema(&table)?;
    // Each chunk's files written on a thread of the runtime's, the chunks side by side.
    let mut writing = Vec::with_capacity(batches.len());
    for (i, batch) in batches.iter().enumerate() {
        let batch = cast(batch, &write)?;
        let (table, props) = (table.clone(), props.clone());
        let prefix = format!("part-{}-{:020}-{i}", d.checkpoint, d.batch_id);
        writing.push(tokio::spawn(async move { write_files(&table, &props, batch, &prefix).await }));
    }
    let mut files = Vec::new();
    for w in writing {
        let written = w.await.map_err(|e| ConnectorError::Remote {
            what: "cannot write the data files".into(),
            transient: false,
            why: e.to_string(),
        })?;
        files.extend(written?);
    }
    let summary = HashMap::from([
        (SUMMARY_CHECKPOINT.to_string(), d.checkpoint.to_string()),
        (SUMMARY_BATCH.to_string(), d.batch_id.to_string()),
    ]);
    let tx = Transaction::new(&table);
    // File names are the delivery's, never in the table before this commit: no need to read
    // every manifest for duplicates.
    let append = tx.fast_append().with_check_duplicate(false).add_data_files(files).set_snapshot_properties(summary);
    let tx = append.apply(tx).map_err(ice("cannot append the batch"))?;
    let tx = tx
        .update_table_properties()
        .set(key, d.batch_id.to_string())
        .apply(tx)
        .map_err(ice("cannot record the batch"))?;
    tx.commit(catalog as &dyn Catalog).await.map_err(ice("cannot commit the batch"))?;
    Ok(())
}

/// The batch in the table's columns: each cast to its column's type (milliseconds to
/// microseconds), a column the batch lacks as nulls.
fn cast(batch: &RecordBatch, write: &arrow_schema::SchemaRef) -> Result<RecordBatch, ConnectorError> {
    let n = batch.num_rows();
    let bad = |e: arrow_schema::ArrowError| ConnectorError::Remote {
        what: "cannot put the batch in the table's columns".into(),
        transient: false,
        why: e.to_string(),
    };
    let columns = write
        .fields()
        .iter()
        .map(|f| match batch.column_by_name(f.name()) {
            Some(c) if c.data_type() == f.data_type() => Ok(c.clone()),
            Some(c) => arrow_cast::cast(c, f.data_type()).map_err(bad),
            None => Ok(arrow_array::new_null_array(f.data_type(), n)),
        })
        .collect::<Result<Vec<_>, _>>()?;
    RecordBatch::try_new(write.clone(), columns).map_err(bad)
}

/// Writes `batch` as Parquet data files named `prefix-NNNNN.parquet`, one or more per partition.
async fn write_files(
    table: &Table,
    props: &WriterProperties,
    batch: RecordBatch,
    prefix: &str,
) -> Result<Vec<DataFile>, ConnectorError> {
    let schema = table.metadata().current_schema().clone();
    let parquet = ParquetWriterBuilder::new(props.clone(), schema.clone());
    let location = DefaultLocationGenerator::new(table.metadata()).map_err(ice("cannot place the files"))?;
    let names = DefaultFileNameGenerator::new(prefix.to_string(), None, DataFileFormat::Parquet);
    let rolling =
        RollingFileWriterBuilder::new_with_default_file_size(parquet, table.file_io().clone(), location, names);
    let builder = DataFileWriterBuilder::new(rolling);
    let spec = table.metadata().default_partition_spec().clone();
    let write = ice("cannot write the data files");
    if spec.is_unpartitioned() {
        let mut w = builder.build(None).await.map_err(&write)?;
        w.write(batch).await.map_err(&write)?;
        return w.close().await.map_err(&write);
    }
    let splitter = RecordBatchPartitionSplitter::try_new_with_computed_values(schema, spec).map_err(&write)?;
    let mut w = FanoutWriter::new(builder);
    for (key, part) in splitter.split(&batch).map_err(&write)? {
        w.write(key, part).await.map_err(&write)?;
    }
    w.close().await.map_err(&write)
}
