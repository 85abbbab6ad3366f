//! Avro: a schema parsed with the schemas it references ([`parse`]), rows encoded with it
//! (`encode.rs`), bytes decoded strictly (`decode.rs`) and written as rows (`json.rs`), and the
//! compatibility rules a registry subject keeps, checked before a run (`compat.rs`). The host
//! encodes and checks; decoding runs in the sandbox, in `plugins/avro-parser`, which builds
//! this module in.

pub mod codegen;
mod compat;
mod decode;
mod direct;
mod encode;
mod float;
mod json;
mod plan;
mod read;

pub use compat::{Level, Refusal, check, check_reader};
pub use decode::{DecodeError, decode};
pub use direct::{Found, MAX_PATH, Number};
pub use encode::{Encoder, Misfit};
pub use json::{Names, write_json};
pub use plan::Plan;

use apache_avro::Schema as AvroSchema;

/// Avro schema text that does not parse.
#[derive(Debug, Clone, thiserror::Error)]
#[error("not an Avro schema: {0}")]
pub struct BadSchema(pub String);

/// `text` parsed, with the named types of `references` (each an Avro schema's JSON text) known.
pub fn parse(text: &str, references: &[(String, String)]) -> Result<AvroSchema, BadSchema> {
    if references.is_empty() {
        return AvroSchema::parse_str(text).map_err(|e| BadSchema(e.to_string()));
    }
    let refs: Vec<&str> = references.iter().map(|(_, t)| t.as_str()).collect();
    AvroSchema::parse_str_with_list(text, refs).map(|(s, _)| s).map_err(|e| BadSchema(e.to_string()))
}

/// The full name of the record (or other named type) a schema is, for the record subject
/// strategies.
pub fn full_name(schema: &AvroSchema) -> Option<String> {
    schema.name().map(|n| n.fullname(None))
}
