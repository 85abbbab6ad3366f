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

use crate::plugin::{DirGrant, Grants, Limits, StageSpec};
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
    sink: Option<SinkFile>,
    checkpoint: Option<CheckpointFile>,
    dead_letter: Option<DeadLetterFile>,
    #[serde(default)]
    failure: FailureFile,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FailureFile {
    #[serde(default)]
    policy: FailureMode,
    retries: Option<u32>,
    backoff: Option<Dur>,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
enum FailureMode {
    #[default]
    DeadLetter,
    FailFast,
}

/// What happens when a plugin traps, runs out of time or memory, or breaks a limit.
#[derive(Debug, Clone, Copy)]
pub struct FailurePolicy {
    /// Stop the pipeline at the first failure (after the retries) instead of isolating the
    /// records that cause it.
    pub fail_fast: bool,
    /// Attempts of the whole batch after the first, before isolating.
    pub retries: u32,
    /// Wait before the first retry; doubles with each.
    pub backoff: Duration,
}

impl Default for FailurePolicy {
    fn default() -> Self {
        Self { fail_fast: false, retries: 2, backoff: Duration::from_millis(100) }
    }
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
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
enum StartingFile {
    #[default]
    Earliest,
    Latest,
}

/// Where a Kafka source starts in a partition the checkpoint does not know yet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StartingOffsets {
    Earliest,
    Latest,
    /// The first offset whose record's timestamp is at or after this (epoch ms).
    Timestamp(i64),
}

/// `[sink]`: a Wasm sink plugin, or Weir's native Kafka sink.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct SinkFile {
    #[serde(rename = "type", default)]
    kind: SinkKindFile,
    plugin: Option<PathBuf>,
    #[serde(default)]
    config: toml::Table,
    #[serde(default)]
    grants: GrantsFile,
    #[serde(default)]
    limits: LimitsFile,
    topic: Option<String>,
    kafka: Option<toml::Table>,
    transactional: Option<bool>,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
enum SinkKindFile {
    #[default]
    Wasm,
    Kafka,
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
    Continuous,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct StageFile {
    plugin: PathBuf,
    /// `[parse]` only: instances that parse a batch's chunks in parallel.
    parallelism: Option<usize>,
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
    /// Names of environment variables to pass through.
    #[serde(default)]
    env: Vec<String>,
    #[serde(default)]
    clocks: bool,
    #[serde(default)]
    random: bool,
    /// "host:port" addresses the plugin may open TCP connections to.
    #[serde(default)]
    network: Vec<String>,
    /// "host:port" authorities the plugin may send HTTP requests to (wasi:http).
    #[serde(default)]
    http: Vec<String>,
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
    max_output_mb: Option<u64>,
    recycle_after_calls: Option<u64>,
    fuel: Option<u64>,
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
    /// Stateless pipelines: each record as soon as it arrives; offsets checkpointed every
    /// `checkpoint_interval`. At-least-once (docs/semantics.md).
    Continuous { checkpoint_interval: Duration },
}

#[derive(Debug, Clone)]
pub struct SourceConfig {
    pub kind: SourceKind,
    pub max_offsets_per_trigger: usize,
}

#[derive(Debug, Clone)]
pub enum SourceKind {
    Replay { path: PathBuf, format: ReplayFormat },
    Kafka(KafkaSourceConfig),
}

impl SourceKind {
    pub fn name(&self) -> &'static str {
        match self {
            SourceKind::Replay { .. } => "replay",
            SourceKind::Kafka(_) => "kafka",
        }
    }

    /// What the source reads, for the checkpoint's fingerprint.
    pub fn identity(&self) -> String {
        match self {
            SourceKind::Replay { path, .. } => format!("replay:{}", path.display()),
            SourceKind::Kafka(k) => format!("kafka:{}", k.topics.join(",")),
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
    /// Parser instances: a batch is cut into this many chunks, parsed on as many threads, and
    /// put back together in order (the events are the same as with one).
    pub parse_parallelism: usize,
    pub transforms: Vec<StageSpec>,
    pub windowed: Option<Windowed>,
    pub sink: Option<SinkConfig>,
    pub checkpoint: Option<PathBuf>,
    pub dead_letter: Option<PathBuf>,
    pub failure: FailurePolicy,
}

impl Pipeline {
    /// Whether any stage sets `limits.fuel` (the Wasm runtime must then meter fuel).
    pub fn uses_fuel(&self) -> bool {
        let sink = match &self.sink {
            Some(SinkConfig::Wasm(s)) => Some(s),
            _ => None,
        };
        std::iter::once(&self.parse)
            .chain(&self.transforms)
            .chain(self.windowed.as_ref().map(|w| &w.aggregate))
            .chain(sink)
            .any(|s| s.limits.fuel.is_some())
    }

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
        if s.parallelism.is_some() && key != "parse" {
            return Err(invalid(&format!("{key}.parallelism"), "only [parse] runs in parallel; remove it".into()));
        }
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
        if let Some(mb) = s.limits.max_output_mb {
            if !(1..=4_096).contains(&mb) {
                return Err(invalid(&format!("{key}.limits.max_output_mb"), format!("{mb}: allowed 1 to 4096")));
            }
            limits.max_output = (mb as usize) << 20;
        }
        if let Some(n) = s.limits.recycle_after_calls {
            if n == 0 {
                return Err(invalid(&format!("{key}.limits.recycle_after_calls"), "must be at least 1".into()));
            }
            limits.recycle_after_calls = n;
        }
        if let Some(f) = s.limits.fuel {
            if f == 0 {
                return Err(invalid(&format!("{key}.limits.fuel"), "must be at least 1".into()));
            }
            limits.fuel = Some(f);
        }
        let mut grants = Grants {
            clocks: s.grants.clocks,
            random: s.grants.random,
            http: s.grants.http.clone(),
            ..Grants::default()
        };
        for (i, a) in s.grants.http.iter().enumerate() {
            if a.contains('/') || !a.contains(':') {
                return Err(invalid(
                    &format!("{key}.grants.http[{i}]"),
                    format!("`{a}`: write the authority as \"host:port\", e.g. \"api.example.com:443\""),
                ));
            }
        }
        for name in s.grants.env {
            let value = std::env::var(&name).map_err(|_| {
                invalid(&format!("{key}.grants.env"), format!("`{name}` is not set in Weir's environment"))
            })?;
            grants.env.push((name, value));
        }
        for (i, a) in s.grants.network.iter().enumerate() {
            use std::net::ToSocketAddrs;
            let addrs = a.to_socket_addrs().map_err(|e| {
                invalid(&format!("{key}.grants.network[{i}]"), format!("`{a}`: {e}; write \"host:port\""))
            })?;
            grants.network.extend(addrs);
        }
        for (i, d) in s.grants.dirs.into_iter().enumerate() {
            if !d.guest.starts_with('/') {
                return Err(invalid(
                    &format!("{key}.grants.dirs[{i}].guest"),
                    format!("`{}`: must be an absolute path inside the sandbox, e.g. \"/out\"", d.guest),
                ));
            }
            grants.dirs.push(DirGrant { host: rel(&d.host), guest: d.guest, writable: d.writable });
        }
        Ok(StageSpec {
            name: format!("{name}/{key} ({})", s.plugin.file_name().map_or("?".into(), |f| f.to_string_lossy())),
            component: rel(&s.plugin),
            config_json,
            grants,
            limits,
        })
    };

    let (kind, max_offsets_per_trigger) = match f.source {
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
            let options = kafka_options("source.kafka", kafka, invalid)?;
            if topics.is_empty() || topics.iter().any(String::is_empty) {
                return Err(invalid("source.topics", "name at least one topic, e.g. topics = [\"orders\"]".into()));
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
                                    "source.partitions",
                                    format!("`{tp}`: write \"topic:partition\" with a topic from source.topics"),
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
            let group_id = option(&options, "group.id").unwrap_or_else(|| format!("weir-{}", name));
            (
                SourceKind::Kafka(KafkaSourceConfig { topics, partitions, starting, options, group_id }),
                max_offsets_per_trigger,
            )
        }
    };
    if max_offsets_per_trigger == Some(0) {
        return Err(invalid("source.max_offsets_per_trigger", "must be at least 1".into()));
    }
    let source = SourceConfig {
        kind,
        max_offsets_per_trigger: max_offsets_per_trigger.unwrap_or(DEFAULT_MAX_OFFSETS_PER_TRIGGER),
    };

    let trigger = match (f.trigger.mode, f.trigger.interval) {
        (TriggerMode::ProcessingTime, interval) => {
            Trigger::ProcessingTime { interval: interval.map_or(Duration::ZERO, |d| d.0) }
        }
        (TriggerMode::Continuous, interval) => {
            Trigger::Continuous { checkpoint_interval: interval.map_or(Duration::from_secs(1), |d| d.0) }
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

    let parse_parallelism = f.parse.parallelism.unwrap_or(1);
    if !(1..=64).contains(&parse_parallelism) {
        return Err(invalid("parse.parallelism", format!("{parse_parallelism}: allowed 1 to 64")));
    }
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

    if matches!(trigger, Trigger::Continuous { .. }) && windowed.is_some() {
        return Err(invalid(
            "trigger.mode",
            "\"continuous\" runs stateless pipelines (parse, transform, sink); a windowed pipeline needs \
             \"processing-time\", \"once\" or \"available-now\""
                .into(),
        ));
    }
    let sink = match f.sink {
        None => None,
        Some(s) => Some(sink_config(s, &name, matches!(trigger, Trigger::Continuous { .. }), &stage, invalid)?),
    };

    Ok(Pipeline {
        name: name.clone(),
        source,
        trigger,
        parse,
        parse_parallelism,
        transforms,
        windowed,
        sink,
        checkpoint: f.checkpoint.map(|c| rel(&c.location)),
        dead_letter: f.dead_letter.map(|d| rel(&d.path)),
        failure: FailurePolicy {
            fail_fast: f.failure.policy == FailureMode::FailFast,
            retries: f.failure.retries.unwrap_or(FailurePolicy::default().retries),
            backoff: f.failure.backoff.map_or(FailurePolicy::default().backoff, |d| d.0),
        },
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
            not_for("topic", s.topic.is_some(), "Wasm")?;
            not_for("kafka", s.kafka.is_some(), "Wasm")?;
            not_for("transactional", s.transactional.is_some(), "Wasm")?;
            let plugin = s.plugin.ok_or_else(|| {
                invalid(
                    "sink.plugin",
                    "a Wasm sink names its component, e.g. plugin = \"sink.wasm\"; or set type = \"kafka\"".into(),
                )
            })?;
            let file = StageFile { plugin, parallelism: None, config: s.config, grants: s.grants, limits: s.limits };
            Ok(SinkConfig::Wasm(stage("sink", file)?))
        }
        SinkKindFile::Kafka => {
            not_for("plugin", s.plugin.is_some(), "Kafka")?;
            not_for("config", !s.config.is_empty(), "Kafka")?;
            let g = &s.grants;
            let granted = !g.dirs.is_empty()
                || !g.env.is_empty()
                || g.clocks
                || g.random
                || !g.network.is_empty()
                || !g.http.is_empty();
            not_for("grants", granted, "Kafka")?;
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
            }))
        }
    }
}

/// `kafka.*` keys, flattened back to librdkafka's dotted names (`kafka.bootstrap.servers`
/// parses as nested tables). `bootstrap.servers` is required.
fn kafka_options(
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
        assert!(matches!(&p.source.kind, SourceKind::Replay { path, .. } if path == Path::new("dir/events.jsonl")));
        assert_eq!(p.parse.component, Path::new("dir/p.wasm"));
        let w = p.windowed.unwrap();
        assert_eq!(w.time.delay_ms, 600_000);
        assert_eq!(w.aggregate.config_json, r#"{"error_status":"ERROR"}"#);
        assert_eq!(w.aggregate.name, "orders/aggregate (a.wasm)");
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
    fn kafka_options_are_librdkafka_names_and_need_the_brokers() {
        let kafka = GOOD.replace(
            "type = \"replay\"\n        path = \"events.jsonl\"",
            "type = \"kafka\"\ntopics = [\"orders\"]\nstarting_offsets = \"latest\"\n\
             kafka.bootstrap.servers = \"127.0.0.1:9\"\nkafka.fetch.wait.max.ms = 5",
        );
        let p = Pipeline::parse(&kafka, Path::new("p.toml")).unwrap();
        let SourceKind::Kafka(k) = p.source.kind else { panic!("not kafka") };
        assert_eq!(k.starting, StartingOffsets::Latest);
        assert_eq!(k.group_id, "weir-orders");
        assert!(k.options.contains(&("fetch.wait.max.ms".into(), "5".into())), "{:?}", k.options);
        let e = err(&kafka.replace("kafka.bootstrap.servers = \"127.0.0.1:9\"", ""));
        assert!(e.contains("source.kafka.bootstrap.servers: required"), "{e}");
        let e = err(&kafka.replace("topics = [\"orders\"]", "topics = [\"orders\"]\npartitions = [\"other:1\"]"));
        assert!(e.contains("source.partitions") && e.contains("`other:1`"), "{e}");
    }

    #[test]
    fn continuous_mode_is_for_stateless_pipelines_and_sinks_are_checked_by_type() {
        let e = err(&GOOD.replace("[parse]", "[trigger]\nmode = \"continuous\"\n[parse]"));
        assert!(e.contains("trigger.mode") && e.contains("stateless"), "{e}");
        let e = err(&format!("{GOOD}\n[sink]\ntype = \"kafka\"\nkafka.bootstrap.servers = \"x:1\""));
        assert!(e.contains("sink.topic"), "{e}");
        let e = err(&format!("{GOOD}\n[sink]\ntype = \"kafka\"\ntopic = \"t\"\nplugin = \"s.wasm\""));
        assert!(e.contains("sink.plugin: does not apply to a Kafka sink"), "{e}");
    }

    #[test]
    fn grants_must_name_an_absolute_guest_path() {
        let text =
            format!("{GOOD}\n[sink]\nplugin = \"s.wasm\"\ngrants.dirs = [{{ host = \"out\", guest = \"out\" }}]");
        assert!(err(&text).contains("sink.grants.dirs[0].guest"));
    }
}
