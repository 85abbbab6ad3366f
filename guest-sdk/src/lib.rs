//! Write Weir plugins in Rust.
//!
//! A plugin implements one trait per role it plays ([`Parser`], [`Transformer`], [`Aggregator`],
//! [`Processor`], [`Sink`]) and exports them with [`export_plugin!`]. The SDK owns the batch loop: the host calls
//! the component once per batch with columnar data, and the SDK walks the batch and calls the
//! trait once per record, inside the sandbox, where a call costs nothing. Plugin code never sees
//! the raw bindings.
//!
//! ```no_run
//! use weir_guest::{export_plugin, Config, Emitter, Parser, PluginError, Record, RecordError};
//!
//! struct Orders;
//!
//! impl Parser for Orders {
//!     fn new(_config: &Config) -> Result<Self, PluginError> { Ok(Orders) }
//!     fn parse(&self, record: &Record<'_>, out: &mut Emitter) -> Result<(), RecordError> {
//!         #[derive(serde::Deserialize)]
//!         struct Ts { order_ts: i64 }
//!         let ts: Ts = record.json()?;
//!         out.emit_json(ts.order_ts, None, record.value)
//!     }
//! }
//!
//! export_plugin!(parser: Orders);
//! ```
//!
//! Rows are UTF-8 JSON objects. A plugin keeps nothing between calls that matters for results:
//! the host may replace an instance at any time, and the trait values built by `new` exist only
//! to hold parsed configuration. A `config` key that `new` never reads is refused as
//! `invalid-config`, naming the key: a typo must not silently run with a default.

extern crate self as weir_guest;

mod batch;
mod config;
mod process;
pub mod registry;
mod roles;
pub mod testing;

// The JSON scanner is shared with the host, which runs the same code outside the sandbox.
use weir_json_scan::{field, scan};

#[doc(hidden)]
pub mod __rt;

pub use batch::{Delivery, Emitter, Event, Header, Record, Rows, Value};
pub use config::Config;
pub use process::{Context, Processor, TimeDomain, Timer};
pub use roles::{Aggregator, Parser, Sink, Transformer, Unsupported};
pub use scan::Paths;

#[doc(hidden)]
pub use wit_bindgen as __wit_bindgen;

#[doc(hidden)]
pub mod __bindings {
    wit_bindgen::generate!({
        path: "wit",
        // The world by name alone: its package version is `wit/plugin.wit`'s, said once there.
        world: "plugin",
        pub_export_macro: true,
        export_macro_name: "__export_plugin_world",
        runtime_path: "::weir_guest::__wit_bindgen::rt",
    });
}

use __bindings::weir::plugin::host;
use __bindings::weir::plugin::types;

/// Why a whole call failed; the host fails this plugin's batch with it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PluginError {
    /// The `config` table in the pipeline file is missing a key or has a bad value.
    InvalidConfig(String),
    /// Accumulator bytes this build cannot decode.
    BadState(String),
    /// An external effect failed (a sink could not write).
    Io(String),
    /// Any other failure of the plugin's logic.
    Internal(String),
    /// This build cannot do what was asked (e.g. migrate accumulators of an unknown state
    /// version).
    Unsupported(String),
}

impl std::fmt::Display for PluginError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PluginError::InvalidConfig(m) => write!(f, "invalid config: {m}"),
            PluginError::BadState(m) => write!(f, "bad state: {m}"),
            PluginError::Io(m) => write!(f, "i/o: {m}"),
            PluginError::Internal(m) => write!(f, "internal: {m}"),
            PluginError::Unsupported(m) => write!(f, "unsupported: {m}"),
        }
    }
}

impl std::error::Error for PluginError {}

impl From<std::io::Error> for PluginError {
    fn from(e: std::io::Error) -> Self {
        PluginError::Io(e.to_string())
    }
}

impl From<PluginError> for types::PluginError {
    fn from(e: PluginError) -> Self {
        match e {
            PluginError::InvalidConfig(m) => types::PluginError::InvalidConfig(m),
            PluginError::BadState(m) => types::PluginError::BadState(m),
            PluginError::Io(m) => types::PluginError::Io(m),
            PluginError::Internal(m) => types::PluginError::Internal(m),
            PluginError::Unsupported(m) => types::PluginError::Unsupported(m),
        }
    }
}

/// What was wrong with one record. It does not fail the batch: the host sends the record to the
/// dead-letter output with this reason and the record's source position.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordError {
    kind: types::RecordErrorKind,
    message: String,
}

impl RecordError {
    /// Not decodable at all (bad UTF-8, bad JSON, truncated).
    pub fn malformed(message: impl Into<String>) -> Self {
        Self { kind: types::RecordErrorKind::Malformed, message: message.into() }
    }

    /// A required field is absent.
    pub fn missing_field(field: &str) -> Self {
        Self { kind: types::RecordErrorKind::MissingField, message: format!("missing field `{field}`") }
    }

    /// A field has a value out of range or of the wrong type.
    pub fn invalid_value(message: impl Into<String>) -> Self {
        Self { kind: types::RecordErrorKind::InvalidValue, message: message.into() }
    }
}

impl From<serde_json::Error> for RecordError {
    fn from(e: serde_json::Error) -> Self {
        use serde_json::error::Category;
        let message = e.to_string();
        match e.classify() {
            Category::Data if message.starts_with("missing field") => {
                Self { kind: types::RecordErrorKind::MissingField, message }
            }
            Category::Data => Self::invalid_value(message),
            Category::Syntax | Category::Eof | Category::Io => Self::malformed(message),
        }
    }
}

/// Log levels for [`log`].
pub use host::LogLevel;

/// Writes a line to the host's log, tagged with the pipeline and plugin.
pub fn log(level: LogLevel, message: &str) {
    host::log(level, message);
}
