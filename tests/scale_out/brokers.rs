//! The broker a scale-out test runs on: Apache Kafka on loopback (`common/apache_kafka.rs`), or
//! librdkafka's mock in a process of its own (this binary, started again).

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Stdio};

use crate::common::apache_kafka::ApacheKafka;
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

/// The group protocol a test's members speak: the classic one (JoinGroup and SyncGroup, the
/// cooperative-sticky assignor in the client), or the consumer protocol of KIP-848 (the broker
/// assigns, `kafka.group.protocol = "consumer"`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Protocol {
    Classic,
    Consumer,
}

/// The broker of a scale-out test: Apache Kafka, one KRaft node, unless `WEIR_TEST_BROKER=mock`
/// asks for librdkafka's mock with the topics of groups `stateless` and `windowed`
/// ([`MockBroker::start`]; Apache Kafka's brokers make a group's topics when it asks). It runs
/// for as long as this lives.
pub(crate) struct Broker {
    /// Read by the measurements (`bench.rs`), which time the mock broker's process too.
    #[allow(dead_code)]
    pub(crate) mock: Option<MockBroker>,
    pub(crate) kafka: Option<ApacheKafka>,
    pub(crate) brokers: String,
}

impl Broker {
    /// The broker, its members on the classic group protocol.
    pub(crate) fn start(dir: &Path, stateless: &[&str], windowed: &[&str]) -> Broker {
        Broker::speaking(dir, stateless, windowed, Protocol::Classic)
    }

    /// The broker, its members on `protocol` (the mock speaks the classic one only).
    pub(crate) fn speaking(dir: &Path, stateless: &[&str], windowed: &[&str], protocol: Protocol) -> Broker {
        if std::env::var("WEIR_TEST_BROKER").is_ok_and(|b| b == "mock") && protocol == Protocol::Classic {
            let mock = MockBroker::start(stateless, windowed);
            return Broker { brokers: mock.brokers.clone(), mock: Some(mock), kafka: None };
        }
        Broker::kafka(dir, protocol)
    }

    /// Apache Kafka, whatever `WEIR_TEST_BROKER` says: for what the mock cannot show.
    pub(crate) fn kafka(dir: &Path, protocol: Protocol) -> Broker {
        Broker::nodes(dir, 1, protocol)
    }

    /// Apache Kafka on `n` nodes (`ApacheKafka::cluster`), with `orders`.
    pub(crate) fn nodes(dir: &Path, n: usize, protocol: Protocol) -> Broker {
        let kafka = ApacheKafka::cluster(&dir.join("kafka"), n);
        kafka.create_topic("orders", PARTITIONS);
        let brokers = kafka.brokers();
        if protocol == Protocol::Consumer {
            CONSUMER_PROTOCOL.lock().unwrap_or_else(|e| e.into_inner()).push(brokers.clone());
        }
        Broker { brokers, mock: None, kafka: Some(kafka) }
    }
}

impl Drop for Broker {
    fn drop(&mut self) {
        CONSUMER_PROTOCOL.lock().unwrap_or_else(|e| e.into_inner()).retain(|b| *b != self.brokers);
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
        MockBroker { child, brokers }
    }
}

impl Drop for MockBroker {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
