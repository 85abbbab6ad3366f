//! Durations as people write them in configuration files. The pipeline file, the limits a
//! sandbox takes and every other file that names a time span read them through [`Dur`], so a
//! span is spelt, and refused, the same way everywhere.

use std::time::Duration;

use serde::Deserialize;

/// A duration written the way people write them: "10 minutes", "30s", "1h 30m", "250ms".
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Dur(pub Duration);

impl<'de> Deserialize<'de> for Dur {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        humantime::parse_duration(&s).map(Dur).map_err(|e| {
            serde::de::Error::custom(format!(
                "`{s}` is not a duration ({e}); write e.g. \"10 minutes\", \"30s\", \"250ms\""
            ))
        })
    }
}
