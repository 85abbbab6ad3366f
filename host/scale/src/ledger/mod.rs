//! A task's checkpoint record in Kafka: the group's checkpoint topic, compacted, one partition
//! per task (task = input partition, so task `p` writes partition `p`). Any process can read it,
//! so a task's checkpoint travels with the task; the local checkpoint directory is rebuilt from
//! it whenever the task is assigned (`task.rs`).
//!
//! Three kinds of record, each carrying its writer's ownership epoch and the task's identity:
//! - `claim`: written by a process the group assigned the task to, with an epoch one above every
//!   epoch in the partition, and with what it claimed (the last commit and the open plans): a
//!   claim alone says where its owner starts;
//! - `plan`: a batch's plan, written before the batch runs (the local `offsets/N`);
//! - `commit`: the state's record of a committed batch (next batch id, source position, ...),
//!   and for a task with state (a stage-2 task), which epoch's records in the changelog hold
//!   that state (`changelog.rs`), whose records of the batch are written first.
//!
//! **Fencing.** One partition is one total order, and every reader folds it the same way: a
//! claim counts only if its epoch is above every epoch before it; any other record counts only
//! if its epoch is at least the newest. So once a claim for epoch E is in the partition, every
//! later record of an older owner is ignored by everyone. A plan is confirmed before its batch
//! runs: the writer folds the partition up to its own record. If a newer claim came first, the
//! writer is fenced ([`CheckpointError::Fenced`]) and delivers nothing. If the writer's plan came
//! first, the new owner reads that plan when it claims, and re-runs it as planned: same
//! records, same batch id, same rows, which the sink dedupes on (identity, batch id).
//!
//! **Confirming without reading back.** Offsets in a partition are given in order, one per
//! record, and never reused, so a record that lands at the offset right after the last one the
//! writer has folded has nothing before it the writer has not seen: the writer folds it as it
//! sent it, with no read. Only a gap (someone else wrote, or a retry left a copy) makes it read
//! the partition up to its record. Either way every reader folds the same records in the same
//! order. A commit is not waited for once the record names this owner's directory (see
//! [`Ledger::commit`]): the next plan waits for it, since it lands before that plan.
//!
//! **Compaction** keeps the newest record of each key, and a record's key is its kind and epoch
//! (`commit-7`). Keyed by kind alone, a zombie's commit written after a newer claim would be the
//! newest `commit`, and compaction would remove the commit the new owner started from; keyed by
//! epoch, the newest claim and its epoch's newest plan and commit always survive, and the claim
//! carries what its owner started from. A partition keeps three records per epoch (per time a
//! task was assigned). A fetch across compacted gaps may hand back records twice (tansu does), so
//! the fold skips offsets it has applied.

mod io;
#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::producer::BaseProducer;
use rdkafka::{Offset, TopicPartitionList};
use serde::{Deserialize, Serialize};

use super::changelog::Changelog;
use crate::checkpoint::{CheckpointError, Ledger, Planned};
use crate::kafka::{CALL_TIMEOUT, KafkaError, client_config, connection_options, flush, with_retry};
use crate::state::StateStore;
use io::Landed;

