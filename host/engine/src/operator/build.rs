//! The operator a pipeline file asks for, built where the operators live: the keyed operator
//! (a window's aggregation, a keyed processor, or rows passed through), an interval join in its
//! place, and what the pipeline puts in front of it (`[join]` with a table, then `[dedup]`).
//! A new operator is a new file in this module and one arm here; the driver runs whatever
//! [`build`] returns.

use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use super::Operator;
use super::dedup::Deduplicate;
use super::interval_join::IntervalJoin;
use super::passthrough::PassThrough;
use super::processor::KeyedProcess;
use super::table_join::TableJoin;
use crate::isolate::Policy;
use crate::pipeline::{Join, Keyed, Pipeline};
use crate::plugin::{Aggregator, Parser, PluginError, Processor, Runtime};

/// The pipeline's operators, chained, their plugins instantiated on `runtime` (so a component
/// that is missing or refuses its configuration fails here, before the checkpoint is touched).
pub fn build(p: &Pipeline, runtime: &Arc<Runtime>, stop: &Arc<AtomicBool>) -> Result<Box<dyn Operator>, PluginError> {
    let policy = Policy { failure: p.failure, stop: stop.clone() };
    let keyed: Box<dyn Operator> = match &p.stateful {
        Some(s) => match &s.keyed {
            Keyed::Window(w) => {
                let agg = Box::new(Aggregator::new(runtime, w.aggregate.clone())?);
                crate::aggregate::operator(w, &s.time, agg, policy)
            }
            Keyed::Process(spec) => {
                let plugin = Box::new(Processor::new(runtime, spec.plugin.clone())?);
                Box::new(KeyedProcess::new(spec.clone(), s.time.allowed_lateness_ms, plugin, policy))
            }
            Keyed::Rows => Box::new(PassThrough { checked: p.rows_checked(), deletions: false }),
        },
        None => Box::new(PassThrough { checked: p.rows_checked(), deletions: p.deletions }),
    };
    let keyed = match (&p.join, &p.stateful) {
        // An interval join is the operator its rows leave (validation keeps windows and
        // processors out); its other stream has a parser of its own.
        (Some(Join::Interval(j)), Some(s)) => {
            let parser = Box::new(Parser::new(runtime, j.parse.clone())?);
            Box::new(IntervalJoin::new((**j).clone(), &s.time, p.bounded(), p.failure, stop.clone(), parser))
        }
        _ => keyed,
    };
    Ok(chain(p, keyed, stop))
}

/// The keyed operator with what the pipeline puts in front of it: `[dedup]`, then `[join]`.
pub fn chain(p: &Pipeline, keyed: Box<dyn Operator>, stop: &Arc<AtomicBool>) -> Box<dyn Operator> {
    let joined: Box<dyn Operator> = match &p.join {
        Some(Join::Table(j)) => Box::new(TableJoin::new(j.clone(), p.bounded(), stop.clone(), keyed)),
        _ => keyed,
    };
    match p.stateful.as_ref().and_then(|s| s.dedup.as_ref()) {
        Some(d) => Box::new(Deduplicate::new(d.clone(), joined)),
        None => joined,
    }
}
