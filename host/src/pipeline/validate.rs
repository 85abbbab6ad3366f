//! From a pipeline file to a [`Pipeline`]: every key, value and combination checked, each error
//! naming the key's path, where it is (for what the TOML parser locates) and what to write
//! instead. Nothing here reads the environment, resolves a name or touches the filesystem.

use std::path::Path;

use super::file::{
    Dur, FailureMode, GrantsFile, JoinType, PipelineFile, SinkFile, SinkKindFile, SourceFile, StageFile, StartingFile,
    TriggerMode, WindowFile, WindowKind,
};
use super::*;
use crate::plugin::{DirGrant, Grants, LimitsFile};

/// Parses and validates pipeline text; `path` (absolute) locates relative paths and names the
/// file in errors.
pub(super) fn pipeline(text: &str, path: &Path) -> Result<Pipeline, PipelineError> {
    let invalid = |key: &str, message: String| PipelineError::Invalid {
        path: path.to_path_buf(),
        at: None,
        key: key.to_string(),
        message,
    };
    let file: PipelineFile = deserialize(text, path)?;
    let base = path.parent().map(Path::to_path_buf).unwrap_or_default();
    build(file, &base, &invalid)
}

/// TOML text as `T`, or the error naming the key that is wrong (and its line and column).
pub(crate) fn deserialize<T: serde::de::DeserializeOwned>(text: &str, path: &Path) -> Result<T, PipelineError> {
    let at = |e: &toml::de::Error| e.span().map(|s| line_col(text, s.start));
    let de = toml::Deserializer::parse(text).map_err(|e| PipelineError::Invalid {
        path: path.to_path_buf(),
        at: at(&e),
        key: "(syntax)".into(),
        message: e.message().to_string(),
    })?;
    serde_path_to_error::deserialize(de).map_err(|e| {
        let key = e.path().to_string();
        let key = if key == "." { "(top level)".to_string() } else { key };
        PipelineError::Invalid {
            path: path.to_path_buf(),
            at: at(e.inner()),
            key,
            message: e.inner().message().to_string(),
        }
    })
}

/// The 1-based line and column of byte `offset` in `text`.
fn line_col(text: &str, offset: usize) -> (usize, usize) {
    let before = &text.as_bytes()[..offset.min(text.len())];
    let line = before.iter().filter(|&&b| b == b'\n').count() + 1;
    let col = before.iter().rev().take_while(|&&b| b != b'\n').count() + 1;
    (line, col)
}

