//! `weir bench --latency`: end-to-end latency of a continuous-mode pipeline, from the moment an
//! order is produced to the moment its output is readable by a consumer of the output topic,
//! all over loopback: on the embedded broker, or with `--brokers` on one the user runs.
//!
//! The producer writes the send time (µs since the epoch) into each order as `sent_us`; the
//! pipeline passes rows through unchanged, so the downstream reader reads it back and takes
//! the difference. Everything runs in this process, on the same clock.
//!
//! Two baselines, with the same producer and reader, say what is the broker's: `--baseline
//! broker` reads the input topic itself (one hop), and `--baseline relay` puts a bare consumer
//! and producer with the pipeline's own Kafka settings where the pipeline would be (two hops,
//! no engine), passing on the orders the pipeline would keep.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::broker::{ALONE, BenchBroker};
use crate::driver::{self, Flush, Output, RunOptions, Stages};
use crate::pipeline::{Pipeline, SinkConfig, SourceKind, StartingOffsets};
use crate::plugin::Runtime;
use crate::progress::Progress;
use crate::sink::producer_config;
use crate::source::kafka::consumer_config;
use crate::workload::OrderStream;
use anyhow::{Context, Result, bail};
use rdkafka::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::message::Message;
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::{Offset, TopicPartitionList};

pub(crate) struct LatencyArgs {
    pub pipeline: Pipeline,
    pub rate: u64,
    pub seconds: u64,
    /// Measure a baseline instead of the pipeline.
    pub baseline: Option<Baseline>,
    /// Where the output rows go, besides being timed.
    pub rows: Option<PathBuf>,
    /// A broker the user runs, instead of the embedded one.
    pub brokers: Option<String>,
}

/// What stands between the producer and the reader instead of the pipeline.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Baseline {
    /// Nothing: the reader reads the input topic.
    Broker,
    /// A bare consumer and producer, with the pipeline's Kafka settings.
    Relay,
}

/// What was measured, in microseconds.
pub(crate) struct Latencies {
    pub samples: usize,
    pub p50: u64,
    pub p99: u64,
    pub max: u64,
    /// Partitions of each topic (sized for the run's volume).
    pub partitions: i32,
}

/// Orders sent in the first second are warm-up (connections, the first fetches, the
/// pipeline's start) and are not timed.
const WARM_UP: Duration = Duration::from_secs(1);
/// The producer's `linger.ms`: it sends what a millisecond brought in one request, as a
/// producer at rate does. Without it, the embedded broker, which hands out one record batch
/// per partition per fetch and finds it by a walk over the partition's batches, falls behind at
/// a few thousand single-record batches a second. It is part of what is measured: the same
/// setting is in the `--baseline` figures.
const PRODUCER_LINGER_MS: &str = "1";
/// The reader's `fetch.wait.max.ms` on the embedded broker, which answers a fetch that finds
/// nothing only when this has passed (it never answers early), so it is kept short; 0 would
/// make the reader ask again at once, forever, on the cores the pipeline needs.
const READER_FETCH_WAIT_MS: &str = "1";
/// The same on a broker the user runs (`--brokers`): Kafka answers a waiting fetch as soon as
/// records arrive, so a long wait costs the reader no latency, and spares the broker and the
/// pipeline's cores a thousand empty fetches a second.
const EXTERNAL_READER_FETCH_WAIT_MS: &str = "100";
/// The orders' seed: `weir gen orders RATE*SECONDS --seed 11` writes what a run produces.
const SEED: u64 = 11;
/// How long the pipeline may take to pass the last orders on after the producer is done.
const DRAIN: Duration = Duration::from_millis(500);

