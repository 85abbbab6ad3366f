//! The compatibility rules a registry subject keeps, checked by Weir before a run, so an
//! incompatible schema is refused at `weir validate`, at start-up or at deploy, naming the
//! field and the rule, rather than by the registry halfway through a batch.
//!
//! The rules are Confluent's: `BACKWARD` (the new schema reads data written with the latest),
//! `FORWARD` (the latest reads data written with the new), `FULL` (both), each `_TRANSITIVE`
//! against every version rather than the latest, and `NONE`. Reading is Avro's schema
//! resolution (apache-avro's `SchemaCompatibility`).

use apache_avro::Schema;
use apache_avro::error::CompatibilityError;
use apache_avro::schema_compatibility::SchemaCompatibility;

/// A subject's compatibility level.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Level {
    pub backward: bool,
    pub forward: bool,
    pub transitive: bool,
}

impl Level {
    /// A level as the registry spells it (`BACKWARD_TRANSITIVE`, ...).
    pub fn parse(text: &str) -> Result<Self, String> {
        let (base, transitive) = match text.strip_suffix("_TRANSITIVE") {
            Some(b) => (b, true),
            None => (text, false),
        };
        let (backward, forward) = match base {
            "NONE" => (false, false),
            "BACKWARD" => (true, false),
            "FORWARD" => (false, true),
            "FULL" => (true, true),
            _ => return Err(format!("compatibility level {text:?} is not one Weir knows")),
        };
        Ok(Self { backward, forward, transitive })
    }

    fn name(self) -> String {
        let base = match (self.backward, self.forward) {
            (false, false) => "NONE",
            (true, false) => "BACKWARD",
            (false, true) => "FORWARD",
            (true, true) => "FULL",
        };
        if self.transitive { format!("{base}_TRANSITIVE") } else { base.to_string() }
    }
}

/// Why a schema is refused: the rule, the version it breaks against, and what does not read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{rule}: {message} (against version {version})")]
pub struct Refusal {
    pub rule: String,
    pub version: u32,
    pub message: String,
}

/// Checks `new` against a subject's `versions` (oldest first) under `level`.
pub fn check(new: &Schema, versions: &[(u32, Schema)], level: Level) -> Result<(), Refusal> {
    let against: &[(u32, Schema)] = match (level.transitive, versions.last()) {
        (true, _) => versions,
        (false, Some(_)) => &versions[versions.len() - 1..],
        (false, None) => &[],
    };
    for (version, old) in against.iter().rev() {
        if level.backward
            && let Err(e) = SchemaCompatibility::can_read(old, new)
        {
            let rule = format!("{} (the new schema must read data written with the old)", level.name());
            return Err(Refusal { rule, version: *version, message: describe(&e) });
        }
        if level.forward
            && let Err(e) = SchemaCompatibility::can_read(new, old)
        {
            let rule = format!("{} (the old schema must read data written with the new)", level.name());
            return Err(Refusal { rule, version: *version, message: describe(&e) });
        }
    }
    Ok(())
}

/// Checks that `reader` reads data written with every one of `writers`.
pub fn check_reader(reader: &Schema, writers: &[(u32, Schema)]) -> Result<(), Refusal> {
    for (version, w) in writers {
        if let Err(e) = SchemaCompatibility::can_read(w, reader) {
            let rule = "the reader schema must read every writer schema of the subject".to_string();
            return Err(Refusal { rule, version: *version, message: describe(&e) });
        }
    }
    Ok(())
}

/// A compatibility error in words, with the field's path where there is one.
fn describe(e: &CompatibilityError) -> String {
    let mut path = Vec::new();
    let mut e = e;
    while let CompatibilityError::FieldTypeMismatch(field, inner) = e {
        path.push(field.as_str());
        e = inner;
    }
    let at = |p: &[&str]| p.join(".");
    match e {
        CompatibilityError::MissingDefaultValue(f) => {
            path.push(f);
            format!("field `{}` is in the reader's schema but not the writer's, and has no default", at(&path))
        }
        other if path.is_empty() => other.to_string(),
        other => format!("field `{}`: {other}", at(&path)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn schema(fields: &str) -> Schema {
        Schema::parse_str(&format!(r#"{{"type":"record","name":"Order","fields":[{fields}]}}"#)).unwrap()
    }

    #[test]
    fn levels_parse_as_the_registry_spells_them() {
        assert_eq!(Level::parse("FULL_TRANSITIVE").unwrap(), Level { backward: true, forward: true, transitive: true });
        assert_eq!(Level::parse("NONE").unwrap().name(), "NONE");
        assert!(Level::parse("SIDEWAYS").is_err());
    }

    #[test]
    fn each_rule_refuses_what_it_must_naming_the_field() {
        let v1 = schema(r#"{"name":"id","type":"string"}"#);
        let added_no_default = schema(r#"{"name":"id","type":"string"},{"name":"amount","type":"double"}"#);
        let added_default = schema(r#"{"name":"id","type":"string"},{"name":"amount","type":"double","default":0}"#);
        let retyped = schema(r#"{"name":"id","type":"long"}"#);
        let old = [(1, v1.clone())];
        let backward = Level::parse("BACKWARD").unwrap();
        let e = check(&added_no_default, &old, backward).unwrap_err();
        assert!(e.message.contains("`amount`") && e.rule.starts_with("BACKWARD"), "{e}");
        check(&added_default, &old, backward).unwrap();
        // Forward: the old reader ignores a new field, default or not.
        check(&added_no_default, &old, Level::parse("FORWARD").unwrap()).unwrap();
        let e = check(&retyped, &old, Level::parse("FULL").unwrap()).unwrap_err();
        assert!(e.message.contains("`id`"), "{e}");
        check(&retyped, &old, Level::parse("NONE").unwrap()).unwrap();
    }

    #[test]
    fn transitive_levels_check_every_version_others_the_latest() {
        let v1 = schema(r#"{"name":"id","type":"string"}"#);
        let v2 = schema(r#"{"name":"id","type":"string"},{"name":"n","type":"int","default":0}"#);
        // Drops `n`, then adds it back without a default: reads v2's data, not v1's.
        let v3 = schema(r#"{"name":"id","type":"string"},{"name":"n","type":"int"}"#);
        let versions = [(1, v1), (2, v2)];
        check(&v3, &versions, Level::parse("BACKWARD").unwrap()).unwrap();
        let e = check(&v3, &versions, Level::parse("BACKWARD_TRANSITIVE").unwrap()).unwrap_err();
        assert_eq!(e.version, 1, "{e}");
        assert!(
            check_reader(&versions[1].1, &[(1, versions[0].1.clone()), (3, schema(r#"{"name":"x","type":"int"}"#))])
                .is_err()
        );
    }
}
