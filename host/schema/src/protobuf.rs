//! Rows (JSON objects) to Protobuf in the Confluent wire format, for the Kafka sink
//! (`format = "protobuf"`): the `.proto` file compiled in pure Rust (protox; its imports found
//! beside it, and Google's well-known types), the row read by Protobuf's JSON mapping into the
//! message the sink names (fields by their `.proto` or JSON names, 64-bit integers as numbers
//! or text, a `Timestamp` as RFC 3339 text; fields the message does not have are ignored), and
//! written after the message indexes that name the message in its file.
//!
//! A row that does not fit is a [`Misfit`](crate::avro::Misfit) naming the field's path.

use std::path::Path;

use prost::Message;
use prost_reflect::{DeserializeOptions, DynamicMessage, MessageDescriptor};

use crate::avro::Misfit;

/// A message of a `.proto` file, ready to encode rows.
pub struct Encoder {
    message: MessageDescriptor,
    /// The wire format's message indexes for it, encoded: `[0]` as the single byte 0.
    indexes: Vec<u8>,
    options: DeserializeOptions,
}

/// `file` compiled, its imports resolved in its directory: the pool of everything it needs, and
/// the file itself.
pub fn compile(file: &Path) -> Result<(prost_reflect::DescriptorPool, prost_reflect::FileDescriptor), String> {
    let dir = file.parent().unwrap_or(Path::new("."));
    let name = file.file_name().and_then(|n| n.to_str()).ok_or("not a file name")?;
    let pool = protox::Compiler::new([dir])
        .and_then(|mut c| {
            c.include_imports(true);
            c.open_file(name)?;
            Ok(c.descriptor_pool())
        })
        .map_err(|e| format!("not a Protobuf schema: {e}"))?;
    let fd = pool.get_file_by_name(name).ok_or("the file is missing from what it compiled to")?;
    Ok((pool, fd))
}

impl Encoder {
    /// Compiles `file` (its imports resolved in its directory) and takes `message` (a full name,
    /// `shop.Order`; `None`: the file's first message).
    pub fn open(file: &Path, message: Option<&str>) -> Result<Self, String> {
        let (pool, fd) = compile(file)?;
        let wanted = match message {
            Some(m) => fd.messages().find(|d| d.full_name() == m).or_else(|| pool.get_message_by_name(m)),
            None => fd.messages().next(),
        };
        let message = wanted.ok_or_else(|| match message {
            Some(m) => format!("no message {m} in it"),
            None => "it has no message".to_string(),
        })?;
        let indexes = indexes_of(&message);
        Ok(Self { message, indexes, options: DeserializeOptions::new().deny_unknown_fields(false) })
    }

    /// The message's full name (the record subject strategies name subjects after it).
    pub fn full_name(&self) -> &str {
        self.message.full_name()
    }

    /// Appends the message indexes and `row` (JSON text) encoded; on a misfit `out` is as it
    /// was.
    pub fn encode(&self, row: &[u8], out: &mut Vec<u8>) -> Result<(), Misfit> {
        let mut de = serde_json::Deserializer::from_slice(row);
        let mut track = serde_path_to_error::Track::new();
        let tracked = serde_path_to_error::Deserializer::new(&mut de, &mut track);
        let msg =
            DynamicMessage::deserialize_with_options(self.message.clone(), tracked, &self.options).map_err(|e| {
                let field = track.path().to_string();
                Misfit { field: if field == "." { "(the row)".into() } else { field }, message: e.to_string() }
            })?;
        out.extend_from_slice(&self.indexes);
        msg.encode(out).map_err(|e| Misfit { field: "(the row)".into(), message: e.to_string() })
    }
}

/// The message indexes naming `m` in its file: its place among its parent's messages, from the
/// top, as zigzag varints after their count; `[0]` is the single byte 0.
fn indexes_of(m: &MessageDescriptor) -> Vec<u8> {
    let mut path = Vec::new();
    let mut at = m.clone();
    loop {
        match at.parent_message() {
            Some(parent) => {
                path.push(parent.child_messages().position(|c| c == at).unwrap_or(0));
                at = parent;
            }
            None => {
                path.push(at.parent_file().messages().position(|c| c == at).unwrap_or(0));
                break;
            }
        }
    }
    path.reverse();
    if path == [0] {
        return vec![0];
    }
    let mut out = Vec::new();
    for n in std::iter::once(path.len()).chain(path) {
        let mut z = (n as u64) << 1;
        while z >= 0x80 {
            out.push((z as u8) | 0x80);
            z >>= 7;
        }
        out.push(z as u8);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const PROTO: &str = "syntax = \"proto3\";\npackage shop;\nimport \"google/protobuf/timestamp.proto\";\n\
                         message Other { string note = 1; }\n\
                         message Order { int64 order_id = 1; string status = 2; google.protobuf.Timestamp at = 3;\n\
                         message Line { string sku = 1; } repeated Line lines = 4; }\n";

    fn encoder(message: Option<&str>) -> Encoder {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("order.proto"), PROTO).unwrap();
        Encoder::open(&dir.path().join("order.proto"), message).unwrap()
    }

    #[test]
    fn a_row_is_encoded_after_the_indexes_of_its_message() {
        let e = encoder(Some("shop.Order"));
        let mut out = Vec::new();
        e.encode(
            br#"{"order_id":7,"status":"OK","at":"2026-11-01T00:00:00Z","lines":[{"sku":"a"}],"extra":1}"#,
            &mut out,
        )
        .unwrap();
        assert_eq!(&out[..2], &[2, 2], "count 1, index 1");
        let back = DynamicMessage::decode(e.message.clone(), &out[2..]).unwrap();
        assert_eq!(back.get_field_by_name("order_id").unwrap().as_i64(), Some(7));
        assert_eq!(encoder(None).indexes, vec![0]);
        assert_eq!(encoder(Some("shop.Order.Line")).indexes, vec![4, 2, 0]);
    }

    #[test]
    fn a_row_that_does_not_fit_names_the_field() {
        let e = encoder(Some("shop.Order"));
        let mut out = vec![9];
        let m = e.encode(br#"{"order_id":"seven"}"#, &mut out).unwrap_err();
        assert_eq!(m.field, "order_id", "{m}");
        let m = e.encode(br#"{"lines":[{"sku":5}]}"#, &mut out).unwrap_err();
        assert_eq!(m.field, "lines[0].sku", "{m}");
        assert_eq!(out, [9]);
        assert!(Encoder::open(Path::new("/nonexistent/x.proto"), None).is_err());
    }
}
