//! A pipeline project: several flows wired through named datasets (docs/projects.md). The
//! project file (`weir.toml`, `file.rs`) declares the datasets and lists the flow files; each
//! flow is a pipeline file whose source or sink may be a dataset (`type = "dataset"`).
//!
//! Loading reads every file and checks what can be checked without plugins or data: each
//! dataset a flow names is declared, no flow writes its own input through any chain of
//! datasets (the graph, `graph.rs`, refuses a cycle and names it), and a table is only fed keyed
//! rows. It then says where each dataset lives: the embedded log's directory under the state
//! directory, or for a Kafka-backed dataset the topic, by replacing the flow's dataset source
//! or sink with Kafka's. `run.rs` runs the flows; `refresh.rs` resets datasets.

pub mod bases;
mod file;
pub mod graph;
mod reach;
pub mod read;
pub mod refresh;
pub mod run;

// The layers below, under the names this crate's modules use.
use weir_config as pipeline;
use weir_engine::{checkpoint, dataset, driver, kafka, progress, source};
use weir_sandbox as plugin;
use weir_types::{columns, own_files};

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::dataset::DatasetKind;
use crate::pipeline::{
    Join, KafkaSinkConfig, KafkaSourceConfig, Keyed, Pipeline, PipelineError, SinkConfig, SourceConfig, SourceKind,
    StartingOffsets, Trigger,
};

/// The project file's name, in a project directory.
pub const PROJECT_FILE: &str = "weir.toml";

#[derive(Debug, thiserror::Error)]
pub enum ProjectError {
    #[error(transparent)]
    File(#[from] PipelineError),
    /// The flows and datasets do not fit together: a message naming them.
    #[error("{}: {message}", path.display())]
    Graph { path: PathBuf, message: String },
    /// Where the Kafka-backed datasets begin could not be read.
    #[error(transparent)]
    Bases(#[from] refresh::RefreshError),
    /// A flow's plugin is granted a place the host keeps for the project (`reach.rs`).
    #[error("{}: {error}", path.display())]
    Grant { path: PathBuf, error: crate::plugin::PluginError },
}

/// What `weir test` changes of a project: where its state goes, recorded events in place of
/// some flows' sources (by flow name), and whether every dataset moves into the embedded log.
#[derive(Debug, Default)]
pub struct Overrides {
    pub state: Option<PathBuf>,
    pub events: BTreeMap<String, PathBuf>,
    /// Every dataset in the embedded log under `state`, Kafka-backed ones too: a test runs the
    /// project's logic on recorded events, with no broker.
    pub embedded: bool,
}

/// Where a dataset's records live.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Storage {
    /// The embedded log, in this directory.
    Embedded { dir: PathBuf },
    Kafka {
        topic: String,
        options: Vec<(String, String)>,
        transactional: bool,
        /// Where the dataset begins in each partition, after a full refresh (`bases.rs`);
        /// empty: at the earliest offset.
        from: Vec<(i32, i64)>,
    },
}

impl Storage {
    /// Where a reader of the dataset starts in a Kafka topic.
    fn starting(from: &[(i32, i64)]) -> StartingOffsets {
        match from.is_empty() {
            true => StartingOffsets::Earliest,
            false => StartingOffsets::Offsets(from.to_vec()),
        }
    }
}

#[derive(Debug, Clone)]
pub struct Dataset {
    pub name: String,
    pub kind: DatasetKind,
    pub storage: Storage,
    /// Embedded: records older than this are dropped.
    pub retention: Option<Duration>,
    /// Embedded: appends of at least this many bytes are ingested as sorted files.
    pub append_file_bytes: usize,
}

/// One flow: a pipeline, and the datasets it reads and writes.
#[derive(Debug, Clone)]
pub struct Flow {
    pub file: PathBuf,
    /// With its datasets resolved: a log directory, or Kafka's source and sink.
    pub pipeline: Pipeline,
    /// Datasets it reads: its source, a join's table or other stream.
    pub reads: Vec<String>,
    pub writes: Option<String>,
    /// Its own source is outside the project (not a dataset).
    pub own_source: bool,
    /// The checkpoint directory, under the project's state.
    pub checkpoint: PathBuf,
}

impl Flow {
    pub fn name(&self) -> &str {
        &self.pipeline.name
    }
}

#[derive(Debug, Clone)]
pub struct Project {
    pub name: String,
    pub state: PathBuf,
    pub datasets: BTreeMap<String, Dataset>,
    /// In dependency order: every flow after the flows that write what it reads.
    pub flows: Vec<Flow>,
    /// Every external source is bounded: the whole project runs to completion.
    pub bounded: bool,
}

impl Project {
    /// The project file at `path`: a directory holding a `weir.toml`, or a file that lists
    /// `flows` (a pipeline file never does), such as a variant beside the `weir.toml`.
    pub fn file_at(path: &Path) -> Option<PathBuf> {
        if path.is_dir() {
            let f = path.join(PROJECT_FILE);
            return f.is_file().then_some(f);
        }
        if path.file_name().is_some_and(|n| n == PROJECT_FILE) {
            return Some(path.to_path_buf());
        }
        let text = std::fs::read_to_string(path).ok()?;
        let table: toml::Table = toml::from_str(&text).ok()?;
        table.contains_key("flows").then(|| path.to_path_buf())
    }

