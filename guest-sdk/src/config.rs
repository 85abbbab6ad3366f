//! The plugin's configuration: the `config` table of its stage in the pipeline file.
//!
//! The SDK notes every key a plugin reads. A key the plugin never read by the time its `new`
//! returns is a typo or a setting this build does not have, and the SDK refuses it as an
//! `invalid-config` error naming the key (and the closest key the plugin does read): a pipeline
//! with `error_statsu = "PENDING"` must not run with the default and give wrong numbers.

use std::cell::RefCell;
use std::collections::BTreeSet;

use serde::de::DeserializeOwned;

use crate::PluginError;

/// The `config` table of this plugin's stage in the pipeline file.
#[derive(Debug, Clone, Default)]
pub struct Config {
    table: serde_json::Map<String, serde_json::Value>,
    /// Keys the plugin asked for, present or not.
    read: RefCell<BTreeSet<String>>,
}

impl Config {
    pub(crate) fn from_host() -> Result<Self, PluginError> {
        Self::from_json(&crate::host::config())
    }

    pub(crate) fn from_json(text: &str) -> Result<Self, PluginError> {
        match serde_json::from_str(text) {
            Ok(serde_json::Value::Object(table)) => Ok(Self { table, read: RefCell::default() }),
            Ok(other) => Err(PluginError::InvalidConfig(format!("expected a table, got {other}"))),
            Err(e) => Err(PluginError::InvalidConfig(e.to_string())),
        }
    }

    /// The value of `key`, or `None` when the table does not have it.
    pub fn get<T: DeserializeOwned>(&self, key: &str) -> Result<Option<T>, PluginError> {
        self.read.borrow_mut().insert(key.to_string());
        self.table
            .get(key)
            .map(|v| T::deserialize(v).map_err(|e| PluginError::InvalidConfig(format!("config.{key}: {e}"))))
            .transpose()
    }

    /// The whole table as a typed struct. Keys the struct does not have are reported like keys
    /// never read (or refused at once with `#[serde(deny_unknown_fields)]`).
    pub fn parse<T: DeserializeOwned>(&self) -> Result<T, PluginError> {
        let mut ignored = Vec::new();
        let value = serde_json::Value::Object(self.table.clone());
        let parsed = serde_ignored::deserialize(value, |path| ignored.push(top_key(&path.to_string())))
            .map_err(|e: serde_json::Error| PluginError::InvalidConfig(e.to_string()))?;
        let mut read = self.read.borrow_mut();
        read.extend(self.table.keys().filter(|k| !ignored.contains(k)).cloned());
        Ok(parsed)
    }

    /// Refuses the first key of the table the plugin never read.
    pub(crate) fn check_all_read(&self) -> Result<(), PluginError> {
        let read = self.read.borrow();
        let Some(unread) = self.table.keys().find(|k| !read.contains(*k)) else { return Ok(()) };
        let hint = match read.iter().min_by_key(|k| distance(k, unread)) {
            Some(close) if distance(close, unread) <= 2 => format!("did you mean `{close}`?"),
            _ if read.is_empty() => "this plugin reads no configuration".to_string(),
            _ => format!("this plugin reads {}", read.iter().map(|k| format!("`{k}`")).collect::<Vec<_>>().join(", ")),
        };
        Err(PluginError::InvalidConfig(format!("config.{unread}: unknown key; {hint}")))
    }
}

/// The top-level key of a path serde_ignored reports (`a.b` → `a`).
fn top_key(path: &str) -> String {
    path.split(['.', '[']).next().unwrap_or(path).to_string()
}

/// Edit distance (Levenshtein), for the "did you mean" hint.
fn distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut prev = row[0];
        row[0] = i + 1;
        for (j, &cb) in b.iter().enumerate() {
            let here = row[j + 1];
            row[j + 1] = (prev + usize::from(ca != cb)).min(row[j] + 1).min(here + 1);
            prev = here;
        }
    }
    row[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn typed_get_names_the_key_on_a_bad_value() {
        let c = Config::from_json(r#"{"threshold": "high"}"#).unwrap();
        let err = c.get::<f64>("threshold").unwrap_err();
        assert!(matches!(err, PluginError::InvalidConfig(m) if m.starts_with("config.threshold")));
        assert_eq!(c.get::<f64>("absent").unwrap(), None);
    }

    #[test]
    fn a_non_table_is_refused() {
        assert!(Config::from_json("[1]").is_err());
    }

    #[test]
    fn a_key_the_plugin_never_read_is_refused_with_the_closest_one() {
        let c = Config::from_json(r#"{"error_statsu": "PENDING"}"#).unwrap();
        assert_eq!(c.get::<String>("error_status").unwrap(), None);
        let PluginError::InvalidConfig(m) = c.check_all_read().unwrap_err() else { panic!("not invalid-config") };
        assert_eq!(m, "config.error_statsu: unknown key; did you mean `error_status`?");
        let c = Config::from_json(r#"{"colour": 1}"#).unwrap();
        c.get::<u32>("threshold").unwrap();
        c.get::<u32>("window").unwrap();
        let PluginError::InvalidConfig(m) = c.check_all_read().unwrap_err() else { panic!("not invalid-config") };
        assert_eq!(m, "config.colour: unknown key; this plugin reads `threshold`, `window`");
        let c = Config::from_json(r#"{"threshold": 1}"#).unwrap();
        c.get::<u32>("threshold").unwrap();
        assert_eq!(c.check_all_read(), Ok(()));
    }

    #[test]
    fn parse_reads_the_struct_s_keys_and_reports_the_rest() {
        #[derive(serde::Deserialize)]
        struct Cfg {
            #[allow(dead_code)]
            keep: Vec<String>,
        }
        let c = Config::from_json(r#"{"keep": ["OK"], "kepp": 1}"#).unwrap();
        c.parse::<Cfg>().unwrap();
        let PluginError::InvalidConfig(m) = c.check_all_read().unwrap_err() else { panic!("not invalid-config") };
        assert!(m.starts_with("config.kepp: unknown key; did you mean `keep`?"), "{m}");
        let c = Config::from_json(r#"{"a": 1, "b": {"c": 2}}"#).unwrap();
        c.parse::<serde_json::Map<String, serde_json::Value>>().unwrap();
        assert_eq!(c.check_all_read(), Ok(()), "a free-form table reads every key");
    }
}
