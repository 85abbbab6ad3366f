//! Apache Kafka for the tests: the broker `cargo xtask setup` fetched (`xtask/kafka/pom.xml`
//! pins its version), started on loopback in KRaft mode, each node one process that is both
//! broker and controller, on free ports, with its data and its log in the test's own directory:
//! one node for most tests, three (replication factor 3, `min.insync.replicas = 2`) for the
//! fault tests.
//!
//! Its heap is fixed ([`HEAP`]) so that several brokers of tests running side by side fit on a
//! 2-core, 24 GiB machine. A broker dropped while its test panics keeps its log, and says where.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use rdkafka::ClientConfig;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer};

/// The JVM options Kafka's own start scripts give the broker (`KAFKA_JVM_PERFORMANCE_OPTS` in
/// `bin/kafka-run-class.sh`): the broker as it is run, G1 with 20 ms pause goals.
const KAFKA_JVM_OPTS: [&str; 7] = [
    "-server",
    "-XX:+UseG1GC",
    "-XX:MaxGCPauseMillis=20",
    "-XX:InitiatingHeapOccupancyPercent=35",
    "-XX:+ExplicitGCInvokesConcurrent",
    "-XX:MaxInlineLevel=15",
    "-Djava.awt.headless=true",
];

/// The broker's JVM heap, initial and most.
const HEAP: &str = "384m";

/// Each node's Log4j 2 configuration: INFO and up to `logs/server.log` in its directory.
const LOG4J: &str = "rootLogger.level = INFO\nrootLogger.appenderRef.file.ref = file\nappender.file.type = File\n\
                     appender.file.name = file\nappender.file.fileName = ${sys:kafka.logs.dir}/server.log\n\
                     appender.file.layout.type = PatternLayout\nappender.file.layout.pattern = [%d] %p %m (%c)%n\n";

/// The group coordinator's bounds, lowered for tests that kill group members: a killed member
/// keeps its tasks for its session timeout, so the scale-out tests ask for 3 s (classic protocol,
/// whose floor is 6 s unless lowered here) and get it as the default (the consumer protocol,
/// KIP-848, where the broker sets it: 45 s unless lowered here).
const GROUPS: &str = "group.min.session.timeout.ms=1000\ngroup.consumer.min.session.timeout.ms=3000\n\
                      group.consumer.session.timeout.ms=3000\ngroup.consumer.min.heartbeat.interval.ms=1000\n\
                      group.consumer.heartbeat.interval.ms=1000\n";

// `log.retention.ms=-1` below: the generated orders are timestamped with their event times, days
// in the past, and the default retention (7 days, by record timestamp) deleted them from under
// the tests as soon as a segment rolled.

/// The partitions of `__consumer_offsets`, where each group's coordinator is the leader of the
/// partition its id hashes to ([`ApacheKafka::coordinator_of`]); fewer than the default 50, so a
/// cluster's first group is ready sooner.
const OFFSETS_PARTITIONS: i32 = 10;

/// Every test broker's cluster id (each has a data directory of its own).
const CLUSTER_ID: &str = "V2VpclRlc3RDbHVzdGVyMA";

/// How long a broker may take to answer its first metadata request.
const START_PATIENCE: Duration = Duration::from_secs(90);

