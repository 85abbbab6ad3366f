//! Stage 1's sink in a two-stage group (`docs/scale-out.md`): a batch's partials
//! (`aggregate/partials.rs`) written to the group's repartition topic, each to the partition its
//! key routes to, in messages named by (lane, batch id, part) (`shuffle.rs`). Every
//! partition gets at least one message per batch, which carries the batch's largest event time:
//! the watermark crosses the shuffle with it.
//!
//! A delivery counts once the broker has every message. It may be written again (a re-run after
//! a crash, a retry after a failed message) with the same messages under the same names, which
//! stage 2 skips as replays: that, not a transaction, is what makes the shuffle exactly-once, so
//! it works on brokers without transactions.

use super::{Delivery, RowSink, Rows, SinkError};
use crate::columns;
use crate::kafka::{AckedProducer, KafkaError, Outgoing};
use crate::shuffle::{self, Header, NO_TIME, Partial};

pub struct RepartitionSink {
    producer: AckedProducer,
    topic: String,
    /// The topic's partitions: the stage-2 tasks.
    partitions: u32,
    /// This task's input partition.
    lane: u32,
    /// Its owner's epoch.
    epoch: u64,
    /// Tumbling windows: partials without a key are routed by window.
    by_window: bool,
}

impl RepartitionSink {
    pub fn new(
        producer: AckedProducer,
        topic: String,
        partitions: u32,
        lane: u32,
        epoch: u64,
        by_window: bool,
    ) -> Self {
        Self { producer, topic, partitions, lane, epoch, by_window }
    }
}

impl RowSink for RepartitionSink {
    fn deliver(&mut self, delivery: &Delivery, rows: &Rows) -> Result<(), SinkError> {
        let task = uuid::Uuid::parse_str(delivery.checkpoint)
            .map_err(|e| shuffle_error(format!("the task's identity {:?}: {e}", delivery.checkpoint)))?
            .as_u128();
        let mut max_time = NO_TIME;
        let mut per: Vec<Vec<Partial>> = (0..self.partitions).map(|_| Vec::new()).collect();
        let keys = columns::items(&rows.keys, &rows.key_ends);
        for ((key, row), &start) in keys.zip(columns::items(&rows.rows, &rows.row_ends)).zip(&rows.times) {
            if row.is_empty() {
                max_time = max_time.max(start);
                continue;
            }
            let (end, acc) = shuffle::split_row(row).ok_or_else(|| shuffle_error("a partial row of under 8 bytes"))?;
            let q = shuffle::route(key, start, self.by_window, self.partitions);
            per[q as usize].push(Partial { start, end, key, acc });
        }
        let header =
            Header { lane: self.lane, task, epoch: self.epoch, batch: delivery.batch_id, part: 0, parts: 0, max_time };
        let messages: Vec<(i32, Vec<u8>)> = per
            .iter()
            .enumerate()
            .flat_map(|(q, partials)| shuffle::encode(header, partials).into_iter().map(move |m| (q as i32, m)))
            .collect();
        let outgoing: Vec<Outgoing> =
            messages.iter().map(|(q, m)| Outgoing { partition: *q, key: None, value: Some(m) }).collect();
        let what = format!("writing batch {} to the repartition topic {}", delivery.batch_id, self.topic);
        self.producer.write_all(&self.topic, &outgoing, &what)?;
        Ok(())
    }
}

fn shuffle_error(message: impl Into<String>) -> SinkError {
    SinkError::Kafka(KafkaError::Topic { topic: "repartition".into(), message: message.into() })
}
