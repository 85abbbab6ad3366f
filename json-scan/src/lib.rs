//! The one-pass JSON scanner that plugins and the host share: [`scan`] reads a few fields of an
//! object while checking the whole of it is valid JSON, [`field`] reads one top-level field
//! without checking the rest. The guest SDK (`weir-guest`) compiles it into every plugin and the
//! host runs the same code, so both sides of the sandbox agree on what a row's fields are.
//!
//! Invariant: it depends on nothing of the host and on nothing but `serde_json` (which decodes
//! the rare key written with escapes), so it builds for `wasm32-wasip2` and the host alike; the
//! guest SDK never depends on the host, only on this.

pub mod field;
pub mod scan;
