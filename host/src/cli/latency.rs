//! `weir bench --latency`: end-to-end latency of a continuous-mode pipeline, from the moment an
//! order is produced to the moment its output is readable by a consumer of the output topic,
//! all on an embedded broker over loopback.
//!
//! The producer writes the send time (µs since the epoch) into each order as `sent_us`; the
//! pipeline passes rows through unchanged, so the downstream consumer reads it back and takes
//! the difference. Everything runs in this process, on the same clock.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::driver::{self, Flush, Output, RunOptions, Stages};
use crate::pipeline::{Pipeline, SinkConfig, SourceKind};
use crate::plugin::Runtime;
use crate::progress::Progress;
use crate::workload::OrderStream;
use anyhow::{Context, Result, bail};
use rdkafka::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Message;
use rdkafka::mocking::MockCluster;
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::{Offset, TopicPartitionList};

pub(super) struct LatencyArgs {
    pub pipeline: Pipeline,
    pub rate: u64,
    pub seconds: u64,
}

/// What was measured, in microseconds.
pub(super) struct Latencies {
    pub samples: usize,
    pub p50: u64,
    pub p99: u64,
    pub max: u64,
}

/// The first second is warm-up (connections, the first fetches) and is not counted.
const WARM_UP: Duration = Duration::from_secs(1);

pub(super) fn measure(mut args: LatencyArgs, runtime: &Arc<Runtime>) -> Result<Latencies> {
    let cluster = MockCluster::new(1).context("cannot start the embedded broker")?;
    let brokers = cluster.bootstrap_servers();
    let (input, output) = match (&mut args.pipeline.source.kind, &mut args.pipeline.sink) {
        (SourceKind::Kafka(src), Some(SinkConfig::Kafka(sink))) if src.topics.len() == 1 => {
            for options in [&mut src.options, &mut sink.options] {
                options.retain(|(k, _)| k != "bootstrap.servers");
                options.push(("bootstrap.servers".into(), brokers.clone()));
            }
            (src.topics[0].clone(), sink.topic.clone())
        }
        _ => bail!("the latency pipeline must read one Kafka topic and write to a Kafka sink"),
    };
    cluster.create_topic(&input, 1, 1).context("cannot create the input topic")?;
    cluster.create_topic(&output, 1, 1).context("cannot create the output topic")?;

    let stop = Arc::new(AtomicBool::new(false));
    let consumer = {
        let (brokers, stop) = (brokers.clone(), stop.clone());
        std::thread::spawn(move || read_latencies(&brokers, &output, &stop))
    };
    let producer = {
        let (brokers, stop) = (brokers.clone(), stop.clone());
        let (rate, seconds) = (args.rate, args.seconds);
        std::thread::spawn(move || produce(&brokers, &input, rate, Duration::from_secs(seconds), &stop))
    };
    let scratch = driver::scratch_checkpoint().context("cannot create a checkpoint directory")?;
    let opts = RunOptions {
        checkpoint: scratch.path().to_path_buf(),
        dead_letters: None,
        progress: Progress::new(&args.pipeline.name, false, None),
        stop: stop.clone(),
        fsync: true,
        flush: Flush::AsConfigured { default: false },
    };
    let run = {
        let (p, runtime, stop) = (args.pipeline.clone(), runtime.clone(), stop.clone());
        std::thread::spawn(move || {
            Stages::wasm(&p, &runtime, Output::Pipeline, &stop).and_then(|s| driver::run(&p, s, opts))
        })
    };
    let produced = producer.join().map_err(|_| anyhow::anyhow!("the producer panicked"))?;
    // Let the last records through, then stop everything.
    std::thread::sleep(Duration::from_millis(500));
    stop.store(true, Ordering::Relaxed);
    run.join().map_err(|_| anyhow::anyhow!("the pipeline panicked"))?.context("the pipeline failed")?;
    let mut lat = consumer.join().map_err(|_| anyhow::anyhow!("the consumer panicked"))??;
    let produced = produced?;
    if lat.is_empty() {
        bail!("no output arrived ({produced} orders produced)");
    }
    lat.sort_unstable();
    let at = |q: f64| lat[((lat.len() - 1) as f64 * q).round() as usize];
    eprintln!("{produced} orders produced, {} outputs timed", lat.len());
    Ok(Latencies { samples: lat.len(), p50: at(0.50), p99: at(0.99), max: lat[lat.len() - 1] })
}

fn now_us() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_micros() as u64)
}

fn produce(brokers: &str, topic: &str, rate: u64, duration: Duration, stop: &AtomicBool) -> Result<u64> {
    let producer: BaseProducer = ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .set("linger.ms", "0")
        .create()
        .context("cannot create the producer")?;
    let mut orders = OrderStream::new(u64::MAX, 11);
    let pacer = super::Pacer::new(rate);
    let mut n = 0u64;
    while !stop.load(Ordering::Relaxed) && pacer.elapsed() < duration {
        if let Some(wait) = pacer.ahead(n) {
            producer.poll(Duration::ZERO);
            std::thread::sleep(wait.min(Duration::from_micros(500)));
            continue;
        }
        let Some(line) = orders.next_line() else { break };
        let payload = format!("{{\"sent_us\":{},{}", now_us(), &line.trim_end()[1..]);
        if producer.send(BaseRecord::<(), str>::to(topic).payload(&payload)).is_err() {
            producer.poll(Duration::from_millis(1));
            continue;
        }
        n += 1;
    }
    producer.flush(Duration::from_secs(10)).context("cannot flush the producer")?;
    Ok(n)
}

fn read_latencies(brokers: &str, topic: &str, stop: &AtomicBool) -> Result<Vec<u64>> {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .set("group.id", "weir-latency-bench")
        // Ask again at once: what is measured is when the output becomes readable, not how
        // long this reader's fetch waits (the embedded broker never answers a waiting fetch early).
        .set("fetch.wait.max.ms", "0")
        .set("isolation.level", "read_uncommitted")
        .create()
        .context("cannot create the output consumer")?;
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition_offset(topic, 0, Offset::Beginning).context("cannot assign the output topic")?;
    consumer.assign(&tpl).context("cannot assign the output topic")?;
    let started = Instant::now();
    let mut lat = Vec::new();
    while !stop.load(Ordering::Relaxed) {
        let Some(Ok(m)) = consumer.poll(Duration::from_millis(50)) else { continue };
        let now = now_us();
        let sent = m.payload().and_then(sent_us);
        if let Some(sent) = sent
            && started.elapsed() >= WARM_UP
        {
            lat.push(now.saturating_sub(sent));
        }
    }
    Ok(lat)
}

fn sent_us(payload: &[u8]) -> Option<u64> {
    let rest = payload.strip_prefix(b"{\"sent_us\":")?;
    let digits = rest.iter().take_while(|b| b.is_ascii_digit()).count();
    std::str::from_utf8(&rest[..digits]).ok()?.parse().ok()
}
