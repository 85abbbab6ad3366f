//! `weir inspect PIPELINE.toml` for a pipeline with `[scale] group`: the group as Kafka holds it,
//! read without joining it. Members and their tasks come from the consumer group (each member's
//! assignment, decoded here); each task's epoch, owner, committed batch and position from its
//! checkpoint record; lag from its partition's end (the input's, or for a stage-2 task the
//! repartition topic's), looked at twice [`LAG_WATCH`] apart to tell the tasks that fall behind.
//! Safe while the group runs: it claims nothing and commits nothing.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use rdkafka::consumer::{BaseConsumer, Consumer};

use super::ledger::{Fold, KafkaLedger};
use super::{Layout, TaskId, kafka};
use crate::checkpoint::StateMeta;
use crate::driver::RunError;
use crate::kafka::{CALL_TIMEOUT, client_config, connection_options, with_retry};
use crate::pipeline::{Pipeline, SourceKind};
use crate::source::Offsets;

/// How long `weir inspect` watches the group between its two looks at each task: a task whose
/// lag grew by more than half of what arrived meanwhile is marked as falling behind. Longer
/// than a continuous-mode commit interval (1 s by default), so a task that keeps up is not.
const LAG_WATCH: Duration = Duration::from_secs(3);

/// The group's view, as text.
pub fn group(pipeline: &Pipeline) -> Result<String, RunError> {
    let (Some(group), SourceKind::Kafka(source)) = (pipeline.group.as_deref(), &pipeline.source.kind) else {
        unreachable!("the caller checked that the pipeline has a group")
    };
    let stop = Arc::new(AtomicBool::new(false));
    let topic = &source.topics[0];
    let partitions = super::input_partitions(source, topic, &stop)?;
    let layout = Layout::of(pipeline, group, topic, partitions);
    let consumer: BaseConsumer =
        client_config(&[], &connection_options(&source.options)).create().map_err(|e| kafka(e, topic))?;
    let mut out = String::new();
    let _ = match &layout.shuffle {
        None => writeln!(out, "group      {group} (pipeline {}, topic {topic}, {partitions} tasks)", pipeline.name),
        Some((shuffle, q)) => writeln!(
            out,
            "group      {group} (pipeline {}, topic {topic}: {partitions} stage-1 tasks; {shuffle}: {q} stage-2 \
             tasks, shown as merge-N)",
            pipeline.name
        ),
    };
    let all: Vec<TaskId> = (0..partitions)
        .map(TaskId::Input)
        .chain((0..layout.shuffle.as_ref().map_or(0, |(_, q)| *q)).map(TaskId::Merge))
        .collect();
    // Who holds what: the group's own answer where the broker gives one (some brokers do not
    // describe groups), else each task's newest claim.
    let mut held: BTreeMap<TaskId, String> = BTreeMap::new();
    // The members' names, where the broker described the group: a claim by anyone else is a
    // process that left or died, whose task waits for the group to move it.
    let mut live: Option<BTreeSet<String>> = None;
    let described = consumer.fetch_group_list(Some(group), CALL_TIMEOUT);
    match described.as_ref().map(|g| g.groups().first()) {
        Ok(Some(g)) if !g.members().is_empty() => {
            let _ = writeln!(out, "state      {}, {} members", g.state(), g.members().len());
            live = Some(g.members().iter().map(|m| m.client_id().to_string()).collect());
            for m in g.members() {
                let mut tasks: Vec<TaskId> = Vec::new();
                for t in layout.topics() {
                    let parts = m.assignment().and_then(|a| assigned(a, t)).unwrap_or_default();
                    tasks.extend(parts.into_iter().filter_map(|p| layout.task(t, p)));
                }
                for t in &tasks {
                    held.insert(*t, m.client_id().to_string());
                }
                let labels: Vec<String> = tasks.iter().map(|t| label(*t)).collect();
                let _ =
                    writeln!(out, "member     {} ({}) tasks [{}]", m.client_id(), m.client_host(), labels.join(", "));
            }
        }
        Ok(_) => {
            let _ = writeln!(out, "state      no members (nothing runs the group now)");
        }
        Err(e) => {
            let _ =
                writeln!(out, "state      the broker did not describe the group ({e}); holders from the tasks' claims");
        }
    }
    let described = described.is_ok();
    let look = |id| look(pipeline, source, &layout, &consumer, id, &stop);
    let first: Vec<Look> = all.iter().map(|&id| look(id)).collect::<Result<_, _>>()?;
    // The second look, a while later, tells which tasks fall behind.
    std::thread::sleep(LAG_WATCH);
    for (&id, before) in all.iter().zip(&first) {
        let now = look(id)?;
        let fold = &now.fold;
        if !described && let Some(owner) = &fold.owner {
            held.insert(id, owner.clone());
        }
        let gone = gone_note(live.as_ref(), fold.owner.as_deref());
        let _ = writeln!(
            out,
            "task {:<5} held by {}; epoch {} (claimed by {}{gone}); next batch {}; offset {}; lag {}{}; watermark {}",
            label(id),
            held.get(&id).map_or("nobody", String::as_str),
            fold.epoch,
            fold.owner.as_deref().unwrap_or("nobody yet"),
            fold.next_batch(),
            now.at.map_or("-".to_string(), |o| o.to_string()),
            now.lag(),
            trend_note(before, &now),
            now.meta
                .as_ref()
                .map(|m| m.watermark.current)
                .filter(|&w| w != crate::watermark::NONE)
                .map_or("none".to_string(), crate::progress::show_time),
        );
    }
    if !described {
        let mut by_owner: BTreeMap<&str, Vec<String>> = BTreeMap::new();
        for (id, owner) in &held {
            by_owner.entry(owner).or_default().push(label(*id));
        }
        for (owner, tasks) in by_owner {
            let _ = writeln!(out, "member     {owner} tasks [{}] (by claim)", tasks.join(", "));
        }
    }
    Ok(out)
}

