//! The glue [`export_plugin!`](crate::export_plugin) expands to: batch loops that adapt the WIT
//! exports to the role traits. Not a public API.

use std::sync::OnceLock;

use crate::batch::{EventBatchView, RawBatchView};
use crate::process::{Context, Timer};
use crate::{Aggregator, Config, Delivery, Emitter, Parser, PluginError, Processor, Rows, Sink, Transformer, types};

pub use crate::__bindings::exports::weir::plugin::{aggregator, parser, processor, sink, transformer};
pub use crate::types::{BatchOutput, EventBatch, PluginError as WitError, RawBatch};

/// `accumulate` folds in batch order only when its groups hold at least one event in this many
/// of the batch: a batch-order pass visits every event, the group order only the members.
const BATCH_ORDER_MIN_SHARE: usize = 4;

/// Nor when the group order reads the batch in this many forward sweeps or fewer (a tumbling
/// window's few groups): each sweep is already read front to back, and the batch order would
/// only add its own pass.
const GROUP_ORDER_MAX_SWEEPS: usize = 8;

type WitResult<T> = Result<T, WitError>;

/// The role's value for this instance, built from the config on first use. A failed `new` is not
/// cached, so every call reports the config error.
fn role<T>(cell: &OnceLock<T>, new: fn(&Config) -> Result<T, PluginError>) -> Result<&T, PluginError> {
    if let Some(v) = cell.get() {
        return Ok(v);
    }
    let config = Config::from_host()?;
    let v = new(&config)?;
    config.check_all_read()?;
    Ok(cell.get_or_init(|| v))
}

fn unsupported(role: &str) -> WitError {
    WitError::Unsupported(format!("this component does not implement the {role} role"))
}

fn record_error(index: usize, e: crate::RecordError) -> types::RecordError {
    types::RecordError { index: index as u32, kind: e.kind, message: e.message }
}

pub fn parse<P: Parser>(cell: &OnceLock<P>, input: RawBatch) -> WitResult<BatchOutput> {
    if !P::IMPLEMENTED {
        return Err(unsupported("parser"));
    }
    let p = role(cell, P::new)?;
    let mut view = RawBatchView::new(&input)?;
    let mut out = Emitter::with_capacity(view.len(), input.values.len());
    let mut errors = Vec::new();
    for i in 0..view.len() {
        let record = view.record(i);
        let mark = out.begin(i as u32);
        if let Err(e) = p.parse(&record, &mut out) {
            out.rollback(mark);
            errors.push(record_error(i, e));
        }
    }
    Ok(BatchOutput { events: out.finish(), errors })
}

pub fn transform<T: Transformer>(cell: &OnceLock<T>, input: EventBatch) -> WitResult<BatchOutput> {
    if !T::IMPLEMENTED {
        return Err(unsupported("transformer"));
    }
    let t = role(cell, T::new)?;
    let view = EventBatchView::new(&input)?;
    let mut out = Emitter::with_capacity(view.len(), input.rows.len());
    let mut errors = Vec::new();
    for i in 0..view.len() {
        let event = view.event(i);
        let mark = out.begin(i as u32);
        if let Err(e) = t.transform(&event, &mut out) {
            out.rollback(mark);
            errors.push(record_error(i, e));
        }
    }
    Ok(BatchOutput { events: out.finish(), errors })
}

fn decode<A: Aggregator>(a: &A, bytes: &[u8]) -> Result<A::Acc, PluginError> {
    if bytes.is_empty() {
        return Ok(A::Acc::default());
    }
    a.decode_acc(bytes)
}

fn encode<A: Aggregator>(a: &A, acc: &A::Acc) -> Result<Vec<u8>, PluginError> {
    let bytes = a.encode_acc(acc)?;
    if bytes.is_empty() {
        return Err(PluginError::Internal("an accumulator encoded to no bytes (empty stands for a new one)".into()));
    }
    Ok(bytes)
}

/// Checks group ends against the number of items they split and yields each group's range.
fn groups(ends: &[u32], items: usize) -> Result<impl Iterator<Item = std::ops::Range<usize>> + '_, PluginError> {
    if ends.windows(2).any(|w| w[0] > w[1]) || ends.last().is_some_and(|&e| e as usize > items) {
        return Err(PluginError::Internal("group ends out of order or past the end".into()));
    }
    Ok(ends.iter().scan(0usize, |start, &end| {
        let r = *start..end as usize;
        *start = end as usize;
        Some(r)
    }))
}

