//! `[sink]` and `output.tombstones`: a Wasm sink plugin, a Kafka topic or a project's dataset,
//! each refusing the keys that belong to the others, and tombstones only where a sink can carry
//! them.

use super::*;

/// `output.tombstones`, checked against the sink that would carry them.
pub(super) fn tombstones(
    output: &OutputFile,
    sink: Option<&SinkFile>,
    invalid: &dyn Fn(&str, String) -> PipelineError,
) -> Result<bool, PipelineError> {
    let tombstones = output.tombstones.unwrap_or(false);
    if tombstones && sink.is_some_and(|s| s.kind == SinkKindFile::Wasm) {
        return Err(invalid(
            "output.tombstones",
            "a Wasm sink gets rows without keys, so it cannot take a tombstone; write to a Kafka sink \
             (type = \"kafka\"), or remove it"
                .into(),
        ));
    }
    let appended = sink.map(|s| s.kind).filter(|k| matches!(k, SinkKindFile::Parquet | SinkKindFile::Iceberg));
    if let Some(kind) = appended
        && tombstones
    {
        return Err(invalid(
            "output.tombstones",
            format!(
                "{} is only appended to here, so a tombstone cannot delete a row there; write the changelog to a \
                 PostgreSQL table or a Kafka topic, or remove it",
                if kind == SinkKindFile::Parquet { "a Parquet directory" } else { "an Iceberg table" }
            ),
        ));
    }
    if tombstones && sink.is_some_and(|s| s.key.is_some()) {
        return Err(invalid(
            "sink.key",
            "a tombstone has no row to take a key field from, so it would go under another key than the \
             rows it deletes; with output.tombstones, leave sink.key out (rows keep the operator's key)"
                .into(),
        ));
    }
    Ok(tombstones)
}

pub(super) fn sink_config(
    s: SinkFile,
    name: &str,
    continuous: bool,
    registry: Option<&weir_schema::RegistryConfig>,
    stage: &dyn Fn(&str, StageFile) -> Result<StageSpec, PipelineError>,
    rel: &dyn Fn(&Path) -> PathBuf,
    invalid: &dyn Fn(&str, String) -> PipelineError,
) -> Result<SinkConfig, PipelineError> {
    let encoded = schema_out(&s, registry, rel, invalid)?;
    let not_for = |key: &str, present: bool, kind: &str| {
        if present {
            Err(invalid(&format!("sink.{key}"), format!("does not apply to a {kind} sink; remove it")))
        } else {
            Ok(())
        }
    };
    // The keys of some kinds of sink, refused on any other.
    use SinkKindFile::{Iceberg, Parquet, Postgres};
    for (key, present, kinds) in [
        ("path", s.path.is_some(), &[Parquet][..]),
        ("compression", s.compression.is_some(), &[Parquet]),
        ("row_group_rows", s.row_group_rows.is_some(), &[Parquet]),
        ("partition_by", s.partition_by.is_some(), &[Parquet, Iceberg]),
        ("connection", s.connection.is_some(), &[Postgres]),
        ("password_file", s.password_file.is_some(), &[Postgres]),
        ("table", s.table.is_some(), &[Postgres, Iceberg]),
        ("key_columns", s.key_columns.is_some(), &[Postgres]),
        ("columns", s.columns.is_some(), &[Postgres]),
        ("deliveries_table", s.deliveries_table.is_some(), &[Postgres]),
        ("retry_for", s.retry_for.is_some(), &[Postgres, Iceberg]),
        ("catalog_uri", s.catalog_uri.is_some(), &[Iceberg]),
        ("catalog_password_file", s.catalog_password_file.is_some(), &[Iceberg]),
        ("catalog_name", s.catalog_name.is_some(), &[Iceberg]),
        ("warehouse", s.warehouse.is_some(), &[Iceberg]),
        ("s3", s.s3.is_some(), &[Iceberg]),
    ] {
        if !kinds.contains(&s.kind) {
            not_for(key, present, s.kind.name())?;
        }
    }
    match s.kind {
        SinkKindFile::Parquet => parquet(s, rel, invalid),
        SinkKindFile::Postgres => postgres(s, rel, invalid),
        SinkKindFile::Iceberg => super::iceberg::iceberg(s, rel, invalid),
        SinkKindFile::Wasm => {
            not_for("dataset", s.dataset.is_some(), "Wasm")?;
            not_for("topic", s.topic.is_some(), "Wasm")?;
            not_for("kafka", s.kafka.is_some(), "Wasm")?;
            not_for("transactional", s.transactional.is_some(), "Wasm")?;
            not_for("key", s.key.is_some(), "Wasm")?;
            let plugin = s.plugin.ok_or_else(|| {
                invalid(
                    "sink.plugin",
                    "a Wasm sink names its component, e.g. plugin = \"sink.wasm\"; or set type = \"kafka\"".into(),
                )
            })?;
            let file = StageFile { plugin, parallelism: None, config: s.config, grants: s.grants, limits: s.limits };
            Ok(SinkConfig::Wasm(stage("sink", file)?))
        }
        SinkKindFile::Dataset => {
            not_for("plugin", s.plugin.is_some(), "dataset")?;
            not_for("config", !s.config.is_empty(), "dataset")?;
            not_for("grants", granted(&s.grants), "dataset")?;
            not_for("limits", s.limits != LimitsFile::default(), "dataset")?;
            not_for("topic", s.topic.is_some(), "dataset")?;
            not_for("kafka", s.kafka.is_some(), "dataset")?;
            not_for("transactional", s.transactional.is_some(), "dataset")?;
            let dataset = s.dataset.ok_or_else(|| {
                invalid("sink.dataset", "the project's dataset to write to, e.g. dataset = \"silver\"".into())
            })?;
            Ok(SinkConfig::Dataset {
                dataset: DatasetRef::named(dataset_name("sink.dataset", dataset, invalid)?),
                key: key_field("sink.key", s.key, invalid)?,
            })
        }
        SinkKindFile::Kafka => {
            not_for("dataset", s.dataset.is_some(), "Kafka")?;
            not_for("plugin", s.plugin.is_some(), "Kafka")?;
            not_for("config", !s.config.is_empty(), "Kafka")?;
            not_for("grants", granted(&s.grants), "Kafka")?;
            let topic = s
                .topic
                .filter(|t| !t.is_empty())
                .ok_or_else(|| invalid("sink.topic", "the topic to write to, e.g. topic = \"alerts\"".into()))?;
            let options = kafka_options("sink.kafka", s.kafka.unwrap_or_default(), invalid)?;
            let transactional_id = option(&options, "transactional.id").unwrap_or_else(|| format!("weir-{name}"));
            if continuous && s.transactional == Some(true) {
                return Err(invalid(
                    "sink.transactional",
                    "continuous mode is at-least-once and delivers without transactions; remove it".into(),
                ));
            }
            Ok(SinkConfig::Kafka(KafkaSinkConfig {
                topic,
                options,
                transactional: s.transactional.unwrap_or(!continuous),
                transactional_id,
                key: key_field("sink.key", s.key, invalid)?,
                event_time_stamps: false,
                encoded,
            }))
        }
    }
}