    pub fn load(path: &Path) -> Result<Self, ProjectError> {
        Self::load_with(path, &Overrides::default())
    }

    /// [`Project::load`], with the state directory and some flows' sources replaced (`weir test`).
    pub fn load_with(path: &Path, over: &Overrides) -> Result<Self, ProjectError> {
        let read =
            |p: &Path| std::fs::read_to_string(p).map_err(|e| PipelineError::Read { path: p.to_path_buf(), source: e });
        let path = std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
        let f: file::ProjectFile = crate::pipeline::deserialize(&read(&path)?, &path)?;
        let invalid = |key: &str, message: String| PipelineError::Invalid {
            path: path.clone(),
            at: None,
            key: key.to_string(),
            message,
        };
        let graph = |message: String| ProjectError::Graph { path: path.clone(), message };
        if f.name.is_empty() || !f.name.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_') {
            return Err(invalid("name", format!("`{}`: use letters, digits, `-` and `_`", f.name)).into());
        }
        let base = path.parent().map(Path::to_path_buf).unwrap_or_default();
        let state = match &over.state {
            Some(s) => s.clone(),
            None => base.join(f.state.unwrap_or_else(|| PathBuf::from(".weir"))),
        };
        let mut datasets = f
            .datasets
            .into_iter()
            .map(|(name, d)| dataset(name, d, &state, &invalid).map(|d| (d.name.clone(), d)))
            .collect::<Result<BTreeMap<_, _>, _>>()?;
        if over.embedded {
            for d in datasets.values_mut() {
                d.storage = Storage::Embedded { dir: embedded_dir(&state, &d.name) };
            }
        }
        for (name, base) in refresh::bases(&state)? {
            if let Some(Storage::Kafka { topic, from, .. }) = datasets.get_mut(&name).map(|d| &mut d.storage)
                && *topic == base.topic
            {
                *from = base.offsets;
            }
        }
        if f.flows.is_empty() {
            return Err(invalid(
                "flows",
                "list the flow files, e.g. flows = [\"bronze.toml\", \"silver.toml\"]".into(),
            )
            .into());
        }
        let mut flows = Vec::new();
        for rel in &f.flows {
            let file = base.join(rel);
            let pipeline = Pipeline::load(&file)?;
            flows.push(flow(file, pipeline, &datasets, &state)?);
        }
        for (flow, events) in &over.events {
            let with_own: Vec<String> = flows.iter().filter(|f| f.own_source).map(|f| f.name().to_string()).collect();
            let Some(fl) = flows.iter_mut().find(|f| f.name() == flow && f.own_source) else {
                return Err(graph(format!(
                    "--events {flow}=...: no flow `{flow}` reads a source of its own (those that do: {})",
                    with_own.join(", ")
                )));
            };
            fl.pipeline.source.kind =
                SourceKind::Replay { path: events.clone(), format: crate::pipeline::ReplayFormat::Auto };
            fl.pipeline.trigger = Trigger::AvailableNow;
        }
        let mut names = BTreeSet::new();
        for fl in &flows {
            if !names.insert(fl.name().to_string()) {
                return Err(graph(format!(
                    "two flows are named `{}` ({}); flow names must differ",
                    fl.name(),
                    fl.file.display()
                )));
            }
        }
        let order = graph::order(&flows).map_err(|cycle| graph(cycle.to_string()))?;
        let mut flows: Vec<Flow> = {
            let mut by_index: Vec<Option<Flow>> = flows.into_iter().map(Some).collect();
            order.into_iter().filter_map(|i| by_index[i].take()).collect()
        };
        check_keys(&flows, &datasets).map_err(graph)?;
        let bounded = flows.iter().all(|fl| !external(&fl.pipeline) || fl.pipeline.bounded());
        for fl in &mut flows {
            resolve(fl, &datasets, bounded);
        }
        let project = Project { name: f.name, state, datasets, flows, bounded };
        reach::keep_flows_clear(&project, &path)?;
        Ok(project)
    }

