//! The topics a group runs on, as the broker has them: the input's partition count, and the
//! group's own topics, created on first use.
//!
//! A group's topics must have the shape its [`Layout`] says (a partition per task): topics of
//! another shape are refused, never used, since a task's records would land in another task's
//! partition.

use std::sync::atomic::AtomicBool;

use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer};

use super::{Layout, kafka};
use crate::checkpoint::CheckpointError;
use crate::driver::RunError;
use crate::kafka::{CALL_TIMEOUT, KafkaError, client_config, connection_options, with_retry};
use crate::shuffle;

/// The replication of the topics a group creates: the broker's default (`-1`).
const REPLICATION: i32 = -1;

/// How long the repartition topic keeps what stage 1 wrote, unless `kafka.*` options on the
/// broker say otherwise: longer than any stage-2 task should lag behind. A stage-2 task that
/// falls further behind finds its next offset gone, and stops saying so (data loss).
const REPARTITION_RETENTION_MS: &str = "604800000";

pub(super) fn input_partitions(
    source: &crate::pipeline::KafkaSourceConfig,
    topic: &str,
    stop: &AtomicBool,
) -> Result<i32, RunError> {
    let consumer: BaseConsumer =
        client_config(&[], &connection_options(&source.options)).create().map_err(|e| kafka(e, topic))?;
    let md = with_retry(stop, "reading the topic's partitions", || consumer.fetch_metadata(Some(topic), CALL_TIMEOUT))
        .map_err(|e| RunError::Source(e.into()))?;
    let n = md.topics().first().map_or(0, |t| t.partitions().len()) as i32;
    if n == 0 {
        return Err(RunError::Source(
            KafkaError::Topic { topic: topic.to_string(), message: "has no partitions (does it exist?)".into() }.into(),
        ));
    }
    Ok(n)
}

/// Creates the group's topics unless they exist: the checkpoint topic (compacted, a partition
/// per task of either stage) and, for two stages, the repartition topic (a partition per
/// stage-2 task) and the changelog (compacted, likewise). Refuses topics of another shape: a
/// group name used before for another pipeline, or topics made beforehand with other counts.
pub(super) fn create_topics(
    options: &[(String, String)],
    layout: &Layout,
    group: &str,
    stop: &AtomicBool,
) -> Result<(), RunError> {
    let compacted = [("cleanup.policy", "compact")];
    let mut wanted = vec![(layout.ledger.clone(), layout.ledger_partitions(), &compacted[..])];
    let retention = [("cleanup.policy", "delete"), ("retention.ms", REPARTITION_RETENTION_MS)];
    if let Some((shuffle, q)) = &layout.shuffle {
        wanted.push((shuffle.clone(), *q, &retention[..]));
        wanted.push((shuffle::changelog_topic(group), *q, &compacted[..]));
    }
    for (topic, partitions, config) in &wanted {
        // Created only if missing: topics may also be made beforehand, by whoever may.
        let mut found = topic_partitions(options, topic, stop)?;
        if found == 0 {
            create_topic(options, topic, *partitions, config, stop)?;
            found = topic_partitions(options, topic, stop)?;
        }
        if found != *partitions {
            return Err(RunError::Source(
                KafkaError::Topic {
                    topic: topic.clone(),
                    message: format!(
                        "has {found} partitions, and group {group} needs {partitions} for this pipeline: the group \
                         name was used for another pipeline or input; use a new [scale] group"
                    ),
                }
                .into(),
            ));
        }
    }
    Ok(())
}

fn topic_partitions(options: &[(String, String)], topic: &str, stop: &AtomicBool) -> Result<i32, RunError> {
    let consumer: BaseConsumer =
        client_config(&[], &connection_options(options)).create().map_err(|e| kafka(e, topic))?;
    let md = with_retry(stop, "reading a topic's partitions", || consumer.fetch_metadata(Some(topic), CALL_TIMEOUT))
        .map_err(|e| RunError::Source(e.into()))?;
    Ok(md.topics().first().map_or(0, |t| t.partitions().len()) as i32)
}

/// Creates `topic` with `partitions` and `config`, unless it exists.
fn create_topic(
    options: &[(String, String)],
    topic: &str,
    partitions: i32,
    config: &[(&str, &str)],
    stop: &AtomicBool,
) -> Result<(), RunError> {
    let admin: AdminClient<DefaultClientContext> =
        client_config(&[], &connection_options(options)).create().map_err(|e| kafka(e, topic))?;
    let mut new = NewTopic::new(topic, partitions, TopicReplication::Fixed(REPLICATION));
    for (k, v) in config {
        new = new.set(k, v);
    }
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().map_err(|e| {
        RunError::Checkpoint(CheckpointError::file(topic, format!("cannot start the admin client: {e}")))
    })?;
    let opts = AdminOptions::new().operation_timeout(Some(CALL_TIMEOUT));
    let created = with_retry(stop, &format!("creating the group's topic {topic}"), || {
        match rt.block_on(admin.create_topics([&new], &opts)) {
            Err(e) => Err(e),
            Ok(results) => {
                for r in results {
                    match r {
                        Ok(_) | Err((_, rdkafka::types::RDKafkaErrorCode::TopicAlreadyExists)) => {}
                        Err((_, code)) => return Err(rdkafka::error::KafkaError::AdminOp(code)),
                    }
                }
                Ok(())
            }
        }
    });
    created.map_err(|e| RunError::Source(e.into()))?;
    Ok(())
}
