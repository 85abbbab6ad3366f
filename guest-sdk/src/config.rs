//! The plugin's configuration: the `config` table of its stage in the pipeline file.

use serde::de::DeserializeOwned;

use crate::PluginError;

/// The `config` table of this plugin's stage in the pipeline file.
#[derive(Debug, Clone, Default)]
pub struct Config {
    table: serde_json::Map<String, serde_json::Value>,
}

impl Config {
    pub(crate) fn from_host() -> Result<Self, PluginError> {
        Self::from_json(&crate::host::config())
    }

    fn from_json(text: &str) -> Result<Self, PluginError> {
        match serde_json::from_str(text) {
            Ok(serde_json::Value::Object(table)) => Ok(Self { table }),
            Ok(other) => Err(PluginError::InvalidConfig(format!("expected a table, got {other}"))),
            Err(e) => Err(PluginError::InvalidConfig(e.to_string())),
        }
    }

    /// The value of `key`, or `None` when the table does not have it.
    pub fn get<T: DeserializeOwned>(&self, key: &str) -> Result<Option<T>, PluginError> {
        self.table
            .get(key)
            .map(|v| T::deserialize(v).map_err(|e| PluginError::InvalidConfig(format!("config.{key}: {e}"))))
            .transpose()
    }

    /// The whole table as a typed struct (use `#[serde(deny_unknown_fields)]` to reject typos).
    pub fn parse<T: DeserializeOwned>(&self) -> Result<T, PluginError> {
        T::deserialize(serde_json::Value::Object(self.table.clone()))
            .map_err(|e| PluginError::InvalidConfig(e.to_string()))
    }
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
}