pub fn accumulate<A: Aggregator>(
    cell: &OnceLock<A>,
    accs: Vec<Vec<u8>>,
    events: EventBatch,
    members: Vec<u32>,
    group_ends: Vec<u32>,
) -> WitResult<Vec<Vec<u8>>> {
    if !A::IMPLEMENTED {
        return Err(unsupported("aggregator"));
    }
    let a = role(cell, A::new)?;
    let view = EventBatchView::new(&events)?;
    if accs.len() != group_ends.len() {
        return Err(PluginError::Internal("one accumulator per group expected".into()).into());
    }
    if members.iter().any(|&m| m as usize >= view.len()) {
        return Err(PluginError::Internal("group member past the end of the events".into()).into());
    }
    let ranges: Vec<_> = groups(&group_ends, members.len())?.collect();
    let mut folded = accs.iter().map(|bytes| decode(a, bytes)).collect::<Result<Vec<_>, _>>()?;
    match batch_order(&members, &ranges, view.len()) {
        // Each group still sees its events in the order given; only the groups interleave.
        Some(owner) => {
            for (i, &g) in owner.iter().enumerate() {
                if let Some(acc) = folded.get_mut(g as usize) {
                    a.add(acc, &view.event(i))?;
                }
            }
        }
        None => {
            for (acc, range) in folded.iter_mut().zip(ranges) {
                for &m in &members[range] {
                    a.add(acc, &view.event(m as usize))?;
                }
            }
        }
    }
    folded.iter().map(|acc| encode(a, acc)).collect::<Result<_, _>>().map_err(Into::into)
}

/// Each event's group (`u32::MAX`: none), when the events can be folded in batch order without
/// changing what any group sees: every event in one group at most, and each group's events
/// given in batch order. Reading the rows front to back instead of group by group is what this
/// buys: with many small groups (sessions per user) the group order jumps across the whole batch,
/// and each jump was a cache miss on a row. `None` when the groups overlap or one's events are
/// not in batch order, or when a pass over the whole batch would not pay: the groups hold too
/// few of its events, or the group order already reads it in a few forward sweeps.
fn batch_order(members: &[u32], ranges: &[std::ops::Range<usize>], events: usize) -> Option<Vec<u32>> {
    if members.len().saturating_mul(BATCH_ORDER_MIN_SHARE) < events {
        return None;
    }
    let sweeps = 1 + members.windows(2).filter(|w| w[1] < w[0]).count();
    if sweeps <= GROUP_ORDER_MAX_SWEEPS {
        return None;
    }
    let mut owner = vec![u32::MAX; events];
    for (g, range) in ranges.iter().enumerate() {
        let mut last = None;
        for &m in &members[range.clone()] {
            let slot = owner.get_mut(m as usize)?;
            if *slot != u32::MAX || last.is_some_and(|l| l >= m) {
                return None;
            }
            *slot = g as u32;
            last = Some(m);
        }
    }
    Some(owner)
}

pub fn merge<A: Aggregator>(cell: &OnceLock<A>, accs: Vec<Vec<u8>>, group_ends: Vec<u32>) -> WitResult<Vec<Vec<u8>>> {
    if !A::IMPLEMENTED {
        return Err(unsupported("aggregator"));
    }
    let a = role(cell, A::new)?;
    let mut out = Vec::with_capacity(group_ends.len());
    for range in groups(&group_ends, accs.len())? {
        let mut acc = A::Acc::default();
        for bytes in &accs[range] {
            a.merge(&mut acc, decode(a, bytes)?);
        }
        out.push(encode(a, &acc)?);
    }
    Ok(out)
}

