//! The project file's schema (`weir.toml`), exactly as written. Every table refuses keys it does
//! not know; `mod.rs` turns a file into the model, with the key's path and the fix in each error.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::Deserialize;

use crate::dataset::DatasetKind;
use crate::pipeline::Dur;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ProjectFile {
    pub(super) name: String,
    /// The flow files, relative to the project file: each a pipeline file.
    pub(super) flows: Vec<PathBuf>,
    /// Where checkpoints and embedded datasets live (default `.weir` beside the project file).
    pub(super) state: Option<PathBuf>,
    #[serde(default)]
    pub(super) datasets: BTreeMap<String, DatasetFile>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct DatasetFile {
    #[serde(default)]
    pub(super) kind: DatasetKind,
    #[serde(default)]
    pub(super) storage: StorageFile,
    /// Kafka: the topic (default: the dataset's name).
    pub(super) topic: Option<String>,
    /// Kafka: librdkafka options, e.g. `kafka.bootstrap.servers = "host:9092"`.
    pub(super) kafka: Option<toml::Table>,
    /// Kafka: produce each batch in a transaction (default true; brokers without transactions
    /// need false, and are then at-least-once).
    pub(super) transactional: Option<bool>,
    /// Embedded: drop records older than this.
    pub(super) retention: Option<Dur>,
    /// Embedded: an append of at least this many bytes is written as a sorted file of its own.
    pub(super) append_file_bytes: Option<u64>,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub(super) enum StorageFile {
    #[default]
    Embedded,
    Kafka,
}
