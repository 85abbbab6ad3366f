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

use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::{DeliveryResult, Message};
use rdkafka::producer::{BaseProducer, BaseRecord, Producer, ProducerContext};
use rdkafka::{ClientContext, Offset, TopicPartitionList};
use serde::{Deserialize, Serialize};

use super::changelog::Changelog;
use crate::checkpoint::{CheckpointError, Ledger, Planned};
use crate::kafka::{CALL_TIMEOUT, KafkaError, client_config, connection_options, flush, with_retry};
use crate::state::StateStore;

/// How long a read of the checkpoint partition waits with nothing arriving before it logs that
/// it is still waiting (and again as often).
const READ_WARN: Duration = Duration::from_secs(10);

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
#[derive(Debug, Default)]
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

/// Where the producer's deliveries landed, in the order they were reported: one partition's
/// deliveries are reported in the order its records were sent.
#[derive(Default)]
struct Landed(Mutex<Vec<Result<i64, rdkafka::error::KafkaError>>>);

impl ClientContext for Landed {}
impl ProducerContext for Landed {
    type DeliveryOpaque = ();
    fn delivery(&self, result: &DeliveryResult<'_>, _: ()) {
        let r = match result {
            Ok(m) => Ok(m.offset()),
            Err((e, _)) => Err(e.clone()),
        };
        if let Ok(mut landed) = self.0.lock() {
            landed.push(r);
        }
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

    fn fail(&self, e: KafkaError) -> CheckpointError {
        CheckpointError::Ledger { task: self.task.clone(), source: Box::new(e) }
    }

    /// Sends `body` under this owner's epoch, to land after every record sent before it;
    /// [`Self::confirm`] waits for it.
    fn send(&mut self, body: Body) -> Result<(), CheckpointError> {
        let record = Record { epoch: self.epoch, identity: self.identity.clone(), body };
        self.produce(&record)?;
        self.sent.push_back(record);
        Ok(())
    }

    fn produce(&self, record: &Record) -> Result<(), CheckpointError> {
        let value = serde_json::to_vec(record).map_err(|e| {
            CheckpointError::file(format!("{}:{}", self.topic, self.partition), format!("cannot encode: {e}"))
        })?;
        let key = record.key();
        let sent = self
            .producer
            .send(BaseRecord::<str, [u8]>::to(&self.topic).partition(self.partition).key(&key).payload(&value));
        sent.map_err(|(e, _)| {
            self.fail(KafkaError::Call { what: "writing a task's checkpoint record".into(), source: e })
        })
    }

    /// Waits until every record sent has landed and folds them in, in order (the module's
    /// opening says how); returns the last one's offset. A record that failed is sent again,
    /// with every record sent after it, so they land in the order they were sent.
    fn confirm(&mut self) -> Result<Option<i64>, CheckpointError> {
        let mut last = None;
        while !self.sent.is_empty() {
            let flushed = with_retry(&self.stop, "writing a task's checkpoint record", || flush(&self.producer));
            flushed.map_err(|e| self.fail(e))?;
            let landed = match self.producer.context().0.lock() {
                Ok(mut landed) => std::mem::take(&mut *landed),
                Err(_) => Vec::new(),
            };
            if landed.len() < self.sent.len() {
                return Err(self.fail(KafkaError::Stopped));
            }
            for result in landed {
                let Some(record) = self.sent.pop_front() else { break };
                match result {
                    Ok(offset) => {
                        if self.fold.applied.map_or(offset == 0, |a| offset == a + 1) {
                            self.fold.apply(offset, record);
                        } else {
                            self.read_to(offset)?;
                        }
                        last = Some(offset);
                    }
                    Err(e) => {
                        tracing::warn!("task {}: writing its checkpoint record: {e}; retrying", self.task);
                        self.sent.push_front(record);
                        break;
                    }
                }
            }
            if !self.sent.is_empty() {
                if self.stop.load(Ordering::Relaxed) {
                    return Err(self.fail(KafkaError::Stopped));
                }
                std::thread::sleep(Duration::from_millis(100));
                // Whatever was reported after the failure is written again behind it.
                if let Ok(mut landed) = self.producer.context().0.lock() {
                    landed.clear();
                }
                for record in &self.sent {
                    self.produce(record)?;
                }
            }
        }
        self.drain();
        Ok(last)
    }

    /// Folds what the reader has already fetched, without waiting: records of this owner's,
    /// already folded, are skipped; anyone else's are seen before the next plan, and the
    /// reader's queue stays short.
    fn drain(&mut self) {
        while let Some(Ok(m)) = self.consumer.poll(Duration::ZERO) {
            if self.fold.applied.is_some_and(|a| m.offset() <= a) {
                continue; // Folded already: most often this owner's own record, not parsed again.
            }
            if let Some(Ok(r)) = m.payload().map(serde_json::from_slice::<Record>) {
                self.fold.apply(m.offset(), r);
            }
        }
    }

    /// Folds the partition up to offset `to` (inclusive).
    fn read_to(&mut self, to: i64) -> Result<(), CheckpointError> {
        if to < 0 {
            return Ok(()); // An empty partition: a task never run.
        }
        let mut since = Instant::now();
        while self.fold.applied.is_none_or(|a| a < to) {
            if self.stop.load(Ordering::Relaxed) {
                return Err(self.fail(KafkaError::Stopped));
            }
            match self.consumer.poll(Duration::from_millis(100)) {
                Some(Ok(m)) => {
                    since = Instant::now();
                    let Some(payload) = m.payload() else { continue };
                    match serde_json::from_slice::<Record>(payload) {
                        Ok(r) => self.fold.apply(m.offset(), r),
                        Err(e) => tracing::warn!(
                            "task {}: checkpoint record at {}:{}@{} is not Weir's ({e}); skipped",
                            self.task,
                            self.topic,
                            self.partition,
                            m.offset()
                        ),
                    }
                }
                Some(Err(e)) => tracing::warn!("task {}: reading its checkpoint record: {e}", self.task),
                None => {
                    // Compaction may have removed the offsets up to `to`.
                    if let Ok(pos) = self.consumer.position()
                        && let Some(p) = pos.find_partition(&self.topic, self.partition)
                        && let Offset::Offset(next) = p.offset()
                        && next > to
                    {
                        return Ok(());
                    }
                    if since.elapsed() >= READ_WARN {
                        tracing::warn!(
                            "task {}: still reading its checkpoint record up to offset {to} (broker unavailable?)",
                            self.task
                        );
                        since = Instant::now();
                    }
                }
            }
        }
        Ok(())
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

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(batch_id: u64) -> Planned {
        Planned {
            batch_id,
            start: crate::source::Offsets::Log { next: 0 },
            end: crate::source::Offsets::Log { next: 1 },
            idle: vec![],
            flush: false,
            planned_at_ms: 0,
            side: None,
        }
    }

    fn rec(epoch: u64, body: Body) -> Record {
        Record { epoch, identity: "id".into(), body }
    }

    fn claim(epoch: u64) -> Record {
        rec(
            epoch,
            Body::Claim { owner: format!("owner {epoch}"), meta: None, side: None, plans: vec![], changelog: None },
        )
    }

    /// Against a broker (librdkafka's mock, in process): an owner's records fold without being
    /// read back while nobody else writes, a newer claim still fences it, and a commit it did
    /// not wait for is in the record once the ledger is dropped.
    #[test]
    fn an_owner_confirms_its_records_and_a_newer_claim_still_fences_it() {
        let cluster = rdkafka::mocking::MockCluster::new(1).unwrap();
        cluster.create_topic("ledger", 1, 1).unwrap();
        let options = vec![("bootstrap.servers".to_string(), cluster.bootstrap_servers())];
        let stop = Arc::new(AtomicBool::new(false));
        let dir = tempfile::tempdir().unwrap();
        let state = StateStore::open(dir.path()).unwrap();
        let open = |owner: &str| KafkaLedger::claim(&options, "ledger", 0, "t", owner, stop.clone()).unwrap();
        let mut a = open("a");
        a.set_side("dir-a".into());
        a.plan(&plan(0)).unwrap();
        a.commit(br#"{"next_batch": 1}"#, &state).unwrap();
        assert!(a.sent.is_empty(), "the first commit naming this directory is waited for");
        a.plan(&plan(1)).unwrap();
        a.commit(br#"{"next_batch": 2}"#, &state).unwrap();
        assert_eq!(a.sent.len(), 1, "later commits are not waited for");
        a.plan(&plan(2)).unwrap();
        assert_eq!((a.fold.epoch, a.fold.next_batch(), a.fold.applied), (1, 2, Some(5)));

        let b = open("b");
        assert_eq!((b.epoch(), b.restored().next_batch()), (2, 2));
        assert_eq!(b.restored().plans.keys().copied().collect::<Vec<_>>(), vec![2], "a's open plan is b's to run");
        match a.plan(&plan(3)) {
            Err(CheckpointError::Fenced { epoch: 1, newer: 2, .. }) => {}
            other => panic!("a wrote after b's claim and was not fenced: {other:?}"),
        }
        drop(b);

        let mut c = open("c");
        c.set_side("dir-c".into());
        c.plan(&plan(2)).unwrap();
        c.commit(br#"{"next_batch": 3}"#, &state).unwrap();
        c.plan(&plan(3)).unwrap();
        c.commit(br#"{"next_batch": 4}"#, &state).unwrap();
        assert_eq!(c.sent.len(), 1);
        drop(c);
        let read = KafkaLedger::read(&options, "ledger", 0, "t", stop.clone()).unwrap();
        assert_eq!((read.restored().epoch, read.restored().next_batch()), (3, 4));
        assert_eq!(read.restored().side.as_deref(), Some("dir-c"));
    }

    #[test]
    fn a_newer_claim_fences_every_later_record_of_the_older_owner() {
        let mut f = Fold::default();
        f.apply(0, claim(1));
        f.apply(1, rec(1, Body::Plan { plan: plan(0) }));
        f.apply(2, rec(1, Body::Commit { meta: serde_json::json!({"next_batch": 1}), side: None, changelog: None }));
        f.apply(3, claim(2));
        // The zombie (epoch 1) goes on: its plan and commit do not count.
        f.apply(4, rec(1, Body::Plan { plan: plan(1) }));
        f.apply(5, rec(1, Body::Commit { meta: serde_json::json!({"next_batch": 2}), side: None, changelog: None }));
        assert_eq!((f.epoch, f.next_batch(), f.plans.len()), (2, 1, 0));
        assert_eq!(f.claim_at, Some(3));
    }

    #[test]
    fn a_claim_that_does_not_raise_the_epoch_does_not_count() {
        let mut f = Fold::default();
        f.apply(0, claim(1));
        f.apply(1, claim(1));
        assert_eq!(f.claim_at, Some(0));
    }

    #[test]
    fn a_plan_made_before_the_new_claim_is_handed_to_the_new_owner() {
        let mut f = Fold::default();
        f.apply(0, claim(1));
        f.apply(1, rec(1, Body::Plan { plan: plan(0) }));
        f.apply(2, claim(2));
        assert_eq!(f.plans.keys().copied().collect::<Vec<_>>(), vec![0]);
    }

    #[test]
    fn records_fetched_twice_are_applied_once_and_compacted_claims_are_implied() {
        let mut f = Fold::default();
        // Compaction removed claim 1 and 2: the first record read is epoch 2's commit.
        f.apply(7, rec(2, Body::Commit { meta: serde_json::json!({"next_batch": 5}), side: None, changelog: None }));
        f.apply(8, rec(2, Body::Plan { plan: plan(5) }));
        f.apply(7, rec(2, Body::Commit { meta: serde_json::json!({"next_batch": 3}), side: None, changelog: None }));
        assert_eq!((f.epoch, f.next_batch(), f.plans.len()), (2, 5, 1));
    }

    #[test]
    fn compaction_keeps_where_the_newest_owner_started() {
        // Epoch 1 committed batch 3 and planned 4; epoch 2 claimed with that; the zombie (1)
        // then committed 4 and planned 5. Compaction keeps only the newest record per key, so
        // of epoch 1 only the zombie's records remain, ahead of them nothing.
        let mut f = Fold::default();
        let started = Body::Claim {
            owner: "b".into(),
            meta: Some(serde_json::json!({"next_batch": 4})),
            side: None,
            plans: vec![plan(4)],
            changelog: None,
        };
        f.apply(10, rec(2, started));
        f.apply(11, rec(1, Body::Commit { meta: serde_json::json!({"next_batch": 5}), side: None, changelog: None }));
        f.apply(12, rec(1, Body::Plan { plan: plan(5) }));
        assert_eq!((f.epoch, f.next_batch()), (2, 4));
        assert_eq!(f.plans.keys().copied().collect::<Vec<_>>(), vec![4]);
        assert_ne!(rec(1, Body::Plan { plan: plan(5) }).key(), rec(2, Body::Plan { plan: plan(5) }).key());
    }
}