pub fn finish<A: Aggregator>(cell: &OnceLock<A>, accs: Vec<Vec<u8>>) -> WitResult<Vec<Vec<u8>>> {
    if !A::IMPLEMENTED {
        return Err(unsupported("aggregator"));
    }
    let a = role(cell, A::new)?;
    let mut out = Vec::with_capacity(accs.len());
    for bytes in &accs {
        let row = match a.finish(&decode(a, bytes)?) {
            Some(row) => serde_json::to_vec(&row)
                .map_err(|e| PluginError::Internal(format!("result row does not serialize: {e}")))?,
            None => Vec::new(),
        };
        out.push(row);
    }
    Ok(out)
}

pub fn state_version<A: Aggregator>() -> u32 {
    A::STATE_VERSION
}

pub fn migrate<A: Aggregator>(cell: &OnceLock<A>, from: u32, accs: Vec<Vec<u8>>) -> WitResult<Vec<Vec<u8>>> {
    if !A::IMPLEMENTED {
        return Err(unsupported("aggregator"));
    }
    let a = role(cell, A::new)?;
    let mut out = Vec::with_capacity(accs.len());
    for bytes in &accs {
        out.push(encode(a, &a.migrate(from, bytes)?)?);
    }
    Ok(out)
}

fn decode_state<P: Processor>(bytes: Option<&Vec<u8>>) -> Result<Option<P::State>, PluginError> {
    bytes
        .map(|b| serde_json::from_slice(b).map_err(|e| PluginError::BadState(format!("state does not decode: {e}"))))
        .transpose()
}

fn encode_state<P: Processor>(state: &Option<P::State>) -> Result<Option<Vec<u8>>, PluginError> {
    state
        .as_ref()
        .map(|s| serde_json::to_vec(s).map_err(|e| PluginError::Internal(format!("state does not encode: {e}"))))
        .transpose()
}

pub fn process<P: Processor>(
    cell: &OnceLock<P>,
    clock: processor::Clock,
    keys: Vec<processor::Keyed>,
    events: EventBatch,
    members: Vec<u32>,
    group_ends: Vec<u32>,
) -> WitResult<Vec<processor::KeyResult>> {
    if !P::IMPLEMENTED {
        return Err(unsupported("processor"));
    }
    let p = role(cell, P::new)?;
    let view = EventBatchView::new(&events)?;
    if keys.len() != group_ends.len() {
        return Err(PluginError::Internal("one key per group expected".into()).into());
    }
    if members.iter().any(|&m| m as usize >= view.len()) {
        return Err(PluginError::Internal("group member past the end of the events".into()).into());
    }
    let mut ctx = Context::new(&clock);
    let mut out = Vec::with_capacity(keys.len());
    let mut evs = Vec::new();
    for (keyed, range) in keys.iter().zip(groups(&group_ends, members.len())?) {
        let mut state = decode_state::<P>(keyed.state.as_ref())?;
        evs.clear();
        evs.extend(members[range].iter().map(|&m| view.event(m as usize)));
        p.process(&keyed.key, &mut state, &evs, &mut ctx)?;
        out.push(ctx.take(encode_state::<P>(&state)?));
    }
    Ok(out)
}

pub fn on_timers<P: Processor>(
    cell: &OnceLock<P>,
    clock: processor::Clock,
    keys: Vec<processor::Keyed>,
    timers: Vec<processor::Timer>,
    timer_ends: Vec<u32>,
) -> WitResult<Vec<processor::KeyResult>> {
    if !P::IMPLEMENTED {
        return Err(unsupported("processor"));
    }
    let p = role(cell, P::new)?;
    if keys.len() != timer_ends.len() {
        return Err(PluginError::Internal("one key per group of timers expected".into()).into());
    }
    let timers: Vec<Timer> = timers.iter().map(Timer::from_wit).collect();
    let mut ctx = Context::new(&clock);
    let mut out = Vec::with_capacity(keys.len());
    for (keyed, range) in keys.iter().zip(groups(&timer_ends, timers.len())?) {
        let mut state = decode_state::<P>(keyed.state.as_ref())?;
        p.on_timers(&keyed.key, &mut state, &timers[range], &mut ctx)?;
        out.push(ctx.take(encode_state::<P>(&state)?));
    }
    Ok(out)
}

pub fn process_state_version<P: Processor>() -> u32 {
    P::STATE_VERSION
}

