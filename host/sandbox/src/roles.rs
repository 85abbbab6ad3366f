//! Typed handles for the plugin roles (the processor's is `processor.rs`). Each wraps a [`Sandbox`] bound to the role's WIT
//! export and checks what the plugin returns against what the contract promises, so the rest of
//! the host can trust the shapes it gets back.

use wasmtime::Store;
use wasmtime::component::{Instance, InstancePre};

use super::Runtime;
use super::bindings::exports::weir::plugin::{aggregator, parser, processor, sink, transformer};
use super::bindings::weir::plugin::types::{BatchOutput, EventBatch, RawBatch};
use super::bindings::weir::plugin::types::{RecordError, RecordErrorKind};
use super::error::{PluginError, WitError};
use super::host::HostState;
use super::limiter::LimitExceeded;
use super::metrics::bump;
use super::sandbox::{Role, Sandbox};
use super::spec::MAX_ERROR_MESSAGE;
use super::spec::StageSpec;
use crate::{columns, json};

/// Binds a role to its WIT export. `probe` runs on every new instance: a sink's `open`, an empty
/// call for the others, so a component that does not play the role (the SDK answers
/// `unsupported` for roles a plugin leaves out) is refused at start-up, not at the first batch.
macro_rules! role {
    ($role:ident, $module:ident, $name:literal, |$g:ident, $s:ident| $probe:expr) => {
        pub struct $role;
        impl Role for $role {
            const NAME: &'static str = $name;
            const INTERFACE: &'static str = concat!("weir:plugin/", stringify!($module), "@", env!("WEIR_WIT_VERSION"));
            type Indices = $module::GuestIndices;
            type Guest = $module::Guest;
            fn indices(pre: &InstancePre<HostState>) -> wasmtime::Result<Self::Indices> {
                $module::GuestIndices::new(pre)
            }
            fn load(
                i: &Self::Indices,
                store: &mut Store<HostState>,
                instance: &Instance,
            ) -> wasmtime::Result<Self::Guest> {
                i.load(store, instance)
            }
            fn probe($g: &Self::Guest, $s: &mut Store<HostState>) -> wasmtime::Result<Result<(), WitError>> {
                $probe
            }
        }
    };
}

role!(ParserRole, parser, "parser", |g, s| g.call_parse(s, &RawBatch::default()).map(|r| r.map(drop)));
role!(TransformerRole, transformer, "transformer", |g, s| g
    .call_transform(s, &EventBatch::default())
    .map(|r| r.map(drop)));
role!(AggregatorRole, aggregator, "aggregator", |g, s| g.call_finish(s, &[]).map(|r| r.map(drop)));
role!(ProcessorRole, processor, "processor", |g, s| g
    .call_on_timers(s, processor::Clock { watermark: 0, processing_time: 0 }, &[], &[], &[])
    .map(|r| r.map(drop)));
role!(SinkRole, sink, "sink", |g, s| g.call_open(s));

pub(super) fn contract(stage: &str, message: String) -> PluginError {
    PluginError::Contract { stage: stage.to_string(), message }
}

/// Checks that an event batch's columns agree and that origins point into an input of `inputs`.
fn check_events(stage: &str, b: &EventBatch, inputs: usize) -> Result<(), PluginError> {
    let n = b.times.len();
    if b.key_ends.len() != n || b.row_ends.len() != n || b.origins.len() != n {
        return Err(contract(stage, "returned event columns of different lengths".into()));
    }
    let ends_ok = |ends: &[u32], len: usize| {
        ends.windows(2).all(|w| w[0] <= w[1]) && ends.last().is_none_or(|&e| e as usize == len)
    };
    if !ends_ok(&b.key_ends, b.keys.len()) || !ends_ok(&b.row_ends, b.rows.len()) {
        return Err(contract(stage, "returned event offsets that do not match their data".into()));
    }
    if b.origins.iter().any(|&o| o as usize >= inputs) {
        return Err(contract(stage, "returned an event whose origin is not an input".into()));
    }
    Ok(())
}

fn check_output(stage: &str, out: &BatchOutput, inputs: usize) -> Result<(), PluginError> {
    check_events(stage, &out.events, inputs)?;
    if out.errors.iter().any(|e| e.index as usize >= inputs) {
        return Err(contract(stage, "reported an error for a record that is not an input".into()));
    }
    Ok(())
}

pub(super) fn check_count(stage: &str, what: &str, got: usize, want: usize) -> Result<(), PluginError> {
    if got != want {
        return Err(contract(stage, format!("{what} returned {got} results for {want} groups")));
    }
    Ok(())
}

