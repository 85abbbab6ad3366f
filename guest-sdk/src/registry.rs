//! Schemas from the pipeline's schema registry, for a stage whose `grants.registry` is `true`
//! (`wit/plugin.wit`, interface `registry`). The host fetches and caches; a plugin asks by id
//! (the one a record is framed with) or by subject and version, never for "the latest": a
//! replayed batch must read the same schemas.
//!
//! Natively (in a plugin's unit tests) there is no host: [`crate::testing::serve_schemas`]
//! says what these calls answer.

use crate::RecordError;

/// What a schema is written in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SchemaType {
    Avro,
    Protobuf,
    Json,
}

impl SchemaType {
    /// As people name it: `Avro`, `Protobuf`, `JSON Schema`.
    pub fn name(self) -> &'static str {
        match self {
            SchemaType::Avro => "Avro",
            SchemaType::Protobuf => "Protobuf",
            SchemaType::Json => "JSON Schema",
        }
    }
}

/// A schema, with everything it references (each as its name and text, a schema after those
/// it references).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Schema {
    pub id: u32,
    pub schema_type: SchemaType,
    pub text: String,
    pub references: Vec<(String, String)>,
}

/// Why the registry did not give a schema.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RegistryError {
    /// The stage has no `grants.registry = true`, or the pipeline no `[registry]`.
    NotGranted,
    /// No such schema id, subject or version.
    NotFound(String),
    /// The registry cannot be reached (after the host's retries).
    Unavailable(String),
}

impl std::fmt::Display for RegistryError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::NotGranted => write!(f, "the stage has no grants.registry (or the pipeline no [registry])"),
            Self::NotFound(m) => write!(f, "{m} is not in the schema registry"),
            Self::Unavailable(m) => write!(f, "{m}"),
        }
    }
}

/// The magic byte that starts a record in the Confluent wire format.
pub const MAGIC: u8 = 0;

/// The schema id and payload of a record in the Confluent wire format (magic byte 0, a 4-byte
/// big-endian schema id, the payload), or the record's error.
pub fn unframe(bytes: &[u8]) -> Result<(u32, &[u8]), RecordError> {
    let Some((head, payload)) = bytes.split_first_chunk::<5>() else {
        return Err(RecordError::malformed(format!(
            "{} bytes: too short for the wire format's 5-byte header (magic byte 0, schema id)",
            bytes.len()
        )));
    };
    if head[0] != MAGIC {
        return Err(RecordError::malformed(format!(
            "magic byte {:#04x}, not 0x00: the record is not in the Confluent wire format",
            head[0]
        )));
    }
    Ok((u32::from_be_bytes([head[1], head[2], head[3], head[4]]), payload))
}

/// The schema registered under `id`.
pub fn schema_by_id(id: u32) -> Result<Schema, RegistryError> {
    imp::by_id(id)
}

/// `Ok` if the stage may reach the registry; else the `invalid-config` error that says how to
/// grant it, for a plugin that reads schemas to return from `new`.
pub fn require_grant() -> Result<(), crate::PluginError> {
    if granted() {
        return Ok(());
    }
    Err(crate::PluginError::InvalidConfig(
        "this parser reads schemas from the registry: give its stage grants.registry = true, and the pipeline \
         a [registry]"
            .into(),
    ))
}

/// Whether the stage may reach the registry (`grants.registry = true` and a `[registry]`):
/// check it in `new`, so a pipeline without the grant is refused at start-up rather than
/// dead-lettering every record. Reaches no registry.
pub fn granted() -> bool {
    !matches!(imp::by_id(0), Err(RegistryError::NotGranted))
}

/// Version `version` of `subject`'s schema.
pub fn schema_by_version(subject: &str, version: u32) -> Result<Schema, RegistryError> {
    imp::by_version(subject, version)
}

/// A parser's reader schema, for its `new`: version `version` of `subject` (`pinned`; `None`:
/// no reader schema), which must be of type `want`, made ready for use by `ready` (parsed,
/// compiled). A registry that cannot be reached is an I/O error (the host retries the start);
/// a missing or mistyped schema, or one `ready` refuses, is the config's error, naming the
/// subject.
pub fn reader<T>(
    pinned: Option<(&str, u32)>,
    want: SchemaType,
    ready: impl FnOnce(&Schema) -> Result<T, String>,
) -> Result<Option<T>, crate::PluginError> {
    let Some((subject, version)) = pinned else { return Ok(None) };
    let invalid =
        |why: String| crate::PluginError::InvalidConfig(format!("reader_subject {subject:?} version {version}: {why}"));
    let schema = schema_by_version(subject, version).map_err(|e| match e {
        RegistryError::Unavailable(m) => crate::PluginError::Io(m),
        e => invalid(e.to_string()),
    })?;
    if schema.schema_type != want {
        return Err(invalid(format!("it is {}, not {}", schema.schema_type.name(), want.name())));
    }
    ready(&schema).map(Some).map_err(invalid)
}

#[cfg(target_arch = "wasm32")]
mod imp {
    use super::*;
    use crate::__bindings::weir::plugin::registry as wit;

    fn from_wit(s: wit::Schema) -> Schema {
        Schema {
            id: s.id,
            schema_type: match s.schema_type {
                wit::SchemaType::Avro => SchemaType::Avro,
                wit::SchemaType::Protobuf => SchemaType::Protobuf,
                wit::SchemaType::Json => SchemaType::Json,
            },
            text: s.text,
            references: s.references.into_iter().map(|r| (r.name, r.text)).collect(),
        }
    }

    fn error(e: wit::RegistryError) -> RegistryError {
        match e {
            wit::RegistryError::NotGranted => RegistryError::NotGranted,
            wit::RegistryError::NotFound(m) => RegistryError::NotFound(m),
            wit::RegistryError::Unavailable(m) => RegistryError::Unavailable(m),
        }
    }

    pub(super) fn by_id(id: u32) -> Result<Schema, RegistryError> {
        wit::schema_by_id(id).map(from_wit).map_err(error)
    }

    pub(super) fn by_version(subject: &str, version: u32) -> Result<Schema, RegistryError> {
        wit::schema_by_version(subject, version).map(from_wit).map_err(error)
    }
}

#[cfg(not(target_arch = "wasm32"))]
pub(crate) mod imp {
    use std::cell::RefCell;

    use super::*;

    /// Schemas, and (subject, version, schema id).
    type Served = (Vec<Schema>, Vec<(String, u32, u32)>);

    thread_local! {
        /// What `testing::serve_schemas` set.
        pub(crate) static SERVED: RefCell<Option<Served>> = const { RefCell::new(None) };
    }

    pub(super) fn by_id(id: u32) -> Result<Schema, RegistryError> {
        SERVED.with_borrow(|s| {
            let (schemas, _) = s.as_ref().ok_or(RegistryError::NotGranted)?;
            if id == 0 {
                return Err(RegistryError::NotFound("schema id 0".into()));
            }
            schemas
                .iter()
                .find(|x| x.id == id)
                .cloned()
                .ok_or_else(|| RegistryError::NotFound(format!("schema id {id}")))
        })
    }

    pub(super) fn by_version(subject: &str, version: u32) -> Result<Schema, RegistryError> {
        let id = SERVED.with_borrow(|s| {
            let (_, versions) = s.as_ref().ok_or(RegistryError::NotGranted)?;
            versions
                .iter()
                .find(|(sub, v, _)| sub == subject && *v == version)
                .map(|(_, _, id)| *id)
                .ok_or_else(|| RegistryError::NotFound(format!("subject {subject:?} version {version}")))
        })?;
        by_id(id)
    }
}