fn build(
    f: PipelineFile,
    base: &Path,
    invalid: &dyn Fn(&str, String) -> PipelineError,
) -> Result<Pipeline, PipelineError> {
    let rel = |p: &Path| base.join(p);
    if f.name.is_empty() || !f.name.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_') {
        return Err(invalid("name", format!("`{}`: use letters, digits, `-` and `_`", f.name)));
    }
    let name = f.name;
    let stage = |key: &str, s: StageFile| -> Result<StageSpec, PipelineError> {
        if s.parallelism.is_some() && key != "parse" {
            return Err(invalid(&format!("{key}.parallelism"), "only [parse] runs in parallel; remove it".into()));
        }
        let config_json =
            serde_json::to_string(&s.config).map_err(|e| invalid(&format!("{key}.config"), e.to_string()))?;
        let limits = s.limits.validate().map_err(|b| invalid(&format!("{key}.limits.{}", b.key), b.message))?;
        let g = s.grants;
        if g.stdout && key != "sink" {
            return Err(invalid(
                &format!("{key}.grants.stdout"),
                "only a [sink] may write to standard output (where `weir test` prints rows); drop it here".into(),
            ));
        }
        let grants = Grants {
            dirs: g
                .dirs
                .into_iter()
                .map(|d| DirGrant { host: rel(&d.host), guest: d.guest, writable: d.writable })
                .collect(),
            env: g.env,
            clocks: g.clocks,
            random: g.random,
            network: g.network,
            http: g.http,
            stdout: g.stdout,
        };
        grants.validate().map_err(|b| invalid(&format!("{key}.grants.{}", b.key), b.message))?;
        Ok(StageSpec {
            name: format!("{name}/{key} ({})", s.plugin.file_name().map_or("?".into(), |f| f.to_string_lossy())),
            component: rel(&s.plugin),
            config_json,
            grants,
            limits,
        })
    };

    let source = source_config("source", f.source, &name, &rel, invalid)?;
    let mut streams = f.streams;
    let join = match f.join {
        None => None,
        Some(j) => {
            let not_for = |key: &str, present: bool, kind: &str| {
                if present {
                    Err(invalid(&format!("join.{key}"), format!("does not apply to a {kind} join; remove it")))
                } else {
                    Ok(())
                }
            };
            let on = key_field("join.on", j.on, invalid)?;
            let field = key_field("join.as", j.field, invalid)?;
            if field.as_ref().is_some_and(|f| f.contains('.')) {
                return Err(invalid(
                    "join.as",
                    "the top-level field the joined row gets: a name without dots, e.g. as = \"user\"".into(),
                ));
            }
            match j.join_type {
                JoinType::Table => {
                    not_for("stream", j.stream.is_some(), "table")?;
                    not_for("before", j.before.is_some(), "table")?;
                    not_for("after", j.after.is_some(), "table")?;
                    let table = j.table.ok_or_else(|| {
                        invalid(
                            "join.table",
                            "the table's source, written like [source], e.g. table = { type = \"replay\", path = \
                             \"users.jsonl\" }; or set type = \"interval\" to join another stream"
                                .into(),
                        )
                    })?;
                    if let SourceFile::Replay { max_offsets_per_trigger: Some(_), .. }
                    | SourceFile::Kafka { max_offsets_per_trigger: Some(_), .. } = &table
                    {
                        return Err(invalid(
                            "join.table.max_offsets_per_trigger",
                            "a table is read as far as it goes when each batch is planned; remove it".into(),
                        ));
                    }
                    Some(Join::Table(TableJoin {
                        // The table's consumer group (lag monitoring only) is not the stream's.
                        table: source_config("join.table", table, &format!("{name}-table"), &rel, invalid)?,
                        on,
                        field: field.unwrap_or_else(|| DEFAULT_JOIN_AS.to_string()),
                        kind: j.kind.unwrap_or_default(),
                    }))
                }
                JoinType::Interval => {
                    not_for("table", j.table.is_some(), "interval")?;
                    if j.kind == Some(JoinKind::Left) {
                        return Err(invalid(
                            "join.kind",
                            "an interval join is inner: a pair is emitted when its later half arrives. Remove it"
                                .into(),
                        ));
                    }
                    let stream = j.stream.ok_or_else(|| {
                        invalid("join.stream", "the other stream's name, with a [streams.NAME] table".into())
                    })?;
                    let s = streams.remove(&stream).ok_or_else(|| {
                        invalid(
                            "join.stream",
                            format!("no [streams.{stream}] table: add one with its source and parse tables"),
                        )
                    })?;
                    let bound = |key: &str, d: Option<Dur>| match d {
                        Some(d) => Ok(millis(span(key, d.0, Duration::ZERO, MAX_TIME_SPAN, invalid)?)),
                        None => Err(invalid(key, "required, from 0, e.g. \"10 minutes\"".into())),
                    };
                    let key = format!("streams.{stream}");
                    Some(Join::Interval(Box::new(IntervalJoin {
                        source: source_config(
                            &format!("{key}.source"),
                            s.source,
                            &format!("{name}-{stream}"),
                            &rel,
                            invalid,
                        )?,
                        parse: stage(&format!("{key}.parse"), s.parse)?,
                        on,
                        field: field.unwrap_or_else(|| stream.clone()),
                        before_ms: bound("join.before", j.before)?,
                        after_ms: bound("join.after", j.after)?,
                        stream,
                    })))
                }
            }
        }
    };
    if let Some(name) = streams.keys().next() {
        return Err(invalid(
            &format!("streams.{name}"),
            "no [join] reads this stream: name it in join.stream, or remove it".into(),
        ));
    }

    let interval = |min: Duration, default: Duration| match f.trigger.interval {
        Some(d) => span("trigger.interval", d.0, min, MAX_TRIGGER_INTERVAL, invalid),
        None => Ok(default),
    };
    let trigger = match (f.trigger.mode, f.trigger.interval) {
        (TriggerMode::ProcessingTime, _) => {
            Trigger::ProcessingTime { interval: interval(Duration::ZERO, Duration::ZERO)? }
        }
        (TriggerMode::Continuous, _) => {
            Trigger::Continuous { checkpoint_interval: interval(Duration::from_millis(1), Duration::from_secs(1))? }
        }
        (TriggerMode::Once, None) => Trigger::Once,
        (TriggerMode::AvailableNow, None) => Trigger::AvailableNow,
        (_, Some(_)) => {
            return Err(invalid(
                "trigger.interval",
                "only for mode = \"processing-time\" or \"continuous\"; remove it".into(),
            ));
        }
    };

    let parse_parallelism = f.parse.as_ref().and_then(|p| p.parallelism).unwrap_or(DEFAULT_PARSE_PARALLELISM);
    if !(1..=MAX_PARSE_PARALLELISM).contains(&parse_parallelism) {
        return Err(invalid("parse.parallelism", format!("{parse_parallelism}: allowed 1 to {MAX_PARSE_PARALLELISM}")));
    }
    let parse = match f.parse {
        Some(p) => Some(stage("parse", p)?),
        None if matches!(source.kind, SourceKind::Dataset(_)) => None,
        None => {
            return Err(invalid(
                "parse",
                "missing: name the parser that turns records into events, e.g. [parse] plugin = \"parser.wasm\" \
                 (a flow reading a dataset may leave it out: the dataset's rows come with their keys and event times)"
                    .into(),
            ));
        }
    };
    let transforms = f
        .transform
        .into_iter()
        .enumerate()
        .map(|(i, t)| stage(&format!("transform[{i}]"), t))
        .collect::<Result<Vec<_>, _>>()?;
    let expect = expectations(f.expect, &stage, invalid)?;

    let tombstones = f.output.tombstones.unwrap_or(false);
    if tombstones && f.sink.as_ref().is_some_and(|s| s.kind == SinkKindFile::Wasm) {
        return Err(invalid(
            "output.tombstones",
            "a Wasm sink gets rows without keys, so it cannot take a tombstone; write to a Kafka sink \
             (type = \"kafka\"), or remove it"
                .into(),
        ));
    }
    if tombstones && f.sink.as_ref().is_some_and(|s| s.key.is_some()) {
        return Err(invalid(
            "sink.key",
            "a tombstone has no row to take a key field from, so it would go under another key than the \
             rows it deletes; with output.tombstones, leave sink.key out (rows keep the operator's key)"
                .into(),
        ));
    }
    let interval_join = matches!(join, Some(Join::Interval(_)));
    let stateful = match (f.window, f.aggregate, f.process, f.watermark) {
        (None, None, None, None) if f.dedup.is_some() => {
            return Err(invalid(
                "dedup",
                "deduplication keeps each key until the watermark passes it: add [watermark] with a delay, \
                 e.g. delay = \"10 minutes\""
                    .into(),
            ));
        }
        (None, None, None, None) => {
            if tombstones {
                return Err(invalid(
                    "output.tombstones",
                    "only state that is deleted makes a tombstone: a window in update mode or a [process]; \
                     remove it"
                        .into(),
                ));
            }
            if f.output.mode != OutputMode::Append {
                return Err(invalid("output.mode", "only `append` applies to a pipeline without [window]".into()));
            }
            None
        }
        (Some(_), _, Some(_), _) | (_, Some(_), Some(_), _) => {
            return Err(invalid(
                "process",
                "a pipeline either aggregates in windows ([window], [aggregate]) or runs a processor \
                 ([process]); remove one"
                    .into(),
            ));
        }
        (None, None, None, Some(_)) if f.dedup.is_none() && !interval_join => {
            return Err(invalid(
                "watermark",
                "only meaningful with [window] and [aggregate], [process], [dedup] or an interval [join]".into(),
            ));
        }
        (None, Some(_), None, _) => return Err(invalid("window", "[aggregate] needs a [window] table".into())),
        (Some(_), None, None, _) => return Err(invalid("aggregate", "[window] needs an [aggregate] table".into())),
        (_, _, _, None) => {
            return Err(invalid(
                "watermark",
                "a stateful pipeline needs [watermark] with a delay, e.g. delay = \"10 minutes\"".into(),
            ));
        }
        (w, a, p, Some(wm)) => {
            let late_path = match (wm.late, wm.late_path) {
                (LatePolicy::Drop, Some(_)) => {
                    return Err(invalid("watermark.late_path", "only with late = \"side-output\"".into()));
                }
                (_, p) => p.map(|p| rel(&p)),
            };
            let time = EventTime {
                delay_ms: millis(span("watermark.delay", wm.delay.0, Duration::ZERO, MAX_TIME_SPAN, invalid)?),
                idle_timeout: wm
                    .idle_timeout
                    .map(|d| span("watermark.idle_timeout", d.0, MIN_WINDOW, MAX_TIME_SPAN, invalid))
                    .transpose()?,
                allowed_lateness_ms: match wm.allowed_lateness {
                    Some(d) => millis(span("watermark.allowed_lateness", d.0, Duration::ZERO, MAX_TIME_SPAN, invalid)?),
                    None => 0,
                },
                late: wm.late,
                late_path,
                flush_at_end: wm.flush_at_end,
            };
            let dedup = match f.dedup {
                None => None,
                Some(d) => Some(Dedup {
                    field: key_field("dedup.key", d.key, invalid)?,
                    within_ms: match d.within {
                        Some(w) => millis(span("dedup.within", w.0, MIN_WINDOW, MAX_TIME_SPAN, invalid)?),
                        None => time.delay_ms,
                    },
                }),
            };
            let keyed = match (w, a, p) {
                (Some(w), Some(a), None) => {
                    let window = window_spec(w, invalid)?;
                    if tombstones && f.output.mode != OutputMode::Update {
                        return Err(invalid(
                            "output.tombstones",
                            "a window's state is dropped as it becomes final; only mode = \"update\" makes that \
                             a change worth a tombstone. Set output.mode = \"update\", or remove it"
                                .into(),
                        ));
                    }
                    if tombstones && matches!(window, WindowSpec::Session { .. }) {
                        return Err(invalid(
                            "output.tombstones",
                            "a session's key (its start and end) changes as it grows and merges, so its \
                             changelog would keep stale keys; tombstones apply to tumbling and sliding windows \
                             and to [process]. Remove it"
                                .into(),
                        ));
                    }
                    Keyed::Window(Windowed {
                        window,
                        aggregate: stage("aggregate", a)?,
                        output: f.output.mode,
                        tombstones,
                    })
                }
                (None, None, Some(p)) => {
                    if f.output.mode != OutputMode::Append {
                        return Err(invalid(
                            "output.mode",
                            "a processor's rows leave as it emits them: only `append` applies with [process]".into(),
                        ));
                    }
                    let ttl = match (p.ttl, p.ttl_clock) {
                        (None, Some(_)) => {
                            return Err(invalid("process.ttl_clock", "only with process.ttl; remove it".into()));
                        }
                        (None, None) => None,
                        (Some(d), clock) => Some(Ttl {
                            ms: millis(span("process.ttl", d.0, MIN_WINDOW, MAX_TIME_SPAN, invalid)?),
                            clock: clock.unwrap_or_default(),
                        }),
                    };
                    let key = key_field("process.key", p.key, invalid)?;
                    let plugin = stage(
                        "process",
                        StageFile {
                            plugin: p.plugin,
                            parallelism: None,
                            config: p.config,
                            grants: p.grants,
                            limits: p.limits,
                        },
                    )?;
                    Keyed::Process(Process { plugin, key, ttl, tombstones })
                }
                (None, None, None) => {
                    if tombstones {
                        return Err(invalid(
                            "output.tombstones",
                            "only state that is deleted makes a tombstone: a window in update mode or a \
                             [process]; remove it"
                                .into(),
                        ));
                    }
                    if f.output.mode != OutputMode::Append {
                        return Err(invalid(
                            "output.mode",
                            "only `append` applies to a pipeline without [window]".into(),
                        ));
                    }
                    Keyed::Rows
                }
                _ => return Err(invalid("window", "[window] and [aggregate] go together".into())),
            };
            Some(Stateful { dedup, time, keyed })
        }
    };

    if let Some(Join::Interval(_)) = &join {
        match &stateful {
            None => {
                return Err(invalid(
                    "join",
                    "an interval join buffers both streams until the watermark passes them: add [watermark] \
                     with a delay, e.g. delay = \"10 minutes\""
                        .into(),
                ));
            }
            Some(s) if !matches!(s.keyed, Keyed::Rows) => {
                return Err(invalid(
                    "join",
                    "an interval join's rows go to the sink; [window] and [process] after it are not supported \
                     yet. Remove them, or aggregate the joined rows in a pipeline that reads them"
                        .into(),
                ));
            }
            Some(_) => {}
        }
    }
    if matches!(trigger, Trigger::Continuous { .. }) && (stateful.is_some() || join.is_some()) {
        return Err(invalid(
            "trigger.mode",
            "\"continuous\" runs stateless pipelines (parse, transform, sink); a stateful pipeline needs \
             \"processing-time\", \"once\" or \"available-now\""
                .into(),
        ));
    }
    let sink = match f.sink {
        None => None,
        Some(s) => Some(sink_config(s, &name, matches!(trigger, Trigger::Continuous { .. }), &stage, invalid)?),
    };

    let pipeline = Pipeline {
        name: name.clone(),
        source,
        trigger,
        parse,
        parse_parallelism,
        transforms,
        expect,
        join,
        stateful,
        sink,
        checkpoint: f.checkpoint.map(|c| rel(&c.location)),
        dead_letter: f.dead_letter.map(|d| rel(&d.path)),
        failure: FailurePolicy {
            fail_fast: f.failure.policy == FailureMode::FailFast,
            retries: match f.failure.retries {
                Some(n) if n > MAX_RETRIES => {
                    return Err(invalid("failure.retries", format!("{n}: allowed 0 to {MAX_RETRIES}")));
                }
                Some(n) => n,
                None => FailurePolicy::default().retries,
            },
            backoff: match f.failure.backoff {
                Some(d) => span("failure.backoff", d.0, Duration::ZERO, MAX_BACKOFF, invalid)?,
                None => FailurePolicy::default().backoff,
            },
        },
        group: None,
    };
    match f.scale {
        None => Ok(pipeline),
        Some(scale) => pipeline.in_group(scale.group).map_err(|m| invalid("scale.group", m)),
    }
}

