//! Scale-out on Apache Kafka's group coordinator: `weir run --group` processes sharing a pipeline
//! over a 6-partition topic through a Kafka consumer group, each task's checkpoint in the group's
//! checkpoint topic: a stateless pipeline (parse, filter, sink), windowed aggregations in two
//! stages around the group's repartition topic, their state in its changelog topic, and the
//! transactional Kafka sink. The kill loops run on both group protocols, the classic one and the
//! consumer protocol of KIP-848.
//!
//! Output goes to the JSON-lines file sink in one directory that every process writes (one
//! machine standing in for several, each with a checkpoint directory of its own). The sink
//! writes a file per delivery, named by the task's identity and the batch id, so the files
//! show both what was delivered and that each task kept one identity while it moved.
//!
//! The harness is in [`harness`] and [`brokers`] (`WEIR_TEST_BROKER=mock` runs the tests that
//! can on librdkafka's mock instead); the measurements beside these tests are a benchmark of
//! their own (`bench.rs`, `cargo bench -p weir --bench scale_out`).

#[path = "../common/mod.rs"]
mod common;

mod brokers;
mod faults;
mod harness;
mod inspect;
mod kafka_sink;
mod quick_start;
mod stateless;
mod two_stages;
mod windows;
