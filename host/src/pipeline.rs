//! The pipeline file (TOML): what it may say, and its validation into a [`Pipeline`].
//!
//! Names follow Spark Structured Streaming where Spark has one (`watermark.delay` is
//! `withWatermark`'s delay, `output.mode` is `outputMode`, `trigger.mode` is the trigger,
//! `checkpoint.location` is `checkpointLocation`, `source.max_offsets_per_trigger` is
//! `maxOffsetsPerTrigger`). Unknown keys are errors, never ignored: a typo must not silently
//! change what a pipeline computes. Every error names the key's path and what is allowed.
//! Relative paths are relative to the pipeline file's directory.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use crate::plugin::{DirGrant, Limits, StageSpec};
use crate::window::WindowSpec;

/// A bad pipeline file: which key, and what is wrong with it.
#[derive(Debug, thiserror::Error)]
pub enum PipelineError {
    #[error("cannot read {}", path.display())]
    Read { path: PathBuf, source: std::io::Error },
    #[error("{}: {key}: {message}", path.display())]
    Invalid { path: PathBuf, key: String, message: String },
}

/// A duration written the way people write them: "10 minutes", "30s", "1h 30m", "250ms".
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Dur(pub Duration);

impl<'de> Deserialize<'de> for Dur {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        humantime::parse_duration(&s).map(Dur).map_err(|e| {
            serde::de::Error::custom(format!(
                "`{s}` is not a duration ({e}); write e.g. \"10 minutes\", \"30s\", \"250ms\""
            ))
        })
    }
}

