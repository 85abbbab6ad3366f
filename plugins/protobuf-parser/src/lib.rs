//! The standard Protobuf parser: records in the Confluent wire format for Protobuf (magic byte
//! 0, a 4-byte schema id, the message indexes naming which message of the schema, then the
//! message), each decoded with the schema its id names in the pipeline's schema registry and
//! passed on as a JSON row in Protobuf's JSON mapping, with the `.proto` field names and 64-bit
//! integers as numbers (so an `int64` epoch can be the event time; a
//! `google.protobuf.Timestamp` is RFC 3339 text, which can be too). Event time and key come
//! from `time_field` and `key_fields`, by `json_parser`'s rules (`weir_schema::rows`).
//!
//! A registry may hold a schema as `.proto` text (compiled here, with its references as the
//! files it imports and Google's well-known types) or as a base64 `FileDescriptorProto` (what
//! Confluent's Python serializer registers); both are read.
//!
//! The stage needs `grants.registry = true` and the pipeline a `[registry]`. Config:
//! `time_field` (required), `time_unit` (`"ms"` default, `"s"`), `key_fields` (up to
//! `weir_schema::rows::MAX_KEY_FIELDS` field paths), and the reader schema, `reader_subject`
//! with `reader_version`. With a reader schema, each record's bytes are read as the reader's
//! message of the same full name, by Protobuf's own rules: fields matched by number, a field
//! the writer lacks its default, a field the reader lacks dropped.
//!
//! A record whose magic byte is not 0, whose schema id the registry does not have, whose schema
//! is not Protobuf, whose message indexes name no message, whose message the reader schema
//! lacks, or whose bytes do not decode is that record's dead letter, with its schema id and why.
//!
//! Invariant: a schema is compiled once per instance, whatever the number of records.

use std::collections::HashMap;
use std::sync::Mutex;

use prost_reflect::{DescriptorPool, DynamicMessage, FileDescriptor, MessageDescriptor, SerializeOptions};
use weir_guest::registry::{self, RegistryError, SchemaType};
use weir_guest::{Config, Emitter, Parser, PluginError, Record, RecordError, export_plugin};
use weir_schema::rows::{EventError, EventFields, EventSettings};

mod descriptors;

/// The most message indexes a record may carry (nesting depth of the message it names).
const MAX_INDEXES: usize = 32;

/// A schema id's file, or why its records cannot be read.
type Ready = Result<FileDescriptor, String>;

struct ProtobufParser {
    fields: EventFields,
    /// The reader schema's messages, when the pipeline names one.
    reader: Option<DescriptorPool>,
    /// By schema id. A mutex only because a parser must be `Sync`.
    files: Mutex<HashMap<u32, Ready>>,
    json: SerializeOptions,
}

impl Parser for ProtobufParser {
    fn new(config: &Config) -> Result<Self, PluginError> {
        let s: EventSettings = config.parse()?;
        let fields = s.fields().map_err(PluginError::InvalidConfig)?;
        registry::require_grant()?;
        let pinned = s.reader().map_err(PluginError::InvalidConfig)?;
        let reader = registry::reader(pinned, SchemaType::Protobuf, |schema| {
            descriptors::pool(schema.id, &schema.text, &schema.references).map(|(pool, _)| pool)
        })?;
        Ok(Self {
            fields,
            reader,
            files: Mutex::default(),
            json: SerializeOptions::new()
                .stringify_64_bit_integers(false)
                .use_proto_field_name(true)
                .skip_default_fields(false),
        })
    }

