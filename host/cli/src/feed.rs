//! Generated orders fed into a broker at a steady rate, for `weir demo` and `weir broker
//! --orders`: the generator's simulated clock (1000 orders per simulated second) replayed at
//! `rate` orders per real second, round robin over the topic's partitions, with error bursts in
//! every fifth simulated minute so that an error-rate pipeline has something to alert on.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use anyhow::{Context, Result, bail};
use rdkafka::ClientConfig;
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};

use crate::workload::OrderStream;

/// Produces paced orders until `events` are out or `stop` is raised; returns how many.
pub(crate) fn produce(
    brokers: &str,
    topic: &str,
    partitions: i32,
    rate: u64,
    events: Option<u64>,
    stop: &AtomicBool,
    produced: &AtomicU64,
) -> Result<u64> {
    let producer: BaseProducer = ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .set("linger.ms", "5")
        .create()
        .context("cannot create the orders producer")?;
    let mut orders = OrderStream::new(events.unwrap_or(u64::MAX), 7);
    let pacer = crate::Pacer::new(rate);
    let mut n = 0u64;
    while !stop.load(Ordering::Relaxed) {
        if let Some(wait) = pacer.ahead(n) {
            producer.poll(Duration::ZERO);
            std::thread::sleep(wait.min(Duration::from_millis(10)));
            continue;
        }
        let Some(line) = orders.next_line() else { break };
        let line = with_bursts(line.trim_end(), n);
        let record = BaseRecord::<(), str>::to(topic).payload(&line).partition((n % partitions.max(1) as u64) as i32);
        match producer.send(record) {
            Ok(()) => {
                n += 1;
                produced.store(n, Ordering::Relaxed);
            }
            Err((e, _)) => {
                producer.poll(Duration::from_millis(10));
                if !matches!(
                    e,
                    rdkafka::error::KafkaError::MessageProduction(rdkafka::types::RDKafkaErrorCode::QueueFull)
                ) {
                    bail!("the orders producer failed: {e}");
                }
            }
        }
    }
    producer.flush(Duration::from_secs(10)).context("cannot flush the orders producer")?;
    Ok(n)
}

/// In every fifth simulated minute, one order in six more fails.
fn with_bursts(line: &str, n: u64) -> String {
    let minute = n / 60_000;
    if minute % 5 == 2 && n.is_multiple_of(6) {
        line.replace("\"status\":\"OK\"", "\"status\":\"ERROR\"")
    } else {
        line.to_string()
    }
}
