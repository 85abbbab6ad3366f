//! The standard Avro parser: records in the Confluent wire format (magic byte 0, a 4-byte
//! schema id, Avro binary), each decoded with the schema its id names in the pipeline's schema
//! registry, resolved to the reader schema the pipeline names (Avro's rules: fields matched by
//! name, defaults for fields the writer lacks, promotions such as int to long, unions), and
//! passed on as a JSON row (`weir_schema::avro::write_json` says how each type reads). Event
//! time and key come from `time_field` and `key_fields`, as `json_parser` takes them.
//!
//! The stage needs `grants.registry = true` and the pipeline a `[registry]`. Config:
//! - `time_field` (required), `time_unit` (`"ms"` default, `"s"`), `key_fields` (up to
//!   `MAX_KEY_FIELDS` field paths, `a.b` inside a record): as `json_parser`'s. A time field
//!   may be a `long` or `int` (epoch ms, or s), a `timestamp-millis`, a `timestamp-micros`
//!   (taken to ms), a `double` of seconds with `time_unit = "s"`, or an RFC 3339 `string`.
//! - `reader_subject` and `reader_version`: the reader schema, a fixed version of a subject
//!   (never "the latest", so a replay reads the same rows). Without them each record is read
//!   with its writer's schema. At start-up Weir refuses a reader schema that cannot read every
//!   version of its subject (`docs/formats.md`).
//!
//! A record whose magic byte is not 0, whose schema id the registry does not have, whose
//! schema is not Avro, or whose bytes do not decode (or leave bytes over) is that record's
//! dead letter, with its schema id and why.
//!
//! Invariant: a writer's schema is parsed once per instance, whatever the number of records.
//! Bytes are decoded strictly (`weir_schema::avro::decode`: a record cut short is refused,
//! never read as `null`s), then resolved to the reader's schema by apache-avro.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::Mutex;

use apache_avro::Schema;
use apache_avro::types::Value;
use weir_guest::registry::{self, RegistryError, SchemaType};
use weir_guest::{Config, Emitter, Parser, PluginError, Record, RecordError, export_plugin};
use weir_schema::avro::{Found, MAX_PATH, Names, Number, Plan, decode, write_json};
use weir_schema::rows::{EventFields, EventSettings, MAX_KEY_FIELDS, TimeUnit};

/// A writer's schema, parsed, with the named types inside it and its references; and, when
/// records are read as their writer wrote them, compiled to decode them straight to rows.
struct Writer {
    schema: Schema,
    names: Names,
    plan: Option<Plan>,
}

/// The reader's schema, with its named types.
struct Reader {
    schema: Schema,
    names: Names,
}

/// Why a schema id cannot be decoded, kept so a bad id costs one lookup per instance.
type Ready = Result<Writer, String>;

/// Schema ids hashed by one multiplication: SipHash, the default, took 2% of an Avro orders
/// pipeline's CPU for a map that holds a handful of ids. Flooding it would take a registry
/// that holds the ids, each fetched once.
#[derive(Default)]
struct IdHasher(u64);

