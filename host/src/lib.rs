//! Weir's host: the engine that runs a pipeline of sandboxed Wasm plugins over a stream, and the
//! `weir` command line ([`cli`], the one public item).
//!
//! The modules follow the data's path:
//! `source` (Kafka, recorded events, a project's dataset) → `ingest` (read ahead, parse through a
//! Wasm parser from `plugin`) → transforms (Wasm) → `expect` → `operator` (`aggregate`: windows
//! over `window`, state in `state`, event time from `watermark`) → `sink` → `checkpoint`. A
//! `project` wires several such pipelines through `dataset`s (the embedded log). The `driver` runs that loop,
//! with `side_output` for dead letters and late events and `isolate` for failing plugins.
//! `pipeline` reads the pipeline file; `progress` reports; `workload` makes the reference
//! workload, and `native` is its logic as host code, the baseline the sandbox is measured
//! against. `columns`, `bytes`, `retry` and `kafka` are helpers the others share. `serve` hosts many tenants'
//! pipelines in one process behind an HTTP API.

mod aggregate;
mod bytes;
mod checkpoint;
pub mod cli;
mod columns;
mod dataset;
mod driver;
mod expect;
mod ingest;
mod isolate;
mod json;
mod kafka;
mod native;
mod operator;
mod own_files;
mod pipeline;
mod plugin;
mod progress;
mod project;
mod retry;
mod scale;
mod serve;
mod side_output;
mod sink;
mod source;
mod state;
mod watermark;
mod window;
mod workload;
