//! From a pipeline file to a [`Pipeline`]: every key, value and combination checked, each error
//! naming the key's path, where it is (for what the TOML parser locates) and what to write
//! instead. Nothing here reads the environment, resolves a name or touches the filesystem.

use std::path::Path;

mod iceberg;
mod joins;
mod sinks;
mod sources;
mod stages;
mod stateful;
mod windows;

use super::file::{
    Dur, FailureFile, FailureMode, GrantsFile, JoinType, OutputFile, PipelineFile, SinkFile, SinkKindFile, SourceFile,
    StageFile, StartingFile, TriggerFile, TriggerMode,
};
use super::*;
use crate::plugin::{DirGrant, Grants, LimitsFile};
use sinks::sink_config;
use sources::source_config;
pub use sources::{MAX_DATASET_NAME, dataset_name, kafka_options};
use stages::{Stages, expectations};
use stateful::StatefulFile;

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
pub fn deserialize<T: serde::de::DeserializeOwned>(text: &str, path: &Path) -> Result<T, PipelineError> {
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
    let registry = match f.registry {
        Some(r) => Some(r.validate(base).map_err(|b| invalid(&format!("registry.{}", b.key), b.message))?),
        None => None,
    };
    let stages = Stages { base, name: &name, invalid, registry: registry.as_ref() };
    let stage = |key: &str, s: StageFile| stages.stage(key, s);

    let source = source_config("source", f.source, &name, &rel, invalid)?;
    let join = joins::join(f.join, f.streams, &name, &stages)?;
    let trigger = trigger(f.trigger, invalid)?;
    let (parse, parse_parallelism) = stages.parse(f.parse, &source)?;
    let transforms = f
        .transform
        .into_iter()
        .enumerate()
        .map(|(i, t)| stage(&format!("transform[{i}]"), t))
        .collect::<Result<Vec<_>, _>>()?;
    let expect = expectations(f.expect, &stage, invalid)?;
    let tombstones = sinks::tombstones(&f.output, f.sink.as_ref(), invalid)?;
    let interval_join = matches!(join, Some(Join::Interval(_)));
    let tables = StatefulFile {
        window: f.window,
        aggregate: f.aggregate,
        process: f.process,
        watermark: f.watermark,
        dedup: f.dedup,
    };
    let stateless = tables.window.is_none()
        && tables.aggregate.is_none()
        && tables.process.is_none()
        && tables.dedup.is_none()
        && tables.watermark.is_none();
    if tombstones && stateless && join.is_some() {
        return Err(invalid(
            "output.tombstones",
            "a joined row takes in a table's, which a deletion has none of: only a pipeline without [join] \
             passes its parser's deletions on; remove it"
                .into(),
        ));
    }
    // A stateless pipeline's tombstones are its parser's deletions, passed on.
    let deletions = tombstones && stateless;
    let stateful = stateful::stateful(tables, &f.output, tombstones && !stateless, interval_join, &stages)?;
    joins::check_interval(&join, &stateful, invalid)?;
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
        Some(s) => Some(sink_config(
            s,
            &name,
            matches!(trigger, Trigger::Continuous { .. }),
            registry.as_ref(),
            &stage,
            &rel,
            invalid,
        )?),
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
        failure: failure(f.failure, invalid)?,
        group: None,
        registry,
        deletions,
    };
    match f.scale {
        None => Ok(pipeline),
        Some(scale) => pipeline.in_group(scale.group).map_err(|m| invalid("scale.group", m)),
    }
}

/// `[trigger]`: when a batch starts, and how often a continuous pipeline checkpoints.
fn trigger(f: TriggerFile, invalid: &dyn Fn(&str, String) -> PipelineError) -> Result<Trigger, PipelineError> {
    let interval = |min: Duration, default: Duration| match f.interval {
        Some(d) => span("trigger.interval", d.0, min, MAX_TRIGGER_INTERVAL, invalid),
        None => Ok(default),
    };
    Ok(match (f.mode, f.interval) {
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
    })
}

/// `[failure]`: fail fast, or isolate failing records, with bounded retries and backoff.
fn failure(f: FailureFile, invalid: &dyn Fn(&str, String) -> PipelineError) -> Result<FailurePolicy, PipelineError> {
    Ok(FailurePolicy {
        fail_fast: f.policy == FailureMode::FailFast,
        retries: match f.retries {
            Some(n) if n > MAX_RETRIES => {
                return Err(invalid("failure.retries", format!("{n}: allowed 0 to {MAX_RETRIES}")));
            }
            Some(n) => n,
            None => FailurePolicy::default().retries,
        },
        backoff: match f.backoff {
            Some(d) => span("failure.backoff", d.0, Duration::ZERO, MAX_BACKOFF, invalid)?,
            None => FailurePolicy::default().backoff,
        },
    })
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

/// Whether a `grants` table grants anything.
fn granted(g: &GrantsFile) -> bool {
    !g.dirs.is_empty()
        || !g.env.is_empty()
        || g.clocks
        || g.random
        || !g.network.is_empty()
        || !g.http.is_empty()
        || g.stdout
        || g.registry
}
