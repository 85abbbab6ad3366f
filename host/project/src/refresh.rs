//! Full refresh: a dataset, every dataset downstream of it, and the checkpoints of the flows
//! that write or read them are reset, so the next run recomputes them from their sources. An
//! embedded dataset's log is deleted; a Kafka-backed dataset's topic keeps its records, and the
//! dataset begins after them instead (`bases.rs`).
//!
//! It is atomic by intent: the plan (which directories go, where each Kafka-backed dataset now
//! begins) is written to `refresh.json` in the state directory, synced and renamed into place
//! before anything changes, and removed after the last deletion. A crash before the rename
//! leaves the old state; after it, every start of the project finishes the plan before any flow
//! runs ([`resume`]), so a refresh that was begun always completes and never half-applies. A
//! reader in between already sees the plan's beginnings ([`bases`]).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use std::collections::BTreeMap;

use super::bases::{self, Base, BaseError};
use super::{Project, Storage};
use crate::checkpoint::CheckpointDir;
use crate::kafka::KafkaError;

/// The plan's file, in the state directory.
const PLAN: &str = "refresh.json";

#[derive(Debug, thiserror::Error)]
pub enum RefreshError {
    #[error("--full-refresh {0}: the project has no such dataset (it has: {1})")]
    Unknown(String, String),
    #[error("--full-refresh: where dataset {dataset} ends in Kafka topic {topic}")]
    Kafka { dataset: String, topic: String, source: Box<KafkaError> },
    #[error(transparent)]
    Bases(#[from] BaseError),
    #[error("--full-refresh: a flow it would reset is running; stop the project first")]
    Running(#[source] crate::checkpoint::CheckpointError),
    #[error("cannot reset {}", path.display())]
    Io { path: PathBuf, source: std::io::Error },
    #[error("{}: not a refresh plan Weir wrote ({source}); finish it by hand (delete what it lists) or remove it", path.display())]
    Plan { path: PathBuf, source: serde_json::Error },
}

#[derive(Debug, Serialize, Deserialize, PartialEq, Eq)]
struct Plan {
    /// The datasets reset (for the report), and every directory to delete.
    datasets: Vec<String>,
    remove: Vec<PathBuf>,
    /// Where each Kafka-backed dataset reset now begins: the ends its topic had.
    #[serde(default)]
    bases: BTreeMap<String, Base>,
}

/// `dataset` and every dataset downstream of it.
pub fn downstream(p: &Project, dataset: &str) -> BTreeSet<String> {
    let mut set = BTreeSet::from([dataset.to_string()]);
    // Flows are in dependency order: one pass reaches everything downstream.
    for fl in &p.flows {
        if fl.reads.iter().any(|r| set.contains(r))
            && let Some(w) = &fl.writes
        {
            set.insert(w.clone());
        }
    }
    set
}

/// Plans the refresh of `dataset` and carries it out; returns the datasets reset.
pub fn full_refresh(p: &Project, dataset: &str) -> Result<Vec<String>, RefreshError> {
    if !p.datasets.contains_key(dataset) {
        let names = p.datasets.keys().cloned().collect::<Vec<_>>().join(", ");
        return Err(RefreshError::Unknown(dataset.to_string(), names));
    }
    let datasets = downstream(p, dataset);
    let mut remove = Vec::new();
    let mut kafka = Vec::new();
    for name in &datasets {
        match p.datasets.get(name).map(|d| &d.storage) {
            Some(Storage::Embedded { dir }) => remove.push(dir.clone()),
            Some(Storage::Kafka { topic, options, .. }) => kafka.push((name, topic, options)),
            None => {}
        }
    }
    let mut flows = Vec::new();
    for fl in &p.flows {
        let touches =
            fl.writes.as_ref().is_some_and(|w| datasets.contains(w)) || fl.reads.iter().any(|r| datasets.contains(r));
        if touches {
            flows.push(fl.checkpoint.clone());
        }
    }
    // A running flow holds its checkpoint's lock: held here until the plan is carried out, so
    // no flow of the refresh starts (or still runs) while its files go.
    let _held = flows
        .iter()
        .filter(|dir| dir.exists())
        .map(|dir| CheckpointDir::lock(dir).map(|(held, _)| held))
        .collect::<Result<Vec<_>, _>>()
        .map_err(RefreshError::Running)?;
    remove.extend(flows);
    // The ends are read with every flow on them stopped (their locks are held), so no record
    // of the old dataset comes after them.
    let mut bases = BTreeMap::new();
    for (name, topic, options) in kafka {
        let base = bases::ends(topic, options).map_err(|source| RefreshError::Kafka {
            dataset: name.clone(),
            topic: topic.clone(),
            source: Box::new(source),
        })?;
        bases.insert(name.clone(), base);
    }
    let plan = Plan { datasets: datasets.into_iter().collect(), remove, bases };
    write_plan(&p.state, &plan)?;
    carry_out(&p.state, &plan)?;
    Ok(plan.datasets)
}

/// Finishes a refresh a crash interrupted; returns the datasets it reset, if there was one.
pub fn resume(state: &Path) -> Result<Option<Vec<String>>, RefreshError> {
    let Some(plan) = pending(state)? else { return Ok(None) };
    carry_out(state, &plan)?;
    Ok(Some(plan.datasets))
}

/// The plan of a refresh begun and not finished, if there is one.
fn pending(state: &Path) -> Result<Option<Plan>, RefreshError> {
    let path = state.join(PLAN);
    let text = match std::fs::read(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(RefreshError::Io { path, source: e }),
    };
    serde_json::from_slice(&text).map(Some).map_err(|e| RefreshError::Plan { path, source: e })
}

/// Where each Kafka-backed dataset begins: as recorded, and as a refresh begun says.
pub fn bases(state: &Path) -> Result<BTreeMap<String, Base>, RefreshError> {
    let mut all = bases::load(state)?;
    if let Some(plan) = pending(state)? {
        all.extend(plan.bases);
    }
    Ok(all)
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> RefreshError + '_ {
    move |e| RefreshError::Io { path: path.to_path_buf(), source: e }
}

fn write_plan(state: &Path, plan: &Plan) -> Result<(), RefreshError> {
    std::fs::create_dir_all(state).map_err(io(state))?;
    let path = state.join(PLAN);
    let text = serde_json::to_vec_pretty(plan).map_err(|e| RefreshError::Plan { path: path.clone(), source: e })?;
    crate::own_files::replace(&path, &text, true).map_err(io(&path))
}

fn carry_out(state: &Path, plan: &Plan) -> Result<(), RefreshError> {
    // The beginnings first: once a reset flow's checkpoint is gone, it must start there.
    bases::record(state, &plan.bases)?;
    for dir in &plan.remove {
        match std::fs::remove_dir_all(dir) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(RefreshError::Io { path: dir.clone(), source: e }),
        }
        if let Some(parent) = dir.parent() {
            sync_dir(parent)?;
        }
    }
    let path = state.join(PLAN);
    std::fs::remove_file(&path).map_err(io(&path))?;
    sync_dir(state)
}

fn sync_dir(dir: &Path) -> Result<(), RefreshError> {
    match std::fs::File::open(dir).and_then(|d| d.sync_all()) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(RefreshError::Io { path: dir.to_path_buf(), source: e }),
    }
}
