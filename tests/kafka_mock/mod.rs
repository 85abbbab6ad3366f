//! Fast Kafka tests on librdkafka's mock cluster, in this test process on a loopback port
//! (`weir` runs as a separate process and connects to it like to any broker). Within the mock's
//! limits (`tests/common/kafka.rs`): ≤ 5 MiB per partition; transactions commit, but `read_committed`
//! would also show aborted records, so these tests never abort one.
//!
//! The pipeline into the `windows` topic that several files run, and the reading of it up to
//! markers, are in `tests/common/kafka.rs` (the tests on Apache Kafka run them too); each file
//! here is one area: the transactional sink, what reads the mock's topics, progress, and the
//! medallion with Kafka-backed datasets.

mod groups;
mod medallion;
mod progress;
mod sink;
mod sources;
