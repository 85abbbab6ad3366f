//! Weir's host: the engine that runs a pipeline of sandboxed Wasm plugins over a stream.
//!
//! The modules follow the data's path:
//! [`source`] → [`parse`] and transform (Wasm, via [`plugin`]) → [`watermark`] → [`window`] →
//! [`aggregate`] (Wasm accumulators in [`state`]) → [`emit`] → [`sink`] → [`checkpoint`]. The
//! [`driver`] runs that loop, with [`side_output`] for dead letters and late data. [`pipeline`] reads the
//! pipeline file; [`progress`] reports; [`workload`] makes the reference workload, and [`native`] is its
//! logic as host code, the baseline the sandbox is measured against.

pub mod aggregate;
pub mod checkpoint;
pub mod driver;
pub mod emit;
pub mod isolate;
pub mod native;
pub mod parse;
pub mod pipeline;
pub mod plugin;
pub mod progress;
pub mod side_output;
pub mod sink;
pub mod source;
pub mod state;
pub mod watermark;
pub mod window;
pub mod workload;
