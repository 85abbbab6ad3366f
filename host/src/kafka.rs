//! The Kafka client settings and error handling that the Kafka source (`source/kafka/`), the
//! Kafka sink (`sink/kafka.rs`) and `weir record` share: one place that builds a librdkafka
//! configuration from a pipeline's `kafka.*` options, and one retry loop for broker calls.
//!
//! A broker that cannot be reached is retried with backoff and a log line per attempt, as long
//! as it takes; a stop request (SIGTERM) ends the wait. Errors that retrying cannot fix (a topic
//! that does not exist, an authorisation failure, a bad option) fail at once.

use std::sync::atomic::AtomicBool;
use std::time::Duration;

use rdkafka::config::ClientConfig;
use rdkafka::error::KafkaError as RdError;
use rdkafka::types::RDKafkaErrorCode;

use crate::retry::{GaveUp, Retry};

/// How long a metadata, offset or watermark request waits before it counts as failed (and is
/// retried).
pub(crate) const CALL_TIMEOUT: Duration = Duration::from_secs(5);

/// How long producing a batch (a flush, a transaction's commit) may take before it counts as
/// failed.
pub(crate) const FLUSH_TIMEOUT: Duration = Duration::from_secs(10);

/// Broker calls are retried for as long as it takes, waiting 100 ms, then twice as long each
/// time, up to 10 s.
const BROKER_RETRY: Retry =
    Retry { retries: None, first_wait: Duration::from_millis(100), max_wait: Duration::from_secs(10) };

#[derive(Debug, thiserror::Error)]
pub(crate) enum KafkaError {
    #[error("kafka client configuration: {0}")]
    Config(#[source] RdError),
    #[error("topic `{topic}`: {message}")]
    Topic { topic: String, message: String },
    #[error(
        "an offset to read is no longer on the broker (deleted by retention?), reading {at}: records were lost \
         between the checkpoint and now; start a new checkpoint to skip them"
    )]
    DataLoss { at: String },
    #[error("kafka: {what}: {source}")]
    Call { what: String, source: RdError },
    #[error("stopped while waiting for the broker")]
    Stopped,
}

/// A client configuration from the pipeline's `kafka.*` options over Weir's defaults.
pub(crate) fn client_config(defaults: &[(&str, &str)], options: &[(String, String)]) -> ClientConfig {
    let mut c = ClientConfig::new();
    for (k, v) in defaults {
        c.set(*k, *v);
    }
    for (k, v) in options {
        c.set(k, v);
    }
    c
}

/// The options that say how to reach the brokers (address, TLS, SASL), without the rest: what a
/// helper client (the sink's start-up scan) needs of a pipeline's options.
pub(crate) fn connection_options(options: &[(String, String)]) -> Vec<(String, String)> {
    options
        .iter()
        .filter(|(k, _)| k == "bootstrap.servers" || ["security.", "sasl.", "ssl."].iter().any(|p| k.starts_with(p)))
        .cloned()
        .collect()
}

/// Retries a broker call until it succeeds, the error is one retrying cannot fix, or `stop` is
/// raised.
pub(crate) fn with_retry<T>(
    stop: &AtomicBool,
    what: &str,
    call: impl FnMut() -> Result<T, RdError>,
) -> Result<T, KafkaError> {
    BROKER_RETRY.run(stop, &format!("kafka: {what} (broker unavailable?)"), call, retriable).map_err(|e| match e {
        GaveUp::Stopped(_) => KafkaError::Stopped,
        GaveUp::Failed(source) => KafkaError::Call { what: what.to_string(), source },
    })
}

fn retriable(e: &RdError) -> bool {
    !matches!(
        e.rdkafka_error_code(),
        Some(
            RDKafkaErrorCode::UnknownTopicOrPartition
                | RDKafkaErrorCode::UnknownTopic
                | RDKafkaErrorCode::TopicAuthorizationFailed
                | RDKafkaErrorCode::GroupAuthorizationFailed
                | RDKafkaErrorCode::InvalidConfig
        )
    )
}
