//! What the mock-cluster tests share: the orders pipeline from the `orders` topic into the
//! `windows` topic through the transactional Kafka sink, its checkpoint named by the caller so
//! that two runs can be two checkpoint identities.

use crate::common::kafka::*;
use crate::common::*;

/// The orders pipeline from the mock's `orders` topic into its `windows` topic through the
/// native transactional Kafka sink.
pub(super) fn to_kafka(dir: &std::path::Path, brokers: &str, checkpoint: &str) -> std::path::PathBuf {
    let extra = format!(
        "[sink]\ntype = \"kafka\"\ntopic = \"windows\"\nkafka.bootstrap.servers = \"{brokers}\"\n\
         [checkpoint]\nlocation = \"{}\"",
        dir.join(checkpoint).display()
    );
    let source = kafka_source(brokers, "orders", 2_000);
    let flush = "flush_at_end = true";
    pipeline(dir, Spec { window: TUMBLING, watermark: flush, extra: &extra, source: &source, ..Default::default() })
}
