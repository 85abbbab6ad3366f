//! What Weir checks against a registry before a run: that a sink's schema may join its
//! subject (the subject's compatibility level, checked by Weir so the refusal names the field
//! and the rule), and that a parser's reader schema reads every version of its subject.
//! `weir validate`, `weir run`'s start-up and a deploy on `weir serve` all call these.

use std::sync::Arc;

use crate::avro::{self, BadSchema, Level, Refusal};
use crate::registry::{Registry, RegistryError, Schema, SchemaType};

#[derive(Debug, Clone, thiserror::Error)]
pub enum CheckError {
    #[error(transparent)]
    Registry(#[from] RegistryError),
    #[error("{what}: {error}")]
    BadSchema { what: String, error: BadSchema },
    #[error("{what}: subject {subject:?} version {version} is a {found} schema, not Avro")]
    NotAvro { what: String, subject: String, version: u32, found: &'static str },
    #[error("{what} is refused by subject {subject:?}'s compatibility level, {refusal}")]
    Incompatible { what: String, subject: String, refusal: Refusal },
    #[error("{what} cannot read data written with subject {subject:?}'s schemas: {refusal}")]
    Unreadable { what: String, subject: String, refusal: Refusal },
    #[error(
        "{what} is not registered under subject {subject:?}, and auto_register is false: register it, or set \
         auto_register = true"
    )]
    NotRegistered { what: String, subject: String },
    #[error("schema registry {registry}: subject {subject:?}'s compatibility level: {message}")]
    Level { registry: String, subject: String, message: String },
}

impl CheckError {
    /// Whether what the pipeline names is refused (a schema, a file, a setting), rather than the
    /// registry failing to answer.
    pub fn is_config(&self) -> bool {
        match self {
            CheckError::Registry(e) => e.is_setup(),
            _ => true,
        }
    }
}

/// Every version of `subject`, oldest first, parsed as Avro.
fn versions(registry: &Registry, subject: &str, what: &str) -> Result<Vec<(u32, apache_avro::Schema)>, CheckError> {
    let mut out = Vec::new();
    for v in registry.versions(subject)? {
        let (_, s) = registry.by_version(subject, Some(v))?;
        out.push((v, parsed(&s, subject, v, what)?));
    }
    Ok(out)
}

fn parsed(s: &Arc<Schema>, subject: &str, version: u32, what: &str) -> Result<apache_avro::Schema, CheckError> {
    if s.schema_type != SchemaType::Avro {
        return Err(CheckError::NotAvro {
            what: what.to_string(),
            subject: subject.to_string(),
            version,
            found: s.schema_type.as_str(),
        });
    }
    avro::parse(&s.text, &s.references).map_err(|error| CheckError::BadSchema {
        what: format!("{what}: subject {subject:?} version {version}"),
        error,
    })
}

/// The id `text` (an Avro schema, `what` in errors) has under `subject`: found there, or, if it
/// passes the subject's compatibility level, registered (with `register`) or `None` (without:
/// a check only, as `weir validate` makes).
pub fn writer_id(
    registry: &Registry,
    subject: &str,
    text: &str,
    what: &str,
    register: bool,
    auto_register: bool,
) -> Result<Option<u32>, CheckError> {
    writer_id_of(registry, SchemaType::Avro, subject, text, what, register, auto_register)
}

/// As [`writer_id`], for a schema of any type: Avro is checked by Weir (the refusal names the
/// field and the rule); Protobuf and JSON Schema by the registry, whose reasons are quoted.
pub fn writer_id_of(
    registry: &Registry,
    schema_type: SchemaType,
    subject: &str,
    text: &str,
    what: &str,
    register: bool,
    auto_register: bool,
) -> Result<Option<u32>, CheckError> {
    if let Some(id) = registry.lookup(subject, schema_type, text)? {
        return Ok(Some(id));
    }
    let level = registry.compatibility(subject)?;
    let parsed = Level::parse(&level).map_err(|message| CheckError::Level {
        registry: registry.url().to_string(),
        subject: subject.to_string(),
        message,
    })?;
    let refused = |message: String, version: u32| CheckError::Incompatible {
        what: what.to_string(),
        subject: subject.to_string(),
        refusal: Refusal { rule: level.clone(), version, message },
    };
    if schema_type == SchemaType::Avro {
        let schema = avro::parse(text, &[]).map_err(|error| CheckError::BadSchema { what: what.to_string(), error })?;
        let existing = versions(registry, subject, what)?;
        avro::check(&schema, &existing, parsed).map_err(|refusal| CheckError::Incompatible {
            what: what.to_string(),
            subject: subject.to_string(),
            refusal,
        })?;
    } else if let Err(reasons) = registry.compatible(subject, schema_type, text)? {
        let latest = registry.versions(subject)?.last().copied().unwrap_or(0);
        return Err(refused(reasons.join("; "), latest));
    }
    if !auto_register {
        return Err(CheckError::NotRegistered { what: what.to_string(), subject: subject.to_string() });
    }
    if !register {
        return Ok(None);
    }
    Ok(Some(registry.register(subject, schema_type, text)?))
}

/// Checks that version `version` of `subject` reads data written with every version of it (an
/// Avro reader; a Protobuf or JSON Schema one is left to the registry's level and the parser).
pub fn reader(registry: &Registry, subject: &str, version: u32, what: &str) -> Result<(), CheckError> {
    let (_, r) = registry.by_version(subject, Some(version))?;
    if matches!(r.schema_type, SchemaType::Protobuf | SchemaType::Json) {
        // Weir has no rules of its own for these: each version passed the subject's level when
        // the registry took it, and the parser dead-letters a record its reader cannot read.
        return Ok(());
    }
    let reader = parsed(&r, subject, version, what)?;
    let writers = versions(registry, subject, what)?;
    avro::check_reader(&reader, &writers).map_err(|refusal| CheckError::Unreadable {
        what: what.to_string(),
        subject: subject.to_string(),
        refusal,
    })
}
