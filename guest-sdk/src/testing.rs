//! Runs a plugin's role natively, without Wasm or the host, for unit tests: each helper builds
//! the columnar batch the host would pass and runs the very batch loop the component runs
//! (`__rt`), so a record error, a rolled-back emission or a refused config key behaves here as
//! it does in a pipeline.
//!
//! ```ignore
//! let (events, errors) = testing::run_parser::<Orders>("{}", &[br#"{"ts":5}"#, b"oops"]).unwrap();
//! let row = testing::run_aggregator::<Count>("{}", &[testing::event(1, r#"{"n":1}"#)]).unwrap();
//! ```
//!
//! `config` is the stage's `config` table as JSON (`"{}"` for none).

use std::sync::OnceLock;

use crate::__bindings::exports::weir::plugin::processor as wit;
use crate::process::Timer;
use crate::{__rt, Aggregator, Config, Parser, PluginError, Processor, Transformer, types};

/// What [`crate::registry`] answers on this thread from now on, as the host would for a stage
/// granted the registry: `schemas` by id, and `versions` as (subject, version, schema id).
/// Native only: in a component the host answers.
#[cfg(not(target_arch = "wasm32"))]
pub fn serve_schemas(schemas: Vec<crate::registry::Schema>, versions: Vec<(String, u32, u32)>) {
    crate::registry::imp::SERVED.with_borrow_mut(|s| *s = Some((schemas, versions)));
}

/// An event for a transformer, aggregator or processor: its time, key and row (a JSON object).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TestEvent {
    pub time: i64,
    pub key: Option<Vec<u8>>,
    pub row: Vec<u8>,
}

/// An event at `time` (epoch ms) with `row`, unkeyed.
pub fn event(time: i64, row: &str) -> TestEvent {
    TestEvent { time, key: None, row: row.as_bytes().to_vec() }
}

/// An event at `time` with `row`, keyed by `key`.
pub fn keyed_event(time: i64, key: &str, row: &str) -> TestEvent {
    TestEvent { time, key: Some(key.as_bytes().to_vec()), row: row.as_bytes().to_vec() }
}

/// An event a parser or transformer emitted, and the index of the input it came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Emitted {
    pub time: i64,
    pub key: Option<Vec<u8>>,
    pub row: Vec<u8>,
    pub origin: usize,
}

/// An input that became a dead letter: its index and the reason.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rejected {
    pub index: usize,
    pub message: String,
}

/// What a processor made of one key: its new state, its rows as (time, row) and its timers.
#[derive(Debug)]
pub struct Processed<S> {
    pub state: Option<S>,
    pub rows: Vec<(i64, Vec<u8>)>,
    pub set_timers: Vec<Timer>,
    pub delete_timers: Vec<Timer>,
}

/// The role built from `config` as the host would build it, keys it never reads refused.
pub(crate) fn role<T>(config: &str, new: fn(&Config) -> Result<T, PluginError>) -> Result<OnceLock<T>, PluginError> {
    let config = Config::from_json(config)?;
    let value = new(&config)?;
    config.check_all_read()?;
    let cell = OnceLock::new();
    let _ = cell.set(value);
    Ok(cell)
}

fn plugin_error(e: types::PluginError) -> PluginError {
    match e {
        types::PluginError::InvalidConfig(m) => PluginError::InvalidConfig(m),
        types::PluginError::BadState(m) => PluginError::BadState(m),
        types::PluginError::Io(m) => PluginError::Io(m),
        types::PluginError::Internal(m) => PluginError::Internal(m),
        types::PluginError::Unsupported(m) => PluginError::Unsupported(m),
    }
}

fn ends<'a>(items: impl Iterator<Item = &'a [u8]>, data: &mut Vec<u8>) -> Vec<u32> {
    items
        .map(|item| {
            data.extend_from_slice(item);
            data.len() as u32
        })
        .collect()
}

pub(crate) fn event_batch(events: &[TestEvent]) -> types::EventBatch {
    let (mut keys, mut rows) = (Vec::new(), Vec::new());
    let key_ends = ends(events.iter().map(|e| e.key.as_deref().unwrap_or_default()), &mut keys);
    let row_ends = ends(events.iter().map(|e| e.row.as_slice()), &mut rows);
    types::EventBatch {
        times: events.iter().map(|e| e.time).collect(),
        keys,
        key_ends,
        rows,
        row_ends,
        origins: (0..events.len() as u32).collect(),
    }
}

fn settle(out: types::BatchOutput) -> (Vec<Emitted>, Vec<Rejected>) {
    let b = out.events;
    let span = |ends: &[u32], i: usize| (if i == 0 { 0 } else { ends[i - 1] as usize })..ends[i] as usize;
    let events = (0..b.times.len())
        .map(|i| {
            let key = &b.keys[span(&b.key_ends, i)];
            Emitted {
                time: b.times[i],
                key: (!key.is_empty()).then(|| key.to_vec()),
                row: b.rows[span(&b.row_ends, i)].to_vec(),
                origin: b.origins[i] as usize,
            }
        })
        .collect();
    let errors = out.errors.into_iter().map(|e| Rejected { index: e.index as usize, message: e.message }).collect();
    (events, errors)
}

/// Parses `values` (raw record values, offsets 0, 1, …) as one batch: the events and the
/// records that became dead letters.
pub fn run_parser<P: Parser>(config: &str, values: &[&[u8]]) -> Result<(Vec<Emitted>, Vec<Rejected>), PluginError> {
    let records: Vec<(&[u8], &[u8])> = values.iter().map(|v| (&b""[..], *v)).collect();
    run_parser_keyed::<P>(config, &records)
}

