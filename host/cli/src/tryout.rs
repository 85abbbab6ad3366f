//! `weir broker`: a Kafka broker to try Weir on, with nothing installed. librdkafka's mock
//! cluster runs in this process; it takes bootstrap connections on a loopback port (9092 by
//! default, the port the example pipelines name), and the clients then talk to the broker it
//! advertises, on a port of its own, also loopback.
//!
//! The mock does not answer `CreateTopics`, so every topic the given pipelines need is made
//! before the first client comes: their Kafka source and sink topics and, for a pipeline with
//! `[scale] group`, the group's own topics with the partition counts the group would give them
//! (`weir_scale::group_topics`, the one place that decides them). With `--orders RATE` it also
//! feeds generated orders into the first pipeline's source topic, as `weir demo` does.
//!
//! It is for try-outs and tests of one's own pipelines, never for data that matters: what it
//! holds is gone when it stops, and each partition keeps only its last few MiB.

use std::collections::BTreeMap;
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use anyhow::{Context, Result};
use rdkafka::mocking::MockCluster;

use crate::exit::{self, Exit};
use crate::pipeline::{Pipeline, SinkConfig, SourceKind};

/// Partitions of each source and sink topic unless `--partitions` says otherwise: enough for
/// a group of a few processes to share.
pub(crate) const DEFAULT_PARTITIONS: i32 = 6;
/// The port bootstrap connections come to unless `--port` says otherwise: Kafka's own, which
/// the example pipelines name.
pub(crate) const DEFAULT_PORT: u16 = 9092;
/// How often the main thread looks whether it was asked to stop.
const STOP_POLL: Duration = Duration::from_millis(200);

pub(crate) struct BrokerArgs {
    pub pipelines: Vec<(PathBuf, Pipeline)>,
    pub port: u16,
    pub partitions: i32,
    /// `NAME` or `NAME:PARTITIONS`.
    pub topics: Vec<String>,
    /// Generated orders per second into the first pipeline's source topic.
    pub orders: Option<u64>,
}

pub(crate) fn broker(args: BrokerArgs, stop: Arc<AtomicBool>) -> Result<Exit> {
    let topics = topics_of(&args)?;
    let listener = TcpListener::bind(("127.0.0.1", args.port)).map_err(|e| {
        exit::Usage(format!(
            "cannot take port {} on 127.0.0.1 ({e}); is another broker running there? Pass --port and name that \
             port in the pipelines' kafka.bootstrap.servers",
            args.port
        ))
    })?;
    let cluster = MockCluster::new(1).context("cannot start the mock broker")?;
    for (topic, partitions) in &topics {
        cluster.create_topic(topic, *partitions, 1).with_context(|| format!("cannot create topic {topic}"))?;
    }
    let inner = cluster.bootstrap_servers();
    let addr = format!("127.0.0.1:{}", listener.local_addr().map_or(args.port, |a| a.port()));
    std::thread::spawn(move || relay(listener, inner));
    println!("weir broker: bootstrap {addr} (librdkafka's mock cluster; for try-outs: nothing it holds outlives it)");
    for (topic, partitions) in &topics {
        println!("  topic {topic}: {partitions} partitions");
    }
    let feed = match (args.orders, feed_topic(&args)) {
        (Some(rate), Some(topic)) => {
            let partitions = topics.get(&topic).copied().unwrap_or(args.partitions);
            println!("  producing {rate} generated orders/s into {topic}");
            let (addr, stop) = (addr.clone(), stop.clone());
            let produced = Arc::new(AtomicU64::new(0));
            Some(std::thread::spawn(move || {
                crate::feed::produce(&addr, &topic, partitions, rate, None, &stop, &produced)
            }))
        }
        (Some(_), None) => {
            return Err(exit::Usage(
                "--orders feeds the first pipeline's Kafka source topic: give a pipeline that reads Kafka".into(),
            )
            .into());
        }
        (None, _) => None,
    };
    println!("Ctrl-C stops it");
    while !stop.load(Ordering::Relaxed) {
        std::thread::sleep(STOP_POLL);
    }
    if let Some(feed) = feed {
        let n = feed.join().map_err(|_| anyhow::anyhow!("the orders producer panicked"))??;
        println!("produced {n} orders");
    }
    Ok(Exit::Done)
}

/// Every topic to make, with its partitions: `--topic`s as asked, then each pipeline's.
fn topics_of(args: &BrokerArgs) -> Result<BTreeMap<String, i32>> {
    if args.partitions < 1 {
        return Err(exit::Usage("--partitions must be at least 1".into()).into());
    }
    let mut topics = BTreeMap::new();
    for t in &args.topics {
        let (name, partitions) = match t.split_once(':') {
            Some((name, n)) => (name, n.parse::<i32>().ok().filter(|n| *n >= 1)),
            None => (t.as_str(), Some(args.partitions)),
        };
        let Some(partitions) = partitions.filter(|_| !name.is_empty()) else {
            return Err(exit::Usage(format!("--topic {t}: give NAME or NAME:PARTITIONS (at least 1)")).into());
        };
        topics.insert(name.to_string(), partitions);
    }
    for (_, p) in &args.pipelines {
        for (topic, partitions) in pipeline_topics(p, args.partitions) {
            topics.entry(topic).or_insert(partitions);
        }
    }
    Ok(topics)
}

/// The Kafka topics `p` reads and writes, and its group's own if it has `[scale] group`.
fn pipeline_topics(p: &Pipeline, partitions: i32) -> Vec<(String, i32)> {
    let mut topics = Vec::new();
    if let SourceKind::Kafka(k) = &p.source.kind {
        topics.extend(k.topics.iter().map(|t| (t.clone(), partitions)));
        if let (Some(group), [input]) = (&p.group, k.topics.as_slice()) {
            topics.extend(crate::scale::group_topics(p, group, input, partitions));
        }
    }
    if let Some(SinkConfig::Kafka(k)) = &p.sink {
        topics.push((k.topic.clone(), partitions));
    }
    topics
}

fn feed_topic(args: &BrokerArgs) -> Option<String> {
    match &args.pipelines.first()?.1.source.kind {
        SourceKind::Kafka(k) => k.topics.first().cloned(),
        _ => None,
    }
}

/// Passes each connection to the bootstrap port on to the mock, both ways, until either side
/// closes it. Only the first requests of each client come this way: the metadata it gets back
/// names the mock's own address.
fn relay(listener: TcpListener, inner: String) {
    for client in listener.incoming().map_while(Result::ok) {
        let Ok(upstream) = TcpStream::connect(&inner) else { continue };
        let _ = client.set_nodelay(true);
        let _ = upstream.set_nodelay(true);
        let (Ok(client_w), Ok(upstream_w)) = (client.try_clone(), upstream.try_clone()) else { continue };
        std::thread::spawn(move || pipe(client, upstream_w));
        std::thread::spawn(move || pipe(upstream, client_w));
    }
}

fn pipe(mut from: TcpStream, mut to: TcpStream) {
    let _ = std::io::copy(&mut from, &mut to);
    let _ = to.shutdown(std::net::Shutdown::Both);
}