pub(crate) fn measure(mut args: LatencyArgs, runtime: &Arc<Runtime>) -> Result<Latencies> {
    let broker = BenchBroker::start(args.brokers.as_deref())?;
    let p = &mut args.pipeline;
    let (inputs, output) = broker.point(&mut p.source.kind, p.sink.as_mut())?;
    // The topic is new: everything produced is read, from the pipeline's first moment.
    if let SourceKind::Kafka(k) = &mut p.source.kind {
        k.starting = StartingOffsets::Earliest;
        // The embedded broker answers a waiting fetch only when the wait has passed, so a wait
        // meant for Kafka (which answers as soon as records arrive) would be what is measured.
        if broker.is_embedded() {
            k.options.retain(|(name, _)| name != "fetch.wait.max.ms");
            k.options.push(("fetch.wait.max.ms".into(), READER_FETCH_WAIT_MS.into()));
        }
    }
    let (input, output) = match (inputs.as_slice(), output) {
        ([input], Some(output)) => (input.clone(), output),
        _ => bail!("the latency pipeline must read one Kafka topic and write to a Kafka sink"),
    };
    let orders = args.rate.saturating_mul(args.seconds);
    let what = format!("--rate {} for --seconds {}", args.rate, args.seconds);
    let partitions = broker.topic_for(&input, orders, ALONE, &what)?;
    // The output is read as it arrives: what the broker deletes past its bound has been read
    // (the reader fails the run if not), and one partition keeps the reader's fetches cheap.
    broker.topic(&output, 1)?;
    let (read, read_partitions) =
        if args.baseline == Some(Baseline::Broker) { (input.clone(), partitions) } else { (output.clone(), 1) };

    let stop = Arc::new(AtomicBool::new(false));
    let reader = {
        let (brokers, stop) = (broker.brokers().to_string(), stop.clone());
        let wait = if broker.is_embedded() { READER_FETCH_WAIT_MS } else { EXTERNAL_READER_FETCH_WAIT_MS };
        let (rows, timed_from) = (args.rows.clone(), now_us() + WARM_UP.as_micros() as u64);
        std::thread::spawn(move || read_latencies(&brokers, wait, &read, read_partitions, timed_from, rows, &stop))
    };
    let scratch = driver::scratch_checkpoint().context("cannot create a checkpoint directory")?;
    let run = match args.baseline {
        Some(Baseline::Broker) => None,
        Some(Baseline::Relay) => {
            let (p, stop) = (args.pipeline.clone(), stop.clone());
            Some(std::thread::spawn(move || relay(&p, &input_of(&p)?, &output, &stop)))
        }
        None => {
            let opts = RunOptions {
                checkpoint: scratch.path().to_path_buf(),
                dead_letters: None,
                progress: Progress::new(&args.pipeline.name, false, None),
                stop: stop.clone(),
                fsync: true,
                flush: Flush::AsConfigured { default: false },
                own_share: true,
                ledger: None,
            };
            let (p, runtime, stop) = (args.pipeline.clone(), runtime.clone(), stop.clone());
            Some(std::thread::spawn(move || -> Result<()> {
                let stages = Stages::wasm(&p, &runtime, Output::Pipeline, &stop)?;
                driver::run(&p, stages, opts).context("the pipeline failed")?;
                Ok(())
            }))
        }
    };
    let produced = produce(&broker, &input, partitions, args.rate, Duration::from_secs(args.seconds), &stop);
    // Let the last orders through, then stop everything.
    std::thread::sleep(DRAIN);
    stop.store(true, Ordering::Relaxed);
    if let Some(run) = run {
        run.join().map_err(|_| anyhow::anyhow!("the pipeline panicked"))??;
    }
    let mut lat = reader.join().map_err(|_| anyhow::anyhow!("the reader panicked"))??;
    let produced = produced?;
    if lat.is_empty() {
        bail!("no output arrived ({produced} orders produced)");
    }
    lat.sort_unstable();
    let at = |q: f64| lat[((lat.len() - 1) as f64 * q).round() as usize];
    eprintln!("{produced} orders produced, {} outputs timed", lat.len());
    Ok(Latencies { samples: lat.len(), p50: at(0.50), p99: at(0.99), max: lat[lat.len() - 1], partitions })
}

/// The statuses the orders-alerts pipeline keeps; the relay keeps the same orders.
const KEPT: [&[u8]; 2] = [b"\"status\":\"ERROR\"", b"\"status\":\"PENDING\""];

fn input_of(p: &Pipeline) -> Result<String> {
    match &p.source.kind {
        SourceKind::Kafka(k) => Ok(k.topics[0].clone()),
        _ => bail!("the latency pipeline must read Kafka"),
    }
}

/// `--baseline relay`: reads `input` as the pipeline's source would (its consumer settings)
/// and writes the orders it keeps to `output` as its sink would (its producer settings), one
/// poll at a time, acknowledgements left to the producer, until `stop`.
fn relay(p: &Pipeline, input: &str, output: &str, stop: &AtomicBool) -> Result<()> {
    let (SourceKind::Kafka(src), Some(SinkConfig::Kafka(sink))) = (&p.source.kind, &p.sink) else {
        bail!("the latency pipeline must read Kafka and write to a Kafka sink");
    };
    let consumer: BaseConsumer = consumer_config(src).create().context("cannot create the relay's consumer")?;
    let producer: BaseProducer = producer_config(sink, true).create().context("cannot create the relay's producer")?;
    let mut tpl = TopicPartitionList::new();
    let md = consumer.fetch_metadata(Some(input), Duration::from_secs(5)).context("relay: topic metadata")?;
    for t in md.topics() {
        for part in t.partitions() {
            tpl.add_partition_offset(input, part.id(), Offset::Beginning).context("relay: assign")?;
        }
    }
    consumer.assign(&tpl).context("relay: assign")?;
    while !stop.load(Ordering::Relaxed) {
        let Some(Ok(m)) = consumer.poll(Duration::from_millis(50)) else { continue };
        let Some(value) = m.payload() else { continue };
        if KEPT.iter().any(|k| memchr::memmem::find(value, k).is_some()) {
            let _ = producer.send(BaseRecord::<(), [u8]>::to(output).payload(value));
        }
        producer.poll(Duration::ZERO);
    }
    Ok(())
}