    fn parse(&self, record: &Record<'_>, out: &mut Emitter) -> Result<(), RecordError> {
        let (id, mut payload) = registry::unframe(record.value)?;
        let bad = |why: String| RecordError::malformed(format!("schema id {id}: {why}"));
        let indexes = message_indexes(&mut payload).map_err(bad)?;
        let mut files = self.files.lock().unwrap_or_else(|p| p.into_inner());
        let ready = match files.entry(id) {
            std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
            std::collections::hash_map::Entry::Vacant(v) => v.insert(file_of(id)?),
        };
        let file = ready.as_ref().map_err(|why| bad(why.clone()))?;
        let mut message = message_at(file, &indexes).map_err(bad)?;
        if let Some(reader) = &self.reader {
            message = reader.get_message_by_name(message.full_name()).ok_or_else(|| {
                bad(format!("the reader schema has no message {}, which the record is", message.full_name()))
            })?;
        }
        let decoded = DynamicMessage::decode(message.clone(), payload)
            .map_err(|e| bad(format!("the bytes do not decode as {}: {e}", message.full_name())))?;
        let row = decoded
            .serialize_with_options(serde_json::value::Serializer, &self.json)
            .map_err(|e| bad(format!("{} has no JSON form: {e}", message.full_name())))?;
        let (time, key) = self.fields.event(&row).map_err(|e| match e {
            EventError::Missing(field) => RecordError::missing_field(&field),
            EventError::Invalid(why) => RecordError::invalid_value(why),
        })?;
        let text = serde_json::to_vec(&row).map_err(|e| bad(e.to_string()))?;
        out.emit_json(time, key.as_deref(), &text)
    }
}

/// The message indexes at the front of a Protobuf record's payload: a count, then that many
/// indexes, zigzag varints; a count of 0 stands for `[0]` (the first message).
fn message_indexes(payload: &mut &[u8]) -> Result<Vec<usize>, String> {
    let count = varint(payload)?;
    if count == 0 {
        return Ok(vec![0]);
    }
    let count = usize::try_from(count).ok().filter(|&c| c <= MAX_INDEXES);
    let count = count.ok_or_else(|| format!("a message index list longer than {MAX_INDEXES}, or negative"))?;
    (0..count)
        .map(|_| varint(payload).and_then(|i| usize::try_from(i).map_err(|_| format!("message index {i}"))))
        .collect()
}

fn varint(bytes: &mut &[u8]) -> Result<i64, String> {
    let mut z: u64 = 0;
    for i in 0..10 {
        let Some((&b, rest)) = bytes.split_first() else { return Err("the message indexes are cut short".into()) };
        *bytes = rest;
        z |= u64::from(b & 0x7f) << (7 * i);
        if b & 0x80 == 0 {
            return Ok(((z >> 1) as i64) ^ -((z & 1) as i64));
        }
    }
    Err("a message index runs past 10 bytes".into())
}

/// The message the indexes name: the file's top-level message `indexes[0]`, then nested ones.
fn message_at(file: &FileDescriptor, indexes: &[usize]) -> Result<MessageDescriptor, String> {
    let mut at = file.messages().nth(indexes[0]);
    for &i in &indexes[1..] {
        at = at.and_then(|m| m.child_messages().nth(i));
    }
    at.ok_or_else(|| format!("message indexes {indexes:?} name no message of {}", file.name()))
}

/// Schema `id`'s file; `Err` inside for an id whose records are dead letters, `Err` outside for
/// a registry the plugin cannot use.
fn file_of(id: u32) -> Result<Ready, RecordError> {
    let schema = match registry::schema_by_id(id) {
        Ok(s) => s,
        Err(RegistryError::NotFound(_)) => return Ok(Err("not in the schema registry".into())),
        Err(e) => return Err(RecordError::malformed(format!("schema id {id}: {e}"))),
    };
    if schema.schema_type != SchemaType::Protobuf {
        return Ok(Err(format!("it is {}, and this parser reads Protobuf", schema.schema_type.name())));
    }
    let pool: Result<(DescriptorPool, String), String> = descriptors::pool(id, &schema.text, &schema.references);
    Ok(pool.and_then(|(pool, name)| {
        pool.get_file_by_name(&name).ok_or_else(|| format!("its file {name} is missing from what it compiled to"))
    }))
}

export_plugin!(parser: ProtobufParser);

#[cfg(test)]
mod tests;