/// An accumulator is never empty (`wit/plugin.wit`: empty stands for a new one).
fn check_not_empty(stage: &str, what: &str, accs: &[Vec<u8>]) -> Result<(), PluginError> {
    if accs.iter().any(Vec::is_empty) {
        return Err(contract(stage, format!("{what} returned an empty accumulator")));
    }
    Ok(())
}

/// Counts a record-by-record stage's call: records in, events out, records rejected.
fn count<R: Role>(sandbox: &Sandbox<R>, records_in: usize, out: &BatchOutput) {
    let m = sandbox.metrics();
    bump(&m.records_in, records_in as u64);
    bump(&m.records_out, out.events.times.len() as u64);
    bump(&m.errors, out.errors.len() as u64);
}

/// Refuses a call's output over `limits.max_output`.
pub(super) fn check_size<R: super::sandbox::Role>(sandbox: &Sandbox<R>, bytes: usize) -> Result<(), PluginError> {
    let max = sandbox.limits().max_output;
    if bytes > max {
        return Err(PluginError::Limit {
            stage: sandbox.stage().to_string(),
            limit: LimitExceeded::Output { bytes, max },
        });
    }
    Ok(())
}

/// Checks, settles and counts what a record-by-record stage (parse, transform) returned for
/// `inputs` items: its shape against the contract, its size against `limits.max_output` (error
/// messages included), then every row that is not one line of UTF-8 JSON object becomes its
/// input's error (but a deletion: an empty row with a key, `wit/plugin.wit`), and [`settle`]
/// leaves each input delivered or dead-lettered, never both.
fn accept<R: Role>(sandbox: &Sandbox<R>, inputs: usize, mut out: BatchOutput) -> Result<BatchOutput, PluginError> {
    let messages: usize = out.errors.iter().map(|e| e.message.len()).sum();
    check_size(sandbox, out.events.rows.len() + out.events.keys.len() + messages)?;
    check_output(sandbox.stage(), &out, inputs)?;
    let e = &out.events;
    let deletion = |i: usize| columns::span(&e.row_ends, i).is_empty() && !columns::span(&e.key_ends, i).is_empty();
    let misshapen: Vec<_> = json::misshapen(&e.rows, &e.row_ends).into_iter().filter(|&(i, _)| !deletion(i)).collect();
    for (i, why) in misshapen {
        let index = out.events.origins[i];
        out.errors.push(RecordError { index, kind: RecordErrorKind::InvalidValue, message: why.to_string() });
    }
    settle(&mut out)?;
    count(sandbox, inputs, &out);
    Ok(out)
}

/// At most one error per input (the plugin's first, else the host's), its message cut to
/// [`MAX_ERROR_MESSAGE`] bytes, and no event from an input that has one: one record is one dead
/// letter at most, however many errors a plugin reports for it, and never also delivered.
fn settle(out: &mut BatchOutput) -> Result<(), crate::columns::ColumnFull> {
    if out.errors.is_empty() {
        return Ok(());
    }
    out.errors.sort_by_key(|e| e.index); // stable: an input's first error stays first
    out.errors.dedup_by_key(|e| e.index);
    for e in &mut out.errors {
        if e.message.len() > MAX_ERROR_MESSAGE {
            let mut cut = MAX_ERROR_MESSAGE;
            while !e.message.is_char_boundary(cut) {
                cut -= 1;
            }
            e.message.truncate(cut);
            e.message.push_str("...");
        }
    }
    let failed = |origin: u32| out.errors.binary_search_by_key(&origin, |e| e.index).is_ok();
    if !out.events.origins.iter().any(|&o| failed(o)) {
        return Ok(());
    }
    let (ev, mut kept) = (&out.events, EventBatch::default());
    for i in (0..ev.times.len()).filter(|&i| !failed(ev.origins[i])) {
        kept.times.push(ev.times[i]);
        columns::push(&mut kept.keys, &mut kept.key_ends, columns::item(&ev.keys, &ev.key_ends, i))?;
        columns::push(&mut kept.rows, &mut kept.row_ends, columns::item(&ev.rows, &ev.row_ends, i))?;
        kept.origins.push(ev.origins[i]);
    }
    out.events = kept;
    Ok(())
}

/// What the engine needs of a parser stage: the Wasm [`Parser`], or a native baseline.
pub trait ParseFns: Send {
    /// Parses a whole batch; origins in the output index into `input`'s records.
    fn parse(&mut self, input: &RawBatch) -> Result<BatchOutput, PluginError>;
    /// Bytes one call may hand back (`limits.max_output_mb`): callers cut batches well below.
    fn max_call_bytes(&self) -> usize {
        usize::MAX
    }
}

