//! A registry that is a schemas file (`[registry] schemas`, `weir test` beside a recording):
//! its contents taken as what the registry holds; and what `weir record --registry` saves.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use super::{Registry, RegistryError, Schema, SchemaType};

impl Registry {
    /// Takes a schemas file's contents as what the registry holds.
    pub(super) fn load(&mut self, saved: crate::saved::Saved) -> Result<(), String> {
        let mut ids = HashMap::new();
        for s in saved.schemas {
            let schema_type =
                SchemaType::parse(Some(&s.schema_type)).map_err(|e| format!("schema id {}: {e}", s.id))?;
            let references = s.references.into_iter().map(|r| (r.name, r.schema)).collect();
            ids.insert(s.id, Arc::new(Schema { id: s.id, schema_type, text: s.schema, references }));
        }
        let mut subjects: HashMap<String, Vec<u32>> = HashMap::new();
        let mut versions = HashMap::new();
        for v in saved.versions {
            if !ids.contains_key(&v.id) {
                return Err(format!(
                    "subject {:?} version {} is schema id {}, which it does not hold",
                    v.subject, v.version, v.id
                ));
            }
            subjects.entry(v.subject.clone()).or_default().push(v.version);
            versions.insert((v.subject, v.version), v.id);
        }
        subjects.values_mut().for_each(|v| v.sort_unstable());
        self.ids = Mutex::new(ids);
        self.versions = Mutex::new(versions);
        self.offline = Some(subjects);
        Ok(())
    }

    /// What the registry holds of `ids` (those it has) and of every version of `subjects`, for a
    /// schemas file (`weir record --registry`).
    pub fn save(
        &self,
        ids: impl IntoIterator<Item = u32>,
        subjects: &[String],
    ) -> Result<crate::saved::Saved, RegistryError> {
        use crate::saved::{SavedReference, SavedSchema, SavedVersion};
        let mut saved = crate::saved::Saved::default();
        let keep = |s: &Schema, saved: &mut crate::saved::Saved| {
            if !saved.schemas.iter().any(|x| x.id == s.id) {
                saved.schemas.push(SavedSchema {
                    id: s.id,
                    schema_type: s.schema_type.as_str().to_string(),
                    schema: s.text.clone(),
                    references: s
                        .references
                        .iter()
                        .map(|(n, t)| SavedReference { name: n.clone(), schema: t.clone() })
                        .collect(),
                });
            }
        };
        for id in ids {
            match self.by_id(id) {
                Ok(s) => keep(&s, &mut saved),
                Err(RegistryError::NotFound { .. }) => {}
                Err(e) => return Err(e),
            }
        }
        for subject in subjects {
            for version in self.versions(subject)? {
                let (version, s) = self.by_version(subject, Some(version))?;
                keep(&s, &mut saved);
                saved.versions.push(SavedVersion { subject: subject.clone(), version, id: s.id });
            }
        }
        saved.schemas.sort_by_key(|s| s.id);
        Ok(saved)
    }
}
