//! Datasets: the named streams and tables a project's flows read and write (`project/`). A
//! dataset is stored either in Kafka (a topic, read and written by the Kafka source and sink) or,
//! by default, in the embedded log (`log.rs`) under the project's state directory, which the
//! dataset source (`source/log.rs`) and sink (`sink/log.rs`) read and write.

pub mod log;

/// What a dataset holds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum DatasetKind {
    /// Append-only: every row, in order.
    #[default]
    Stream,
    /// A keyed materialized view: each key's latest row, a tombstone deleting it; its changelog
    /// is what downstream flows read.
    Table,
}

impl DatasetKind {
    pub fn name(self) -> &'static str {
        match self {
            DatasetKind::Stream => "stream",
            DatasetKind::Table => "table",
        }
    }
}
