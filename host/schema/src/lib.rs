//! Schemas from a schema registry, and the record formats they describe: what the host needs to
//! read and write the topics most Kafka users have, Avro (and, through the registry, Protobuf
//! and JSON Schema) in the Confluent wire format.
//!
//! - `wire.rs`: the framing, a magic byte `0` and a 4-byte big-endian schema id before the
//!   payload;
//! - `registry.rs`: a client of the Confluent registry API that caches what it fetches (a
//!   schema id is immutable, so each is fetched once per process) and retries a registry that
//!   is down before it gives up naming it;
//! - `avro/`: rows (JSON objects) written as Avro, with the field that does not fit named, and
//!   the compatibility rules checked before a run;
//! - `protobuf.rs`, `json_schema.rs`: rows written as Protobuf, or checked against a JSON
//!   Schema, for the Kafka sink;
//! - `checks.rs`: what is checked against the registry before a run;
//! - `saved.rs`: a registry's schemas saved to a file, for tests that need no registry;
//! - `rows.rs`: event times and keys from decoded rows, as `json_parser` reads them;
//! - `limits.rs`: every default and bound, named once.
//!
//! Decoding is not here: it runs in the sandbox (`plugins/avro-parser`), which reaches the
//! registry only through the host's `registry` interface (`wit/plugin.wit`), backed by this
//! crate's [`Registry`].

pub mod avro;
#[cfg(feature = "registry")]
pub mod checks;
mod config;
#[cfg(feature = "registry")]
pub mod json_schema;
pub mod limits;
#[cfg(feature = "registry")]
pub mod proto_codegen;
#[cfg(feature = "registry")]
pub mod protobuf;
#[cfg(feature = "registry")]
mod registry;
pub mod rows;
pub mod saved;
mod subject;
#[cfg(feature = "registry")]
mod tls;
pub mod wire;

pub use config::{RegistryConfig, RegistryFile};
#[cfg(feature = "registry")]
pub use registry::{Registry, RegistryError, Schema, SchemaRef, SchemaType};
pub use subject::SubjectStrategy;