/// One look at a task: its checkpoint record, and its position against its partition's end.
struct Look {
    fold: Fold,
    meta: Option<StateMeta>,
    /// The next offset its record says it reads, if it committed any.
    at: Option<i64>,
    /// Its partition's end.
    high: i64,
}

impl Look {
    fn lag(&self) -> i64 {
        (self.high - self.at.unwrap_or(0)).max(0)
    }
}

fn look(
    pipeline: &Pipeline,
    source: &crate::pipeline::KafkaSourceConfig,
    layout: &Layout,
    consumer: &BaseConsumer,
    id: TaskId,
    stop: &Arc<AtomicBool>,
) -> Result<Look, RunError> {
    let (t, p) = layout.source_of(id);
    let task = super::task::name(pipeline, t, p);
    let record = KafkaLedger::read(&source.options, &layout.ledger, layout.ledger_partition(id), &task, stop.clone())?;
    let fold = record.restored().clone();
    let (_, high) = with_retry(stop, "reading a task's input end", || consumer.fetch_watermarks(t, p, CALL_TIMEOUT))
        .map_err(|e| RunError::Source(e.into()))?;
    let meta: Option<StateMeta> = fold.meta.clone().and_then(|m| serde_json::from_value(m).ok());
    let at = meta.as_ref().and_then(|m| match &m.source {
        Offsets::Kafka { partitions } | Offsets::Repartition { partitions, .. } => {
            partitions.iter().find(|o| o.partition == p).map(|o| o.offset)
        }
        _ => None,
    });
    Ok(Look { fold, meta, at, high })
}

/// What follows a task's lag: that it grows, where between the two looks the task took in less
/// than half of what arrived in its partition (a task that keeps up takes in all of it, give or
/// take one trigger's worth, since its record moves once a batch), and that its position did
/// not move at all.
fn trend_note(before: &Look, now: &Look) -> String {
    let arrived = (now.high - before.high).max(0);
    let grew = now.lag() - before.lag();
    if arrived == 0 || grew <= 0 || 2 * grew <= arrived {
        return String::new();
    }
    let stuck = if now.at == before.at { ", its position not moving" } else { "" };
    format!(" (growing: +{grew} in {} s{stuck})", LAG_WATCH.as_secs())
}

/// What follows a task's claimant: that it is no longer in the group, where the broker named
/// the members (`live`) and the claimant is not one of them.
fn gone_note(live: Option<&BTreeSet<String>>, owner: Option<&str>) -> &'static str {
    match (live, owner) {
        (Some(live), Some(owner)) if !live.contains(owner) => ", no longer in the group",
        _ => "",
    }
}

