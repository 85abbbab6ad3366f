//! Subject name strategies: under which registry subject a topic's schema is registered, as
//! Confluent's serializers name it (`subject.name.strategy`).

use serde::Deserialize;

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SubjectStrategy {
    /// `TOPIC-value` (`TOPIC-key` for keys): Confluent's default, one schema lineage per topic.
    #[default]
    Topic,
    /// The record's full name: one lineage per record type, whatever topics carry it.
    Record,
    /// `TOPIC-RECORDNAME`: several record types on one topic, each with its lineage.
    TopicRecord,
}

impl SubjectStrategy {
    /// As a pipeline file spells it.
    pub fn name(self) -> &'static str {
        match self {
            Self::Topic => "topic",
            Self::Record => "record",
            Self::TopicRecord => "topic-record",
        }
    }

    /// The subject of `topic`'s values (`key`: its keys) whose record is named `record` (the
    /// schema's full name; `None` for a schema that is no named type).
    pub fn subject(self, topic: &str, key: bool, record: Option<&str>) -> Result<String, String> {
        let part = if key { "key" } else { "value" };
        match (self, record) {
            (Self::Topic, _) => Ok(format!("{topic}-{part}")),
            (Self::Record, Some(r)) => Ok(r.to_string()),
            (Self::TopicRecord, Some(r)) => Ok(format!("{topic}-{r}")),
            (_, None) => Err(format!(
                "subject_strategy \"{}\" names the subject after the record, but the schema is no record: use \
                 \"topic\"",
                self.name()
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subjects_are_named_as_confluent_names_them() {
        assert_eq!(SubjectStrategy::Topic.subject("orders", false, Some("x.Order")).unwrap(), "orders-value");
        assert_eq!(SubjectStrategy::Topic.subject("orders", true, None).unwrap(), "orders-key");
        assert_eq!(SubjectStrategy::Record.subject("orders", false, Some("x.Order")).unwrap(), "x.Order");
        assert_eq!(SubjectStrategy::TopicRecord.subject("orders", false, Some("x.Order")).unwrap(), "orders-x.Order");
        assert!(SubjectStrategy::Record.subject("orders", false, None).is_err());
    }
}