impl Dur {
    fn millis(self) -> i64 {
        i64::try_from(self.0.as_millis()).unwrap_or(i64::MAX)
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct PipelineFile {
    name: String,
    source: SourceFile,
    #[serde(default)]
    trigger: TriggerFile,
    parse: StageFile,
    #[serde(default)]
    transform: Vec<StageFile>,
    watermark: Option<WatermarkFile>,
    window: Option<WindowFile>,
    aggregate: Option<StageFile>,
    #[serde(default)]
    output: OutputFile,
    sink: Option<StageFile>,
    checkpoint: Option<CheckpointFile>,
    dead_letter: Option<DeadLetterFile>,
}

#[derive(Debug, Deserialize)]
#[serde(tag = "type", rename_all = "kebab-case", deny_unknown_fields)]
enum SourceFile {
    /// Recorded events, one per line (see docs/recorded-events.md).
    Replay {
        path: PathBuf,
        #[serde(default)]
        format: ReplayFormat,
        max_offsets_per_trigger: Option<usize>,
    },
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

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct TriggerFile {
    #[serde(default)]
    mode: TriggerMode,
    interval: Option<Dur>,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
enum TriggerMode {
    #[default]
    ProcessingTime,
    Once,
    AvailableNow,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct StageFile {
    plugin: PathBuf,
    #[serde(default)]
    config: toml::Table,
    #[serde(default)]
    grants: GrantsFile,
    #[serde(default)]
    limits: LimitsFile,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct GrantsFile {
    #[serde(default)]
    dirs: Vec<DirGrantFile>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct DirGrantFile {
    host: PathBuf,
    guest: String,
    #[serde(default)]
    writable: bool,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct LimitsFile {
    call_timeout: Option<Dur>,
    max_memory_mb: Option<u64>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct WatermarkFile {
    delay: Dur,
    idle_timeout: Option<Dur>,
    allowed_lateness: Option<Dur>,
    #[serde(default)]
    late: LatePolicy,
    late_path: Option<PathBuf>,
    #[serde(default = "yes")]
    flush_at_end: bool,
}

fn yes() -> bool {
    true
}

/// What happens to an event that is late for every window it belongs to.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum LatePolicy {
    /// Counted and dropped.
    #[default]
    Drop,
    /// Counted and written to the late-data file with its reason.
    SideOutput,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct WindowFile {
    #[serde(rename = "type")]
    kind: WindowKind,
    size: Option<Dur>,
    slide: Option<Dur>,
    gap: Option<Dur>,
    offset: Option<Dur>,
}

#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(rename_all = "kebab-case")]
enum WindowKind {
    Tumbling,
    Sliding,
    Session,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct OutputFile {
    #[serde(default)]
    mode: OutputMode,
}

/// Which window results leave a batch.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum OutputMode {
    /// Each window once, when the watermark passes its end: the final result.
    #[default]
    Append,
    /// Each window changed in this batch.
    Update,
    /// Every window kept in state.
    Complete,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct CheckpointFile {
    location: PathBuf,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct DeadLetterFile {
    path: PathBuf,
}

/// When batches start and how much each reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Trigger {
    /// A batch every `interval` (back to back if a batch takes longer), until input ends.
    ProcessingTime { interval: Duration },
    /// One batch with everything available, then stop.
    Once,
    /// Everything available now, in batches of `max_offsets_per_trigger`, then stop.
    AvailableNow,
}

#[derive(Debug, Clone)]
pub struct SourceConfig {
    pub path: PathBuf,
    pub format: ReplayFormat,
    pub max_offsets_per_trigger: usize,
}

/// Default batch size for a replay: large enough that per-call costs vanish, small enough that
/// the watermark advances during a replay as it would on a live stream.
pub const DEFAULT_MAX_OFFSETS_PER_TRIGGER: usize = 10_000;

#[derive(Debug, Clone)]
pub struct EventTime {
    pub delay_ms: i64,
    pub idle_timeout: Option<Duration>,
    pub allowed_lateness_ms: i64,
    pub late: LatePolicy,
    pub late_path: Option<PathBuf>,
    pub flush_at_end: bool,
}

/// A windowed aggregation: how to window, what to aggregate, what to emit.
#[derive(Debug, Clone)]
pub struct Windowed {
    pub window: WindowSpec,
    pub aggregate: StageSpec,
    pub time: EventTime,
    pub output: OutputMode,
}

/// A validated pipeline.
#[derive(Debug, Clone)]
pub struct Pipeline {
    pub name: String,
    pub source: SourceConfig,
    pub trigger: Trigger,
    pub parse: StageSpec,
    pub transforms: Vec<StageSpec>,
    pub windowed: Option<Windowed>,
    pub sink: Option<StageSpec>,
    pub checkpoint: Option<PathBuf>,
    pub dead_letter: Option<PathBuf>,
}

impl Pipeline {
    /// Reads and validates a pipeline file.
    pub fn load(path: &Path) -> Result<Self, PipelineError> {
        let text =
            std::fs::read_to_string(path).map_err(|e| PipelineError::Read { path: path.to_path_buf(), source: e })?;
        Self::parse(&text, path)
    }

    /// Validates pipeline text; `path` locates relative paths and names the file in errors.
    pub fn parse(text: &str, path: &Path) -> Result<Self, PipelineError> {
        let invalid = |key: &str, message: String| PipelineError::Invalid {
            path: path.to_path_buf(),
            key: key.to_string(),
            message,
        };
        let de = toml::Deserializer::parse(text).map_err(|e| invalid("(syntax)", e.message().to_string()))?;
        let file: PipelineFile = serde_path_to_error::deserialize(de).map_err(|e| {
            let key = e.path().to_string();
            let key = if key == "." { "(top level)".to_string() } else { key };
            invalid(&key, e.into_inner().message().to_string())
        })?;
        let base = path.parent().map(Path::to_path_buf).unwrap_or_default();
        build(file, &base, &invalid)
    }
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
        let config_json =
            serde_json::to_string(&s.config).map_err(|e| invalid(&format!("{key}.config"), e.to_string()))?;
        let mut limits = Limits::default();
        if let Some(t) = s.limits.call_timeout {
            if t.0.is_zero() {
                return Err(invalid(&format!("{key}.limits.call_timeout"), "must be more than zero".into()));
            }
            limits.call_timeout = t.0;
        }
        if let Some(mb) = s.limits.max_memory_mb {
            if !(1..=65_536).contains(&mb) {
                return Err(invalid(&format!("{key}.limits.max_memory_mb"), format!("{mb}: allowed 1 to 65536")));
            }
            limits.max_memory = (mb as usize) << 20;
        }
        let mut dirs = Vec::new();
        for (i, d) in s.grants.dirs.into_iter().enumerate() {
            if !d.guest.starts_with('/') {
                return Err(invalid(
                    &format!("{key}.grants.dirs[{i}].guest"),
                    format!("`{}`: must be an absolute path inside the sandbox, e.g. \"/out\"", d.guest),
                ));
            }
            dirs.push(DirGrant { host: rel(&d.host), guest: d.guest, writable: d.writable });
        }
        Ok(StageSpec { name: format!("{name}/{key}"), component: rel(&s.plugin), config_json, dirs, limits })
    };

    let SourceFile::Replay { path, format, max_offsets_per_trigger } = f.source;
    if max_offsets_per_trigger == Some(0) {
        return Err(invalid("source.max_offsets_per_trigger", "must be at least 1".into()));
    }
    let source = SourceConfig {
        path: rel(&path),
        format,
        max_offsets_per_trigger: max_offsets_per_trigger.unwrap_or(DEFAULT_MAX_OFFSETS_PER_TRIGGER),
    };

    let trigger = match (f.trigger.mode, f.trigger.interval) {
        (TriggerMode::ProcessingTime, interval) => {
            Trigger::ProcessingTime { interval: interval.map_or(Duration::ZERO, |d| d.0) }
        }
        (TriggerMode::Once, None) => Trigger::Once,
        (TriggerMode::AvailableNow, None) => Trigger::AvailableNow,
        (_, Some(_)) => {
            return Err(invalid("trigger.interval", "only for mode = \"processing-time\"; remove it".into()));
        }
    };

    let parse = stage("parse", f.parse)?;
    let transforms = f
        .transform
        .into_iter()
        .enumerate()
        .map(|(i, t)| stage(&format!("transform[{i}]"), t))
        .collect::<Result<Vec<_>, _>>()?;

    let windowed = match (f.window, f.aggregate, f.watermark) {
        (None, None, None) => {
            if f.output.mode != OutputMode::Append {
                return Err(invalid("output.mode", "only `append` applies to a pipeline without [window]".into()));
            }
            None
        }
        (Some(w), Some(a), Some(wm)) => {
            let window = window_spec(w, invalid)?;
            let late_path = match (wm.late, wm.late_path) {
                (LatePolicy::Drop, Some(_)) => {
                    return Err(invalid("watermark.late_path", "only with late = \"side-output\"".into()));
                }
                (_, p) => p.map(|p| rel(&p)),
            };
            let time = EventTime {
                delay_ms: wm.delay.millis(),
                idle_timeout: wm.idle_timeout.map(|d| d.0),
                allowed_lateness_ms: wm.allowed_lateness.map_or(0, Dur::millis),
                late: wm.late,
                late_path,
                flush_at_end: wm.flush_at_end,
            };
            Some(Windowed { window, aggregate: stage("aggregate", a)?, time, output: f.output.mode })
        }
        (None, Some(_), _) => return Err(invalid("window", "[aggregate] needs a [window] table".into())),
        (Some(_), None, _) => return Err(invalid("aggregate", "[window] needs an [aggregate] table".into())),
        (Some(_), Some(_), None) => {
            return Err(invalid(
                "watermark",
                "a windowed pipeline needs [watermark] with a delay, e.g. delay = \"10 minutes\"".into(),
            ));
        }
        (None, None, Some(_)) => {
            return Err(invalid("watermark", "only meaningful with [window] and [aggregate]".into()));
        }
    };

    Ok(Pipeline {
        name: name.clone(),
        source,
        trigger,
        parse,
        transforms,
        windowed,
        sink: f.sink.map(|s| stage("sink", s)).transpose()?,
        checkpoint: f.checkpoint.map(|c| rel(&c.location)),
        dead_letter: f.dead_letter.map(|d| rel(&d.path)),
    })
}

fn window_spec(w: WindowFile, invalid: &dyn Fn(&str, String) -> PipelineError) -> Result<WindowSpec, PipelineError> {
    let positive = |key: &str, d: Option<Dur>, example: &str| match d {
        Some(d) if !d.0.is_zero() => Ok(d.millis()),
        Some(_) => Err(invalid(key, "must be more than zero".into())),
        None => Err(invalid(key, format!("required for this window type, e.g. {example}"))),
    };
    let unused = |key: &str, d: Option<Dur>, kind: &str| match d {
        Some(_) => Err(invalid(key, format!("does not apply to a {kind} window; remove it"))),
        None => Ok(()),
    };
    let offset = w.offset.map_or(0, Dur::millis);
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

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = r#"
        name = "orders"
        [source]
        type = "replay"
        path = "events.jsonl"
        [parse]
        plugin = "p.wasm"
        [watermark]
        delay = "10 minutes"
        [window]
        type = "tumbling"
        size = "1 minute"
        [aggregate]
        plugin = "a.wasm"
        config = { error_status = "ERROR" }
    "#;

    fn err(text: &str) -> String {
        Pipeline::parse(text, Path::new("dir/p.toml")).unwrap_err().to_string()
    }

    #[test]
    fn a_good_file_resolves_paths_against_its_directory() {
        let p = Pipeline::parse(GOOD, Path::new("dir/p.toml")).unwrap();
        assert_eq!(p.source.path, Path::new("dir/events.jsonl"));
        assert_eq!(p.parse.component, Path::new("dir/p.wasm"));
        let w = p.windowed.unwrap();
        assert_eq!(w.time.delay_ms, 600_000);
        assert_eq!(w.aggregate.config_json, r#"{"error_status":"ERROR"}"#);
        assert_eq!(w.aggregate.name, "orders/aggregate");
    }

    #[test]
    fn unknown_keys_name_their_path_and_the_allowed_keys() {
        let e = err(&GOOD.replace("size = \"1 minute\"", "sise = \"1 minute\""));
        assert!(e.contains("window") && e.contains("unknown field `sise`") && e.contains("`size`"), "{e}");
    }

    #[test]
    fn bad_values_say_what_is_allowed() {
        let e = err(&GOOD.replace("delay = \"10 minutes\"", "delay = \"10 minuts\""));
        assert!(e.contains("watermark.delay") && e.contains("not a duration"), "{e}");
        let e = err(&format!("{GOOD}\n[output]\nmode = \"apend\""));
        assert!(e.contains("output.mode") && e.contains("`append`"), "{e}");
    }

    #[test]
    fn a_sliding_window_needs_a_slide_that_divides_its_size() {
        let text = GOOD.replace("type = \"tumbling\"", "type = \"sliding\"\nslide = \"7 seconds\"");
        assert!(err(&text).contains("window.slide: must divide"));
        let text = GOOD.replace("type = \"tumbling\"", "type = \"sliding\"");
        assert!(err(&text).contains("window.slide: required"));
    }

    #[test]
    fn a_window_without_a_watermark_is_refused() {
        let text = GOOD.replace("[watermark]\n        delay = \"10 minutes\"", "");
        assert!(err(&text).contains("watermark: a windowed pipeline needs [watermark]"));
    }

    #[test]
    fn grants_must_name_an_absolute_guest_path() {
        let text =
            format!("{GOOD}\n[sink]\nplugin = \"s.wasm\"\ngrants.dirs = [{{ host = \"out\", guest = \"out\" }}]");
        assert!(err(&text).contains("sink.grants.dirs[0].guest"));
    }
}
