//! `[source]` and what is written like it (`join.table`, `[streams.NAME].source`): a replay
//! file, Kafka topics with their librdkafka options, or a project's dataset by name.

use super::*;

/// `[source]`, or a source written like it under `key` (`join.table`).
pub(super) fn source_config(
    key: &str,
    f: SourceFile,
    name: &str,
    rel: &dyn Fn(&Path) -> std::path::PathBuf,
    invalid: &dyn Fn(&str, String) -> PipelineError,
) -> Result<SourceConfig, PipelineError> {
    let (kind, max_offsets_per_trigger) = match f {
        SourceFile::Replay { path, format, max_offsets_per_trigger } => {
            (SourceKind::Replay { path: rel(&path), format }, max_offsets_per_trigger)
        }
        SourceFile::Kafka {
            topics,
            partitions,
            starting_offsets,
            starting_timestamp,
            max_offsets_per_trigger,
            kafka,
        } => {
            let options = kafka_options(&format!("{key}.kafka"), kafka, invalid)?;
            if topics.is_empty() || topics.iter().any(String::is_empty) {
                return Err(invalid(
                    &format!("{key}.topics"),
                    "name at least one topic, e.g. topics = [\"orders\"]".into(),
                ));
            }
            let partitions = match partitions {
                None => None,
                Some(list) => Some(
                    list.iter()
                        .map(|tp| {
                            let parsed = tp.rsplit_once(':').and_then(|(t, p)| Some((t.to_string(), p.parse().ok()?)));
                            match parsed {
                                Some((t, p)) if topics.contains(&t) => Ok((t, p)),
                                _ => Err(invalid(
                                    &format!("{key}.partitions"),
                                    format!("`{tp}`: write \"topic:partition\" with a topic from {key}.topics"),
                                )),
                            }
                        })
                        .collect::<Result<Vec<_>, _>>()?,
                ),
            };
            let starting = match (starting_timestamp, starting_offsets) {
                (Some(ms), _) => StartingOffsets::Timestamp(ms),
                (None, StartingFile::Earliest) => StartingOffsets::Earliest,
                (None, StartingFile::Latest) => StartingOffsets::Latest,
            };
            let group_id = option(&options, "group.id").unwrap_or_else(|| format!("weir-{name}"));
            (
                SourceKind::Kafka(KafkaSourceConfig { topics, partitions, starting, options, group_id }),
                max_offsets_per_trigger,
            )
        }
        SourceFile::Dataset { dataset, max_offsets_per_trigger } => (
            SourceKind::Dataset(DatasetRef::named(dataset_name(&format!("{key}.dataset"), dataset, invalid)?)),
            max_offsets_per_trigger,
        ),
    };
    if let Some(n) = max_offsets_per_trigger
        && !(1..=MAX_OFFSETS_PER_TRIGGER).contains(&n)
    {
        return Err(invalid(
            &format!("{key}.max_offsets_per_trigger"),
            format!("{n}: allowed 1 to {MAX_OFFSETS_PER_TRIGGER}"),
        ));
    }
    Ok(SourceConfig {
        kind,
        max_offsets_per_trigger: max_offsets_per_trigger.unwrap_or(DEFAULT_MAX_OFFSETS_PER_TRIGGER),
    })
}

/// `kafka.*` keys, flattened back to librdkafka's dotted names (`kafka.bootstrap.servers`
/// parses as nested tables). `bootstrap.servers` is required.
pub fn kafka_options(
    key: &str,
    table: toml::Table,
    invalid: &dyn Fn(&str, String) -> PipelineError,
) -> Result<Vec<(String, String)>, PipelineError> {
    fn flatten(prefix: &str, t: toml::Table, out: &mut Vec<(String, String)>) -> Result<(), String> {
        for (k, v) in t {
            let name = if prefix.is_empty() { k } else { format!("{prefix}.{k}") };
            match v {
                toml::Value::Table(t) => flatten(&name, t, out)?,
                toml::Value::String(s) => out.push((name, s)),
                toml::Value::Integer(i) => out.push((name, i.to_string())),
                toml::Value::Boolean(b) => out.push((name, b.to_string())),
                toml::Value::Float(f) => out.push((name, f.to_string())),
                _ => return Err(format!("`{name}`: give librdkafka options as strings, numbers or booleans")),
            }
        }
        Ok(())
    }
    let mut out = Vec::new();
    flatten("", table, &mut out).map_err(|m| invalid(key, m))?;
    if option(&out, "bootstrap.servers").is_none() {
        return Err(invalid(
            &format!("{key}.bootstrap.servers"),
            format!("required: the brokers to connect to, e.g. {key}.bootstrap.servers = \"127.0.0.1:9092\""),
        ));
    }
    Ok(out)
}

/// The longest dataset name.
pub const MAX_DATASET_NAME: usize = 128;

/// A dataset's name as a flow writes it: letters, digits, `_` and `-` (it names a directory and
/// a graph node).
pub fn dataset_name(
    key: &str,
    name: String,
    invalid: &dyn Fn(&str, String) -> PipelineError,
) -> Result<String, PipelineError> {
    let ok = !name.is_empty()
        && name.len() <= MAX_DATASET_NAME
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    if ok {
        Ok(name)
    } else {
        Err(invalid(
            key,
            format!(
                "`{name}`: a dataset's name is 1 to {MAX_DATASET_NAME} letters, digits, `_` or `-`, e.g. \"silver\""
            ),
        ))
    }
}