pub fn process_migrate<P: Processor>(cell: &OnceLock<P>, from: u32, states: Vec<Vec<u8>>) -> WitResult<Vec<Vec<u8>>> {
    if !P::IMPLEMENTED {
        return Err(unsupported("processor"));
    }
    let p = role(cell, P::new)?;
    let mut out = Vec::with_capacity(states.len());
    for bytes in &states {
        let state = Some(p.migrate(from, bytes)?);
        out.push(encode_state::<P>(&state)?.unwrap_or_default());
    }
    Ok(out)
}

pub fn sink_open<S: Sink>(cell: &OnceLock<S>) -> WitResult<()> {
    if !S::IMPLEMENTED {
        return Err(unsupported("sink"));
    }
    Ok(role(cell, S::new)?.open()?)
}

fn delivery(d: &sink::Delivery) -> Delivery<'_> {
    Delivery { checkpoint: &d.checkpoint, batch_id: d.batch_id }
}

pub fn sink_write<S: Sink>(cell: &OnceLock<S>, d: sink::Delivery, rows: sink::RowBatch) -> WitResult<()> {
    if !S::IMPLEMENTED {
        return Err(unsupported("sink"));
    }
    let s = role(cell, S::new)?;
    Ok(s.write_batch(&delivery(&d), Rows::new(&rows.rows, &rows.row_ends)?)?)
}

pub fn sink_commit<S: Sink>(cell: &OnceLock<S>, d: sink::Delivery) -> WitResult<()> {
    if !S::IMPLEMENTED {
        return Err(unsupported("sink"));
    }
    Ok(role(cell, S::new)?.commit(&delivery(&d))?)
}