/// The broker's jars: `WEIR_KAFKA`, which `cargo xtask test` sets to what `cargo xtask setup`
/// fetched (the one place that names the version).
pub fn kafka_libs() -> PathBuf {
    let p = PathBuf::from(std::env::var_os("WEIR_KAFKA").expect(
        "WEIR_KAFKA names the Apache Kafka broker's jars: `cargo xtask test` fetches them and sets it (or run \
         `cargo xtask setup` and point WEIR_KAFKA at ~/.cache/weir-tools/kafka-*/libs)",
    ));
    assert!(p.is_dir(), "WEIR_KAFKA={} is not a directory", p.display());
    p
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// One node (broker and controller in one process): its process, directory and ports.
struct Node {
    child: Option<Child>,
    dir: PathBuf,
    port: u16,
}

impl Node {
    fn log(&self) -> PathBuf {
        self.dir.join("logs").join("server.log")
    }
}

/// Apache Kafka on loopback: one node, or a cluster of several ([`ApacheKafka::cluster`]), their
/// data under `dir`.
pub struct ApacheKafka {
    nodes: Vec<Node>,
}

impl ApacheKafka {
    /// One node; returns once it answers a metadata request.
    pub fn start(dir: &Path) -> Self {
        Self::cluster(dir, 1)
    }

    /// `n` nodes, each a broker and a voter of the controller quorum. With three or more, topics
    /// are replicated three times and a write needs two replicas (`min.insync.replicas = 2`),
    /// internal topics included, so one node may fail without losing anything committed.
    pub fn cluster(dir: &Path, n: usize) -> Self {
        let ports: Vec<(u16, u16)> = (0..n).map(|_| (free_port(), free_port())).collect();
        let voters: Vec<String> =
            ports.iter().enumerate().map(|(i, (_, c))| format!("{}@127.0.0.1:{c}", i + 1)).collect();
        let (replicas, min_isr) = if n >= 3 { (3, 2) } else { (n, 1) };
        let mut nodes = Vec::new();
        for (i, &(port, controller)) in ports.iter().enumerate() {
            let dir = dir.join(format!("node-{}", i + 1));
            std::fs::create_dir_all(dir.join("logs")).unwrap();
            let config = format!(
                "process.roles=broker,controller\nnode.id={id}\ncontroller.quorum.voters={voters}\n\
                 listeners=PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller}\n\
                 advertised.listeners=PLAINTEXT://127.0.0.1:{port}\ncontroller.listener.names=CONTROLLER\n\
                 listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT\nlog.dirs={data}\n\
                 offsets.topic.replication.factor={replicas}\ntransaction.state.log.replication.factor={replicas}\n\
                 transaction.state.log.min.isr={min_isr}\nshare.coordinator.state.topic.replication.factor={replicas}\n\
                 share.coordinator.state.topic.min.isr={min_isr}\ndefault.replication.factor={replicas}\n\
                 min.insync.replicas={min_isr}\ngroup.initial.rebalance.delay.ms=0\nauto.create.topics.enable=false\n\
                 offsets.topic.num.partitions={OFFSETS_PARTITIONS}\nlog.retention.ms=-1\n{GROUPS}",
                id = i + 1,
                voters = voters.join(","),
                data = dir.join("data").display()
            );
            std::fs::write(dir.join("server.properties"), config).unwrap();
            std::fs::write(dir.join("log4j2.properties"), LOG4J).unwrap();
            let format = java(&dir)
                .args(["kafka.tools.StorageTool", "format", "-t", CLUSTER_ID, "-c"])
                .arg(dir.join("server.properties"))
                .output()
                .unwrap();
            assert!(format.status.success(), "kafka storage format: {}", String::from_utf8_lossy(&format.stderr));
            nodes.push(Node { child: None, dir, port });
        }
        let mut k = ApacheKafka { nodes };
        let started = Instant::now();
        // All at once: a node waits for a majority of the quorum before it serves.
        for i in 0..n {
            k.spawn(i);
        }
        k.wait_ready();
        eprintln!("apache kafka: {n} node(s) up on {} after {:?}", k.brokers(), started.elapsed());
        k
    }

    pub fn brokers(&self) -> String {
        self.nodes.iter().map(|n| format!("127.0.0.1:{}", n.port)).collect::<Vec<_>>().join(",")
    }

    /// The first node's log.
    pub fn log(&self) -> PathBuf {
        self.nodes[0].log()
    }

    fn spawn(&mut self, i: usize) {
        let node = &mut self.nodes[i];
        let out = std::fs::File::create(node.dir.join("logs").join("stdout.log")).unwrap();
        let child = java(&node.dir)
            .args(["-Xms".to_string() + HEAP, "-Xmx".to_string() + HEAP])
            .args(KAFKA_JVM_OPTS)
            .args(["kafka.Kafka"])
            .arg(node.dir.join("server.properties"))
            .stdout(out.try_clone().unwrap())
            .stderr(out)
            .spawn()
            .expect("cannot start java for the Kafka broker");
        node.child = Some(child);
    }

    /// Waits until every running node is listed as a broker in a metadata answer.
    fn wait_ready(&self) {
        let consumer: BaseConsumer = ClientConfig::new().set("bootstrap.servers", self.brokers()).create().unwrap();
        let running = self.nodes.iter().filter(|n| n.child.is_some()).count();
        let deadline = Instant::now() + START_PATIENCE;
        while !consumer.fetch_metadata(None, Duration::from_secs(1)).is_ok_and(|m| m.brokers().len() >= running) {
            assert!(Instant::now() < deadline, "Kafka did not come up; see {}", self.log().display());
        }
    }

    /// SIGKILL to every node: the brokers go away without a word, as crashed ones do.
    pub fn kill(&mut self) {
        for i in 0..self.nodes.len() {
            self.kill_node(i);
        }
    }

    /// SIGKILL to node `i` (0-based) alone.
    pub fn kill_node(&mut self, i: usize) {
        if let Some(mut c) = self.nodes[i].child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Starts node `i` again, on its ports and its data, and waits until it is a broker again.
    pub fn restart_node(&mut self, i: usize) {
        self.kill_node(i);
        self.spawn(i);
        self.wait_ready();
    }

    /// Starts every node again on the same ports with the same data.
    pub fn restart(&mut self) {
        self.kill();
        for i in 0..self.nodes.len() {
            self.spawn(i);
        }
        self.wait_ready();
    }

    /// The node (0-based) that leads `topic`'s `partition` now.
    pub fn leader_of(&self, topic: &str, partition: i32) -> usize {
        let consumer: BaseConsumer = ClientConfig::new().set("bootstrap.servers", self.brokers()).create().unwrap();
        let md = consumer.fetch_metadata(Some(topic), Duration::from_secs(10)).unwrap();
        let p = md.topics()[0].partitions().iter().find(|p| p.id() == partition).expect("the partition exists");
        usize::try_from(p.leader() - 1).expect("the partition has a leader")
    }

    /// The process id of node `i`'s broker, while it runs: for a test that freezes it (SIGSTOP).
    pub fn pid(&self, i: usize) -> Option<u32> {
        self.nodes[i].child.as_ref().map(Child::id)
    }

    /// The node (0-based) whose broker coordinates consumer group `group` now: the leader of the
    /// `__consumer_offsets` partition the group's id hashes to, as Kafka computes it
    /// (`Utils.abs(groupId.hashCode()) % offsets.topic.num.partitions`, both protocols).
    pub fn coordinator_of(&self, group: &str) -> usize {
        let hash = group.encode_utf16().fold(0i32, |h, c| h.wrapping_mul(31).wrapping_add(i32::from(c)));
        let abs = if hash == i32::MIN { 0 } else { hash.abs() };
        self.leader_of("__consumer_offsets", abs % OFFSETS_PARTITIONS)
    }

    /// Creates `topic` with `partitions` partitions, and waits until it has a leader for each.
    pub fn create_topic(&self, topic: &str, partitions: u32) {
        let admin: AdminClient<DefaultClientContext> =
            ClientConfig::new().set("bootstrap.servers", self.brokers()).create().unwrap();
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let replicas = self.nodes.len().min(3) as i32;
        let new = NewTopic::new(topic, partitions as i32, TopicReplication::Fixed(replicas));
        let opts = AdminOptions::new().operation_timeout(Some(Duration::from_secs(30)));
        for r in rt.block_on(admin.create_topics([&new], &opts)).unwrap() {
            r.unwrap_or_else(|(t, e)| panic!("creating {t}: {e}"));
        }
        let consumer: BaseConsumer = ClientConfig::new().set("bootstrap.servers", self.brokers()).create().unwrap();
        let deadline = Instant::now() + START_PATIENCE;
        loop {
            let md = consumer.fetch_metadata(Some(topic), Duration::from_secs(5)).unwrap();
            let ready = md.topics().first().is_some_and(|t| {
                t.error().is_none()
                    && t.partitions().len() == partitions as usize
                    && t.partitions().iter().all(|p| p.leader() >= 0)
            });
            if ready {
                return;
            }
            assert!(Instant::now() < deadline, "{topic} has no leaders; see {}", self.log().display());
        }
    }
}

impl ApacheKafka {
    /// Deletes every record of `topic`'s `partition` before `offset`, as retention would.
    pub fn delete_records(&self, topic: &str, partition: i32, offset: i64) {
        let admin: AdminClient<DefaultClientContext> =
            ClientConfig::new().set("bootstrap.servers", self.brokers()).create().unwrap();
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let mut tpl = rdkafka::TopicPartitionList::new();
        tpl.add_partition_offset(topic, partition, rdkafka::Offset::Offset(offset)).unwrap();
        let opts = AdminOptions::new().operation_timeout(Some(Duration::from_secs(30)));
        let done = rt.block_on(admin.delete_records(&tpl, &opts)).unwrap();
        for e in done.elements() {
            assert!(e.error().is_ok(), "deleting records of {topic}/{partition}: {:?}", e.error());
        }
    }
}

/// `java` with the broker's jars and its log configuration.
fn java(dir: &Path) -> Command {
    let mut c = Command::new("java");
    c.arg("-cp")
        .arg(format!("{}/*", kafka_libs().display()))
        .arg(format!("-Dkafka.logs.dir={}", dir.join("logs").display()))
        .arg(format!("-Dlog4j2.configurationFile={}", dir.join("log4j2.properties").display()))
        .stdin(Stdio::null());
    c
}

impl Drop for ApacheKafka {
    fn drop(&mut self) {
        self.kill();
        if std::thread::panicking() {
            // The test's directory goes with it: keep each node's log in the temp directory.
            for (i, node) in self.nodes.iter().enumerate() {
                let keep = std::env::temp_dir().join(format!(
                    "weir-kafka-{}-{}-node-{}.log",
                    std::process::id(),
                    node.port,
                    i + 1
                ));
                let _ = std::fs::copy(node.log(), &keep);
                eprintln!("apache kafka's log is kept: {}", keep.display());
            }
        }
    }
}