/// A parser stage.
pub struct Parser(Sandbox<ParserRole>);

impl Parser {
    pub fn new(runtime: &Runtime, spec: StageSpec) -> Result<Self, PluginError> {
        Sandbox::new(runtime, spec).map(Self)
    }
}

impl ParseFns for Parser {
    fn parse(&mut self, input: &RawBatch) -> Result<BatchOutput, PluginError> {
        self.0.recycle_if_due();
        if let Some(registry) = self.0.registry() {
            super::registry::prefetch(registry, input)
                .map_err(|e| PluginError::Registry { stage: self.0.stage().to_string(), error: Box::new(e) })?;
        }
        let out = self.0.call(|g, s| g.call_parse(s, input))?;
        accept(&self.0, input.value_ends.len(), out)
    }

    fn max_call_bytes(&self) -> usize {
        self.0.limits().max_output
    }
}

/// What the engine needs of a transformer stage: the Wasm [`Transformer`], or host code.
pub trait TransformFns: Send {
    /// Transforms a whole batch; origins in the output index into `input`'s events.
    fn transform(&mut self, input: &EventBatch) -> Result<BatchOutput, PluginError>;
    /// Bytes one call may hand back (`limits.max_output_mb`): callers cut batches well below.
    fn max_call_bytes(&self) -> usize {
        usize::MAX
    }
}

/// A transformer stage.
pub struct Transformer(Sandbox<TransformerRole>);

impl Transformer {
    pub fn new(runtime: &Runtime, spec: StageSpec) -> Result<Self, PluginError> {
        Sandbox::new(runtime, spec).map(Self)
    }
}

impl TransformFns for Transformer {
    fn transform(&mut self, input: &EventBatch) -> Result<BatchOutput, PluginError> {
        self.0.recycle_if_due();
        let out = self.0.call(|g, s| g.call_transform(s, input))?;
        accept(&self.0, input.times.len(), out)
    }

    fn max_call_bytes(&self) -> usize {
        self.0.limits().max_output
    }
}

/// The aggregator's batched calls (`wit/plugin.wit`), as the window operators make them. The
/// Wasm aggregator implements them for pipelines; native implementations serve tests and
/// native baselines.
pub trait AggregateFns: Send {
    /// Folds group `g`'s events (`events[members[k]]`, `k` in its range) into `accs[g]`.
    fn accumulate(
        &mut self,
        accs: &[Vec<u8>],
        events: &EventBatch,
        members: &[u32],
        group_ends: &[u32],
    ) -> Result<Vec<Vec<u8>>, PluginError>;
    /// One accumulator per run of accumulators.
    fn merge(&mut self, accs: &[Vec<u8>], group_ends: &[u32]) -> Result<Vec<Vec<u8>>, PluginError>;
    /// One result row (a JSON object, or empty for none) per accumulator.
    fn finish(&mut self, accs: &[Vec<u8>]) -> Result<Vec<Vec<u8>>, PluginError>;
    /// The stage name, for errors.
    fn stage(&self) -> &str;
    /// Bytes one call may hand back (`limits.max_output_mb`): callers cut their calls well
    /// below it.
    fn max_call_bytes(&self) -> usize {
        usize::MAX
    }
    /// The version of the accumulator encoding: 1 unless a stage says otherwise.
    fn state_version(&mut self) -> Result<u32, PluginError> {
        Ok(1)
    }
    /// Accumulators written by state version `from`, converted to this one's.
    fn migrate(&mut self, from: u32, _accs: &[Vec<u8>]) -> Result<Vec<Vec<u8>>, PluginError> {
        Err(PluginError::Failed {
            stage: self.stage().to_string(),
            error: WitError::Unsupported(format!("no migration from state version {from}")),
        })
    }
}

/// An aggregator stage.
pub struct Aggregator(Sandbox<AggregatorRole>);

impl Aggregator {
    pub fn new(runtime: &Runtime, spec: StageSpec) -> Result<Self, PluginError> {
        Sandbox::new(runtime, spec).map(Self)
    }
}

impl AggregateFns for Aggregator {
    /// The plugin build's accumulator encoding version.
    fn state_version(&mut self) -> Result<u32, PluginError> {
        self.0.call(|g, s| g.call_state_version(s).map(Ok))
    }

    /// Accumulators written by state version `from`, converted to this build's. A plugin
    /// that cannot answers `PluginError::Failed` with `unsupported`.
    fn migrate(&mut self, from: u32, accs: &[Vec<u8>]) -> Result<Vec<Vec<u8>>, PluginError> {
        let out = self.0.call(|g, s| g.call_migrate(s, from, accs))?;
        check_count(self.0.stage(), "migrate", out.len(), accs.len())?;
        check_not_empty(self.0.stage(), "migrate", &out)?;
        Ok(out)
    }

