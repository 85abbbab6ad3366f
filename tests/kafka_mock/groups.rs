//! A group on a broker that cannot run one: librdkafka's mock cluster (the broker of
//! `weir demo`) answers metadata requests but never `CreateTopics`.

use crate::common::kafka::*;
use crate::common::*;
use rdkafka::mocking::MockCluster;

/// `weir run --group` on the mock fails, naming the request it got no answer to and the
/// group's topic it could not make, and how to go on, instead of waiting until it is stopped.
#[test]
fn a_group_on_a_broker_that_never_creates_topics_fails_naming_the_request_and_the_topic() {
    let cluster = MockCluster::new(1).unwrap();
    cluster.create_topic("orders", 2, 1).unwrap();
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("out")).unwrap();
    let text = format!(
        "name = \"tryout\"\n[source]\n{source}\n[parse]\nplugin = \"{parse}\"\n{sink}",
        source = kafka_source(&cluster.bootstrap_servers(), "orders", 100),
        parse = component("orders_json").display(),
        sink = file_sink(&dir.path().join("out")),
    );
    let p = dir.path().join("tryout.toml");
    std::fs::write(&p, text).unwrap();
    let out = weir().arg("run").arg(&p).args(["--group", "tryout"]).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "the group ran on a broker that cannot hold it: {stderr}");
    for what in ["CreateTopics", "weir.tryout.checkpoints", "beforehand"] {
        assert!(stderr.contains(what), "the error does not name {what:?}: {stderr}");
    }
}