/// Exports a plugin's roles as a `weir:plugin` component.
///
/// ```no_run
/// # type OrdersParser = weir_guest::Unsupported;
/// # type ErrorRate = weir_guest::Unsupported;
/// weir_guest::export_plugin!(parser: OrdersParser, aggregator: ErrorRate);
/// ```
///
/// Roles: `parser`, `transformer`, `aggregator`, `processor`, `sink`, each at most once. Roles not named
/// answer `unsupported` if the host calls them.
#[macro_export]
macro_rules! export_plugin {
    ($($role:ident : $ty:ty),+ $(,)?) => {
        $crate::__export_plugin!(@munch
            [$crate::Unsupported] [$crate::Unsupported] [$crate::Unsupported] [$crate::Unsupported]
            [$crate::Unsupported]
            $($role : $ty,)+);
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __export_plugin {
    (@munch [$p:ty] [$t:ty] [$a:ty] [$k:ty] [$s:ty] parser : $x:ty, $($rest:tt)*) => {
        $crate::__export_plugin!(@munch [$x] [$t] [$a] [$k] [$s] $($rest)*);
    };
    (@munch [$p:ty] [$t:ty] [$a:ty] [$k:ty] [$s:ty] transformer : $x:ty, $($rest:tt)*) => {
        $crate::__export_plugin!(@munch [$p] [$x] [$a] [$k] [$s] $($rest)*);
    };
    (@munch [$p:ty] [$t:ty] [$a:ty] [$k:ty] [$s:ty] aggregator : $x:ty, $($rest:tt)*) => {
        $crate::__export_plugin!(@munch [$p] [$t] [$x] [$k] [$s] $($rest)*);
    };
    (@munch [$p:ty] [$t:ty] [$a:ty] [$k:ty] [$s:ty] processor : $x:ty, $($rest:tt)*) => {
        $crate::__export_plugin!(@munch [$p] [$t] [$a] [$x] [$s] $($rest)*);
    };
    (@munch [$p:ty] [$t:ty] [$a:ty] [$k:ty] [$s:ty] sink : $x:ty, $($rest:tt)*) => {
        $crate::__export_plugin!(@munch [$p] [$t] [$a] [$k] [$x] $($rest)*);
    };
    (@munch [$p:ty] [$t:ty] [$a:ty] [$k:ty] [$s:ty] $other:ident : $x:ty, $($rest:tt)*) => {
        compile_error!(concat!("unknown plugin role `", stringify!($other),
            "`: expected parser, transformer, aggregator, processor or sink"));
    };
    (@munch [$p:ty] [$t:ty] [$a:ty] [$k:ty] [$s:ty]) => {
        const _: () = {
            use $crate::__rt as rt;
            use ::std::sync::OnceLock;

            struct WeirPlugin;
            static PARSER: OnceLock<$p> = OnceLock::new();
            static TRANSFORMER: OnceLock<$t> = OnceLock::new();
            static AGGREGATOR: OnceLock<$a> = OnceLock::new();
            static PROCESSOR: OnceLock<$k> = OnceLock::new();
            static SINK: OnceLock<$s> = OnceLock::new();

            impl rt::parser::Guest for WeirPlugin {
                fn parse(input: rt::RawBatch) -> Result<rt::BatchOutput, rt::WitError> {
                    rt::parse(&PARSER, input)
                }
            }
            impl rt::transformer::Guest for WeirPlugin {
                fn transform(input: rt::EventBatch) -> Result<rt::BatchOutput, rt::WitError> {
                    rt::transform(&TRANSFORMER, input)
                }
            }
            impl rt::aggregator::Guest for WeirPlugin {
                fn accumulate(
                    accs: Vec<Vec<u8>>,
                    events: rt::EventBatch,
                    members: Vec<u32>,
                    group_ends: Vec<u32>,
                ) -> Result<Vec<Vec<u8>>, rt::WitError> {
                    rt::accumulate(&AGGREGATOR, accs, events, members, group_ends)
                }
                fn merge(accs: Vec<Vec<u8>>, group_ends: Vec<u32>) -> Result<Vec<Vec<u8>>, rt::WitError> {
                    rt::merge(&AGGREGATOR, accs, group_ends)
                }
                fn finish(accs: Vec<Vec<u8>>) -> Result<Vec<Vec<u8>>, rt::WitError> {
                    rt::finish(&AGGREGATOR, accs)
                }
                fn state_version() -> u32 {
                    rt::state_version::<$a>()
                }
                fn migrate(from: u32, accs: Vec<Vec<u8>>) -> Result<Vec<Vec<u8>>, rt::WitError> {
                    rt::migrate(&AGGREGATOR, from, accs)
                }
            }
            impl rt::processor::Guest for WeirPlugin {
                fn process(
                    clock: rt::processor::Clock,
                    keys: Vec<rt::processor::Keyed>,
                    events: rt::EventBatch,
                    members: Vec<u32>,
                    group_ends: Vec<u32>,
                ) -> Result<Vec<rt::processor::KeyResult>, rt::WitError> {
                    rt::process(&PROCESSOR, clock, keys, events, members, group_ends)
                }
                fn on_timers(
                    clock: rt::processor::Clock,
                    keys: Vec<rt::processor::Keyed>,
                    timers: Vec<rt::processor::Timer>,
                    timer_ends: Vec<u32>,
                ) -> Result<Vec<rt::processor::KeyResult>, rt::WitError> {
                    rt::on_timers(&PROCESSOR, clock, keys, timers, timer_ends)
                }
                fn state_version() -> u32 {
                    rt::process_state_version::<$k>()
                }
                fn migrate(from: u32, states: Vec<Vec<u8>>) -> Result<Vec<Vec<u8>>, rt::WitError> {
                    rt::process_migrate(&PROCESSOR, from, states)
                }
            }
            impl rt::sink::Guest for WeirPlugin {
                fn open() -> Result<(), rt::WitError> {
                    rt::sink_open(&SINK)
                }
                fn write_batch(delivery: rt::sink::Delivery, rows: rt::sink::RowBatch) -> Result<(), rt::WitError> {
                    rt::sink_write(&SINK, delivery, rows)
                }
                fn commit(delivery: rt::sink::Delivery) -> Result<(), rt::WitError> {
                    rt::sink_commit(&SINK, delivery)
                }
            }

            $crate::__bindings::__export_plugin_world!(WeirPlugin with_types_in $crate::__bindings);
        };
    };
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::Event;
    use crate::testing::{self, TestEvent};

    /// Remembers the order it was given events in: their times, as added.
    struct Seen;

    impl Aggregator for Seen {
        type Acc = Vec<i64>;
        type Output = Vec<i64>;

        fn new(_: &Config) -> Result<Self, PluginError> {
            Ok(Seen)
        }

        fn add(&self, acc: &mut Vec<i64>, event: &Event<'_>) -> Result<(), PluginError> {
            acc.push(event.time);
            Ok(())
        }

        fn merge(&self, acc: &mut Vec<i64>, other: Vec<i64>) {
            acc.extend(other);
        }

        fn finish(&self, acc: &Vec<i64>) -> Option<Vec<i64>> {
            Some(acc.clone())
        }
    }

    /// `members` and `group_ends` from each group's list of event indexes.
    fn layout(groups: &[Vec<u32>]) -> (Vec<u32>, Vec<u32>, Vec<std::ops::Range<usize>>) {
        let (mut members, mut ends, mut ranges) = (Vec::new(), Vec::new(), Vec::new());
        for g in groups {
            let from = members.len();
            members.extend(g);
            ends.push(members.len() as u32);
            ranges.push(from..members.len());
        }
        (members, ends, ranges)
    }

    #[test]
    fn many_small_groups_in_batch_order_are_folded_front_to_back() {
        // Sessions per user: 40 events, 20 groups of two, each group's in batch order.
        let groups: Vec<Vec<u32>> = (0..20).map(|g| vec![g, g + 20]).collect();
        let (members, _, ranges) = layout(&groups);
        let owner = batch_order(&members, &ranges, 40).expect("batch order");
        assert_eq!(owner[..3], [0, 1, 2]);
        assert_eq!(owner[20..23], [0, 1, 2]);
        // One group's events out of batch order, an event in two groups, groups holding too
        // few of the batch, or a few groups read in as many sweeps: the group order stays.
        let mut unordered = groups.clone();
        unordered[5].reverse();
        let mut overlapping = groups.clone();
        overlapping[6].push(7);
        for (why, groups, events) in [
            ("unordered", unordered, 40),
            ("overlapping", overlapping, 40),
            ("sparse", groups.clone(), 40 * BATCH_ORDER_MIN_SHARE as u32 + 1),
            ("few sweeps", vec![(0..20).collect(), (20..40).collect()], 40),
        ] {
            let (members, _, ranges) = layout(&groups);
            assert_eq!(batch_order(&members, &ranges, events as usize), None, "{why}");
        }
    }

    proptest! {
        /// Whichever order `accumulate` folds in, each group sees exactly its events, in the
        /// order they were given, after what its accumulator held.
        #[test]
        fn each_group_sees_its_events_in_the_order_given(
            n in 1usize..120,
            picks in proptest::collection::vec((0usize..40, any::<bool>(), any::<bool>()), 120),
            groups in 1usize..40,
            held in proptest::collection::vec(proptest::option::of(proptest::collection::vec(-5i64..0, 0..3)), 40),
        ) {
            let events: Vec<TestEvent> = (0..n).map(|i| testing::event(i as i64, "{}")).collect();
            // Each event joins a group or none; some groups take theirs out of order, or an
            // event already in another group.
            let mut of: Vec<Vec<u32>> = vec![Vec::new(); groups];
            for (i, &(g, skip, reverse)) in picks.iter().take(n).enumerate() {
                if skip && g % 3 == 0 {
                    continue;
                }
                of[g % groups].push(i as u32);
                if reverse && g % 11 == 0 {
                    of[(g + 1) % groups].push(i as u32);
                }
            }
            for (g, members) in of.iter_mut().enumerate() {
                if picks[g].2 && g % 7 == 0 {
                    members.reverse();
                }
            }
            let accs: Vec<Vec<u8>> = (0..groups)
                .map(|g| held[g].as_ref().map(|h| serde_json::to_vec(h).unwrap()).unwrap_or_default())
                .collect();
            let (members, ends, _) = layout(&of);
            let cell = testing::role("{}", Seen::new).unwrap();
            let out = accumulate(&cell, accs, testing::event_batch(&events), members, ends).unwrap();
            prop_assert_eq!(out.len(), groups);
            for (g, bytes) in out.iter().enumerate() {
                let got: Vec<i64> = serde_json::from_slice(bytes).unwrap();
                let mut want = held[g].clone().unwrap_or_default();
                want.extend(of[g].iter().map(|&i| i as i64));
                prop_assert_eq!(got, want);
            }
        }
    }
}