    /// The flows that write `dataset`.
    pub fn writers<'a>(&'a self, dataset: &'a str) -> impl Iterator<Item = &'a Flow> + 'a {
        self.flows.iter().filter(move |f| f.writes.as_deref() == Some(dataset))
    }
}

/// Where a dataset's embedded log lives in the project's state.
fn embedded_dir(state: &Path, dataset: &str) -> PathBuf {
    state.join("datasets").join(dataset)
}

fn dataset(
    name: String,
    d: file::DatasetFile,
    state: &Path,
    invalid: &dyn Fn(&str, String) -> PipelineError,
) -> Result<Dataset, PipelineError> {
    let key = |k: &str| format!("datasets.{name}.{k}");
    let name = crate::pipeline::dataset_name(&format!("datasets.{name}"), name.clone(), invalid)?;
    let only = |k: &str, present: bool, storage: &str| match present {
        true => Err(invalid(&key(k), format!("applies to storage = \"{storage}\" only; remove it"))),
        false => Ok(()),
    };
    let storage = match d.storage {
        file::StorageFile::Embedded => {
            only("topic", d.topic.is_some(), "kafka")?;
            only("kafka", d.kafka.is_some(), "kafka")?;
            only("transactional", d.transactional.is_some(), "kafka")?;
            Storage::Embedded { dir: embedded_dir(state, &name) }
        }
        file::StorageFile::Kafka => {
            only("retention", d.retention.is_some(), "embedded")?;
            only("append_file_bytes", d.append_file_bytes.is_some(), "embedded")?;
            let options = crate::pipeline::kafka_options(&key("kafka"), d.kafka.unwrap_or_default(), invalid)?;
            let topic = d.topic.unwrap_or_else(|| name.clone());
            if topic.is_empty() {
                return Err(invalid(&key("topic"), "name the topic, or leave it out to use the dataset's name".into()));
            }
            Storage::Kafka { topic, options, transactional: d.transactional.unwrap_or(true), from: Vec::new() }
        }
    };
    if let Some(r) = d.retention
        && r.0.is_zero()
    {
        return Err(invalid(&key("retention"), "keep records for some time, e.g. retention = \"7 days\"".into()));
    }
    let append_file_bytes = match d.append_file_bytes {
        None => crate::dataset::log::INGEST_BYTES,
        Some(_) if d.kind == DatasetKind::Table => {
            return Err(invalid(
                &key("append_file_bytes"),
                "applies to kind = \"stream\" only (a table's rows are written with its row index); remove it".into(),
            ));
        }
        Some(0) => {
            return Err(invalid(
                &key("append_file_bytes"),
                format!("give a size in bytes, e.g. {}, or leave it out", crate::dataset::log::INGEST_BYTES),
            ));
        }
        Some(b) => usize::try_from(b).unwrap_or(usize::MAX),
    };
    Ok(Dataset { name, kind: d.kind, storage, retention: d.retention.map(|r| r.0), append_file_bytes })
}