impl Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u32(u32::from(b) ^ (self.0 as u32).rotate_left(8));
        }
    }

    fn write_u32(&mut self, n: u32) {
        self.0 = (self.0 ^ u64::from(n)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
}

type Decoders = HashMap<u32, Ready, BuildHasherDefault<IdHasher>>;

struct AvroParser {
    fields: EventFields,
    /// The time path, then the key paths: what the direct decoder notes.
    wanted: Vec<Vec<String>>,
    reader: Option<Reader>,
    /// By schema id. A mutex only because a parser must be `Sync`: an instance runs one call
    /// at a time, so it is never contended.
    decoders: Mutex<Decoders>,
    row: Mutex<Vec<u8>>,
}

/// A schema and its references, parsed.
fn parse_schema(s: &registry::Schema) -> Result<(Schema, Vec<Schema>), String> {
    if s.references.is_empty() {
        return Schema::parse_str(&s.text).map(|x| (x, vec![])).map_err(|e| e.to_string());
    }
    let refs: Vec<&str> = s.references.iter().map(|(_, t)| t.as_str()).collect();
    Schema::parse_str_with_list(&s.text, refs).map_err(|e| e.to_string())
}

impl Parser for AvroParser {
    fn new(config: &Config) -> Result<Self, PluginError> {
        let s: EventSettings = config.parse()?;
        let fields = s.fields().map_err(PluginError::InvalidConfig)?;
        registry::require_grant()?;
        let pinned = s.reader().map_err(PluginError::InvalidConfig)?;
        let reader = registry::reader(pinned, SchemaType::Avro, |schema| {
            let (s, refs) = parse_schema(schema)?;
            let names = Names::of(std::iter::once(&s).chain(&refs));
            Ok(Reader { schema: s, names })
        })?;
        if let Some(deep) = std::iter::once(&fields.time).chain(&fields.keys).find(|p| p.len() > MAX_PATH) {
            return Err(PluginError::InvalidConfig(format!(
                "`{}`: a field path goes at most {MAX_PATH} records deep",
                deep.join(".")
            )));
        }
        Ok(AvroParser {
            wanted: std::iter::once(fields.time.clone()).chain(fields.keys.iter().cloned()).collect(),
            fields,
            reader,
            decoders: Mutex::default(),
            row: Mutex::default(),
        })
    }

    fn parse(&self, record: &Record<'_>, out: &mut Emitter) -> Result<(), RecordError> {
        let (id, mut payload) = registry::unframe(record.value)?;
        let mut decoders = self.decoders.lock().unwrap_or_else(|p| p.into_inner());
        let decoder = match decoders.entry(id) {
            std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
            std::collections::hash_map::Entry::Vacant(v) => v.insert(self.decoder(id)?),
        };
        let w = decoder.as_ref().map_err(|why| RecordError::malformed(format!("schema id {id}: {why}")))?;
        if let Some(plan) = &w.plan {
            return self.parse_direct(id, plan, payload, out);
        }
        let value = decode(&w.schema, &w.names, &mut payload)
            .map_err(|e| RecordError::malformed(format!("schema id {id}: the bytes do not decode: {e}")))?;
        if !payload.is_empty() {
            return Err(RecordError::malformed(format!(
                "schema id {id}: {} bytes left over after the record",
                payload.len()
            )));
        }
        let (value, read_as, names) = match &self.reader {
            None => (value, &w.schema, &w.names),
            Some(r) => {
                let v = value.resolve_with_names(&r.schema, r.names.map()).map_err(|e| {
                    RecordError::invalid_value(format!("schema id {id}: the reader schema cannot read it: {e}"))
                })?;
                (v, &r.schema, &r.names)
            }
        };
        let time = self.event_time(&value)?;
        let mut row = self.row.lock().unwrap_or_else(|p| p.into_inner());
        row.clear();
        write_json(read_as, names, &value, &mut row);
        if self.fields.keys.is_empty() {
            return out.emit_json(time, None, &row);
        }
        let mut key = Vec::new();
        for (i, p) in self.fields.keys.iter().enumerate() {
            if i > 0 {
                key.push(b'|');
            }
            match lookup(&value, p) {
                Some(Value::String(s)) | Some(Value::Enum(_, s)) => key.extend_from_slice(s.as_bytes()),
                Some(v) => write_json(&Schema::Null, names, v, &mut key),
                None => key.extend_from_slice(b"null"),
            }
        }
        out.emit_json(time, Some(&key), &row)
    }
}

impl AvroParser {
    /// A record read with its writer's schema: decoded straight to its row
    /// (`weir_schema::avro::Plan`), event time and key taken from where it noted them.
    fn parse_direct(&self, id: u32, plan: &Plan, mut payload: &[u8], out: &mut Emitter) -> Result<(), RecordError> {
        let mut row = self.row.lock().unwrap_or_else(|p| p.into_inner());
        row.clear();
        let mut found = [None; 1 + MAX_KEY_FIELDS];
        let found = &mut found[..self.wanted.len()];
        plan.decode_json(&mut payload, &mut row, found)
            .map_err(|e| RecordError::malformed(format!("schema id {id}: the bytes do not decode: {e}")))?;
        if !payload.is_empty() {
            return Err(RecordError::malformed(format!(
                "schema id {id}: {} bytes left over after the record",
                payload.len()
            )));
        }
        let text = |f: &Found| &row[f.start..f.end];
        let time = match found[0].filter(|f| text(f) != b"null") {
            None => return Err(RecordError::missing_field(&self.fields.time_field)),
            Some(f) => self.direct_time(f, text(&f))?,
        };
        if self.fields.keys.is_empty() {
            return out.emit_json(time, None, &row);
        }
        let mut key = Vec::new();
        for (i, f) in found[1..].iter().enumerate() {
            if i > 0 {
                key.push(b'|');
            }
            match f {
                Some(f) if text(f).first() == Some(&b'"') => {
                    let s: String = serde_json::from_slice(text(f))
                        .map_err(|e| RecordError::invalid_value(format!("key field: {e}")))?;
                    key.extend_from_slice(s.as_bytes());
                }
                Some(f) => key.extend_from_slice(text(f)),
                None => key.extend_from_slice(b"null"),
            }
        }
        out.emit_json(time, Some(&key), &row)
    }

    /// Epoch milliseconds of a time field the direct decoder found (`text`: its JSON).
    fn direct_time(&self, f: Found, text: &[u8]) -> Result<i64, RecordError> {
        let out_of_range =
            || RecordError::invalid_value(format!("time field `{}` is out of range", self.fields.time_field));
        match (f.number, self.fields.unit) {
            (Some(Number::Timestamp(n, per_ms)), _) => Ok(n.div_euclid(per_ms)),
            (Some(Number::Int(n)), TimeUnit::Ms) => Ok(n),
            (Some(Number::Int(n)), TimeUnit::S) => n.checked_mul(1_000).ok_or_else(out_of_range),
            (Some(Number::Float(s)), TimeUnit::S) => seconds(s).ok_or_else(out_of_range),
            (None, _) if text.first() == Some(&b'"') => {
                let s: String = serde_json::from_slice(text).map_err(|e| RecordError::invalid_value(e.to_string()))?;
                let t = time::OffsetDateTime::parse(&s, &time::format_description::well_known::Rfc3339)
                    .map_err(|e| RecordError::invalid_value(format!("time {s:?} is not RFC 3339: {e}")))?;
                i64::try_from(t.unix_timestamp_nanos() / 1_000_000).map_err(|_| out_of_range())
            }
            _ => Err(RecordError::invalid_value(format!(
                "time field `{}` is {}, not a time (a long of epoch {}, a timestamp, or RFC 3339 text)",
                self.fields.time_field,
                String::from_utf8_lossy(text),
                if self.fields.unit == TimeUnit::S { "seconds" } else { "milliseconds" }
            ))),
        }
    }

    /// The decoder of schema id `id`; `Err` inside for an id that cannot be decoded (the
    /// record's dead letter), `Err` outside for a registry that cannot be reached.
    fn decoder(&self, id: u32) -> Result<Ready, RecordError> {
        let schema = match registry::schema_by_id(id) {
            Ok(s) => s,
            Err(RegistryError::NotFound(_)) => return Ok(Err("not in the schema registry".into())),
            // The host fetched the batch's ids before the call; one missing now means the
            // registry is not granted or went away, which no record is at fault for.
            Err(e) => return Err(RecordError::malformed(format!("schema id {id}: {e}"))),
        };
        if schema.schema_type != SchemaType::Avro {
            return Ok(Err(format!("it is {}, and this parser reads Avro", schema.schema_type.name())));
        }
        let (writer, refs) = match parse_schema(&schema) {
            Ok(x) => x,
            Err(e) => return Ok(Err(format!("not an Avro schema: {e}"))),
        };
        if let Some(r) = &self.reader
            && let Err(e) = apache_avro::schema_compatibility::SchemaCompatibility::can_read(&writer, &r.schema)
        {
            return Ok(Err(format!("the reader schema cannot read its writer's: {e}")));
        }
        let names = Names::of(std::iter::once(&writer).chain(&refs));
        let plan = match &self.reader {
            Some(_) => None,
            None => match Plan::new(&writer, &names, &self.wanted) {
                Ok(p) => Some(p),
                Err(e) => return Ok(Err(e.to_string())),
            },
        };
        Ok(Ok(Writer { schema: writer, names, plan }))
    }

    fn event_time(&self, value: &Value) -> Result<i64, RecordError> {
        let v = lookup(value, &self.fields.time).ok_or_else(|| RecordError::missing_field(&self.fields.time_field))?;
        let out_of_range =
            || RecordError::invalid_value(format!("time field `{}` is out of range", self.fields.time_field));
        match (v, self.fields.unit) {
            (Value::TimestampMillis(n) | Value::LocalTimestampMillis(n), _) => Ok(*n),
            (Value::TimestampMicros(n) | Value::LocalTimestampMicros(n), _) => Ok(n.div_euclid(1_000)),
            (Value::TimestampNanos(n) | Value::LocalTimestampNanos(n), _) => Ok(n.div_euclid(1_000_000)),
            (Value::Long(n), TimeUnit::Ms) => Ok(*n),
            (Value::Int(n), TimeUnit::Ms) => Ok(i64::from(*n)),
            (Value::Long(n), TimeUnit::S) => n.checked_mul(1_000).ok_or_else(out_of_range),
            (Value::Int(n), TimeUnit::S) => Ok(i64::from(*n) * 1_000),
            (Value::Double(s), TimeUnit::S) => seconds(*s).ok_or_else(out_of_range),
            (Value::Float(s), TimeUnit::S) => seconds(f64::from(*s)).ok_or_else(out_of_range),
            (Value::String(s), _) => {
                let t = time::OffsetDateTime::parse(s, &time::format_description::well_known::Rfc3339)
                    .map_err(|e| RecordError::invalid_value(format!("time {s:?} is not RFC 3339: {e}")))?;
                i64::try_from(t.unix_timestamp_nanos() / 1_000_000).map_err(|_| out_of_range())
            }
            (other, _) => Err(RecordError::invalid_value(format!(
                "time field `{}` is {}, not a time (a long of epoch {}, a timestamp, or RFC 3339 text)",
                self.fields.time_field,
                kind(other),
                if self.fields.unit == TimeUnit::S { "seconds" } else { "milliseconds" }
            ))),
        }
    }
}

fn seconds(s: f64) -> Option<i64> {
    let ms = (s * 1000.0).round();
    (ms.is_finite() && ms.abs() <= 9.0e15).then_some(ms as i64)
}

fn kind(v: &Value) -> String {
    format!("{:?}", apache_avro::schema::SchemaKind::from(v)).to_lowercase()
}

/// The value at a field path, through records and the unions a field may be wrapped in.
fn lookup<'v>(value: &'v Value, path: &[String]) -> Option<&'v Value> {
    let mut v = unwrap(value);
    for part in path {
        let Value::Record(fields) = v else { return None };
        v = unwrap(&fields.iter().find(|(k, _)| k == part)?.1);
    }
    match v {
        Value::Null => None,
        v => Some(v),
    }
}

fn unwrap(v: &Value) -> &Value {
    match v {
        Value::Union(_, inner) => unwrap(inner),
        v => v,
    }
}

export_plugin!(parser: AvroParser);

#[cfg(test)]
mod tests;