    fn accumulate(
        &mut self,
        accs: &[Vec<u8>],
        events: &EventBatch,
        members: &[u32],
        group_ends: &[u32],
    ) -> Result<Vec<Vec<u8>>, PluginError> {
        self.0.recycle_if_due();
        let out = self.0.call(|g, s| g.call_accumulate(s, accs, events, members, group_ends))?;
        check_size(&self.0, out.iter().map(Vec::len).sum())?;
        check_count(self.0.stage(), "accumulate", out.len(), accs.len())?;
        check_not_empty(self.0.stage(), "accumulate", &out)?;
        let m = self.0.metrics();
        bump(&m.records_in, members.len() as u64);
        bump(&m.records_out, out.len() as u64);
        Ok(out)
    }

    fn merge(&mut self, accs: &[Vec<u8>], group_ends: &[u32]) -> Result<Vec<Vec<u8>>, PluginError> {
        self.0.recycle_if_due();
        let out = self.0.call(|g, s| g.call_merge(s, accs, group_ends))?;
        check_size(&self.0, out.iter().map(Vec::len).sum())?;
        check_count(self.0.stage(), "merge", out.len(), group_ends.len())?;
        check_not_empty(self.0.stage(), "merge", &out)?;
        Ok(out)
    }

    fn finish(&mut self, accs: &[Vec<u8>]) -> Result<Vec<Vec<u8>>, PluginError> {
        self.0.recycle_if_due();
        let out = self.0.call(|g, s| g.call_finish(s, accs))?;
        check_size(&self.0, out.iter().map(Vec::len).sum())?;
        check_count(self.0.stage(), "finish", out.len(), accs.len())?;
        Ok(out)
    }

    fn stage(&self) -> &str {
        self.0.stage()
    }

    fn max_call_bytes(&self) -> usize {
        self.0.limits().max_output
    }
}

/// A sink stage.
pub struct Sink(Sandbox<SinkRole>);

fn delivery(d: &weir_types::Delivery) -> sink::Delivery {
    sink::Delivery { checkpoint: d.checkpoint.to_string(), batch_id: d.batch_id }
}

impl Sink {
    pub fn new(runtime: &Runtime, spec: StageSpec) -> Result<Self, PluginError> {
        Sandbox::new(runtime, spec).map(Self)
    }

    pub fn write_batch(&mut self, d: &weir_types::Delivery, rows: &sink::RowBatch) -> Result<(), PluginError> {
        self.0.recycle_if_due();
        self.0.call(|g, s| g.call_write_batch(s, &delivery(d), rows))?;
        bump(&self.0.metrics().records_in, rows.row_ends.len() as u64);
        Ok(())
    }

    pub fn commit(&mut self, d: &weir_types::Delivery) -> Result<(), PluginError> {
        self.0.call(|g, s| g.call_commit(s, &delivery(d)))
    }
}

pub use sink::RowBatch;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{RecordError, RecordErrorKind};

    fn error(index: u32, message: &str) -> RecordError {
        RecordError { index, kind: RecordErrorKind::InvalidValue, message: message.to_string() }
    }

    #[test]
    fn settle_keeps_one_cut_error_per_input_and_no_event_of_it() {
        let mut out = BatchOutput { events: EventBatch::default(), errors: Vec::new() };
        for (i, row) in [b"{\"a\":0}", b"{\"a\":1}", b"{\"a\":2}"].iter().enumerate() {
            out.events.times.push(i as i64);
            columns::push(&mut out.events.rows, &mut out.events.row_ends, &row[..]).unwrap();
            columns::push(&mut out.events.keys, &mut out.events.key_ends, b"k").unwrap();
            out.events.origins.push(i as u32);
        }
        out.errors = vec![error(1, &"é".repeat(2_000)), error(1, "second"), error(0, "first of 0")];
        settle(&mut out).unwrap();
        let indices: Vec<u32> = out.errors.iter().map(|e| e.index).collect();
        assert_eq!(indices, vec![0, 1], "one error per input, in input order");
        assert_eq!(out.errors[0].message, "first of 0");
        let cut = &out.errors[1].message;
        assert!(cut.len() <= MAX_ERROR_MESSAGE + 3 && cut.ends_with("...") && cut.starts_with('é'), "{cut}");
        assert_eq!(out.events.origins, vec![2], "inputs with an error deliver no event");
        assert_eq!(columns::item(&out.events.rows, &out.events.row_ends, 0), b"{\"a\":2}");
    }
}
