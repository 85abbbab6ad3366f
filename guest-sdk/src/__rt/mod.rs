//! The glue [`export_plugin!`](crate::export_plugin) expands to: batch loops that adapt the WIT
//! exports to the role traits. Not a public API.
//!
//! This module holds what every role shares (building the role value, checking group ends) and
//! the parser's, transformer's and sink's loops; the aggregator's live in `aggregate`, the
//! processor's in `stateful`. The macro reaches all of them as `$crate::__rt::NAME`, so each is
//! re-exported here.

use std::sync::OnceLock;

use crate::batch::{EventBatchView, RawBatchView};
use crate::{Config, Delivery, Emitter, Parser, PluginError, Rows, Sink, Transformer, types};

mod aggregate;
mod stateful;

pub use aggregate::{accumulate, finish, merge, migrate, state_version};
pub use stateful::{on_timers, process, process_migrate, process_state_version};

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