/// Every source a pipeline reads: its own, a join's table, an interval join's other stream.
fn sources(p: &Pipeline) -> Vec<(&'static str, &SourceConfig)> {
    let mut out = vec![("source", &p.source)];
    match &p.join {
        Some(Join::Table(j)) => out.push(("join.table", &j.table)),
        Some(Join::Interval(j)) => out.push(("streams", &j.source)),
        None => {}
    }
    out
}

fn sources_mut(p: &mut Pipeline) -> Vec<&mut SourceConfig> {
    let mut out = vec![&mut p.source];
    match &mut p.join {
        Some(Join::Table(j)) => out.push(&mut j.table),
        Some(Join::Interval(j)) => out.push(&mut j.source),
        None => {}
    }
    out
}

/// Whether the flow's own source is outside the project.
fn external(p: &Pipeline) -> bool {
    !matches!(p.source.kind, SourceKind::Dataset(_))
}

fn flow(
    file: PathBuf,
    pipeline: Pipeline,
    datasets: &BTreeMap<String, Dataset>,
    state: &Path,
) -> Result<Flow, ProjectError> {
    let unknown = |key: &str, name: &str| {
        let declared = datasets.keys().map(String::as_str).collect::<Vec<_>>().join(", ");
        PipelineError::Invalid {
            path: file.clone(),
            at: None,
            key: key.to_string(),
            message: format!(
                "flow {} names dataset `{name}`, which weir.toml does not declare; add [datasets.{name}] or use one \
                 of: {}",
                pipeline.name,
                if declared.is_empty() { "(none declared)".to_string() } else { declared }
            ),
        }
    };
    let mut reads = Vec::new();
    for (key, s) in sources(&pipeline) {
        if let SourceKind::Dataset(d) = &s.kind {
            if !datasets.contains_key(&d.name) {
                return Err(unknown(&format!("{key}.dataset"), &d.name).into());
            }
            reads.push(d.name.clone());
        }
    }
    let writes = match &pipeline.sink {
        Some(SinkConfig::Dataset { dataset, .. }) => {
            if !datasets.contains_key(&dataset.name) {
                return Err(unknown("sink.dataset", &dataset.name).into());
            }
            Some(dataset.name.clone())
        }
        _ => None,
    };
    if pipeline.checkpoint.is_some() {
        return Err(PipelineError::Invalid {
            path: file.clone(),
            at: None,
            key: "checkpoint".into(),
            message: "the project keeps each flow's checkpoint under its state directory; remove [checkpoint]".into(),
        }
        .into());
    }
    let checkpoint = state.join("flows").join(&pipeline.name);
    let own_source = external(&pipeline);
    Ok(Flow { file, pipeline, reads, writes, own_source, checkpoint })
}

