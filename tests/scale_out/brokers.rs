//! The broker a scale-out test runs on: librdkafka's mock in a process of its own (this binary,
//! started again), or tansu.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Stdio};

use crate::common::kafka::*;
use crate::harness::*;

/// The mock broker of a test, as a process of its own (this binary, started again with
/// `WEIR_TEST_MOCK_BROKER`), so that it outlives the members the test kills: with the topics in
/// `WEIR_TEST_MOCK_TOPICS`, it prints its address, then serves until its stdin closes.
pub(crate) fn serve_mock_broker() {
    let cluster = rdkafka::mocking::MockCluster::new(1).unwrap();
    // The mock does not answer CreateTopics: every topic the test's groups use, made here
    // (`MockBroker::start` lists them).
    let topics = std::env::var("WEIR_TEST_MOCK_TOPICS").unwrap();
    for t in topics.split(',') {
        let (name, partitions) = t.split_once(':').unwrap();
        cluster.create_topic(name, partitions.parse().unwrap(), 1).unwrap();
    }
    println!("bootstrap {}", cluster.bootstrap_servers());
    let mut rest = String::new();
    let _ = std::io::Read::read_to_string(&mut std::io::stdin(), &mut rest);
}

/// Not a test on its own: [`serve_mock_broker`] in the test binary, run for this test alone.
#[test]
#[ignore = "a helper process of the tests on the mock broker"]
fn mock_broker_process() {
    if std::env::var_os("WEIR_TEST_MOCK_BROKER").is_some() {
        serve_mock_broker();
    }
}

/// The broker a test that can run on either uses: librdkafka's mock with the topics of
/// groups `stateless` and `windowed` ([`MockBroker::start`]), or tansu with `WEIR_TEST_ON_TANSU`
/// (it makes a group's topics itself). It runs for as long as this lives.
pub(crate) struct Broker {
    /// Read by the measurements (`bench.rs`), which time the mock broker's process too.
    #[allow(dead_code)]
    pub(crate) mock: Option<MockBroker>,
    pub(crate) _tansu: Option<Tansu>,
    pub(crate) brokers: String,
}

impl Broker {
    pub(crate) fn start(dir: &Path, stateless: &[&str], windowed: &[&str]) -> Broker {
        if std::env::var_os("WEIR_TEST_ON_TANSU").is_some() {
            let tansu = Tansu::start(&dir.join("tansu"));
            tansu.create_topic("orders", PARTITIONS);
            Broker { brokers: tansu.brokers(), mock: None, _tansu: Some(tansu) }
        } else {
            let mock = MockBroker::start(stateless, windowed);
            Broker { brokers: mock.brokers.clone(), mock: Some(mock), _tansu: None }
        }
    }
}

/// The mock broker in a process of its own; killed when dropped.
pub(crate) struct MockBroker {
    pub(crate) child: Child,
    pub(crate) brokers: String,
}

impl MockBroker {
    /// The broker, with the `orders` and `alerts` topics and those of groups `stateless` (one
    /// stage) and `windowed` (two stages), and an input of its own for each windowed group,
    /// `orders.GROUP` (for a measurement whose input outgrows what the mock keeps).
    pub(crate) fn start(stateless: &[&str], windowed: &[&str]) -> MockBroker {
        let p = PARTITIONS;
        let mut topics = vec![format!("orders:{p}"), format!("alerts:{p}")];
        topics.extend(stateless.iter().map(|g| format!("weir.{g}.checkpoints:{p}")));
        for g in windowed {
            topics.push(format!("orders.{g}:{p}"));
            topics.push(format!("weir.{g}.checkpoints:{}", 2 * p));
            topics.push(format!("weir.{g}.repartition:{p}"));
            topics.push(format!("weir.{g}.changelog:{p}"));
        }
        let mut child = std::process::Command::new(std::env::current_exe().unwrap())
            .args(["--exact", "brokers::mock_broker_process", "--ignored", "--nocapture", "--test-threads", "1"])
            .env("WEIR_TEST_MOCK_BROKER", "1")
            .env("WEIR_TEST_MOCK_TOPICS", topics.join(","))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let brokers = BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
            // libtest may print the test's name on the same line first.
            .find_map(|l| l.split_once("bootstrap ").map(|(_, b)| b.trim().to_string()))
            .expect("the mock broker printed its address");
        MOCKS.lock().unwrap_or_else(|e| e.into_inner()).push(brokers.clone());
        MockBroker { child, brokers }
    }
}

impl Drop for MockBroker {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        // Its port is free again: a later broker (tansu) may get the same address.
        MOCKS.lock().unwrap_or_else(|e| e.into_inner()).retain(|m| *m != self.brokers);
    }
}