/// A task as `weir inspect` shows it: its input partition, or `merge-` and its repartition
/// partition.
fn label(id: TaskId) -> String {
    match id {
        TaskId::Input(p) => p.to_string(),
        TaskId::Merge(q) => format!("merge-{q}"),
    }
}

/// The partitions of `topic` in a member's assignment, as the consumer protocol encodes it:
/// version (i16), then topics (i32 count; each a name as i16 length and bytes, then i32 count
/// of i32 partitions), then user data. `None` if the bytes are not that.
pub(super) fn assigned(bytes: &[u8], topic: &str) -> Option<Vec<i32>> {
    let mut r = Reader(bytes);
    r.take(2)?;
    let mut out = Vec::new();
    for _ in 0..r.i32()?.max(0) {
        let len = i16::from_be_bytes(r.take(2)?.try_into().ok()?);
        let name = r.take(usize::try_from(len).ok()?)?;
        for _ in 0..r.i32()?.max(0) {
            let p = r.i32()?;
            if name == topic.as_bytes() {
                out.push(p);
            }
        }
    }
    Some(out)
}

struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if self.0.len() < n {
            return None;
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Some(head)
    }

    fn i32(&mut self) -> Option<i32> {
        Some(i32::from_be_bytes(self.take(4)?.try_into().ok()?))
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::{Look, assigned, gone_note, trend_note};

    fn at(at: i64, high: i64) -> Look {
        Look { fold: Default::default(), meta: None, at: Some(at), high }
    }

    /// A task that took in what arrived is not marked, one that took in less than half is, and
    /// one that took in nothing is said not to move.
    #[test]
    fn a_task_is_marked_only_when_it_falls_behind() {
        assert_eq!(trend_note(&at(100, 100), &at(1100, 1100)), "");
        assert_eq!(trend_note(&at(100, 150), &at(1000, 1150)), "", "within a batch of what arrived");
        assert_eq!(trend_note(&at(100, 100), &at(100, 100)), "", "nothing arrived");
        assert_eq!(trend_note(&at(100, 100), &at(400, 1100)), " (growing: +700 in 3 s)");
        assert_eq!(trend_note(&at(100, 100), &at(100, 1100)), " (growing: +1000 in 3 s, its position not moving)");
    }

    /// A claim by a process the broker does not list as a member is marked; one by a member,
    /// or where the broker named no members, is not.
    #[test]
    fn a_claim_by_a_process_that_left_the_group_is_marked() {
        let live: std::collections::BTreeSet<String> = ["host-a:1".to_string()].into();
        assert_eq!(gone_note(Some(&live), Some("host-b:2")), ", no longer in the group");
        assert_eq!(gone_note(Some(&live), Some("host-a:1")), "");
        assert_eq!(gone_note(None, Some("host-b:2")), "");
        assert_eq!(gone_note(Some(&live), None), "");
    }

    fn encode(topics: &[(&str, Vec<i32>)]) -> Vec<u8> {
        let mut b = vec![0, 1];
        b.extend((topics.len() as i32).to_be_bytes());
        for (name, parts) in topics {
            b.extend((name.len() as i16).to_be_bytes());
            b.extend(name.as_bytes());
            b.extend((parts.len() as i32).to_be_bytes());
            for p in parts {
                b.extend(p.to_be_bytes());
            }
        }
        b.extend(0i32.to_be_bytes()); // no user data
        b
    }

    #[test]
    fn an_assignment_yields_the_topics_partitions() {
        let b = encode(&[("orders", vec![0, 3, 5]), ("other", vec![1])]);
        assert_eq!(assigned(&b, "orders"), Some(vec![0, 3, 5]));
        assert_eq!(assigned(&b, "none"), Some(vec![]));
        assert_eq!(assigned(&b[..b.len() - 9], "orders"), None, "cut inside the second topic");
    }

    proptest! {
        /// Whatever the broker hands back, decoding never panics.
        #[test]
        fn any_bytes_decode_or_are_refused(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
            let _ = assigned(&bytes, "orders");
        }

        #[test]
        fn encoded_assignments_round_trip(parts in proptest::collection::vec(0i32..1000, 0..50)) {
            prop_assert_eq!(assigned(&encode(&[("orders", parts.clone())]), "orders"), Some(parts));
        }
    }
}
