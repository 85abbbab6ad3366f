//! A warning for a group that stalls: this process has held no task for longer than the
//! group's session timeout while some of the group's tasks are held by no member. A coordinator
//! that never finishes a rebalance (one waiting on a member that is gone) looks like that, and
//! without this nothing would say so: the process logs nothing while it holds nothing, and
//! roll-ups print only while batches arrive.
//!
//! Idle alone is no fault (a group may have more processes than tasks), so the warning asks
//! the broker how the group's tasks are held first; a broker that does not describe the group,
//! or one whose members' assignments it cannot read (the consumer protocol's), gives no answer,
//! and no warning.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext};

use super::{Layout, TaskId};
use crate::kafka::CALL_TIMEOUT;

/// The session timeout on the consumer protocol, where the broker sets it: Kafka's default
/// (`group.consumer.session.timeout.ms`).
const BROKER_SESSION_TIMEOUT: Duration = Duration::from_secs(45);

/// When to look: after [`StallWatch::after`] idle, and again each time as long as it lasts.
pub(super) struct StallWatch {
    after: Duration,
    idle_since: Option<Instant>,
    last_look: Option<Instant>,
}

impl StallWatch {
    /// A watch for a member whose session timeout is the pipeline's `session.timeout.ms`, or
    /// `default_ms` (classic protocol), or the broker's (consumer protocol).
    pub(super) fn new(options: &[(String, String)], default_ms: &str, consumer_protocol: bool) -> Self {
        let ms = |v: &str| v.parse::<u64>().ok().map(Duration::from_millis);
        let configured = options.iter().find(|(k, _)| k == "session.timeout.ms").and_then(|(_, v)| ms(v));
        let after = if consumer_protocol {
            BROKER_SESSION_TIMEOUT
        } else {
            configured.or_else(|| ms(default_ms)).unwrap_or(BROKER_SESSION_TIMEOUT)
        };
        StallWatch { after, idle_since: None, last_look: None }
    }

    /// Whether to ask the broker now: this process has held no task (`idle`) for longer than
    /// the session timeout, and did not ask within the last one.
    pub(super) fn due(&mut self, idle: bool, now: Instant) -> bool {
        if !idle {
            (self.idle_since, self.last_look) = (None, None);
            return false;
        }
        let since = *self.idle_since.get_or_insert(now);
        let looked_long_ago = self.last_look.is_none_or(|t| now.duration_since(t) >= self.after);
        if now.duration_since(since) >= self.after && looked_long_ago {
            self.last_look = Some(now);
            return true;
        }
        false
    }

    /// Warns if the group has tasks that no member holds, this process holding none for
    /// longer than the session timeout.
    pub(super) fn look<C: ConsumerContext>(&self, consumer: &BaseConsumer<C>, group: &str, layout: &Layout) {
        let Ok(list) = consumer.fetch_group_list(Some(group), CALL_TIMEOUT) else { return };
        let Some(g) = list.groups().first() else { return };
        let (mut held, mut read) = (BTreeSet::new(), 0);
        for m in g.members() {
            let Some(bytes) = m.assignment().filter(|b| !b.is_empty()) else { continue };
            for t in layout.topics() {
                let Some(parts) = super::inspect::assigned(bytes, t) else { return };
                held.extend(parts.into_iter().filter_map(|p| layout.task(t, p)));
            }
            read += 1;
        }
        // This process is a member: a description with no readable assignment is no answer.
        if read == 0 {
            return;
        }
        let unheld = unheld(layout, &held);
        if unheld > 0 {
            tracing::warn!(
                "group {group}: this process has held no task for over {:?} while {unheld} of the group's tasks are \
                 held by no member (group state {}, {} members): the group may be stalled; `weir inspect` shows \
                 who claimed what",
                self.after,
                g.state(),
                g.members().len()
            );
        }
    }
}

/// How many of the group's tasks are not in `held`.
fn unheld(layout: &Layout, held: &BTreeSet<TaskId>) -> usize {
    let q = layout.shuffle.as_ref().map_or(0, |(_, q)| *q);
    (0..layout.lanes).map(TaskId::Input).chain((0..q).map(TaskId::Merge)).filter(|t| !held.contains(t)).count()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Idle past the session timeout, it looks once, then once per session timeout; any task
    /// held starts the count again.
    #[test]
    fn it_looks_once_per_session_timeout_of_idleness() {
        let opts = vec![("session.timeout.ms".to_string(), "3000".to_string())];
        let mut w = StallWatch::new(&opts, "10000", false);
        let t0 = Instant::now();
        let at = |s: u64| t0 + Duration::from_secs(s);
        assert!(!w.due(true, at(0)));
        assert!(!w.due(true, at(2)));
        assert!(w.due(true, at(3)));
        assert!(!w.due(true, at(5)));
        assert!(w.due(true, at(6)));
        assert!(!w.due(false, at(7)));
        assert!(!w.due(true, at(8)));
        assert!(w.due(true, at(11)));
        assert_eq!(StallWatch::new(&[], "10000", false).after, Duration::from_secs(10));
        assert_eq!(StallWatch::new(&opts, "10000", true).after, BROKER_SESSION_TIMEOUT);
    }

    #[test]
    fn tasks_of_both_stages_that_no_member_holds_are_counted() {
        let layout = Layout { input: "orders".into(), lanes: 3, shuffle: Some(("r".into(), 2)), ledger: "l".into() };
        let held: BTreeSet<TaskId> = [TaskId::Input(0), TaskId::Merge(1)].into();
        assert_eq!(unheld(&layout, &held), 3);
        assert_eq!(unheld(&layout, &BTreeSet::new()), 5);
    }
}
