//! The pipeline file's schema: what a pipeline file may say, exactly as written (TOML through
//! serde). Every table refuses keys it does not know, so a typo is an error naming the key, never
//! a silent default. `validate/` turns a file into the model (`lib.rs`, `connectors.rs`, `operators.rs`).

use std::path::PathBuf;

use serde::Deserialize;

use super::{LatePolicy, OutputMode, ReplayFormat};
use crate::plugin::LimitsFile;
pub use weir_types::Dur;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct PipelineFile {
    pub(super) name: String,
    pub(super) source: SourceFile,
    #[serde(default)]
    pub(super) trigger: TriggerFile,
    /// Optional only when the source is a dataset (its rows are taken as they are).
    pub(super) parse: Option<StageFile>,
    #[serde(default)]
    pub(super) transform: Vec<StageFile>,
    /// Data-quality expectations on the rows after the transforms.
    #[serde(default)]
    pub(super) expect: Vec<ExpectFile>,
    pub(super) watermark: Option<WatermarkFile>,
    pub(super) dedup: Option<DedupFile>,
    pub(super) join: Option<JoinFile>,
    /// Streams besides `[source]`, by name, for joins to read.
    #[serde(default)]
    pub(super) streams: std::collections::BTreeMap<String, StreamFile>,
    pub(super) window: Option<WindowFile>,
    pub(super) aggregate: Option<StageFile>,
    pub(super) process: Option<ProcessFile>,
    #[serde(default)]
    pub(super) output: OutputFile,
    pub(super) sink: Option<SinkFile>,
    pub(super) checkpoint: Option<CheckpointFile>,
    pub(super) dead_letter: Option<DeadLetterFile>,
    #[serde(default)]
    pub(super) failure: FailureFile,
    /// Many processes share the pipeline through a Kafka consumer group (`scale/`).
    pub(super) scale: Option<ScaleFile>,
    /// The schema registry stages with `grants.registry` and an Avro sink reach.
    pub(super) registry: Option<weir_schema::RegistryFile>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ScaleFile {
    pub(super) group: String,
}

/// One expectation: a built-in `rule`, or a transform `plugin` whose dropped rows violate it.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ExpectFile {
    pub(super) name: String,
    pub(super) rule: Option<String>,
    pub(super) plugin: Option<PathBuf>,
    #[serde(default)]
    pub(super) config: toml::Table,
    #[serde(default)]
    pub(super) grants: GrantsFile,
    #[serde(default)]
    pub(super) limits: LimitsFile,
    #[serde(default)]
    pub(super) on_violation: crate::expect::OnViolation,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct FailureFile {
    #[serde(default)]
    pub(super) policy: FailureMode,
    pub(super) retries: Option<u32>,
    pub(super) backoff: Option<Dur>,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub(super) enum FailureMode {
    #[default]
    DeadLetter,
    FailFast,
}

#[derive(Debug, Deserialize)]
#[serde(tag = "type", rename_all = "kebab-case", deny_unknown_fields)]
pub(super) enum SourceFile {
    /// Recorded events, one per line (see docs/recorded-events.md).
    Replay {
        path: PathBuf,
        #[serde(default)]
        format: ReplayFormat,
        max_offsets_per_trigger: Option<usize>,
    },
    /// Kafka topics (docs/kafka.md).
    Kafka {
        topics: Vec<String>,
        /// Only these partitions, as "topic:partition"; default: all of each topic's.
        partitions: Option<Vec<String>>,
        #[serde(default)]
        starting_offsets: StartingFile,
        /// Start at the first record at or after this time (epoch ms) instead.
        starting_timestamp: Option<i64>,
        max_offsets_per_trigger: Option<usize>,
        /// librdkafka options, e.g. `kafka.bootstrap.servers = "host:9092"`.
        kafka: toml::Table,
    },
    /// A dataset of the project the flow is in (docs/projects.md).
    Dataset { dataset: String, max_offsets_per_trigger: Option<usize> },
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub(super) enum StartingFile {
    #[default]
    Earliest,
    Latest,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct SinkFile {
    #[serde(rename = "type", default)]
    pub(super) kind: SinkKindFile,
    pub(super) plugin: Option<PathBuf>,
    #[serde(default)]
    pub(super) config: toml::Table,
    #[serde(default)]
    pub(super) grants: GrantsFile,
    #[serde(default)]
    pub(super) limits: LimitsFile,
    pub(super) topic: Option<String>,
    pub(super) kafka: Option<toml::Table>,
    pub(super) transactional: Option<bool>,
    /// Kafka, dataset: the row field whose value keys each row (default: the row's own key).
    pub(super) key: Option<String>,
    /// A dataset of the project the flow is in.
    pub(super) dataset: Option<String>,
    /// Kafka: how rows are written (`"json"`, the default, or `"avro"`).
    pub(super) format: Option<SinkFormatFile>,
    /// Kafka with `format = "avro"`: the value schema (`.avsc`), the key schema, the subject
    /// name strategy, and whether to register the schema when its subject lacks it.
    pub(super) schema: Option<PathBuf>,
    /// Protobuf: the message rows are written as.
    pub(super) message: Option<String>,
    pub(super) key_schema: Option<PathBuf>,
    pub(super) subject_strategy: Option<weir_schema::SubjectStrategy>,
    pub(super) auto_register: Option<bool>,
    /// Parquet: the directory the files go under, their compression, rows per row group, and
    /// the column (or `day(COLUMN)`, `hour(COLUMN)`) that spreads them over directories.
    pub(super) path: Option<PathBuf>,
    pub(super) compression: Option<String>,
    pub(super) row_group_rows: Option<i64>,
    pub(super) partition_by: Option<String>,
    /// PostgreSQL: the file of connection settings, the password's file, the table, the
    /// columns a row is found by and those written, the deliveries table, and how long to wait
    /// for a database that went away.
    pub(super) connection: Option<PathBuf>,
    pub(super) password_file: Option<PathBuf>,
    pub(super) table: Option<String>,
    pub(super) key_columns: Option<Vec<String>>,
    pub(super) columns: Option<Vec<String>>,
    pub(super) deliveries_table: Option<String>,
    pub(super) retry_for: Option<Dur>,
    /// Iceberg: the SQL catalog's database and its password's file, the catalog's name, the
    /// warehouse, and an S3-compatible store's settings (`table`, `schema`, `partition_by` and
    /// `retry_for` as above).
    pub(super) catalog_uri: Option<String>,
    pub(super) catalog_password_file: Option<PathBuf>,
    pub(super) catalog_name: Option<String>,
    pub(super) warehouse: Option<String>,
    pub(super) s3: Option<S3File>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct S3File {
    pub(super) endpoint: Option<String>,
    pub(super) region: Option<String>,
    #[serde(default)]
    pub(super) path_style: bool,
    pub(super) credentials_file: Option<PathBuf>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub(super) enum SinkFormatFile {
    Json,
    Avro,
    Protobuf,
    JsonSchema,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub(super) enum SinkKindFile {
    #[default]
    Wasm,
    Kafka,
    Dataset,
    Parquet,
    Postgres,
    Iceberg,
}

impl SinkKindFile {
    pub(super) fn name(self) -> &'static str {
        match self {
            SinkKindFile::Wasm => "Wasm",
            SinkKindFile::Kafka => "Kafka",
            SinkKindFile::Dataset => "dataset",
            SinkKindFile::Parquet => "Parquet",
            SinkKindFile::Postgres => "PostgreSQL",
            SinkKindFile::Iceberg => "Iceberg",
        }
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct TriggerFile {
    #[serde(default)]
    pub(super) mode: TriggerMode,
    pub(super) interval: Option<Dur>,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub(super) enum TriggerMode {
    #[default]
    ProcessingTime,
    Once,
    AvailableNow,
    Continuous,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct StageFile {
    pub(super) plugin: PathBuf,
    /// `[parse]` only: instances that parse a batch's chunks in parallel.
    pub(super) parallelism: Option<usize>,
    #[serde(default)]
    pub(super) config: toml::Table,
    #[serde(default)]
    pub(super) grants: GrantsFile,
    #[serde(default)]
    pub(super) limits: LimitsFile,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct GrantsFile {
    #[serde(default)]
    pub(super) dirs: Vec<DirGrantFile>,
    /// Names of environment variables to pass through.
    #[serde(default)]
    pub(super) env: Vec<String>,
    #[serde(default)]
    pub(super) clocks: bool,
    #[serde(default)]
    pub(super) random: bool,
    /// "host:port" addresses the plugin may open TCP connections to.
    #[serde(default)]
    pub(super) network: Vec<String>,
    /// "host:port" authorities the plugin may send HTTP requests to (wasi:http).
    #[serde(default)]
    pub(super) http: Vec<String>,
    /// The process's standard output (a `[sink]` only).
    #[serde(default)]
    pub(super) stdout: bool,
    /// The pipeline's `[registry]`, through the `registry` interface.
    #[serde(default)]
    pub(super) registry: bool,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct DirGrantFile {
    pub(super) host: PathBuf,
    pub(super) guest: String,
    #[serde(default)]
    pub(super) writable: bool,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct WatermarkFile {
    pub(super) delay: Dur,
    pub(super) idle_timeout: Option<Dur>,
    pub(super) allowed_lateness: Option<Dur>,
    #[serde(default)]
    pub(super) late: LatePolicy,
    pub(super) late_path: Option<PathBuf>,
    /// Whether a run that reaches the end of bounded input emits every open window; default:
    /// the run's (`weir test` flushes, `weir run` does not).
    pub(super) flush_at_end: Option<bool>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct DedupFile {
    /// A top-level field of the parser's row (default: the event's key, which the parser set).
    pub(super) key: Option<String>,
    /// How long after a key's first event a repeat still counts as a duplicate, in event time
    /// (default: the watermark's delay).
    pub(super) within: Option<Dur>,
}

/// `[join]`: a stream-table or an interval join.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct JoinFile {
    #[serde(rename = "type", default)]
    pub(super) join_type: JoinType,
    /// A table join: the table's source, written like `[source]`.
    pub(super) table: Option<SourceFile>,
    /// An interval join: the name of the other stream, a `[streams.NAME]`.
    pub(super) stream: Option<String>,
    /// An interval join: `left.time BETWEEN right.time - before AND right.time + after`.
    pub(super) before: Option<Dur>,
    pub(super) after: Option<Dur>,
    /// A top-level field of the row to look up by (default: the event's key).
    pub(super) on: Option<String>,
    /// The field of the joined row that holds the table's row (default "table").
    #[serde(rename = "as")]
    pub(super) field: Option<String>,
    pub(super) kind: Option<super::JoinKind>,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub(super) enum JoinType {
    #[default]
    Table,
    Interval,
}

/// `[streams.NAME]`: a second stream, with its own source and parser.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct StreamFile {
    pub(super) source: SourceFile,
    pub(super) parse: StageFile,
}

/// `[process]`: a keyed processor plugin, in place of `[window]` and `[aggregate]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ProcessFile {
    pub(super) plugin: PathBuf,
    #[serde(default)]
    pub(super) config: toml::Table,
    #[serde(default)]
    pub(super) grants: GrantsFile,
    #[serde(default)]
    pub(super) limits: LimitsFile,
    /// A top-level field of the row to key by (default: the event's key, which the parser set).
    pub(super) key: Option<String>,
    /// Expire a key's state when it has had no events for this long.
    pub(super) ttl: Option<Dur>,
    /// Which clock `ttl` is measured on; default processing time.
    pub(super) ttl_clock: Option<super::TtlClock>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct WindowFile {
    #[serde(rename = "type")]
    pub(super) kind: WindowKind,
    pub(super) size: Option<Dur>,
    pub(super) slide: Option<Dur>,
    pub(super) gap: Option<Dur>,
    pub(super) offset: Option<Dur>,
}

#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub(super) enum WindowKind {
    Tumbling,
    Sliding,
    Session,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct OutputFile {
    #[serde(default)]
    pub(super) mode: OutputMode,
    /// A tombstone (a key without a value) when a key's state is deleted: a changelog.
    pub(super) tombstones: Option<bool>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct CheckpointFile {
    pub(super) location: PathBuf,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct DeadLetterFile {
    pub(super) path: PathBuf,
}
