//! The standard JSON Schema parser: records in the Confluent wire format (magic byte 0, a
//! 4-byte schema id, JSON text), each checked against the JSON Schema its id names in the
//! pipeline's schema registry and passed on as it is, as the row. Event time and key come from
//! `time_field` and `key_fields`, by `json_parser`'s rules (`weir_schema::rows`).
//!
//! The stage needs `grants.registry = true` and the pipeline a `[registry]`. Config:
//! `time_field` (required), `time_unit` (`"ms"` default, `"s"`), `key_fields` (up to
//! `weir_schema::rows::MAX_KEY_FIELDS` field paths), and the reader schema, `reader_subject`
//! with `reader_version`: a record must then fit the reader schema as well as its writer's.
//!
//! A record whose magic byte is not 0, whose schema id the registry does not have, whose schema
//! is not JSON Schema, whose text is not a JSON object, or that its schema or the reader schema
//! refuses is that record's dead letter, with its schema id and why (a refusal names the
//! field's location).
//!
//! Invariant: a schema is compiled once per instance, whatever the number of records.

use std::collections::HashMap;
use std::sync::Mutex;

use jsonschema::{Draft, Retrieve, Uri, Validator};
use serde_json::Value;
use weir_guest::registry::{self, RegistryError, SchemaType};
use weir_guest::{Config, Emitter, Parser, PluginError, Record, RecordError, export_plugin};
use weir_schema::rows::{EventError, EventFields, EventSettings};

/// A schema id's validator, or why its records cannot be read.
type Ready = Result<Validator, String>;

struct JsonSchemaParser {
    fields: EventFields,
    /// The reader schema, when the pipeline names one.
    reader: Option<Validator>,
    /// By schema id. A mutex only because a parser must be `Sync`; an instance runs one call at
    /// a time.
    validators: Mutex<HashMap<u32, Ready>>,
}

/// The schemas a schema references, by the name it references them with: `$ref`s to them are
/// answered from here, and nothing is fetched from anywhere.
struct References(Vec<(String, Value)>);

impl Retrieve for References {
    fn retrieve(&self, uri: &Uri<String>) -> Result<Value, Box<dyn std::error::Error + Send + Sync>> {
        let wanted = uri.as_str();
        self.0
            .iter()
            .find(|(name, _)| wanted == name || wanted.ends_with(&format!("/{name}")))
            .map(|(_, v)| v.clone())
            .ok_or_else(|| format!("{wanted} is not among the schema's references").into())
    }
}

impl Parser for JsonSchemaParser {
    fn new(config: &Config) -> Result<Self, PluginError> {
        let s: EventSettings = config.parse()?;
        let fields = s.fields().map_err(PluginError::InvalidConfig)?;
        registry::require_grant()?;
        let pinned = s.reader().map_err(PluginError::InvalidConfig)?;
        let reader = registry::reader(pinned, SchemaType::Json, validator)?;
        Ok(Self { fields, reader, validators: Mutex::default() })
    }

    fn parse(&self, record: &Record<'_>, out: &mut Emitter) -> Result<(), RecordError> {
        let (id, payload) = registry::unframe(record.value)?;
        let mut validators = self.validators.lock().unwrap_or_else(|p| p.into_inner());
        let ready = match validators.entry(id) {
            std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
            std::collections::hash_map::Entry::Vacant(v) => v.insert(compile(id)?),
        };
        let validator = ready.as_ref().map_err(|why| RecordError::malformed(format!("schema id {id}: {why}")))?;
        let row: Value = serde_json::from_slice(payload)
            .map_err(|e| RecordError::malformed(format!("schema id {id}: the payload is not JSON: {e}")))?;
        if !row.is_object() {
            return Err(RecordError::invalid_value(format!("schema id {id}: the payload is not a JSON object")));
        }
        for (v, whose) in std::iter::once((validator, "")).chain(self.reader.iter().map(|r| (r, "the reader schema: ")))
        {
            if let Err(e) = v.validate(&row) {
                let at = e.instance_path().to_string();
                let at = if at.is_empty() { "the row".to_string() } else { format!("`{at}`") };
                return Err(RecordError::invalid_value(format!("schema id {id}: {whose}{at}: {e}")));
            }
        }
        let (time, key) = self.fields.event(&row).map_err(record_error)?;
        out.emit_json(time, key.as_deref(), payload)
    }
}

/// A row without its event, as the record's error.
fn record_error(e: EventError) -> RecordError {
    match e {
        EventError::Missing(field) => RecordError::missing_field(&field),
        EventError::Invalid(why) => RecordError::invalid_value(why),
    }
}

/// Schema `id`'s validator; `Err` inside for an id whose records are dead letters, `Err`
/// outside for a registry the plugin cannot use.
fn compile(id: u32) -> Result<Ready, RecordError> {
    let schema = match registry::schema_by_id(id) {
        Ok(s) => s,
        Err(RegistryError::NotFound(_)) => return Ok(Err("not in the schema registry".into())),
        Err(e) => return Err(RecordError::malformed(format!("schema id {id}: {e}"))),
    };
    if schema.schema_type != SchemaType::Json {
        return Ok(Err(format!("it is {}, and this parser reads JSON Schema", schema.schema_type.name())));
    }
    Ok(validator(&schema))
}

/// A JSON Schema's validator, its references answered from what the registry gave with it.
fn validator(schema: &registry::Schema) -> Result<Validator, String> {
    let Ok(text) = serde_json::from_str::<Value>(&schema.text) else {
        return Err("its schema is not JSON".into());
    };
    let mut refs = Vec::new();
    for (name, t) in &schema.references {
        match serde_json::from_str(t) {
            Ok(v) => refs.push((name.clone(), v)),
            Err(e) => return Err(format!("reference {name:?} is not JSON: {e}")),
        }
    }
    let mut options = jsonschema::options().with_retriever(References(refs));
    // Confluent's serializers write draft-07 schemas, and say so; one that does not say is
    // taken as draft-07 too.
    if text.get("$schema").is_none() {
        options = options.with_draft(Draft::Draft7);
    }
    options.build(&text).map_err(|e| format!("not a JSON Schema: {e}"))
}

export_plugin!(parser: JsonSchemaParser);

#[cfg(test)]
mod tests;