fn now_us() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_micros() as u64)
}

/// Produces paced orders, filling the partitions one after the other.
fn produce(
    broker: &BenchBroker,
    topic: &str,
    partitions: i32,
    rate: u64,
    duration: Duration,
    stop: &AtomicBool,
) -> Result<u64> {
    let producer: BaseProducer = ClientConfig::new()
        .set("bootstrap.servers", broker.brokers())
        .set("linger.ms", PRODUCER_LINGER_MS)
        .create()
        .context("cannot create the producer")?;
    // The stream `weir gen orders RATE*SECONDS --seed 11` writes, as far as the run gets.
    let planned = rate.saturating_mul(duration.as_secs().max(1));
    let mut orders = OrderStream::new(planned, SEED);
    let pacer = crate::Pacer::new(rate);
    let mut n = 0u64;
    while !stop.load(Ordering::Relaxed) && pacer.elapsed() < duration {
        if let Some(wait) = pacer.ahead(n) {
            producer.poll(Duration::ZERO);
            std::thread::sleep(wait.min(Duration::from_micros(500)));
            continue;
        }
        let Some(line) = orders.next_line() else { break };
        let payload = format!("{{\"sent_us\":{},{}", now_us(), &line.trim_end()[1..]);
        let partition = broker.partition(n, ALONE, partitions);
        if producer.send(BaseRecord::<(), str>::to(topic).payload(&payload).partition(partition)).is_err() {
            producer.poll(Duration::from_millis(1));
            continue;
        }
        n += 1;
    }
    producer.flush(Duration::from_secs(10)).context("cannot flush the producer")?;
    Ok(n)
}

/// Reads `topic` from its start until `stop`, timing each order that carries a send time from
/// `timed_from` on (µs since the epoch), and writing every row to `rows` if asked. Fails if the
/// broker deleted records before they were read: the lost ones would be the late ones, and the
/// figures would flatter.
fn read_latencies(
    brokers: &str,
    fetch_wait_ms: &str,
    topic: &str,
    partitions: i32,
    timed_from: u64,
    rows: Option<PathBuf>,
    stop: &AtomicBool,
) -> Result<Vec<u64>> {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .set("group.id", "weir-latency-bench")
        .set("fetch.wait.max.ms", fetch_wait_ms)
        .set("isolation.level", "read_uncommitted")
        .set("auto.offset.reset", "error")
        .create()
        .context("cannot create the output reader")?;
    let mut tpl = TopicPartitionList::new();
    for p in 0..partitions {
        tpl.add_partition_offset(topic, p, Offset::Beginning).context("cannot assign the output topic")?;
    }
    consumer.assign(&tpl).context("cannot assign the output topic")?;
    let mut out = match &rows {
        Some(path) => {
            Some(BufWriter::new(File::create(path).with_context(|| format!("cannot create {}", path.display()))?))
        }
        None => None,
    };
    let mut lat = Vec::new();
    while !stop.load(Ordering::Relaxed) {
        let m = match consumer.poll(Duration::from_millis(50)) {
            None => continue,
            Some(Ok(m)) => m,
            Some(Err(KafkaError::MessageConsumption(
                RDKafkaErrorCode::AutoOffsetReset | RDKafkaErrorCode::OffsetOutOfRange,
            ))) => bail!("the reader fell behind and the broker deleted records it had not read: no figures"),
            Some(Err(_)) => continue,
        };
        let now = now_us();
        let payload = m.payload().unwrap_or_default();
        if let Some(sent) = sent_us(payload)
            && sent >= timed_from
        {
            lat.push(now.saturating_sub(sent));
        }
        if let Some(out) = out.as_mut() {
            out.write_all(payload).and_then(|()| out.write_all(b"\n")).context("cannot write the rows")?;
        }
    }
    if let Some(mut out) = out {
        out.flush().context("cannot write the rows")?;
    }
    Ok(lat)
}

fn sent_us(payload: &[u8]) -> Option<u64> {
    let rest = payload.strip_prefix(b"{\"sent_us\":")?;
    let digits = rest.iter().take_while(|b| b.is_ascii_digit()).count();
    std::str::from_utf8(&rest[..digits]).ok()?.parse().ok()
}
