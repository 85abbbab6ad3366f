//! Weir's engine: what runs one pipeline of sandboxed Wasm plugins over a stream. It knows
//! nothing of how it is deployed: projects, scale-out and `weir serve` stand above it and plug in
//! through its traits (a source, a sink, the driver's `Stages`).
//!
//! The modules follow the data's path: [`source`] (Kafka, recorded events, a project's dataset,
//! a repartition topic) → [`ingest`] (read ahead, parse through a Wasm parser) → transforms
//! (Wasm) → expectations → [`operator`] (windows and [`aggregate`], dedup, joins, keyed
//! processors; state in [`state`], event time from the watermark) → [`sink`] → [`checkpoint`].
//! The [`driver`] runs that loop, with [`side_output`] for dead letters and late events and
//! [`isolate`] for failing plugins; [`progress`] reports it. [`dataset`] is the embedded log that
//! projects' flows read and write; [`shuffle`] is the partial-row codec that two-stage
//! aggregation and the repartition source and sink share; [`schemas`] checks a pipeline's
//! schemas against its registry before a run; [`kafka`] holds the client settings
//! every Kafka source and sink uses; [`native`] is the reference query's logic as host code, the
//! baseline the sandbox is measured against.

pub mod aggregate;
pub mod checkpoint;
pub mod dataset;
pub mod driver;
pub mod ingest;
pub mod isolate;
pub mod kafka;
pub mod native;
pub mod operator;
pub mod progress;
pub mod schemas;
pub mod shuffle;
pub mod side_output;
pub mod sink;
pub mod source;
pub mod state;
#[cfg(test)]
mod testing;

// The layers below, under the names this crate's modules use.
use weir_config as pipeline;
use weir_config::expect;
use weir_sandbox as plugin;
#[cfg(test)]
use weir_types::workload;
use weir_types::{bytes, columns, json, own_files, retry, rows, watermark, window};
