//! Schema checks before a run: a stage granted the registry that reads with a pinned reader
//! schema (`reader_subject` and `reader_version` in its config, as the standard library's Avro
//! parser takes them) must read every version of its subject, and an Avro Kafka sink's schema
//! must pass its subject's compatibility level. `weir validate`, `weir run`'s start-up and a
//! deploy on `weir serve` run these, so an incompatible schema is refused, naming the field
//! and the rule, before a record is read.

use serde::Deserialize;
use weir_schema::Registry;
use weir_schema::checks::{self, CheckError};

use crate::pipeline::{Pipeline, SinkConfig};
use crate::sink::avro::{self, AvroSinkError};

#[derive(Debug, thiserror::Error)]
pub enum SchemaError {
    #[error("stage {stage}: {error}")]
    Reader { stage: String, error: Box<CheckError> },
    #[error(transparent)]
    Sink(#[from] AvroSinkError),
}

impl SchemaError {
    /// Whether the pipeline as written is refused (a schema that does not fit or cannot be
    /// read), rather than the registry failing to answer.
    pub fn is_config(&self) -> bool {
        match self {
            SchemaError::Reader { error, .. } => !matches!(**error, CheckError::Registry(_)),
            SchemaError::Sink(e) => e.is_config(),
        }
    }
}

/// A stage config's reader schema, if it pins one.
#[derive(Deserialize)]
struct Pinned {
    reader_subject: Option<String>,
    reader_version: Option<u32>,
}

/// Checks the reader schemas of the stages that pin one.
pub fn check_readers(p: &Pipeline) -> Result<(), SchemaError> {
    for stage in p.stages() {
        let Some(config) = &stage.grants.registry else { continue };
        let Ok(Pinned { reader_subject: Some(subject), reader_version: Some(version) }) =
            serde_json::from_str::<Pinned>(&stage.config_json)
        else {
            continue;
        };
        let err = |error| SchemaError::Reader { stage: stage.name.clone(), error: Box::new(error) };
        let registry = Registry::shared(config).map_err(|e| err(e.into()))?;
        checks::reader(&registry, &subject, version, &format!("reader_subject {subject:?} version {version}"))
            .map_err(err)?;
    }
    Ok(())
}

/// Every check, without registering anything: what `weir validate` and a deploy run.
pub fn check(p: &Pipeline) -> Result<(), SchemaError> {
    check_readers(p)?;
    if let Some(SinkConfig::Kafka(k)) = &p.sink
        && let Some(a) = &k.avro
    {
        avro::check(a, &k.topic)?;
    }
    Ok(())
}
