//! The `registry` interface (`wit/plugin.wit`): schemas from the pipeline's schema registry,
//! for a stage whose `grants.registry` is `true`, and nothing for any other.
//!
//! The plugin sees schemas, never the registry's address or credentials. Fetching and caching
//! are `weir_schema::Registry`'s, shared by the process, so a schema id costs one request per
//! process whatever the number of stages, instances and batches.
//!
//! Before a parser with the grant gets a batch, [`prefetch`] fetches every schema id the batch's
//! records are framed with. A registry that is down is retried there, outside the plugin's
//! call and its deadline, and if it stays down the run stops with an error naming it: records
//! are never failed (and dead-lettered) because the registry was away.

use weir_schema::{Registry, RegistryError, SchemaType, wire};

use super::bindings::weir::plugin::registry as wit;
use super::bindings::weir::plugin::types::RawBatch;
use super::host::HostState;

impl wit::Host for HostState {
    fn schema_by_id(&mut self, id: u32) -> Result<wit::Schema, wit::RegistryError> {
        let r = self.registry.as_ref().ok_or(wit::RegistryError::NotGranted)?;
        if id == 0 {
            // No registry gives id 0: a plugin asks for it to learn whether it has the grant,
            // and that costs no request.
            return Err(wit::RegistryError::NotFound("schema id 0".into()));
        }
        r.by_id(id).map(|s| to_wit(&s)).map_err(to_wit_error)
    }

    fn schema_by_version(&mut self, subject: String, version: u32) -> Result<wit::Schema, wit::RegistryError> {
        let r = self.registry.as_ref().ok_or(wit::RegistryError::NotGranted)?;
        r.by_version(&subject, Some(version)).map(|(_, s)| to_wit(&s)).map_err(to_wit_error)
    }
}

fn to_wit(s: &weir_schema::Schema) -> wit::Schema {
    wit::Schema {
        id: s.id,
        schema_type: match s.schema_type {
            SchemaType::Avro => wit::SchemaType::Avro,
            SchemaType::Protobuf => wit::SchemaType::Protobuf,
            SchemaType::Json => wit::SchemaType::Json,
        },
        text: s.text.clone(),
        references: s
            .references
            .iter()
            .map(|(name, text)| wit::Reference { name: name.clone(), text: text.clone() })
            .collect(),
    }
}

fn to_wit_error(e: RegistryError) -> wit::RegistryError {
    match e {
        RegistryError::NotFound { what, .. } => wit::RegistryError::NotFound(what),
        other => wit::RegistryError::Unavailable(other.to_string()),
    }
}

/// Fetches the schemas of every framed value and key in `input` that the process has not seen.
/// An id the registry does not have is fine here (the parser dead-letters its records); a
/// registry that cannot be reached, after its retries, is the error.
pub(crate) fn prefetch(registry: &Registry, input: &RawBatch) -> Result<(), RegistryError> {
    let mut last = None;
    for column in [(&input.values, &input.value_ends), (&input.keys, &input.key_ends)] {
        let (bytes, ends) = column;
        let mut start = 0usize;
        for &end in ends {
            let end = end as usize;
            if let Some(record) = bytes.get(start..end)
                && let Ok((id, _)) = wire::unframe(record)
                && last != Some(id)
            {
                last = Some(id);
                if registry.cached(id).is_none() {
                    match registry.by_id(id) {
                        Ok(_) | Err(RegistryError::NotFound { .. }) => {}
                        Err(e) => return Err(e),
                    }
                }
            }
            start = end;
        }
    }
    Ok(())
}
