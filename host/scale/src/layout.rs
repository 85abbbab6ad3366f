//! The group's tasks and topics: which task a partition the group assigns is, and which
//! partition of the checkpoint topic holds each task's record.
//!
//! Every process of a group derives the same [`Layout`] from the same pipeline and input, so
//! a task's checkpoint partition is the same wherever it runs: stage-1 tasks first, then
//! stage 2's.

use crate::pipeline::{Keyed, Pipeline};
use crate::shuffle;

/// The group's checkpoint topic.
pub fn ledger_topic(group: &str) -> String {
    format!("weir.{group}.checkpoints")
}

/// A task: an input partition (the only stage, or stage 1), or a repartition partition
/// (stage 2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum TaskId {
    Input(i32),
    Merge(i32),
}

/// The topics a group runs on, and where each task's checkpoint record is.
#[derive(Debug, Clone)]
pub(crate) struct Layout {
    pub input: String,
    /// The input's partitions: the tasks of the only stage, or of stage 1.
    pub lanes: i32,
    /// A two-stage group's repartition topic and its partitions (the stage-2 tasks).
    pub shuffle: Option<(String, i32)>,
    pub ledger: String,
}

impl Layout {
    pub(crate) fn of(pipeline: &Pipeline, group: &str, input: &str, lanes: i32) -> Self {
        let two_stage = matches!(pipeline.stateful.as_ref().map(|s| &s.keyed), Some(Keyed::Window(_)));
        // As many stage-2 tasks as stage-1 ones: the parallelism the input already asks for.
        let shuffle = two_stage.then(|| (shuffle::repartition_topic(group), lanes));
        Self { input: input.to_string(), lanes, shuffle, ledger: ledger_topic(group) }
    }

    pub(crate) fn topics(&self) -> Vec<&str> {
        std::iter::once(self.input.as_str()).chain(self.shuffle.as_ref().map(|(t, _)| t.as_str())).collect()
    }

    pub(crate) fn task(&self, topic: &str, partition: i32) -> Option<TaskId> {
        if topic == self.input {
            return Some(TaskId::Input(partition));
        }
        self.shuffle.as_ref().filter(|(t, _)| t == topic).map(|_| TaskId::Merge(partition))
    }

    /// The task's partition of the checkpoint topic: stage-1 tasks first, then stage 2's.
    pub(crate) fn ledger_partition(&self, task: TaskId) -> i32 {
        match task {
            TaskId::Input(p) => p,
            TaskId::Merge(q) => self.lanes + q,
        }
    }

    pub(crate) fn ledger_partitions(&self) -> i32 {
        self.lanes + self.shuffle.as_ref().map_or(0, |(_, q)| *q)
    }

    /// The task's topic and partition, as its name shows them.
    pub(crate) fn source_of(&self, task: TaskId) -> (&str, i32) {
        match (task, &self.shuffle) {
            (TaskId::Merge(q), Some((topic, _))) => (topic, q),
            (TaskId::Input(p) | TaskId::Merge(p), _) => (&self.input, p),
        }
    }

    pub(crate) fn describe(&self, tasks: &[TaskId]) -> String {
        let names: Vec<String> = tasks
            .iter()
            .map(|&t| {
                let (topic, p) = self.source_of(t);
                format!("{topic}-{p}")
            })
            .collect();
        format!("[{}]", names.join(", "))
    }
}
