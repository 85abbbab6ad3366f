//! Apache Kafka for the tests: the broker `cargo xtask setup` fetched (`xtask/kafka/pom.xml`
//! pins its version), started on loopback in KRaft mode as one process that is both broker and
//! controller, on free ports, with its data and its log in the test's own directory.
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

/// The broker's JVM heap, initial and most.
const HEAP: &str = "384m";

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

/// One Apache Kafka node (broker and controller), its data in `dir`.
pub struct ApacheKafka {
    child: Option<Child>,
    dir: PathBuf,
    port: u16,
    started: Instant,
}

impl ApacheKafka {
    /// Formats the node's storage and starts it; returns once it answers a metadata request.
    pub fn start(dir: &Path) -> Self {
        std::fs::create_dir_all(dir.join("logs")).unwrap();
        let (port, controller) = (free_port(), free_port());
        let config = format!(
            "process.roles=broker,controller\nnode.id=1\ncontroller.quorum.voters=1@127.0.0.1:{controller}\n\
             listeners=PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller}\n\
             advertised.listeners=PLAINTEXT://127.0.0.1:{port}\ncontroller.listener.names=CONTROLLER\n\
             listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT\nlog.dirs={data}\n\
             offsets.topic.replication.factor=1\ntransaction.state.log.replication.factor=1\n\
             transaction.state.log.min.isr=1\nshare.coordinator.state.topic.replication.factor=1\n\
             share.coordinator.state.topic.min.isr=1\ngroup.initial.rebalance.delay.ms=0\n\
             auto.create.topics.enable=false\n",
            data = dir.join("data").display()
        );
        std::fs::write(dir.join("server.properties"), config).unwrap();
        std::fs::write(
            dir.join("log4j2.properties"),
            "rootLogger.level = INFO\nrootLogger.appenderRef.file.ref = file\nappender.file.type = File\n\
             appender.file.name = file\nappender.file.fileName = ${sys:kafka.logs.dir}/server.log\n\
             appender.file.layout.type = PatternLayout\nappender.file.layout.pattern = [%d] %p %m (%c)%n\n",
        )
        .unwrap();
        let format = java(dir)
            .args(["kafka.tools.StorageTool", "format", "-t", CLUSTER_ID, "-c"])
            .arg(dir.join("server.properties"))
            .output()
            .unwrap();
        assert!(format.status.success(), "kafka storage format: {}", String::from_utf8_lossy(&format.stderr));
        let mut k = ApacheKafka { child: None, dir: dir.to_path_buf(), port, started: Instant::now() };
        k.spawn();
        k
    }

    pub fn brokers(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// The broker's own log.
    pub fn log(&self) -> PathBuf {
        self.dir.join("logs").join("server.log")
    }

    fn spawn(&mut self) {
        let out = std::fs::File::create(self.dir.join("logs").join("stdout.log")).unwrap();
        let child = java(&self.dir)
            .args(["-Xms".to_string() + HEAP, "-Xmx".to_string() + HEAP])
            .args(["kafka.Kafka"])
            .arg(self.dir.join("server.properties"))
            .stdout(out.try_clone().unwrap())
            .stderr(out)
            .spawn()
            .expect("cannot start java for the Kafka broker");
        self.child = Some(child);
        self.started = Instant::now();
        self.wait_ready();
    }

    /// Waits until the broker answers a metadata request.
    fn wait_ready(&self) {
        let consumer: BaseConsumer = ClientConfig::new().set("bootstrap.servers", self.brokers()).create().unwrap();
        let deadline = Instant::now() + START_PATIENCE;
        while !consumer.fetch_metadata(None, Duration::from_secs(1)).is_ok_and(|m| !m.brokers().is_empty()) {
            assert!(Instant::now() < deadline, "Kafka did not come up; see {}", self.log().display());
        }
        eprintln!("apache kafka: up on {} after {:?}", self.brokers(), self.started.elapsed());
    }

    /// SIGKILL: the broker goes away without a word, as a crashed one does.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Starts it again on the same ports with the same data.
    pub fn restart(&mut self) {
        self.kill();
        self.spawn();
    }

    /// Creates `topic` with `partitions` partitions, and waits until it has a leader for each.
    pub fn create_topic(&self, topic: &str, partitions: u32) {
        let admin: AdminClient<DefaultClientContext> =
            ClientConfig::new().set("bootstrap.servers", self.brokers()).create().unwrap();
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let new = NewTopic::new(topic, partitions as i32, TopicReplication::Fixed(1));
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
            eprintln!("apache kafka's log is kept: {}", self.log().display());
            // The test's directory goes with it: keep the log where the target directory is.
            let keep = std::env::temp_dir().join(format!("weir-kafka-{}-{}.log", std::process::id(), self.port));
            let _ = std::fs::copy(self.log(), &keep);
            eprintln!("copied to {}", keep.display());
        }
    }
}
