//! Where a pipeline reads and writes: its source (a recorded-events file, Kafka, a project's
//! dataset, or a group's repartition topic) and its sink, as validated. Each is only described
//! here; what it reaches on the machine (files, brokers, the project's logs) is opened by the
//! engine at start-up.

use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;

use crate::plugin::StageSpec;

/// Where a Kafka source starts in a partition the checkpoint does not know yet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StartingOffsets {
    Earliest,
    Latest,
    /// The first offset whose record's timestamp is at or after this (epoch ms).
    Timestamp(i64),
    /// These offsets, by partition (a Kafka-backed dataset's beginning after a full refresh,
    /// `project/bases.rs`), never below the earliest the broker keeps; a partition not listed
    /// from its earliest.
    Offsets(Vec<(i32, i64)>),
}

/// How a recorded-events file is laid out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ReplayFormat {
    /// `envelope` if the first line is an object with `value` and only envelope keys, else `lines`.
    #[default]
    Auto,
    /// Each line is one record's value.
    Lines,
    /// Each line is `{"value": .., "key": .., "partition": .., "offset": .., "timestamp": ..}`.
    Envelope,
}

#[derive(Debug, Clone)]
pub struct SourceConfig {
    pub kind: SourceKind,
    pub max_offsets_per_trigger: usize,
}

#[derive(Debug, Clone)]
pub enum SourceKind {
    Replay {
        path: PathBuf,
        format: ReplayFormat,
    },
    Kafka(KafkaSourceConfig),
    Dataset(DatasetRef),
    /// A group's stage-2 task: made by `scale/`, never written in a file.
    Repartition(Box<RepartitionConfig>),
}

/// One partition of a group's repartition topic, which the group's stage-1 tasks write
/// (`host/engine/src/source/repartition.rs`).
#[derive(Debug, Clone)]
pub struct RepartitionConfig {
    /// The topic, with the one partition in `partitions`.
    pub kafka: KafkaSourceConfig,
    /// The stage-1 tasks that write to it: the input topic's partitions.
    pub lanes: u32,
}

/// A project's dataset, as a flow names it. The project fills in where it lives
/// (`project/mod.rs`): the embedded log's directory here, or a Kafka topic, for which it
/// replaces the source or sink with Kafka's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DatasetRef {
    pub name: String,
    /// The embedded log's directory; `None` outside a project.
    pub log: Option<PathBuf>,
    pub table: bool,
    /// The project's input is bounded: reading ends once the dataset's writers are done and
    /// everything they wrote is read.
    pub bounded: bool,
    /// Written to: records older than this are dropped (the dataset's retention).
    pub retention: Option<Duration>,
}

impl DatasetRef {
    pub(crate) fn named(name: String) -> Self {
        Self { name, log: None, table: false, bounded: false, retention: None }
    }
}

impl SourceKind {
    pub fn name(&self) -> &'static str {
        match self {
            SourceKind::Replay { .. } => "replay",
            SourceKind::Kafka(_) => "kafka",
            SourceKind::Dataset(_) => "dataset",
            SourceKind::Repartition(_) => "repartition",
        }
    }

    /// What the source reads, for the checkpoint's fingerprint: a file by its canonical path (so
    /// `./orders.jsonl`, `orders.jsonl` and a start from another directory agree), topics by
    /// name. Called at start-up, not in validation: it reads the filesystem.
    pub fn identity(&self) -> String {
        match self {
            SourceKind::Replay { path, .. } => {
                let path = std::fs::canonicalize(path).unwrap_or_else(|_| path.clone());
                format!("replay:{}", path.display())
            }
            SourceKind::Kafka(k) => format!("kafka:{}", k.topics.join(",")),
            SourceKind::Dataset(d) => format!("dataset:{}", d.name),
            SourceKind::Repartition(r) => format!("repartition:{}", r.kafka.topics.join(",")),
        }
    }
}

#[derive(Debug, Clone)]
pub struct KafkaSourceConfig {
    pub topics: Vec<String>,
    /// Explicit (topic, partition) assignment; `None`: every partition of each topic.
    pub partitions: Option<Vec<(String, i32)>>,
    pub starting: StartingOffsets,
    /// librdkafka options, applied over Weir's defaults.
    pub options: Vec<(String, String)>,
    /// Group whose offsets Weir commits for lag monitoring: `kafka.group.id`, else `weir-NAME`.
    pub group_id: String,
}

/// Where rows go.
#[derive(Debug, Clone)]
pub enum SinkConfig {
    Wasm(StageSpec),
    Kafka(KafkaSinkConfig),
    /// A project's dataset; `key`: the row field whose value keys each row (`sink.key`).
    Dataset {
        dataset: DatasetRef,
        key: Option<String>,
    },
    /// Parquet files in a directory (`weir_connectors::parquet`).
    Parquet(weir_connectors::parquet::Settings),
    /// A PostgreSQL table, upserted by key (`weir_connectors::postgres`).
    Postgres(weir_connectors::postgres::Settings),
    /// An Apache Iceberg table, appended to (`weir_connectors::iceberg`).
    Iceberg(weir_connectors::iceberg::Settings),
}

#[derive(Debug, Clone)]
pub struct KafkaSinkConfig {
    pub topic: String,
    pub options: Vec<(String, String)>,
    /// One transaction per batch (exactly-once for `read_committed` consumers).
    pub transactional: bool,
    /// `kafka.transactional.id`, else `weir-NAME`: stable across restarts, so a restarted
    /// pipeline fences its previous incarnation.
    pub transactional_id: String,
    /// `sink.key`: the row field whose value keys each message; `None`: the row's own key.
    pub key: Option<String>,
    /// Each message's timestamp is its row's event time: set for a project's Kafka-backed
    /// dataset, whose readers take event time from it.
    pub event_time_stamps: bool,
    /// `format = "avro"`, `"protobuf"` or `"json-schema"`: rows written in the Confluent wire
    /// format with a registered schema; `None`: JSON text.
    pub encoded: Option<SchemaOut>,
}

/// What a Kafka sink's rows are written as.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SchemaFormat {
    Avro,
    Protobuf,
    JsonSchema,
}

impl SchemaFormat {
    /// As a pipeline file spells it.
    pub fn name(self) -> &'static str {
        match self {
            SchemaFormat::Avro => "avro",
            SchemaFormat::Protobuf => "protobuf",
            SchemaFormat::JsonSchema => "json-schema",
        }
    }
}

/// A Kafka sink's output through the schema registry (`docs/formats.md`).
#[derive(Debug, Clone)]
pub struct SchemaOut {
    pub format: SchemaFormat,
    /// The value schema's file (`.avsc`, `.proto`, or a JSON Schema), read at start-up.
    pub schema: PathBuf,
    /// Protobuf: the message rows are written as (its full name); `None`: the file's first.
    pub message: Option<String>,
    /// The key schema's file (Avro): keys written as Avro under the topic's key subject;
    /// `None`: keys as their text.
    pub key_schema: Option<PathBuf>,
    pub strategy: weir_schema::SubjectStrategy,
    /// Register the schema when its subject does not have it yet; `false`: it must be there.
    pub auto_register: bool,
    pub registry: weir_schema::RegistryConfig,
}