/// `[source]`, or a source written like it under `key` (`join.table`).
fn source_config(
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

fn sink_config(
    s: SinkFile,
    name: &str,
    continuous: bool,
    stage: &dyn Fn(&str, StageFile) -> Result<StageSpec, PipelineError>,
    invalid: &dyn Fn(&str, String) -> PipelineError,
) -> Result<SinkConfig, PipelineError> {
    let not_for = |key: &str, present: bool, kind: &str| {
        if present {
            Err(invalid(&format!("sink.{key}"), format!("does not apply to a {kind} sink; remove it")))
        } else {
            Ok(())
        }
    };
    match s.kind {
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
            }))
        }
    }
}

/// `kafka.*` keys, flattened back to librdkafka's dotted names (`kafka.bootstrap.servers`
/// parses as nested tables). `bootstrap.servers` is required.
pub(crate) fn kafka_options(
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

fn option(options: &[(String, String)], name: &str) -> Option<String> {
    options.iter().rev().find(|(k, _)| k == name).map(|(_, v)| v.clone())
}

/// A duration in `min..=max`, or the error naming `key` and the range.
fn span(
    key: &str,
    d: Duration,
    min: Duration,
    max: Duration,
    invalid: &dyn Fn(&str, String) -> PipelineError,
) -> Result<Duration, PipelineError> {
    if (min..=max).contains(&d) {
        return Ok(d);
    }
    let show = |d: Duration| humantime::format_duration(d).to_string();
    let min = if min.is_zero() { "0".to_string() } else { show(min) };
    Err(invalid(key, format!("{}: allowed {min} to {}", show(d), show(max))))
}

/// A `key` naming a row field, `.` for nesting (`dedup.key`, `process.key`, `join.on`,
/// `sink.key`; and `join.as`, checked for dots beside); `None`: the event's key.
fn key_field(
    key: &str,
    field: Option<String>,
    invalid: &dyn Fn(&str, String) -> PipelineError,
) -> Result<Option<String>, PipelineError> {
    match field {
        Some(k) if k.is_empty() || k.len() > MAX_KEY_FIELD => Err(invalid(
            key,
            format!("a top-level field name of 1 to {MAX_KEY_FIELD} bytes, or leave it out to use the event's key"),
        )),
        k => Ok(k),
    }
}

/// Milliseconds of a duration already checked against [`MAX_TIME_SPAN`].
fn millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

fn window_spec(w: WindowFile, invalid: &dyn Fn(&str, String) -> PipelineError) -> Result<WindowSpec, PipelineError> {
    let positive = |key: &str, d: Option<Dur>, example: &str| match d {
        Some(d) => Ok(millis(span(key, d.0, MIN_WINDOW, MAX_TIME_SPAN, invalid)?)),
        None => Err(invalid(key, format!("required for this window type, e.g. {example}"))),
    };
    let unused = |key: &str, d: Option<Dur>, kind: &str| match d {
        Some(_) => Err(invalid(key, format!("does not apply to a {kind} window; remove it"))),
        None => Ok(()),
    };
    let offset = match w.offset {
        Some(d) => millis(span("window.offset", d.0, Duration::ZERO, MAX_TIME_SPAN, invalid)?),
        None => 0,
    };
    match w.kind {
        WindowKind::Tumbling => {
            unused("window.slide", w.slide, "tumbling")?;
            unused("window.gap", w.gap, "tumbling")?;
            let size = positive("window.size", w.size, "size = \"1 minute\"")?;
            Ok(WindowSpec::sliding(size, size, offset))
        }
        WindowKind::Sliding => {
            unused("window.gap", w.gap, "sliding")?;
            let size = positive("window.size", w.size, "size = \"10 minutes\"")?;
            let slide = positive("window.slide", w.slide, "slide = \"1 minute\"")?;
            if slide > size || size % slide != 0 {
                return Err(invalid("window.slide", format!("must divide window.size ({size} ms); got {slide} ms")));
            }
            if size / slide > MAX_WINDOWS_PER_EVENT {
                return Err(invalid(
                    "window.slide",
                    format!(
                        "{slide} ms puts every event in {} windows of {size} ms; at most {MAX_WINDOWS_PER_EVENT}: make \
                         the slide longer",
                        size / slide
                    ),
                ));
            }
            Ok(WindowSpec::sliding(size, slide, offset))
        }
        WindowKind::Session => {
            unused("window.size", w.size, "session")?;
            unused("window.slide", w.slide, "session")?;
            unused("window.offset", w.offset, "session")?;
            Ok(WindowSpec::Session { gap: positive("window.gap", w.gap, "gap = \"5 minutes\"")? })
        }
    }
}

/// Whether a `grants` table grants anything.
fn granted(g: &GrantsFile) -> bool {
    !g.dirs.is_empty()
        || !g.env.is_empty()
        || g.clocks
        || g.random
        || !g.network.is_empty()
        || !g.http.is_empty()
        || g.stdout
}

/// The longest dataset name.
pub(crate) const MAX_DATASET_NAME: usize = 128;

/// A dataset's name as a flow writes it: letters, digits, `_` and `-` (it names a directory and
/// a graph node).
pub(crate) fn dataset_name(
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

/// `expect`: each a name (unique, like a field name) and exactly one of `rule` and `plugin`.
fn expectations(
    list: Vec<super::file::ExpectFile>,
    stage: &dyn Fn(&str, StageFile) -> Result<StageSpec, PipelineError>,
    invalid: &dyn Fn(&str, String) -> PipelineError,
) -> Result<Vec<Expectation>, PipelineError> {
    use crate::expect::{MAX_EXPECTATIONS, Rule};
    if list.len() > MAX_EXPECTATIONS {
        return Err(invalid("expect", format!("{} expectations; a flow has at most {MAX_EXPECTATIONS}", list.len())));
    }
    let mut names = std::collections::HashSet::new();
    let mut out = Vec::with_capacity(list.len());
    for (i, e) in list.into_iter().enumerate() {
        let key = |k: &str| format!("expect[{i}].{k}");
        let ok = !e.name.is_empty()
            && e.name.len() <= MAX_DATASET_NAME
            && e.name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
        if !ok {
            return Err(invalid(
                &key("name"),
                format!("`{}`: letters, digits, `_` or `-`, e.g. \"valid_amount\"", e.name),
            ));
        }
        if !names.insert(e.name.clone()) {
            return Err(invalid(
                &key("name"),
                format!("`{}` is the name of an earlier expectation; names must differ", e.name),
            ));
        }
        let check = match (e.rule, e.plugin) {
            (Some(rule), None) => {
                if !e.config.is_empty() || granted(&e.grants) || e.limits != LimitsFile::default() {
                    return Err(invalid(
                        &key("rule"),
                        "a rule has no config, grants or limits (a plugin does); remove them".into(),
                    ));
                }
                ExpectCheck::Rule(Rule::parse(&rule).map_err(|m| invalid(&key("rule"), m))?)
            }
            (None, Some(plugin)) => {
                let file =
                    StageFile { plugin, parallelism: None, config: e.config, grants: e.grants, limits: e.limits };
                ExpectCheck::Plugin(stage(&format!("expect[{i}]"), file)?)
            }
            _ => {
                return Err(invalid(
                    &key("rule"),
                    "give exactly one of rule = \"amount > 0\" (built in) and plugin = \"check.wasm\" (a transform \
                     whose dropped rows violate it)"
                        .into(),
                ));
            }
        };
        out.push(Expectation { name: e.name, check, on_violation: e.on_violation });
    }
    Ok(out)
}
