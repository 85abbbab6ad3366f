//! Rows checked against a JSON Schema, for the Kafka sink (`format = "json-schema"`): a row the
//! schema accepts is written as it is, after the wire format's header; one it refuses is a
//! [`Misfit`](crate::avro::Misfit) naming the field's location (`/items/2/price`) and the rule.

use jsonschema::{Draft, Validator};
use serde_json::Value;

use crate::avro::Misfit;

pub struct Encoder {
    validator: Validator,
    title: Option<String>,
}

impl Encoder {
    /// The schema's text compiled (draft-07 when it names no `$schema`, as Confluent's
    /// serializers write).
    pub fn new(text: &str) -> Result<Self, String> {
        let schema: Value = serde_json::from_str(text).map_err(|e| format!("not JSON: {e}"))?;
        let mut options = jsonschema::options();
        if schema.get("$schema").is_none() {
            options = options.with_draft(Draft::Draft7);
        }
        let validator = options.build(&schema).map_err(|e| format!("not a JSON Schema: {e}"))?;
        Ok(Self { validator, title: schema.get("title").and_then(Value::as_str).map(String::from) })
    }

    /// The schema's `title`: the record subject strategies name subjects after it.
    pub fn title(&self) -> Option<&str> {
        self.title.as_deref()
    }

    /// Appends `row` (JSON text) if the schema accepts it.
    pub fn encode(&self, row: &[u8], out: &mut Vec<u8>) -> Result<(), Misfit> {
        let value: Value = serde_json::from_slice(row)
            .map_err(|e| Misfit { field: "(the row)".into(), message: format!("not JSON: {e}") })?;
        if let Err(e) = self.validator.validate(&value) {
            let at = e.instance_path().to_string();
            return Err(Misfit { field: if at.is_empty() { "(the row)".into() } else { at }, message: e.to_string() });
        }
        out.extend_from_slice(row);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_the_schema_refuses_name_the_place() {
        let e = Encoder::new(
            r#"{"title":"Order","type":"object","properties":{"amount":{"type":"number","minimum":0}},"required":["amount"]}"#,
        )
        .unwrap();
        assert_eq!(e.title(), Some("Order"));
        let mut out = Vec::new();
        e.encode(br#"{"amount":1}"#, &mut out).unwrap();
        assert_eq!(out, br#"{"amount":1}"#);
        let m = e.encode(br#"{"amount":-1}"#, &mut out).unwrap_err();
        assert_eq!(m.field, "/amount", "{m}");
        assert_eq!(e.encode(b"{}", &mut out).unwrap_err().field, "(the row)");
        assert!(Encoder::new("{\"type\": 5}").is_err());
    }
}
