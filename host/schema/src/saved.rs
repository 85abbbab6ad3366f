//! A registry's schemas saved to a file: what `weir record --registry` writes beside a
//! recording, and what `[registry] schemas = FILE` (or `weir test` finding `EVENTS.schemas.json`
//! beside its events) reads instead of a registry, so a test over recorded Avro needs no
//! registry. Ids and versions are the live registry's, so the recorded bytes decode as they
//! did.
//!
//! Invariant: a saved registry answers only what the file holds; it registers nothing, and a
//! subject's compatibility level reads as `NONE` (the checks against it are a live registry's).

use std::path::Path;

use serde::{Deserialize, Serialize};

/// The file's contents.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Saved {
    pub schemas: Vec<SavedSchema>,
    #[serde(default)]
    pub versions: Vec<SavedVersion>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct SavedSchema {
    pub id: u32,
    /// `AVRO`, `PROTOBUF` or `JSON`.
    pub schema_type: String,
    pub schema: String,
    /// What it references, a schema after those it references.
    #[serde(default)]
    pub references: Vec<SavedReference>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SavedReference {
    pub name: String,
    pub schema: String,
}

/// A subject's version and the schema id it is.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SavedVersion {
    pub subject: String,
    pub version: u32,
    pub id: u32,
}

impl Saved {
    /// Reads a schemas file; the error names the file and what is wrong.
    pub fn load(path: &Path) -> Result<Self, String> {
        let text = std::fs::read_to_string(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        serde_json::from_str(&text).map_err(|e| format!("{}: not a schemas file: {e}", path.display()))
    }

    /// Writes it, as `load` reads it.
    pub fn write(&self, path: &Path) -> Result<(), String> {
        let text = serde_json::to_string_pretty(self).map_err(|e| e.to_string())?;
        std::fs::write(path, text + "\n").map_err(|e| format!("cannot write {}: {e}", path.display()))
    }

    /// The schemas file beside a recording: `EVENTS.schemas.json`.
    pub fn beside(events: &Path) -> std::path::PathBuf {
        let mut name = events.file_name().unwrap_or_default().to_os_string();
        name.push(".schemas.json");
        events.with_file_name(name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_schemas_file_round_trips_and_sits_beside_its_recording() {
        let saved = Saved {
            schemas: vec![SavedSchema {
                id: 3,
                schema_type: "AVRO".into(),
                schema: "\"long\"".into(),
                references: vec![],
            }],
            versions: vec![SavedVersion { subject: "orders-value".into(), version: 1, id: 3 }],
        };
        let dir = tempfile::tempdir().unwrap();
        let path = Saved::beside(&dir.path().join("orders.jsonl"));
        assert_eq!(path.file_name().unwrap(), "orders.jsonl.schemas.json");
        saved.write(&path).unwrap();
        assert_eq!(Saved::load(&path).unwrap(), saved);
        std::fs::write(&path, r#"{"schemas":[],"extra":1}"#).unwrap();
        assert!(Saved::load(&path).unwrap_err().contains("extra"));
    }
}
