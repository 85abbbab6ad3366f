//! Rows written as Avro in the Confluent wire format, in front of the Kafka sink
//! (`format = "avro"`): each row encoded with the sink's schema and framed with the id the
//! registry gave it at start-up, its key likewise when there is a `key_schema`.
//!
//! A row (or key) that does not fit the schema is not written: it is set aside with the field
//! that does not fit, and the driver writes it to the dead letters ([`RowSink::rejected`]).
//! Which rows fit depends on the rows alone, so a batch re-delivered after a crash sets aside
//! the same rows, whether or not the Kafka sink finds the batch already in the topic.
//!
//! The registry is reached only at start-up ([`AvroSink::open`]): the schema is looked up under
//! its subject, or checked against the subject's compatibility level and registered. After
//! that, writing needs no registry.

use weir_schema::avro::Encoder;
use weir_schema::checks::{self, CheckError};
use weir_schema::{Registry, wire};
use weir_types::keys::KeyField;

use super::{Barrier, Delivery, RowSink, Rows, SinkError};
use crate::pipeline::AvroOut;

/// A schema ready to write with: its encoder and registry id.
struct Writer {
    encoder: Encoder,
    id: u32,
}

pub struct AvroSink {
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
pub enum AvroSinkError {
    #[error("sink.{key} {}: {message}", path.display())]
    File { key: &'static str, path: std::path::PathBuf, message: String },
    #[error(transparent)]
    Check(#[from] CheckError),
    #[error("sink.subject_strategy: {0}")]
    Strategy(String),
}

impl AvroSinkError {
    /// Whether the sink as written is refused, rather than the registry failing to answer.
    pub fn is_config(&self) -> bool {
        match self {
            AvroSinkError::Check(e) => e.is_config(),
            _ => true,
        }
    }
}

/// A schema file's text and its subject under the sink's strategy.
fn subject_of(avro: &AvroOut, topic: &str, key: bool) -> Result<Option<(String, String, &'static str)>, AvroSinkError> {
    let (path, name) = match (key, &avro.key_schema) {
        (false, _) => (&avro.schema, "schema"),
        (true, Some(p)) => (p, "key_schema"),
        (true, None) => return Ok(None),
    };
    let file = |message: String| AvroSinkError::File { key: name, path: path.clone(), message };
    let text = std::fs::read_to_string(path).map_err(|e| file(e.to_string()))?;
    let schema = weir_schema::avro::parse(&text, &[]).map_err(|e| file(e.to_string()))?;
    let record = weir_schema::avro::full_name(&schema);
    let subject = avro.strategy.subject(topic, key, record.as_deref()).map_err(AvroSinkError::Strategy)?;
    Ok(Some((text, subject, name)))
}

/// Checks the sink's schemas against their subjects without registering anything: what
/// `weir validate` and a deploy run.
pub fn check(avro: &AvroOut, topic: &str, patience: std::time::Duration) -> Result<(), AvroSinkError> {
    let config =
        weir_schema::RegistryConfig { retry_for: avro.registry.retry_for.min(patience), ..avro.registry.clone() };
    let registry = Registry::shared(&config).map_err(CheckError::from)?;
    for key in [false, true] {
        if let Some((text, subject, name)) = subject_of(avro, topic, key)? {
            checks::writer_id(&registry, &subject, &text, &format!("sink.{name}"), false, avro.auto_register)?;
        }
    }
    Ok(())
}

impl AvroSink {
    /// The sink in front of `inner`, its schemas registered (or found) under their subjects.
    pub fn open(
        avro: &AvroOut,
        topic: &str,
        key_field: Option<&str>,
        inner: Box<dyn RowSink>,
    ) -> Result<Self, AvroSinkError> {
        let registry = Registry::shared(&avro.registry).map_err(CheckError::from)?;
        let mut writers = Vec::new();
        for key in [false, true] {
            let Some((text, subject, name)) = subject_of(avro, topic, key)? else { continue };
            let what = format!("sink.{name}");
            let id = checks::writer_id(&registry, &subject, &text, &what, true, avro.auto_register)?;
            let id = id.ok_or(CheckError::NotRegistered { what, subject: subject.clone() })?;
            tracing::info!("kafka sink: {name} is schema id {id} under subject {subject:?} of {}", registry.url());
            let schema = weir_schema::avro::parse(&text, &[]).map_err(|e| AvroSinkError::File {
                key: "schema",
                path: avro.schema.clone(),
                message: e.to_string(),
            })?;
            writers.push(Writer { encoder: Encoder::new(schema, vec![]), id });
        }
        let mut writers = writers.into_iter();
        let value = writers.next().ok_or_else(|| AvroSinkError::Strategy("no value schema".into()))?;
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
            return Err("the row has no key, and sink.key_schema wants one: key the rows (a window, a \
                        [process], key_fields, or sink.key)"
                .into());
        }
        wire::frame(w.id, out);
        let json;
        let text = if matches!(w.encoder.schema(), apache_avro::Schema::String) {
            json = serde_json::to_vec(&String::from_utf8_lossy(key)).unwrap_or_default();
            &json[..]
        } else {
            key
        };
        w.encoder.encode(text, out).map_err(|m| format!("the key does not fit sink.key_schema: {m}"))
    }
}

impl RowSink for AvroSink {
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
