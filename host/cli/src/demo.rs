//! `weir demo`: the whole product in one command, with nothing to install. An embedded
//! Kafka-protocol broker (librdkafka's mock cluster, in-process on a loopback port), a producer
//! of generated orders, and the orders error-rate pipeline reading them from Kafka through the
//! Wasm plugins; each finalized window is printed, with an alert when its error rate passes the
//! threshold. Ctrl-C stops it cleanly.
//!
//! The producer replays the generator's simulated clock (1000 orders per simulated second) at
//! `rate` orders per real second, and injects error bursts into every fifth simulated minute so
//! that there is something to alert on.

use std::collections::HashMap;
use std::io::Write;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use crate::driver::{self, Flush, Output, RunOptions, Stages};
use crate::feed;
use crate::pipeline::{Pipeline, SourceKind};
use crate::plugin::Runtime;
use crate::progress::{Progress, show_time};
use crate::sink::{Delivery, RowSink, Rows, SinkError};
use anyhow::{Context, Result, bail};
use rdkafka::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::mocking::MockCluster;
use rdkafka::{Offset, TopicPartitionList};

pub(super) struct DemoArgs {
    pub pipeline: Pipeline,
    /// Orders produced per second.
    pub rate: u64,
    /// Produce this many orders, wait for the pipeline to read them all, and stop.
    pub events: Option<u64>,
    /// Alert when a window's error rate is above this fraction.
    pub threshold: f64,
    /// One JSON progress object per batch on stderr.
    pub progress_json: bool,
}

const TOPIC: &str = "orders";
const PARTITIONS: i32 = 4;

pub(super) fn demo(mut args: DemoArgs, runtime: &Arc<Runtime>, stop: Arc<AtomicBool>) -> Result<()> {
    let cluster = MockCluster::new(1).context("cannot start the embedded broker")?;
    cluster.create_topic(TOPIC, PARTITIONS, 1).context("cannot create the orders topic")?;
    let brokers = cluster.bootstrap_servers();
    let group = match &mut args.pipeline.source.kind {
        SourceKind::Kafka(k) if k.topics == [TOPIC] => {
            k.options.retain(|(name, _)| name != "bootstrap.servers");
            k.options.push(("bootstrap.servers".into(), brokers.clone()));
            k.group_id.clone()
        }
        _ => bail!("the demo pipeline must read the Kafka topic `{TOPIC}`"),
    };
    eprintln!(
        "embedded broker at {brokers}; producing {} orders/s into `{TOPIC}` ({PARTITIONS} partitions); Ctrl-C stops",
        args.rate
    );

    let produced = Arc::new(AtomicU64::new(0));
    let producer = {
        let (brokers, stop, produced) = (brokers.clone(), stop.clone(), produced.clone());
        let (rate, events) = (args.rate, args.events);
        std::thread::spawn(move || feed::produce(&brokers, TOPIC, PARTITIONS, rate, events, &stop, &produced))
    };
    let watcher = args.events.map(|n| {
        let (brokers, stop) = (brokers.clone(), stop.clone());
        std::thread::spawn(move || stop_when_read(&brokers, &group, n, &produced, &stop))
    });

    let scratch = driver::scratch_checkpoint().context("cannot create a checkpoint directory")?;
    let opts = RunOptions {
        checkpoint: scratch.path().to_path_buf(),
        dead_letters: None,
        progress: Progress::new(&args.pipeline.name, args.progress_json, None),
        stop: stop.clone(),
        fsync: true,
        flush: Flush::AsConfigured { default: false },
        own_share: true,
        ledger: None,
    };
    let alerts = Output::Sink(Box::new(Alerts { threshold: args.threshold, out: std::io::stdout() }));
    let result = Stages::wasm(&args.pipeline, runtime, alerts, &stop)
        .and_then(|stages| driver::run(&args.pipeline, stages, opts));
    stop.store(true, Ordering::Relaxed);
    let produced = producer.join().map_err(|_| anyhow::anyhow!("the producer thread panicked"))??;
    if let Some(w) = watcher {
        w.join().map_err(|_| anyhow::anyhow!("the watcher thread panicked"))??;
    }
    let summary = result.context("the demo pipeline failed")?;
    eprintln!("produced {produced} orders; {}", summary.render());
    Ok(())
}

/// Prints finalized windows, and an alert line for each one over the threshold.
struct Alerts<W: Write> {
    threshold: f64,
    out: W,
}

impl<W: Write + Send> RowSink for Alerts<W> {
    fn deliver(&mut self, _: &Delivery, rows: &Rows) -> Result<(), SinkError> {
        for (_, row) in rows.iter().filter(|(_, row)| !row.is_empty()) {
            let v: serde_json::Value = serde_json::from_slice(row).map_err(std::io::Error::other)?;
            let num = |k: &str| v.get(k).and_then(serde_json::Value::as_f64).unwrap_or(0.0);
            let start = v.get("window_start").and_then(serde_json::Value::as_i64).unwrap_or(0);
            let rate = num("error_rate");
            writeln!(
                self.out,
                "window {}  orders {:>6}  errors {:>5}  error rate {:>5.2}%",
                show_time(start),
                num("count"),
                num("errors"),
                rate * 100.0
            )?;
            if rate > self.threshold {
                writeln!(
                    self.out,
                    "ALERT  window {}: error rate {:.2}% is above {:.2}%",
                    show_time(start),
                    rate * 100.0,
                    self.threshold * 100.0
                )?;
            }
        }
        self.out.flush()?;
        Ok(())
    }
}

/// With `--events N`: once the producer is done, waits until the pipeline's group offsets
/// (committed after every batch, for lag monitoring) cover everything produced, then stops it.
fn stop_when_read(brokers: &str, group: &str, n: u64, produced: &AtomicU64, stop: &AtomicBool) -> Result<()> {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .set("group.id", group)
        .create()
        .context("cannot create the lag watcher")?;
    while !stop.load(Ordering::Relaxed) {
        std::thread::sleep(Duration::from_millis(100));
        if produced.load(Ordering::Relaxed) < n {
            continue;
        }
        let mut tpl = TopicPartitionList::new();
        for p in 0..PARTITIONS {
            tpl.add_partition(TOPIC, p);
        }
        let Ok(committed) = consumer.committed_offsets(tpl, Duration::from_secs(2)) else { continue };
        let read: HashMap<i32, i64> = committed
            .elements()
            .iter()
            .map(|e| (e.partition(), if let Offset::Offset(o) = e.offset() { o } else { 0 }))
            .collect();
        let total: i64 = read.values().sum();
        if total >= n as i64 {
            stop.store(true, Ordering::Relaxed);
        }
    }
    Ok(())
}
