//! The stages a run is made of (parsers, transforms, the operators, the sink), built in one place.
//! The driver runs whatever it is given: [`Stages::wasm`] builds a pipeline's own plugins,
//! `native::stages` the host-code baseline that `weir bench --native` measures the sandbox
//! against, and a test may put a run together from stages of its own.

use std::io::Write;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use super::RunError;
use crate::aggregate::Policy;
use crate::expect::ExpectStage;
use crate::ingest::DatasetRows;
use crate::operator::Operator;
use crate::operator::dedup::Deduplicate;
use crate::operator::interval_join::IntervalJoin;
use crate::operator::passthrough::PassThrough;
use crate::operator::processor::KeyedProcess;
use crate::operator::table_join::TableJoin;
use crate::pipeline::{ExpectCheck, Join, Keyed, Pipeline, SinkConfig, Trigger};
use crate::plugin::{Aggregator, ParseFns, Parser, PluginError, Processor, Runtime, Sink, TransformFns, Transformer};
use crate::sink::{KafkaSink, LineSink, LogSink, RowSink, SinkError, WasmSink};
use crate::source::SourceError;

/// Where a run's rows go.
pub(crate) enum Output {
    /// The pipeline's `[sink]`, or the console without one.
    Pipeline,
    /// JSON lines to a writer (`weir test`, `weir bench`).
    Lines(Box<dyn Write + Send>),
    /// A sink of the caller's (`weir demo`'s console).
    Sink(Box<dyn RowSink>),
}

pub(crate) struct Stages {
    /// One per `parse.parallelism`.
    pub parsers: Vec<Box<dyn ParseFns>>,
    pub transforms: Vec<Box<dyn TransformFns>>,
    /// The pipeline's `expect`, in order.
    pub expect: Vec<ExpectStage>,
    pub operator: Box<dyn Operator>,
    pub sink: Box<dyn RowSink>,
    /// The Wasm runtime the plugins run on, for their metrics and the fair share between
    /// pipelines; `None` when no stage is a plugin.
    pub runtime: Option<Arc<Runtime>>,
}

impl Stages {
    /// The pipeline's own plugins, each instantiated (so a missing component, a role it does
    /// not play or a configuration it refuses fails here, before the checkpoint is touched).
    pub(crate) fn wasm(
        p: &Pipeline,
        runtime: &Arc<Runtime>,
        output: Output,
        stop: &Arc<AtomicBool>,
    ) -> Result<Self, RunError> {
        let parsers = (0..p.parser_instances())
            .map(|_| match &p.parse {
                Some(spec) => Ok(Box::new(Parser::new(runtime, spec.clone())?) as Box<dyn ParseFns>),
                None => Ok(Box::new(DatasetRows) as Box<dyn ParseFns>),
            })
            .collect::<Result<_, PluginError>>()?;
        let transforms = p
            .transforms
            .iter()
            .map(|t| Ok(Box::new(Transformer::new(runtime, t.clone())?) as Box<dyn TransformFns>))
            .collect::<Result<_, PluginError>>()?;
        let expect = p
            .expect
            .iter()
            .map(|e| {
                Ok(match &e.check {
                    ExpectCheck::Rule(r) => ExpectStage::rule(e.name.clone(), e.on_violation, r.clone()),
                    ExpectCheck::Plugin(spec) => ExpectStage::plugin(
                        e.name.clone(),
                        e.on_violation,
                        spec.name.clone(),
                        Box::new(Transformer::new(runtime, spec.clone())?),
                    ),
                })
            })
            .collect::<Result<_, PluginError>>()?;
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
                Keyed::Rows => Box::new(PassThrough { checked: p.rows_checked() }),
            },
            None => Box::new(PassThrough { checked: p.rows_checked() }),
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
        let operator = chain(p, keyed, stop);
        let sink = sink(p, output, Some(runtime), stop)?;
        Ok(Self { parsers, transforms, expect, operator, sink, runtime: Some(runtime.clone()) })
    }
}

/// The keyed operator with what the pipeline puts in front of it: `[dedup]`, then `[join]`.
pub(crate) fn chain(p: &Pipeline, keyed: Box<dyn Operator>, stop: &Arc<AtomicBool>) -> Box<dyn Operator> {
    let joined: Box<dyn Operator> = match &p.join {
        Some(Join::Table(j)) => Box::new(TableJoin::new(j.clone(), p.bounded(), stop.clone(), keyed)),
        _ => keyed,
    };
    match p.stateful.as_ref().and_then(|s| s.dedup.as_ref()) {
        Some(d) => Box::new(Deduplicate::new(d.clone(), joined)),
        None => joined,
    }
}

/// The sink for `output`: the pipeline's own (a Wasm sink needs `runtime`), or the caller's.
pub(crate) fn sink(
    p: &Pipeline,
    output: Output,
    runtime: Option<&Arc<Runtime>>,
    stop: &Arc<AtomicBool>,
) -> Result<Box<dyn RowSink>, RunError> {
    let continuous = matches!(p.trigger, Trigger::Continuous { .. });
    Ok(match (output, &p.sink) {
        (Output::Lines(w), _) => Box::new(LineSink(w)),
        (Output::Sink(s), _) => s,
        (Output::Pipeline, Some(SinkConfig::Wasm(spec))) => {
            let runtime = runtime
                .ok_or_else(|| PluginError::Engine(format!("{}: a Wasm sink needs the Wasm runtime", spec.name)))?;
            Box::new(WasmSink(Sink::new(runtime, spec.clone())?))
        }
        (Output::Pipeline, Some(SinkConfig::Kafka(k))) => {
            Box::new(KafkaSink::open(k, continuous, stop.clone()).map_err(SinkError::Kafka)?)
        }
        (Output::Pipeline, Some(SinkConfig::Dataset { dataset, key })) => match &dataset.log {
            Some(dir) => Box::new(LogSink::open(dataset, dir, key.clone())?),
            None => return Err(SourceError::NoProject(dataset.name.clone()).into()),
        },
        (Output::Pipeline, None) => Box::new(LineSink(std::io::stdout())),
    })
}