/// The reader's `fetch.wait.max.ms`: how long the broker may hold a fetch that finds nothing
/// new. The reader stays assigned, so this is how often an idle task asks; it reads only when
/// someone else wrote (a claim, a rebalance), so a record seen a tenth of a second later costs
/// nothing, while a fetch every few milliseconds from every task is a steady load on the broker.
const READ_WAIT_MS: &str = "100";

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Record {
    epoch: u64,
    identity: String,
    #[serde(flatten)]
    body: Body,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
enum Body {
    /// `owner`: who claimed it (host and pid), for `weir inspect` and logs; `meta`, `side` and
    /// `plans`: the last commit and the open plans it claimed, so the claim alone says where it
    /// starts.
    Claim {
        owner: String,
        meta: Option<serde_json::Value>,
        side: Option<String>,
        plans: Vec<Planned>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        changelog: Option<u64>,
    },
    Plan {
        plan: Planned,
    },
    /// `side`: the local directory whose side-output files `meta`'s lengths measure
    /// (`task.rs`); `changelog`: the epoch whose changelog records hold the state.
    Commit {
        meta: serde_json::Value,
        side: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        changelog: Option<u64>,
    },
}

impl Record {
    /// Its compaction key: kind and epoch (the module's opening says why).
    fn key(&self) -> String {
        let kind = match self.body {
            Body::Claim { .. } => "claim",
            Body::Plan { .. } => "plan",
            Body::Commit { .. } => "commit",
        };
        format!("{kind}-{}", self.epoch)
    }
}

/// What the partition says, folded in order.
#[derive(Debug, Default, Clone)]
pub(super) struct Fold {
    /// The newest owner's epoch (0: never claimed).
    pub epoch: u64,
    /// Where the newest counted claim is.
    claim_at: Option<i64>,
    pub identity: Option<String>,
    pub owner: Option<String>,
    /// The last committed batch's state record.
    pub meta: Option<serde_json::Value>,
    /// Which local directory's side outputs the record's lengths measure.
    pub side: Option<String>,
    /// Whose changelog records hold the state (a stage-2 task's; `None`: no state there).
    pub changelog: Option<u64>,
    /// Plans at or after the next batch: re-run as planned.
    pub plans: BTreeMap<u64, Planned>,
    /// The highest offset applied.
    applied: Option<i64>,
}

impl Fold {
    fn apply(&mut self, offset: i64, r: Record) {
        if self.applied.is_some_and(|a| offset <= a) {
            return;
        }
        self.applied = Some(offset);
        match r.body {
            Body::Claim { owner, meta, side, plans, changelog } => {
                if r.epoch <= self.epoch {
                    return;
                }
                self.epoch = r.epoch;
                self.claim_at = Some(offset);
                self.owner = Some(owner);
                // What the claimer read: the same as this fold up to here, unless compaction
                // removed records this fold would have needed.
                if meta.is_some() {
                    self.meta = meta;
                    self.side = side;
                    self.changelog = changelog;
                }
                self.plans.extend(plans.into_iter().map(|p| (p.batch_id, p)));
                let next = self.next_batch();
                self.plans.retain(|&b, _| b >= next);
            }
            body => {
                if r.epoch < self.epoch {
                    return;
                }
                // Newer than any claim read: its claim was compacted away.
                self.epoch = r.epoch;
                match body {
                    Body::Plan { plan } => {
                        self.plans.insert(plan.batch_id, plan);
                    }
                    Body::Commit { meta, side, changelog } => {
                        let next = meta.get("next_batch").and_then(serde_json::Value::as_u64).unwrap_or(0);
                        self.plans.retain(|&b, _| b >= next);
                        self.meta = Some(meta);
                        self.side = side;
                        self.changelog = changelog;
                    }
                    Body::Claim { .. } => {}
                }
            }
        }
        if self.identity.is_none() {
            self.identity = Some(r.identity);
        }
    }

    /// The next batch id the committed record names (0: nothing committed).
    pub fn next_batch(&self) -> u64 {
        self.meta.as_ref().and_then(|m| m.get("next_batch")).and_then(serde_json::Value::as_u64).unwrap_or(0)
    }
}

/// A task's checkpoint record, open for one owner epoch.
pub struct KafkaLedger {
    topic: String,
    partition: i32,
    /// The task, for messages: `TOPIC-PARTITION` of the input.
    task: String,
    epoch: u64,
    identity: String,
    /// The local directory whose side outputs this owner's commits measure.
    side: Option<String>,
    producer: BaseProducer<Landed>,
    consumer: BaseConsumer,
    fold: Fold,
    /// Records sent and not yet folded, oldest first.
    sent: VecDeque<Record>,
    stop: Arc<AtomicBool>,
    /// A stage-2 task's state, written with each commit.
    changelog: Option<Changelog>,
}

impl KafkaLedger {
    /// Reads task `partition`'s record to its end, claiming nothing (`weir inspect`, and the
    /// first step of a claim).
    pub(super) fn read(
        options: &[(String, String)],
        topic: &str,
        partition: i32,
        task: &str,
        stop: Arc<AtomicBool>,
    ) -> Result<Self, CheckpointError> {
        let conn = connection_options(options);
        let fail = |e: KafkaError| CheckpointError::Ledger { task: task.to_string(), source: Box::new(e) };
        let producer: BaseProducer<Landed> = client_config(
            &[("enable.idempotence", "true"), ("acks", "all"), ("linger.ms", "0"), ("compression.type", "lz4")],
            &conn,
        )
        .create_with_context(Landed::default())
        .map_err(|e| fail(KafkaError::Config(e)))?;
        let consumer: BaseConsumer = client_config(
            &[("group.id", "weir-ledger"), ("enable.auto.commit", "false"), ("fetch.wait.max.ms", READ_WAIT_MS)],
            &conn,
        )
        .create()
        .map_err(|e| fail(KafkaError::Config(e)))?;
        let mut tpl = TopicPartitionList::new();
        tpl.add_partition_offset(topic, partition, Offset::Beginning).map_err(|e| fail(KafkaError::Config(e)))?;
        consumer.assign(&tpl).map_err(|e| fail(KafkaError::Config(e)))?;
        let mut ledger = KafkaLedger {
            topic: topic.to_string(),
            partition,
            task: task.to_string(),
            epoch: 0,
            identity: String::new(),
            side: None,
            producer,
            consumer,
            fold: Fold::default(),
            sent: VecDeque::new(),
            stop,
            changelog: None,
        };
        let (_, high) = with_retry(&ledger.stop, "reading a task's checkpoint record", || {
            ledger.consumer.fetch_watermarks(topic, partition, CALL_TIMEOUT)
        })
        .map_err(fail)?;
        ledger.read_to(high - 1)?;
        Ok(ledger)
    }

    /// Reads the task's record to its end and claims the task with a new epoch. Returns the
    /// ledger and what the record held before the claim.
    pub(super) fn claim(
        options: &[(String, String)],
        topic: &str,
        partition: i32,
        task: &str,
        owner: &str,
        stop: Arc<AtomicBool>,
    ) -> Result<Self, CheckpointError> {
        let mut ledger = Self::read(options, topic, partition, task, stop)?;
        ledger.epoch = ledger.fold.epoch + 1;
        ledger.identity = ledger.fold.identity.clone().unwrap_or_else(|| uuid::Uuid::now_v7().to_string());
        let claimed = Body::Claim {
            owner: owner.to_string(),
            meta: ledger.fold.meta.clone(),
            side: ledger.fold.side.clone(),
            plans: ledger.fold.plans.values().cloned().collect(),
            changelog: ledger.fold.changelog,
        };
        ledger.send(claimed)?;
        let at = ledger.confirm()?;
        if ledger.fold.claim_at != at {
            return Err(CheckpointError::Fenced {
                task: task.to_string(),
                epoch: ledger.epoch,
                newer: ledger.fold.epoch,
            });
        }
        Ok(ledger)
    }

    /// Names the local directory whose side-output lengths this owner's commits record.
    pub(super) fn set_side(&mut self, side: String) {
        self.side = Some(side);
    }

    /// Makes `changelog` (open under this owner's epoch, its snapshot of the state written)
    /// the state's record: a commit of the claimed batch again, saying so. From here on every
    /// commit writes the batch's changes there first.
    pub(super) fn adopt(&mut self, mut changelog: Changelog) -> Result<(), CheckpointError> {
        if let Some(meta) = self.fold.meta.clone() {
            let body = Body::Commit { meta, side: self.side.clone(), changelog: Some(self.epoch) };
            self.send(body)?;
            self.confirm()?;
            if self.fold.epoch != self.epoch {
                return Err(CheckpointError::Fenced {
                    task: self.task.clone(),
                    epoch: self.epoch,
                    newer: self.fold.epoch,
                });
            }
        }
        changelog.tombstone_stale()?;
        self.changelog = Some(changelog);
        Ok(())
    }

    pub(super) fn epoch(&self) -> u64 {
        self.epoch
    }

    pub(super) fn identity(&self) -> &str {
        &self.identity
    }

    /// What the record held when this owner claimed it.
    pub(super) fn restored(&self) -> &Fold {
        &self.fold
    }
}

impl Ledger for KafkaLedger {
    fn plan(&mut self, plan: &Planned) -> Result<(), CheckpointError> {
        self.send(Body::Plan { plan: plan.clone() })?;
        self.confirm()?;
        if self.fold.epoch != self.epoch {
            return Err(CheckpointError::Fenced { task: self.task.clone(), epoch: self.epoch, newer: self.fold.epoch });
        }
        Ok(())
    }

    fn commit(&mut self, meta: &[u8], state: &StateStore) -> Result<(), CheckpointError> {
        let meta: serde_json::Value = serde_json::from_slice(meta).map_err(|e| {
            CheckpointError::file(format!("{}:{}", self.topic, self.partition), format!("cannot encode: {e}"))
        })?;
        let changelog = match self.changelog.as_mut() {
            Some(c) => {
                let next = meta.get("next_batch").and_then(serde_json::Value::as_u64).unwrap_or(0);
                c.write(next.saturating_sub(1), state)?;
                Some(self.epoch)
            }
            None => None,
        };
        self.send(Body::Commit { meta, side: self.side.clone(), changelog })?;
        // Until the record's newest commit is this directory's, the local state must not get
        // ahead of it (`task.rs`, `make_local`): wait for this one.
        if self.fold.side != self.side {
            self.confirm()?;
        }
        Ok(())
    }

    fn sync(&mut self) -> Result<(), CheckpointError> {
        self.confirm().map(|_| ())
    }
}

impl Drop for KafkaLedger {
    /// A commit not yet waited for is sent on its way: without it, the task's next owner would
    /// run the last batch again (harmless: its rows are deduped, but wasted).
    fn drop(&mut self) {
        if !self.sent.is_empty() {
            let _ = flush(&self.producer);
        }
    }
}
