//! Rows written in the Confluent wire format, in front of the Kafka sink (`format = "avro"`,
//! `"protobuf"` or `"json-schema"`): each row encoded with the sink's schema (or, for JSON
//! Schema, checked against it) and framed with the id the registry gave the schema at start-up;
//! its key likewise, as Avro, when there is a `key_schema`.
//!
//! A row (or key) that does not fit the schema is not written: it is set aside with the field
//! that does not fit, and the driver writes it to the dead letters ([`RowSink::rejected`]).
//! Which rows fit depends on the rows alone, so a batch re-delivered after a crash sets aside
//! the same rows, whether or not the Kafka sink finds the batch already in the topic.
//!
//! The registry is reached only at start-up ([`FramedSink::open`]): the schema is looked up
//! under its subject, or checked against the subject's compatibility level and registered.
//! After that, writing needs no registry.

use std::path::Path;

use weir_schema::avro::Misfit;
use weir_schema::checks::{self, CheckError};
use weir_schema::{Registry, SchemaType, wire};
use weir_types::keys::KeyField;

use super::{Barrier, Delivery, RowSink, Rows, SinkError};
use crate::pipeline::{SchemaFormat, SchemaOut};

/// A schema's encoder.
enum Encoder {
    Avro(weir_schema::avro::Encoder),
    Protobuf(weir_schema::protobuf::Encoder),
    Json(weir_schema::json_schema::Encoder),
}

impl Encoder {
    fn encode(&self, row: &[u8], out: &mut Vec<u8>) -> Result<(), Misfit> {
        match self {
            Encoder::Avro(e) => e.encode(row, out),
            Encoder::Protobuf(e) => e.encode(row, out),
            Encoder::Json(e) => e.encode(row, out),
        }
    }
}

/// A schema file made ready: its text (what is registered), type, subject and encoder.
struct Schema {
    text: String,
    schema_type: SchemaType,
    subject: String,
    encoder: Encoder,
    /// `schema` or `key_schema`, for errors.
    key: &'static str,
}

/// A schema ready to write with: its encoder and registry id.
struct Writer {
    encoder: Encoder,
    id: u32,
    /// A key schema that is Avro's `string`: the key's text is written as it.
    string: bool,
}

pub struct FramedSink {
    inner: Box<dyn RowSink>,
    value: Writer,
    key: Option<Writer>,
    /// `sink.key`: the row field whose value keys each message (read before the row is encoded).
    key_field: Option<KeyField>,
    encoded: Rows,
    rejected: Vec<(usize, String)>,
}