/// Parses `records` (each a key, empty for none, and a value) as one batch, as
/// [`run_parser`] does.
pub fn run_parser_keyed<P: Parser>(
    config: &str,
    records: &[(&[u8], &[u8])],
) -> Result<(Vec<Emitted>, Vec<Rejected>), PluginError> {
    let cell = role(config, P::new)?;
    let (mut keys, mut data) = (Vec::new(), Vec::new());
    let key_ends = ends(records.iter().map(|r| r.0), &mut keys);
    let value_ends = ends(records.iter().map(|r| r.1), &mut data);
    let n = records.len();
    let batch = types::RawBatch {
        values: data,
        value_ends,
        keys,
        key_ends,
        timestamps: vec![-1; n],
        partitions: vec![0; n],
        offsets: (0..n as i64).collect(),
        headers: Vec::new(),
    };
    __rt::parse(&cell, batch).map(settle).map_err(plugin_error)
}

/// Transforms `events` as one batch: the events out and the inputs that became dead letters.
pub fn run_transformer<T: Transformer>(
    config: &str,
    events: &[TestEvent],
) -> Result<(Vec<Emitted>, Vec<Rejected>), PluginError> {
    let cell = role(config, T::new)?;
    __rt::transform(&cell, event_batch(events)).map(settle).map_err(plugin_error)
}

/// The result row of one group holding `events` (decoded), or `None` for no row. The events are
/// accumulated in two halves that are then merged, as sliding windows and sessions do: a
/// correct aggregator gives the same row either way.
pub fn run_aggregator<A: Aggregator>(
    config: &str,
    events: &[TestEvent],
) -> Result<Option<serde_json::Value>, PluginError> {
    let cell = role(config, A::new)?;
    let half = events.len() / 2;
    let mut accs = Vec::new();
    for part in [&events[..half], &events[half..]] {
        let n = part.len() as u32;
        let acc = __rt::accumulate(&cell, vec![Vec::new()], event_batch(part), (0..n).collect(), vec![n]);
        accs.extend(acc.map_err(plugin_error)?);
    }
    let merged = __rt::merge(&cell, accs, vec![2]).map_err(plugin_error)?;
    let row = __rt::finish(&cell, merged).map_err(plugin_error)?.pop().unwrap_or_default();
    if row.is_empty() {
        return Ok(None);
    }
    serde_json::from_slice(&row).map(Some).map_err(|e| PluginError::Internal(format!("result row: {e}")))
}

/// Folds `events` into the accumulator bytes `acc` (empty: a new one), as one call of the
/// host's: the new bytes, as the host would store them.
pub fn accumulate<A: Aggregator>(config: &str, events: &[TestEvent], acc: &[u8]) -> Result<Vec<u8>, PluginError> {
    let cell = role(config, A::new)?;
    let n = events.len() as u32;
    let mut out = __rt::accumulate(&cell, vec![acc.to_vec()], event_batch(events), (0..n).collect(), vec![n])
        .map_err(plugin_error)?;
    out.pop().ok_or_else(|| PluginError::Internal("no accumulator out".into()))
}

/// The result row's bytes for the accumulator bytes `acc`, as the host gets them (empty: no row).
pub fn finish<A: Aggregator>(config: &str, acc: &[u8]) -> Result<Vec<u8>, PluginError> {
    let cell = role(config, A::new)?;
    let mut out = __rt::finish(&cell, vec![acc.to_vec()]).map_err(plugin_error)?;
    out.pop().ok_or_else(|| PluginError::Internal("no row out".into()))
}

/// Accumulator bytes written by state version `from`, converted to this build's, as the host
/// migrates a checkpoint.
pub fn migrate<A: Aggregator>(config: &str, from: u32, accs: &[&[u8]]) -> Result<Vec<Vec<u8>>, PluginError> {
    let cell = role(config, A::new)?;
    __rt::migrate(&cell, from, accs.iter().map(|a| a.to_vec()).collect()).map_err(plugin_error)
}

/// Runs `process` for one key with `state` and `events` (put in event-time order, as the host
/// does), at watermark `watermark`.
pub fn run_processor<P: Processor>(
    config: &str,
    key: &[u8],
    state: Option<P::State>,
    events: &[TestEvent],
    watermark: i64,
) -> Result<Processed<P::State>, PluginError> {
    let cell = role(config, P::new)?;
    let mut events = events.to_vec();
    events.sort_by_key(|e| e.time);
    let state = state.map(|s| serde_json::to_vec(&s)).transpose().map_err(|e| PluginError::Internal(e.to_string()))?;
    let n = events.len() as u32;
    let clock = wit::Clock { watermark, processing_time: 0 };
    let keys = vec![wit::Keyed { key: key.to_vec(), state }];
    let mut out =
        __rt::process(&cell, clock, keys, event_batch(&events), (0..n).collect(), vec![n]).map_err(plugin_error)?;
    let r = out.pop().ok_or_else(|| PluginError::Internal("no result for the key".into()))?;
    let state =
        r.state.map(|s| serde_json::from_slice(&s)).transpose().map_err(|e| PluginError::BadState(e.to_string()))?;
    let mut rows = Vec::new();
    let mut start = 0;
    for (t, end) in r.times.iter().zip(&r.row_ends) {
        rows.push((*t, r.rows[start..*end as usize].to_vec()));
        start = *end as usize;
    }
    Ok(Processed {
        state,
        rows,
        set_timers: r.set_timers.iter().map(Timer::from_wit).collect(),
        delete_timers: r.delete_timers.iter().map(Timer::from_wit).collect(),
    })
}
