//! Scale-out measurements, not tests: what a group's records cost a stateless pipeline, and
//! windows in two stages against one process (`docs/performance.md`, "Scale-out"). Each prints a
//! table; nothing is asserted about time.
//!
//! `cargo bench -p weir --bench scale_out -- group` or `-- windows` (both without an argument);
//! They run on Apache Kafka (`WEIR_KAFKA`, as the tests), or on librdkafka's mock with
//! `WEIR_TEST_BROKER=mock`; `WEIR_TEST_ROUNDS` sets the rounds.

#[path = "../common/mod.rs"]
mod common;

// The harness the tests use, of which a measurement needs only part.
#[allow(dead_code)]
mod brokers;
#[allow(dead_code)]
mod harness;
mod measure;
#[allow(dead_code)]
mod windows;

fn main() {
    // The mock broker's own process (`brokers::MockBroker::start` starts this binary again).
    if std::env::var_os("WEIR_TEST_MOCK_BROKER").is_some() {
        brokers::serve_mock_broker();
        return;
    }
    let which: Vec<String> = std::env::args().skip(1).filter(|a| !a.starts_with('-')).collect();
    let wants = |name: &str| which.is_empty() || which.iter().any(|w| w == name);
    if wants("group") {
        measure::a_group_against_one_process();
    }
    if wants("windows") {
        measure::windows_in_two_stages_against_one();
    }
}
