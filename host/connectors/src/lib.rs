//! Weir's built-in connectors to external systems, one folder per system with everything that
//! system needs: its settings as a pipeline file gives them (checked, naming the key and the
//! fix), and its exactly-once writer. The engine opens them through [`TableSink`]; the
//! configuration crate builds their settings. Nothing here knows the engine or the pipeline file.
//!
//! - `parquet/`: each batch as Parquet files in a directory, partitioned by a column.
//! - `iceberg/`: each batch appended to an Apache Iceberg table as one snapshot.
//! - `postgres/`: a changelog upserted into (and deleted from) a PostgreSQL table.
//!
//! Invariant: a sink keeps each delivery (checkpoint identity, batch id) once. The same
//! delivery always carries the same rows, so writing one again leaves what the first write left.

pub mod arrow_rows;
// The columns a table sink's settings carry, for the configuration crate to name.
pub use arrow_schema;
pub mod avro_arrow;
pub mod iceberg;
pub mod parquet;
pub mod partition;
pub mod postgres;
pub mod retry;

use weir_types::Delivery;
use weir_types::rows::Rows;

/// A sink the host runs natively.
pub trait TableSink: Send {
    /// Writes a batch and makes it visible; called again with the same delivery and rows when
    /// the process died before the batch was committed.
    fn deliver(&mut self, delivery: &Delivery, rows: &Rows) -> Result<(), ConnectorError>;

    /// The rows of the last [`TableSink::deliver`] that did not fit, by index, with why (the
    /// field and what was wrong): the engine writes them to the dead letters.
    fn rejected(&mut self) -> Vec<(usize, String)> {
        Vec::new()
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ConnectorError {
    #[error("{what}: {source}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{0}")]
    Parquet(String),
    /// A call to an external system (a database, a catalog, an object store) that failed;
    /// `transient` when it may pass by itself (the system went away), which the sink waits out
    /// for a while (`retry.rs`).
    #[error("{what}: {why}")]
    Remote { what: String, transient: bool, why: String },
    /// The external system is not as the settings need it (a table without the key's index):
    /// the pipeline file's key, and the fix.
    #[error("{key}: {why}")]
    Refused { key: String, why: String },
}

impl ConnectorError {
    pub(crate) fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> Self {
        let what = what.into();
        move |source| ConnectorError::Io { what, source }
    }
}

/// A setting that cannot be used: the pipeline file's key (`sink.compression`) and why, with
/// the fix.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{key}: {why}")]
pub struct Invalid {
    pub key: String,
    pub why: String,
}

impl Invalid {
    pub(crate) fn new(key: &str, why: impl Into<String>) -> Self {
        Invalid { key: key.to_string(), why: why.into() }
    }
}
