//! The topics a group runs on, as the broker has them: the input's partition count, and the
//! group's own topics, created on first use.
//!
//! A group's topics must have the shape its [`Layout`] says (a partition per task): topics of
//! another shape are refused, never used, since a task's records would land in another task's
//! partition.

use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

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

/// How long a broker that answered the metadata request just before may take to answer
/// `CreateTopics`. One that takes longer does not create topics (librdkafka's mock cluster,
/// `weir demo`'s broker, never answers): the run fails, naming the request and the topic,
/// rather than wait on it until stopped.
const CREATE_TOPICS_TIMEOUT: Duration = Duration::from_secs(15);

/// How long a topic just created may stay missing from the broker's metadata, and how often
/// to look meanwhile ([`created_partitions`]).
const NEW_TOPIC_PATIENCE: Duration = Duration::from_secs(30);
const NEW_TOPIC_POLL: Duration = Duration::from_millis(100);

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
    for (topic, partitions, config) in &wanted(layout, group) {
        // Created only if missing: topics may also be made beforehand, by whoever may.
        let mut found = topic_partitions(options, topic, stop)?;
        if found == 0 {
            create_topic(options, topic, *partitions, config, stop)?;
            found = created_partitions(options, topic, stop)?;
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

/// A topic's settings, as `name = value` pairs.
type Settings = &'static [(&'static str, &'static str)];

/// The group's own topics: each one's name, partitions and settings.
fn wanted(layout: &Layout, group: &str) -> Vec<(String, i32, Settings)> {
    const COMPACTED: Settings = &[("cleanup.policy", "compact")];
    const RETAINED: Settings = &[("cleanup.policy", "delete"), ("retention.ms", REPARTITION_RETENTION_MS)];
    let mut wanted = vec![(layout.ledger.clone(), layout.ledger_partitions(), COMPACTED)];
    if let Some((shuffle, q)) = &layout.shuffle {
        wanted.push((shuffle.clone(), *q, RETAINED));
        wanted.push((shuffle::changelog_topic(group), *q, COMPACTED));
    }
    wanted
}

/// The topics the first process of `pipeline`'s group would create over an input of
/// `input_partitions` (name and partitions), for a broker that cannot create topics: `weir
/// broker` makes them beforehand.
pub fn group_topics(
    pipeline: &crate::pipeline::Pipeline,
    group: &str,
    input: &str,
    input_partitions: i32,
) -> Vec<(String, i32)> {
    let layout = Layout::of(pipeline, group, input, input_partitions);
    wanted(&layout, group).into_iter().map(|(t, p, _)| (t, p)).collect()
}

fn topic_partitions(options: &[(String, String)], topic: &str, stop: &AtomicBool) -> Result<i32, RunError> {
    let consumer: BaseConsumer =
        client_config(&[], &connection_options(options)).create().map_err(|e| kafka(e, topic))?;
    let md = with_retry(stop, "reading a topic's partitions", || consumer.fetch_metadata(Some(topic), CALL_TIMEOUT))
        .map_err(|e| RunError::Source(e.into()))?;
    Ok(md.topics().first().map_or(0, |t| t.partitions().len()) as i32)
}

/// The partitions of a topic just created (here, or by another process of the group at the
/// same moment), once the broker's metadata lists them: on KRaft a broker answers metadata
/// requests from its own copy, which may not have the new topic for a moment yet.
fn created_partitions(options: &[(String, String)], topic: &str, stop: &AtomicBool) -> Result<i32, RunError> {
    let deadline = Instant::now() + NEW_TOPIC_PATIENCE;
    loop {
        let found = topic_partitions(options, topic, stop)?;
        if found > 0 || Instant::now() >= deadline {
            return Ok(found);
        }
        std::thread::sleep(NEW_TOPIC_POLL);
    }
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
    let opts = AdminOptions::new().operation_timeout(Some(CALL_TIMEOUT)).request_timeout(Some(CREATE_TOPICS_TIMEOUT));
    let mut unanswered = false;
    let created = with_retry(stop, &format!("creating the group's topic {topic}"), || {
        match rt.block_on(admin.create_topics([&new], &opts)) {
            Err(e) if is_timeout(&e) => {
                // Not retried (a code `with_retry` gives up on): the broker answers metadata
                // requests, so it is up, and does not do this one.
                unanswered = true;
                Err(rdkafka::error::KafkaError::Global(rdkafka::types::RDKafkaErrorCode::InvalidConfig))
            }
            Err(e) => Err(e),
            Ok(results) => {
                for r in results {
                    match r {
                        Ok(_) | Err((_, rdkafka::types::RDKafkaErrorCode::TopicAlreadyExists)) => {}
                        // As `Global`, whose code `with_retry` reads (an `AdminOp` has none to
                        // read, so a refusal such as an authorization error was retried).
                        Err((_, code)) => return Err(rdkafka::error::KafkaError::Global(code)),
                    }
                }
                Ok(())
            }
        }
    });
    if unanswered {
        let secs = CREATE_TOPICS_TIMEOUT.as_secs();
        return Err(RunError::Source(
            KafkaError::Topic {
                topic: topic.to_string(),
                message: format!(
                    "the broker did not answer CreateTopics in {secs} s; a broker that cannot create topics \
                     (librdkafka's mock cluster, `weir demo`'s broker) needs the group's topics made beforehand \
                     (docs/scale-out.md, \"A task's checkpoint travels with it\")"
                ),
            }
            .into(),
        ));
    }
    created.map_err(|e| RunError::Source(e.into()))?;
    Ok(())
}

/// Whether a broker call ended because no answer came in time.
fn is_timeout(e: &rdkafka::error::KafkaError) -> bool {
    use rdkafka::types::RDKafkaErrorCode::{OperationTimedOut, RequestTimedOut};
    // An admin call's own timeout comes as `AdminOp`, which carries no `rdkafka_error_code`.
    matches!(e, rdkafka::error::KafkaError::AdminOp(OperationTimedOut | RequestTimedOut))
        || matches!(e.rdkafka_error_code(), Some(OperationTimedOut | RequestTimedOut))
}