/// `type = "parquet"`: its settings, its columns from the Avro record schema `schema` names.
fn parquet(
    s: SinkFile,
    rel: &dyn Fn(&Path) -> PathBuf,
    invalid: &dyn Fn(&str, String) -> PipelineError,
) -> Result<SinkConfig, PipelineError> {
    built_in(&s, SinkKindFile::Parquet, invalid)?;
    let (file, columns) = columns(&s, rel, invalid)?;
    let settings = weir_connectors::parquet::Settings::new(
        s.path.as_deref().map(rel),
        file.clone(),
        columns,
        s.compression.as_deref(),
        s.row_group_rows,
        s.partition_by.as_deref(),
    )
    .map_err(|e| invalid(&e.key, e.why))?;
    Ok(SinkConfig::Parquet(settings))
}

/// Refuses the keys of a plugin, Kafka or dataset sink on a built-in connector's (`kind`).
pub(super) fn built_in(
    s: &SinkFile,
    kind: SinkKindFile,
    invalid: &dyn Fn(&str, String) -> PipelineError,
) -> Result<(), PipelineError> {
    for (key, present) in [
        ("plugin", s.plugin.is_some()),
        ("config", !s.config.is_empty()),
        ("grants", granted(&s.grants)),
        ("limits", s.limits != LimitsFile::default()),
        ("topic", s.topic.is_some()),
        ("kafka", s.kafka.is_some()),
        ("transactional", s.transactional.is_some()),
        ("dataset", s.dataset.is_some()),
        ("key", s.key.is_some()),
    ] {
        if present {
            let fix = match (key, kind) {
                ("key", SinkKindFile::Postgres) => "; name the table's key columns in key_columns",
                _ => "",
            };
            let what = format!(
                "does not apply to a{} {} sink; remove it{fix}",
                if kind == SinkKindFile::Iceberg { "n" } else { "" },
                kind.name()
            );
            return Err(invalid(&format!("sink.{key}"), what));
        }
    }
    Ok(())
}

