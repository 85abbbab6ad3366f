//! Schema checks before a run: a stage granted the registry that reads with a pinned reader
//! schema (`reader_subject` and `reader_version` in its config, as the standard library's Avro
//! parser takes them) must read every version of its subject, and an Avro Kafka sink's schema
//! must pass its subject's compatibility level. `weir validate`, `weir run`'s start-up and a
//! deploy on `weir serve` run these, so an incompatible schema is refused, naming the field
//! and the rule, before a record is read.

use std::time::Duration;

use serde::Deserialize;
use weir_schema::Registry;
use weir_schema::checks::{self, CheckError};

use crate::pipeline::{Pipeline, SinkConfig};
use crate::sink::framed::{self, FramedSinkError};

#[derive(Debug, thiserror::Error)]
pub enum SchemaError {
    #[error("stage {stage}: {error}")]
    Reader { stage: String, error: Box<CheckError> },
    #[error(transparent)]
    Sink(#[from] FramedSinkError),
}

impl SchemaError {
    /// Whether the pipeline as written is refused (a schema that does not fit or cannot be
    /// read), rather than the registry failing to answer.
    pub fn is_config(&self) -> bool {
        match self {
            SchemaError::Reader { error, .. } => error.is_config(),
            SchemaError::Sink(e) => e.is_config(),
        }
    }
}

/// How long a check before a run waits for a registry that is down (`weir validate`, a deploy
/// on `weir serve`): a person or a request is waiting, so not the whole `registry.retry_for`.
pub const CHECK_PATIENCE: Duration = Duration::from_secs(10);

/// A stage config's reader schema, if it pins one.
#[derive(Deserialize)]
struct Pinned {
    reader_subject: Option<String>,
    reader_version: Option<u32>,
}

/// Checks the reader schemas of the stages that pin one, waiting at most `patience` for a
/// registry that is down (`None`: its `retry_for`).
pub fn check_readers(p: &Pipeline, patience: Option<Duration>) -> Result<(), SchemaError> {
    for stage in p.stages() {
        let Some(config) = &stage.grants.registry else { continue };
        let Ok(Pinned { reader_subject: Some(subject), reader_version: Some(version) }) =
            serde_json::from_str::<Pinned>(&stage.config_json)
        else {
            continue;
        };
        let err = |error| SchemaError::Reader { stage: stage.name.clone(), error: Box::new(error) };
        let config = weir_schema::RegistryConfig {
            retry_for: patience.map_or(config.retry_for, |p| config.retry_for.min(p)),
            ..config.clone()
        };
        let registry = Registry::shared(&config).map_err(|e| err(e.into()))?;
        checks::reader(&registry, &subject, version, &format!("reader_subject {subject:?} version {version}"))
            .map_err(err)?;
    }
    Ok(())
}

/// Every check, without registering anything: what `weir validate` and a deploy run, waiting
/// at most [`CHECK_PATIENCE`] for a registry that is down.
pub fn check(p: &Pipeline) -> Result<(), SchemaError> {
    check_readers(p, Some(CHECK_PATIENCE))?;
    if let Some(SinkConfig::Kafka(k)) = &p.sink
        && let Some(a) = &k.encoded
    {
        framed::check(a, &k.topic, CHECK_PATIENCE)?;
    }
    Ok(())
}
