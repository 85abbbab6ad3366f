//! Where a Kafka-backed dataset begins. Weir does not delete a topic's records (a broker may not
//! allow it, and a topic may have readers outside the project), so a full refresh of a
//! Kafka-backed dataset moves the dataset's beginning instead: to the end each partition of its
//! topic had when the refresh was planned. Every reader in the project starts there (its flows,
//! `weir query`, `weir test`'s comparisons); the records before it are the old dataset's.
//!
//! The beginnings are kept in `bases.json` in the state directory, replaced whole and synced. A
//! beginning names its topic: once the dataset is moved to another topic, it no longer applies.
//! Offsets past a partition's end mean the topic was deleted and created again since, and the
//! reader starts at the earliest (`source/kafka/mod.rs`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;

use rdkafka::consumer::{BaseConsumer, Consumer};
use serde::{Deserialize, Serialize};

use crate::kafka::{CALL_TIMEOUT, KafkaError, client_config, connection_options, with_retry};

/// The file, in the state directory.
const FILE: &str = "bases.json";

#[derive(Debug, thiserror::Error)]
pub enum BaseError {
    #[error("{}", path.display())]
    Io { path: PathBuf, source: std::io::Error },
    #[error("{}: not a file of dataset beginnings Weir wrote ({source}); restore it, or remove it to read every dataset from its topic's earliest offset", path.display())]
    Parse { path: PathBuf, source: serde_json::Error },
}

/// A Kafka-backed dataset's beginning: the first offset of each partition of `topic` that is
/// the dataset's.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Base {
    pub topic: String,
    pub offsets: Vec<(i32, i64)>,
}

/// The beginnings recorded in `state`, by dataset.
pub fn load(state: &Path) -> Result<BTreeMap<String, Base>, BaseError> {
    let path = state.join(FILE);
    match std::fs::read(&path) {
        Ok(text) => serde_json::from_slice(&text).map_err(|source| BaseError::Parse { path, source }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(BTreeMap::new()),
        Err(source) => Err(BaseError::Io { path, source }),
    }
}

/// Records `set` over what `state` has (idempotent: a resumed refresh records the same again).
pub fn record(state: &Path, set: &BTreeMap<String, Base>) -> Result<(), BaseError> {
    if set.is_empty() {
        return Ok(());
    }
    let mut all = load(state)?;
    all.extend(set.iter().map(|(d, b)| (d.clone(), b.clone())));
    let path = state.join(FILE);
    let text = serde_json::to_vec_pretty(&all).map_err(|source| BaseError::Parse { path: path.clone(), source })?;
    crate::own_files::replace(&path, &text, true).map_err(|source| BaseError::Io { path, source })
}

/// The end of every partition of `topic` now: the beginning of a dataset refreshed now. A topic
/// the broker does not have yet has no records to skip.
pub fn ends(topic: &str, options: &[(String, String)]) -> Result<Base, KafkaError> {
    let consumer: BaseConsumer =
        client_config(&[], &connection_options(options)).create().map_err(KafkaError::Config)?;
    let stop = AtomicBool::new(false);
    let md = with_retry(&stop, &format!("metadata of topic {topic}"), || {
        consumer.fetch_metadata(Some(topic), CALL_TIMEOUT)
    })?;
    let mut offsets = Vec::new();
    if let Some(t) = md.topics().iter().find(|t| t.name() == topic && t.error().is_none()) {
        for p in t.partitions() {
            let (_, high) = with_retry(&stop, &format!("watermarks of {topic}/{}", p.id()), || {
                consumer.fetch_watermarks(topic, p.id(), CALL_TIMEOUT)
            })?;
            offsets.push((p.id(), high));
        }
    }
    offsets.sort_unstable();
    Ok(Base { topic: topic.to_string(), offsets })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn beginnings_are_recorded_over_earlier_ones_and_read_back() {
        let dir = tempfile::tempdir().unwrap();
        assert!(load(dir.path()).unwrap().is_empty(), "none before a refresh");
        let base = |topic: &str, o: i64| Base { topic: topic.into(), offsets: vec![(0, o), (1, o + 1)] };
        record(dir.path(), &BTreeMap::from([("a".to_string(), base("ta", 5)), ("b".to_string(), base("tb", 7))]))
            .unwrap();
        record(dir.path(), &BTreeMap::from([("a".to_string(), base("ta", 9))])).unwrap();
        let got = load(dir.path()).unwrap();
        assert_eq!(got, BTreeMap::from([("a".to_string(), base("ta", 9)), ("b".to_string(), base("tb", 7))]));
        std::fs::write(dir.path().join(FILE), "{\"a\":").unwrap();
        let e = load(dir.path()).unwrap_err().to_string();
        assert!(e.contains("remove it"), "{e}");
    }
}
