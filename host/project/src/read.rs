//! A dataset's rows, read from wherever it lives, beside a running project: `weir query`'s
//! materialized views and `weir test`'s comparisons both read through here.
//!
//! A table yields its current row per key (the last value written; a tombstone deletes), a
//! stream every row it keeps, in order. The embedded log is opened read-only, so a reader never
//! blocks a writer. A Kafka topic is read by a consumer of its own, from the earliest offset up
//! to the end each partition has when the read begins, committed transactions only
//! (librdkafka's `read_committed`): a batch a transactional flow delivered twice (once before a
//! crash, once on the re-run) is in the topic once as far as this read goes, and a table's
//! fold is indifferent to a non-transactional writer's repeats, which come before anything newer.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use super::{Dataset, Storage};
use crate::dataset::DatasetKind;
use crate::dataset::log::{Log, LogError};
use crate::kafka::KafkaError;
use crate::pipeline::KafkaSourceConfig;
use crate::source::Limit;
use crate::source::kafka::KafkaSource;

/// How many records a Kafka read takes per step.
const KAFKA_STEP: usize = 100_000;

/// How many records an embedded stream's read takes per step.
const LOG_STEP: usize = 10_000;

#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    #[error("dataset `{dataset}` has no rows yet: the project has not written it ({} does not exist)", dir.display())]
    NotWritten { dataset: String, dir: PathBuf },
    #[error(transparent)]
    Log(#[from] LogError),
    #[error("dataset `{dataset}`, Kafka topic {topic}")]
    Kafka { dataset: String, topic: String, source: Box<KafkaError> },
    #[error("writing a row")]
    Write(#[from] std::io::Error),
}

/// What is handed each row (key, row); an error stops the read.
pub type Each<'a> = &'a mut dyn FnMut(&[u8], &[u8]) -> std::io::Result<()>;

/// Calls `each` with every row of `d` (key, row), as the module says; a table's rows in key order.
pub fn scan(d: &Dataset, each: Each<'_>) -> Result<(), ReadError> {
    let table = d.kind == DatasetKind::Table;
    match &d.storage {
        Storage::Embedded { dir } => {
            let log = embedded(&d.name, dir)?;
            if table {
                for (key, row) in log.rows()? {
                    each(&key, &row)?;
                }
                return Ok(());
            }
            let (mut at, end) = (log.start(), log.end());
            let mut failed = None;
            while at < end && failed.is_none() {
                let read = log.read_with(at, end, LOG_STEP, |offset, _, key, value| {
                    at = offset + 1;
                    if failed.is_none()
                        && let Err(e) = each(key, value)
                    {
                        failed = Some(e);
                    }
                })?;
                if read == 0 {
                    break;
                }
            }
            failed.map_or(Ok(()), |e| Err(e.into()))
        }
        Storage::Kafka { topic, options, from, .. } if table => {
            let mut rows = BTreeMap::new();
            kafka(&d.name, topic, options, from, &mut |key, value| {
                match value.is_empty() {
                    true => rows.remove(key),
                    false => rows.insert(key.to_vec(), value.to_vec()),
                };
            })?;
            for (key, row) in rows {
                each(&key, &row)?;
            }
            Ok(())
        }
        Storage::Kafka { topic, options, from, .. } => {
            let mut failed = None;
            kafka(&d.name, topic, options, from, &mut |key, value| {
                if failed.is_none()
                    && let Err(e) = each(key, value)
                {
                    failed = Some(e);
                }
            })?;
            failed.map_or(Ok(()), |e| Err(e.into()))
        }
    }
}

/// A table's current row for `key`, if it has one.
pub fn row(d: &Dataset, key: &[u8]) -> Result<Option<Vec<u8>>, ReadError> {
    let (topic, options, from) = match &d.storage {
        Storage::Embedded { dir } => return Ok(embedded(&d.name, dir)?.row(key)?),
        Storage::Kafka { topic, options, from, .. } => (topic, options, from),
    };
    let mut found = None;
    kafka(&d.name, topic, options, from, &mut |k, value| {
        if k == key {
            found = (!value.is_empty()).then(|| value.to_vec());
        }
    })?;
    Ok(found)
}

fn embedded(dataset: &str, dir: &Path) -> Result<Log, ReadError> {
    if !dir.exists() {
        return Err(ReadError::NotWritten { dataset: dataset.to_string(), dir: dir.to_path_buf() });
    }
    Ok(Log::open_read_only(dir)?)
}

/// Every record of a Kafka-backed dataset (key, value), from where it begins (`from`, after a
/// full refresh), partition by partition in offset order.
fn kafka(
    dataset: &str,
    topic: &str,
    options: &[(String, String)],
    from: &[(i32, i64)],
    each: &mut dyn FnMut(&[u8], &[u8]),
) -> Result<(), ReadError> {
    let failed =
        |source| ReadError::Kafka { dataset: dataset.to_string(), topic: topic.to_string(), source: Box::new(source) };
    // Its own group, never committed to (a read commits no offsets), so it moves no flow's.
    let cfg = KafkaSourceConfig {
        topics: vec![topic.to_string()],
        partitions: None,
        starting: Storage::starting(from),
        options: options.iter().filter(|(k, _)| k != "group.id" && k != "transactional.id").cloned().collect(),
        group_id: format!("weir-read-{dataset}"),
    };
    let mut source = KafkaSource::open(&cfg, &[], Arc::new(AtomicBool::new(false))).map_err(failed)?;
    while let Some(batch) = source.next_batch(Limit { records: KAFKA_STEP, bounded: true }).map_err(failed)? {
        let r = &batch.records;
        let values = crate::columns::items(&r.values, &r.value_ends);
        for (key, value) in crate::columns::items(&r.keys, &r.key_ends).zip(values) {
            each(key, value);
        }
    }
    Ok(())
}