/// A table takes keyed rows only: a flow feeding one must key its rows (a window, a processor,
/// `sink.key`), or pass on rows that are keyed already (read from a table, or from a stream
/// whose every writer keys its rows). Flows are in dependency order, so each stream's writers
/// are settled before its readers.
fn check_keys(flows: &[Flow], datasets: &BTreeMap<String, Dataset>) -> Result<(), String> {
    let mut keyed: BTreeMap<&str, bool> =
        datasets.values().map(|d| (d.name.as_str(), d.kind == DatasetKind::Table)).collect();
    for fl in flows {
        let p = &fl.pipeline;
        let Some(target) = fl.writes.as_deref() else { continue };
        let own = matches!(&p.sink, Some(SinkConfig::Dataset { key: Some(_), .. }))
            || matches!(p.stateful.as_ref().map(|s| &s.keyed), Some(Keyed::Window(_) | Keyed::Process(_)));
        let passed_on = match &p.source.kind {
            SourceKind::Dataset(d) => keyed.get(d.name.as_str()).copied().unwrap_or(false),
            _ => false,
        };
        let rows_keyed = own || passed_on;
        let kind = datasets.get(target).map_or(DatasetKind::Stream, |d| d.kind);
        if kind == DatasetKind::Table && !rows_keyed {
            return Err(format!(
                "flow {} ({}) writes table `{target}`, but its rows carry no key; key them with a [window] and \
                 [aggregate], a [process], or sink.key = \"FIELD\", or make `{target}` a stream",
                fl.name(),
                fl.file.display()
            ));
        }
        if kind == DatasetKind::Stream {
            let e = keyed.entry(target).or_insert(true);
            *e = *e && rows_keyed;
        }
    }
    Ok(())
}

/// Points the flow's dataset sources and sink at where each dataset lives.
fn resolve(fl: &mut Flow, datasets: &BTreeMap<String, Dataset>, bounded: bool) {
    let name = fl.pipeline.name.clone();
    let mut reads_kafka = false;
    for s in sources_mut(&mut fl.pipeline) {
        let SourceKind::Dataset(d) = &mut s.kind else { continue };
        let Some(ds) = datasets.get(&d.name) else { continue };
        match &ds.storage {
            Storage::Embedded { dir } => {
                d.log = Some(dir.clone());
                d.table = ds.kind == DatasetKind::Table;
                d.bounded = bounded;
            }
            Storage::Kafka { topic, options, from, .. } => {
                reads_kafka = true;
                let group_id = options
                    .iter()
                    .rev()
                    .find(|(k, _)| k == "group.id")
                    .map_or_else(|| format!("weir-{name}"), |(_, v)| v.clone());
                s.kind = SourceKind::Kafka(KafkaSourceConfig {
                    topics: vec![topic.clone()],
                    partitions: None,
                    starting: Storage::starting(from),
                    options: options.clone(),
                    group_id,
                });
            }
        }
    }
    // A bounded project reads a Kafka-backed dataset once its writers are done, up to the end
    // it has then (`run.rs` starts the flow after them).
    if bounded && reads_kafka && matches!(fl.pipeline.trigger, Trigger::ProcessingTime { .. }) {
        fl.pipeline.trigger = Trigger::AvailableNow;
    }
    if let Some(SinkConfig::Dataset { dataset, key }) = &mut fl.pipeline.sink
        && let Some(ds) = datasets.get(&dataset.name)
    {
        match &ds.storage {
            Storage::Embedded { dir } => {
                dataset.log = Some(dir.clone());
                dataset.table = ds.kind == DatasetKind::Table;
                dataset.retention = ds.retention;
            }
            Storage::Kafka { topic, options, transactional, .. } => {
                let transactional_id = options
                    .iter()
                    .rev()
                    .find(|(k, _)| k == "transactional.id")
                    .map_or_else(|| format!("weir-{name}"), |(_, v)| v.clone());
                let continuous = matches!(fl.pipeline.trigger, Trigger::Continuous { .. });
                fl.pipeline.sink = Some(SinkConfig::Kafka(KafkaSinkConfig {
                    topic: topic.clone(),
                    options: options.clone(),
                    transactional: *transactional && !continuous,
                    transactional_id,
                    key: key.clone(),
                    event_time_stamps: true,
                    encoded: None,
                }));
            }
        }
    }
}

#[cfg(test)]
mod tests;