/// Why the sink cannot start.
#[derive(Debug, thiserror::Error)]
pub enum FramedSinkError {
    #[error("sink.{key} {}: {message}", path.display())]
    File { key: &'static str, path: std::path::PathBuf, message: String },
    #[error(transparent)]
    Check(#[from] CheckError),
    #[error("sink.subject_strategy: {0}")]
    Strategy(String),
}

impl FramedSinkError {
    /// Whether the sink as written is refused, rather than the registry failing to answer.
    pub fn is_config(&self) -> bool {
        match self {
            FramedSinkError::Check(e) => e.is_config(),
            _ => true,
        }
    }
}

/// The value schema (`key`: the key schema, Avro) read, compiled and given its subject.
fn schema_of(out: &SchemaOut, topic: &str, key: bool) -> Result<Option<Schema>, FramedSinkError> {
    let (path, name, format) = match (key, &out.key_schema) {
        (false, _) => (&out.schema, "schema", out.format),
        (true, Some(p)) => (p, "key_schema", SchemaFormat::Avro),
        (true, None) => return Ok(None),
    };
    let file = |message: String| FramedSinkError::File { key: name, path: path.clone(), message };
    let text = std::fs::read_to_string(path).map_err(|e| file(e.to_string()))?;
    let (encoder, schema_type, record) = match format {
        SchemaFormat::Avro => {
            let schema = weir_schema::avro::parse(&text, &[]).map_err(|e| file(e.to_string()))?;
            let record = weir_schema::avro::full_name(&schema);
            (Encoder::Avro(weir_schema::avro::Encoder::new(schema, vec![])), SchemaType::Avro, record)
        }
        SchemaFormat::Protobuf => {
            let e = weir_schema::protobuf::Encoder::open(Path::new(path), out.message.as_deref()).map_err(file)?;
            let record = Some(e.full_name().to_string());
            (Encoder::Protobuf(e), SchemaType::Protobuf, record)
        }
        SchemaFormat::JsonSchema => {
            let e = weir_schema::json_schema::Encoder::new(&text).map_err(file)?;
            let record = e.title().map(String::from);
            (Encoder::Json(e), SchemaType::Json, record)
        }
    };
    let subject = out.strategy.subject(topic, key, record.as_deref()).map_err(FramedSinkError::Strategy)?;
    Ok(Some(Schema { text, schema_type, subject, encoder, key: name }))
}

/// Checks the sink's schemas against their subjects without registering anything: what
/// `weir validate` and a deploy run, waiting at most `patience` for a registry that is down.
pub fn check(out: &SchemaOut, topic: &str, patience: std::time::Duration) -> Result<(), FramedSinkError> {
    let config =
        weir_schema::RegistryConfig { retry_for: out.registry.retry_for.min(patience), ..out.registry.clone() };
    let registry = Registry::shared(&config).map_err(CheckError::from)?;
    for key in [false, true] {
        if let Some(s) = schema_of(out, topic, key)? {
            let what = format!("sink.{}", s.key);
            checks::writer_id_of(&registry, s.schema_type, &s.subject, &s.text, &what, false, out.auto_register)?;
        }
    }
    Ok(())
}

impl FramedSink {
    /// The sink in front of `inner`, its schemas registered (or found) under their subjects.
    pub fn open(
        out: &SchemaOut,
        topic: &str,
        key_field: Option<&str>,
        inner: Box<dyn RowSink>,
    ) -> Result<Self, FramedSinkError> {
        let registry = Registry::shared(&out.registry).map_err(CheckError::from)?;
        let mut writers = Vec::new();
        for key in [false, true] {
            let Some(s) = schema_of(out, topic, key)? else { continue };
            let what = format!("sink.{}", s.key);
            let id =
                checks::writer_id_of(&registry, s.schema_type, &s.subject, &s.text, &what, true, out.auto_register)?;
            let id = id.ok_or(CheckError::NotRegistered { what, subject: s.subject.clone() })?;
            tracing::info!(
                "kafka sink: {} is schema id {id} under subject {:?} of {}",
                s.key,
                s.subject,
                registry.url()
            );
            let string = matches!(&s.encoder, Encoder::Avro(e) if matches!(e.schema(), apache_avro::Schema::String));
            writers.push(Writer { encoder: s.encoder, id, string });
        }
        let mut writers = writers.into_iter();
        let value = writers.next().ok_or_else(|| FramedSinkError::Strategy("no value schema".into()))?;
        Ok(Self {
            inner,
            value,
            key: writers.next(),
            key_field: key_field.map(KeyField::new),
            encoded: Rows::default(),
            rejected: Vec::new(),
        })
    }

    /// `key` written with the key schema: a `string` schema takes the key's text, any other
    /// the key as JSON.
    fn key(&self, key: &[u8], out: &mut Vec<u8>) -> Result<(), String> {
        let Some(w) = &self.key else {
            out.extend_from_slice(key);
            return Ok(());
        };
        if key.is_empty() {
            return Err("the row has no key, and sink.key_schema wants one: key the rows (a window, a [process], \
                        key_fields, or sink.key)"
                .into());
        }
        wire::frame(w.id, out);
        let json;
        let text = if w.string {
            json = serde_json::to_vec(&String::from_utf8_lossy(key)).unwrap_or_default();
            &json[..]
        } else {
            key
        };
        w.encoder.encode(text, out).map_err(|m| format!("the key does not fit sink.key_schema: {m}"))
    }
}

impl RowSink for FramedSink {
    fn deliver(&mut self, d: &Delivery, rows: &Rows) -> Result<(), SinkError> {
        self.encoded.clear();
        self.rejected.clear();
        let (mut k, mut v) = (Vec::new(), Vec::new());
        for (i, ((key, row), &time)) in rows.iter().zip(&rows.times).enumerate() {
            k.clear();
            v.clear();
            let field_key;
            let key = match &self.key_field {
                Some(field) if !row.is_empty() => {
                    field_key = field.key(row).unwrap_or_default();
                    &field_key[..]
                }
                _ => key,
            };
            let fitted = self.key(key, &mut k).and_then(|()| {
                if row.is_empty() {
                    return Ok(()); // A tombstone stays one.
                }
                wire::frame(self.value.id, &mut v);
                self.value.encoder.encode(row, &mut v).map_err(|m| format!("the row does not fit sink.schema: {m}"))
            });
            match fitted {
                Ok(()) => self.encoded.push(if key.is_empty() { &[] } else { &k }, &v, time)?,
                Err(why) => self.rejected.push((i, why)),
            }
        }
        self.inner.deliver(d, &self.encoded)
    }

    fn barrier(&mut self) -> Barrier {
        self.inner.barrier()
    }

    fn rejected(&mut self) -> Vec<(usize, String)> {
        std::mem::take(&mut self.rejected)
    }
}
