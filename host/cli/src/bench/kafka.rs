//! `weir bench --kafka`: the throughput measurement with the events read from Kafka instead of
//! a file. The orders are produced into the embedded broker first, round robin over partitions
//! enough to hold them all (so every partition's event time moves with the others, as on a
//! topic keyed by anything but time, and the watermark and the rows are the replay's). Then the
//! pipeline reads them from there: a micro-batch pipeline with `available-now` (it ends at the
//! high watermarks it found), a continuous one until its parser has seen every order. Last, a
//! bare consumer with the pipeline's consumer settings reads the same records from the same
//! broker, no engine behind it: what the client and the broker alone allow.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::{ClientConfig, Offset, TopicPartitionList};

use crate::broker::{BATCHED, BenchBroker};
use crate::pipeline::{KafkaSourceConfig, Pipeline, SourceKind, StartingOffsets, Trigger};
use crate::plugin::Runtime;
use crate::workload::OrderStream;

/// The topic a pipeline that reads a file reads instead.
const TOPIC: &str = "orders";
/// The producer batches as much as it can: what is measured is the reading.
const PRODUCER: [(&str, &str); 3] = [("linger.ms", "50"), ("batch.size", "1000000"), ("batch.num.messages", "100000")];
/// The consumer's `fetch.wait.max.ms` for a pipeline that read a file: the embedded broker
/// answers a fetch that finds nothing only when this has passed.
const FETCH_WAIT_MS: &str = "10";

/// The orders waiting in the embedded broker.
pub(super) struct KafkaInput {
    /// Kept running for the pipeline.
    _broker: BenchBroker,
    pub orders: u64,
    pub partitions: i32,
    pub produce_s: f64,
    topic: String,
    source: KafkaSourceConfig,
}

/// Produces `n` orders of `seed` into the broker (`brokers`, else the embedded one) and points
/// `p` at them.
pub(super) fn prepare(p: &mut Pipeline, n: u64, seed: u64, brokers: Option<&str>) -> Result<KafkaInput> {
    let broker = BenchBroker::start(brokers)?;
    let topic = match &mut p.source.kind {
        SourceKind::Kafka(k) => match k.topics.as_slice() {
            [t] => {
                k.starting = StartingOffsets::Earliest;
                k.partitions = None;
                t.clone()
            }
            _ => bail!("--kafka measures a pipeline that reads one topic"),
        },
        other => {
            *other = SourceKind::Kafka(KafkaSourceConfig {
                topics: vec![TOPIC.into()],
                partitions: None,
                starting: StartingOffsets::Earliest,
                options: vec![("fetch.wait.max.ms".into(), FETCH_WAIT_MS.into())],
                group_id: format!("weir-{}", p.name),
            });
            TOPIC.into()
        }
    };
    let (topics, _) = broker.point(&mut p.source.kind, None)?;
    let topic = topics.first().cloned().unwrap_or(topic);
    if !matches!(p.trigger, Trigger::Continuous { .. }) {
        p.trigger = Trigger::AvailableNow;
    }
    let partitions = broker.topic_for(&topic, n, BATCHED, &format!("--events {n}"))?;
    let started = Instant::now();
    produce(broker.brokers(), &topic, partitions, n, seed)?;
    let produce_s = started.elapsed().as_secs_f64();
    let SourceKind::Kafka(source) = &p.source.kind else { bail!("the pipeline reads Kafka by now") };
    let source = KafkaSourceConfig { group_id: format!("{}-bare", source.group_id), ..source.clone() };
    Ok(KafkaInput { _broker: broker, orders: n, partitions, produce_s, topic, source })
}

/// Reads every order with a bare consumer (the pipeline's consumer settings, every partition
/// from its start, from a queue of its own as the source reads them), doing nothing with them;
/// returns the seconds it took.
pub(super) fn bare_read(input: &KafkaInput) -> Result<f64> {
    let consumer: Arc<BaseConsumer> = Arc::new(
        crate::source::kafka::consumer_config(&input.source).create().context("cannot create the bare consumer")?,
    );
    let mut tpl = TopicPartitionList::new();
    for p in 0..input.partitions {
        tpl.add_partition_offset(&input.topic, p, Offset::Beginning).context("bare consumer: partitions")?;
    }
    consumer.assign(&tpl).context("bare consumer: assign")?;
    let queues = (0..input.partitions)
        .map(|p| consumer.split_partition_queue(&input.topic, p).context("bare consumer: partition queue"))
        .collect::<Result<Vec<_>>>()?;
    let started = Instant::now();
    let mut read = 0u64;
    while read < input.orders {
        let before = read;
        for q in &queues {
            loop {
                match q.poll(Duration::ZERO) {
                    Some(Ok(_)) => read += 1,
                    Some(Err(e)) => bail!("bare consumer: {e}"),
                    None => break,
                }
            }
        }
        if read == before {
            if started.elapsed() > BARE_DEADLINE {
                bail!("bare consumer: {read} of {} after {BARE_DEADLINE:?}", input.orders)
            }
            // Serves the client's events, and waits a little for fetches to land.
            if let Some(Err(e)) = consumer.poll(Duration::from_millis(1)) {
                bail!("bare consumer: {e}");
            }
        }
    }
    Ok(started.elapsed().as_secs_f64())
}

/// How long the bare consumer may take: the records are all there, so only a broken broker
/// takes this long.
const BARE_DEADLINE: Duration = Duration::from_secs(600);

fn produce(brokers: &str, topic: &str, partitions: i32, n: u64, seed: u64) -> Result<()> {
    let mut config = ClientConfig::new();
    config.set("bootstrap.servers", brokers);
    for (k, v) in PRODUCER {
        config.set(k, v);
    }
    let producer: BaseProducer = config.create().context("cannot create the producer")?;
    let mut orders = OrderStream::new(n, seed);
    let mut i = 0u64;
    while let Some(line) = orders.next_line() {
        let partition = (i % partitions as u64) as i32;
        let mut record = BaseRecord::<(), str>::to(topic).payload(line.trim_end()).partition(partition);
        loop {
            match producer.send(record) {
                Ok(()) => break,
                Err((
                    rdkafka::error::KafkaError::MessageProduction(rdkafka::types::RDKafkaErrorCode::QueueFull),
                    r,
                )) => {
                    record = r;
                    producer.poll(Duration::from_millis(10));
                }
                Err((e, _)) => bail!("cannot produce the orders: {e}"),
            }
        }
        i += 1;
    }
    producer.flush(Duration::from_secs(60)).context("cannot flush the orders into the embedded broker")?;
    Ok(())
}

/// A continuous pipeline never ends by itself: raises `stop` once its parser has taken in
/// `orders` records (its plugin metrics say so), checking every millisecond.
pub(super) fn stop_when_parsed(
    runtime: &Arc<Runtime>,
    pipeline: &str,
    orders: u64,
    stop: &Arc<AtomicBool>,
) -> std::thread::JoinHandle<()> {
    let (runtime, pipeline, stop) = (runtime.clone(), pipeline.to_string(), stop.clone());
    std::thread::spawn(move || {
        while !stop.load(Ordering::Relaxed) {
            let parsed: u64 = runtime
                .metrics()
                .pipeline(&pipeline)
                .iter()
                .filter(|(stage, _)| stage == "parse")
                .map(|(_, s)| s.records_in)
                .sum();
            if parsed >= orders {
                stop.store(true, Ordering::Relaxed);
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    })
}
