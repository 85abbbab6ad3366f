//! Sinks: where a batch's result rows go. Each batch is delivered with its [`Delivery`]: the
//! identity of the checkpoint that planned it and its batch id there. The same delivery always
//! carries the same rows, and after a crash a batch may be delivered again, so a sink that keeps
//! each delivery once (keyed on both parts: another checkpoint's batch 7 is other rows) is
//! exactly-once.
//!
//! One file per sink: `wasm.rs` (a sink plugin), `kafka.rs` (Weir's transactional Kafka sink),
//! `framed.rs` (rows as Avro, Protobuf or JSON Schema in front of the Kafka sink),
//! `connector.rs` (a built-in connector of `weir_connectors`: Parquet files, PostgreSQL, Iceberg),
//! `lines.rs` (JSON lines to a writer: the console, and `weir test`'s capture), `log.rs` (a
//! project's dataset in the embedded log), `repartition.rs` (a group's shuffle, stage 1's
//! partials to stage 2).

mod connector;
pub mod framed;
mod kafka;
mod lines;
mod log;
mod open;
mod repartition;
mod wasm;

use crate::kafka::KafkaError;
use crate::plugin::PluginError;

pub use kafka::{KafkaSink, producer_config};
pub use lines::LineSink;
pub use log::LogSink;
pub use open::open;
pub use repartition::RepartitionSink;
pub use wasm::WasmSink;

pub use weir_types::Delivery;
pub use weir_types::rows::{Rows, RowsMark};

#[derive(Debug, thiserror::Error)]
pub enum SinkError {
    #[error(transparent)]
    Plugin(#[from] PluginError),
    #[error("cannot write rows: {0}")]
    Io(#[from] std::io::Error),
    #[error(transparent)]
    Kafka(#[from] KafkaError),
    #[error(transparent)]
    Log(crate::dataset::log::LogError),
    #[error(
        "dataset {dataset} is a table, which takes keyed rows only: {why}; key the flow's rows (a window, \
             a [process], or sink.key = \"FIELD\")"
    )]
    Unkeyed { dataset: String, why: String },
    #[error(transparent)]
    Framed(#[from] Box<framed::FramedSinkError>),
    #[error(transparent)]
    Connector(#[from] weir_connectors::ConnectorError),
    #[error(transparent)]
    Rows(#[from] crate::columns::ColumnFull),
    #[error(
        "sink.dataset = \"{0}\" writes a project's dataset: run the project (weir run DIR, where DIR has a \
         weir.toml listing this flow)"
    )]
    NoProject(String),
}

/// Where result rows go.
pub trait RowSink: Send {
    /// Delivers a batch and makes it visible. Called again with the same delivery and rows if
    /// the process died before the batch was committed.
    fn deliver(&mut self, delivery: &Delivery, rows: &Rows) -> Result<(), SinkError>;

    /// What waits until everything delivered so far is durable: run (on any thread) before
    /// the source position is committed. For sinks whose `deliver` already waits, nothing.
    fn barrier(&mut self) -> Barrier {
        Box::new(|| Ok(()))
    }

    /// The rows of the last [`RowSink::deliver`] that the sink could not write, by index, with
    /// why: the driver writes them to the dead letters. Most sinks write every row.
    fn rejected(&mut self) -> Vec<(usize, String)> {
        Vec::new()
    }
}

/// A wait for what a sink was given before it was taken (see [`RowSink::barrier`]).
pub type Barrier = Box<dyn FnOnce() -> Result<(), SinkError> + Send>;
