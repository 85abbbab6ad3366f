//! The stages a run is made of (parsers, transforms, the operators, the sink), put together in
//! one place from what each module builds ([`crate::operator::build`], [`crate::sink::open`]).
//! The driver runs whatever it is given: [`Stages::wasm`] builds a pipeline's own plugins,
//! `native::stages` the host-code baseline that `weir bench --native` measures the sandbox
//! against, and a test may put a run together from stages of its own.

use std::io::Write;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use super::RunError;
use crate::expect::ExpectStage;
use crate::ingest::DatasetRows;
use crate::operator::Operator;
use crate::pipeline::{ExpectCheck, Pipeline};
use crate::plugin::{ParseFns, Parser, PluginError, Runtime, TransformFns, Transformer};
use crate::sink::{LineSink, RowSink};

/// Where a run's rows go.
pub enum Output {
    /// The pipeline's `[sink]`, or the console without one.
    Pipeline,
    /// JSON lines to a writer (`weir test`, `weir bench`).
    Lines(Box<dyn Write + Send>),
    /// A sink of the caller's (`weir demo`'s console).
    Sink(Box<dyn RowSink>),
}

pub struct Stages {
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
    pub fn wasm(
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
                        Box::new(Transformer::new(runtime, spec.as_ref().clone())?),
                    ),
                })
            })
            .collect::<Result<_, PluginError>>()?;
        let operator = crate::operator::build(p, runtime, stop)?;
        let sink = sink(p, output, Some(runtime), stop)?;
        Ok(Self { parsers, transforms, expect, operator, sink, runtime: Some(runtime.clone()) })
    }
}

/// The sink for `output`: the pipeline's own (a Wasm sink needs `runtime`), or the caller's.
pub fn sink(
    p: &Pipeline,
    output: Output,
    runtime: Option<&Arc<Runtime>>,
    stop: &Arc<AtomicBool>,
) -> Result<Box<dyn RowSink>, RunError> {
    Ok(match output {
        Output::Lines(w) => Box::new(LineSink(w)),
        Output::Sink(s) => s,
        Output::Pipeline => crate::sink::open(p, runtime, stop)?,
    })
}