/// A table sink's columns, from the Avro record schema `sink.schema` names: the file, and its
/// columns.
pub(super) fn columns(
    s: &SinkFile,
    rel: &dyn Fn(&Path) -> PathBuf,
    invalid: &dyn Fn(&str, String) -> PipelineError,
) -> Result<(PathBuf, weir_connectors::arrow_schema::Schema), PipelineError> {
    let file = s.schema.as_deref().map(rel).ok_or_else(|| {
        invalid(
            "sink.schema",
            "the columns, as an Avro record schema: name its file, e.g. schema = \"windows.avsc\"".into(),
        )
    })?;
    let text = std::fs::read_to_string(&file)
        .map_err(|e| invalid("sink.schema", format!("cannot read {}: {e}", file.display())))?;
    let avro =
        weir_schema::avro::parse(&text, &[]).map_err(|e| invalid("sink.schema", format!("{}: {e}", file.display())))?;
    let names = weir_schema::avro::Names::of([&avro]);
    let columns = weir_connectors::avro_arrow::arrow_schema(&avro, &names)
        .map_err(|e| invalid("sink.schema", format!("{}: {e}", file.display())))?;
    Ok((file, columns))
}

/// `type = "postgres"`: its settings, the connection file read and checked now (the table is
/// checked against the database when the run starts).
fn postgres(
    s: SinkFile,
    rel: &dyn Fn(&Path) -> PathBuf,
    invalid: &dyn Fn(&str, String) -> PipelineError,
) -> Result<SinkConfig, PipelineError> {
    built_in(&s, SinkKindFile::Postgres, invalid)?;
    let connection = s.connection.as_deref().map(rel);
    let password_file = s.password_file.as_deref().map(rel);
    let settings = weir_connectors::postgres::Settings::new(weir_connectors::postgres::Given {
        connection: connection.as_deref(),
        password_file: password_file.as_deref(),
        table: s.table.as_deref(),
        key_columns: s.key_columns,
        columns: s.columns,
        deliveries_table: s.deliveries_table.as_deref(),
        retry_for: s.retry_for.map(|d| d.0),
    })
    .map_err(|e| invalid(&e.key, e.why))?;
    Ok(SinkConfig::Postgres(settings))
}

/// A Kafka sink's `format`, `schema`, `message`, `key_schema`, `subject_strategy` and
/// `auto_register`.
fn schema_out(
    s: &SinkFile,
    registry: Option<&weir_schema::RegistryConfig>,
    rel: &dyn Fn(&Path) -> PathBuf,
    invalid: &dyn Fn(&str, String) -> PipelineError,
) -> Result<Option<SchemaOut>, PipelineError> {
    use crate::file::SinkFormatFile;
    if s.format.is_some() && s.kind != SinkKindFile::Kafka {
        return Err(invalid("sink.format", "only a Kafka sink (type = \"kafka\") has a format; remove it".into()));
    }
    let format = match s.format {
        None | Some(SinkFormatFile::Json) => None,
        Some(SinkFormatFile::Avro) => Some(SchemaFormat::Avro),
        Some(SinkFormatFile::Protobuf) => Some(SchemaFormat::Protobuf),
        Some(SinkFormatFile::JsonSchema) => Some(SchemaFormat::JsonSchema),
    };
    let Some(format) = format else {
        for (key, present) in [
            ("schema", s.schema.is_some() && !matches!(s.kind, SinkKindFile::Parquet | SinkKindFile::Iceberg)),
            ("message", s.message.is_some()),
            ("key_schema", s.key_schema.is_some()),
            ("subject_strategy", s.subject_strategy.is_some()),
            ("auto_register", s.auto_register.is_some()),
        ] {
            if present {
                return Err(invalid(
                    &format!("sink.{key}"),
                    "only with format = \"avro\", \"protobuf\" or \"json-schema\": set one, or remove this key \
                     (rows are written as JSON)"
                        .into(),
                ));
            }
        }
        return Ok(None);
    };
    if s.message.is_some() && format != SchemaFormat::Protobuf {
        return Err(invalid("sink.message", "only with format = \"protobuf\"; remove it".into()));
    }
    let example = match format {
        SchemaFormat::Avro => "order.avsc",
        SchemaFormat::Protobuf => "order.proto",
        SchemaFormat::JsonSchema => "order.schema.json",
    };
    let schema = s.schema.as_deref().ok_or_else(|| {
        invalid(
            "sink.schema",
            format!("format = \"{}\" writes with a schema: name its file, e.g. schema = \"{example}\"", format.name()),
        )
    })?;
    let registry = registry.ok_or_else(|| {
        invalid(
            "sink.format",
            format!(
                "format = \"{}\" registers its schema in a schema registry: add [registry] with its url, e.g. url \
                 = \"http://localhost:8081\"",
                format.name()
            ),
        )
    })?;
    Ok(Some(SchemaOut {
        format,
        schema: rel(schema),
        message: s.message.clone(),
        key_schema: s.key_schema.as_deref().map(rel),
        strategy: s.subject_strategy.unwrap_or_default(),
        auto_register: s.auto_register.unwrap_or(true),
        registry: registry.clone(),
    }))
}
