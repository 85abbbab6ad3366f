//! The glue [`export_plugin!`](crate::export_plugin) expands to: batch loops that adapt the WIT
//! exports to the role traits. Not a public API.

use std::sync::OnceLock;

use crate::batch::{EventBatchView, RawBatchView};
use crate::process::{Context, Timer};
use crate::{Aggregator, Config, Delivery, Emitter, Parser, PluginError, Processor, Rows, Sink, Transformer, types};

pub use crate::__bindings::exports::weir::plugin::{aggregator, parser, processor, sink, transformer};
pub use crate::types::{BatchOutput, EventBatch, PluginError as WitError, RawBatch};

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
    let mut out = Vec::with_capacity(accs.len());
    for (acc_bytes, range) in accs.iter().zip(groups(&group_ends, members.len())?) {
        let mut acc = decode(a, acc_bytes)?;
        for &m in &members[range] {
            a.add(&mut acc, &view.event(m as usize))?;
        }
        out.push(encode(a, &acc)?);
    }
    Ok(out)
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
