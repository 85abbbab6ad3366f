//! The orders parser and the error-rate aggregator (`plugins/orders-json`,
//! `plugins/error-rate`) as host code, for comparison only: `weir bench --native` runs the same
//! pipeline through these stages instead of the plugins, so the difference is what the sandbox
//! and the Wasm boundary cost. Same logic, same rows out, and the same accumulator bytes as the
//! plugin's (two little-endian u64s, its state version 2).

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use serde::Deserialize;

use crate::columns;
use crate::driver::{self, RunError, Stages};
use crate::isolate::Policy;
use crate::pipeline::Pipeline;
use crate::plugin::{
    AggregateFns, BatchOutput, EventBatch, ParseFns, PluginError, RawBatch, RecordError, RecordErrorKind,
};

/// Why a pipeline cannot run on the native stages.
#[derive(Debug, thiserror::Error)]
#[error("the native baseline replaces orders_json.wasm and error_rate.wasm, with no transforms; {0}")]
pub struct NotTheOrdersPipeline(&'static str);

/// The orders pipeline's stages as host code: the same parser (with its `key_by_user` config)
/// and aggregator, the pipeline's window, and `output`.
pub fn stages(p: &Pipeline, output: driver::Output, stop: &Arc<AtomicBool>) -> Result<Stages, RunError> {
    let uses = |path: &Path, name: &str| path.file_name().is_some_and(|f| f == name);
    let refuse = |why| PluginError::Engine(NotTheOrdersPipeline(why).to_string());
    let s = p.stateful.as_ref().ok_or_else(|| refuse("this pipeline has no aggregate"))?;
    let crate::pipeline::Keyed::Window(w) = &s.keyed else {
        return Err(refuse("this pipeline has no window").into());
    };
    let Some(parse) = &p.parse else { return Err(refuse("it has no parser").into()) };
    if !uses(&parse.component, "orders_json.wasm") || !uses(&w.aggregate.component, "error_rate.wasm") {
        return Err(refuse("this pipeline uses other plugins").into());
    }
    if !p.transforms.is_empty() {
        return Err(refuse("this pipeline has transforms").into());
    }
    if p.join.is_some() {
        return Err(refuse("this pipeline has a join").into());
    }
    #[derive(Deserialize, Default)]
    struct OrdersConfig {
        #[serde(default)]
        key_by_user: bool,
    }
    let config: OrdersConfig = serde_json::from_str(&parse.config_json).unwrap_or_default();
    Ok(Stages {
        parsers: (0..p.parser_instances())
            .map(|_| Box::new(Orders::new(config.key_by_user)) as Box<dyn ParseFns>)
            .collect(),
        transforms: Vec::new(),
        expect: Vec::new(),
        operator: crate::operator::chain(
            p,
            crate::aggregate::operator(
                w,
                &s.time,
                Box::new(ErrorRate),
                Policy { failure: p.failure, stop: stop.clone() },
            ),
            stop,
        ),
        sink: driver::sink(p, output, None, stop)?,
        runtime: None,
    })
}

/// `plugins/orders-json`: event time `order_ts`, key `user_id` when `key_by_user`, the record
/// as the row; the two fields read by the SDK's one-pass scanner, compiled natively.
struct Orders {
    key_by_user: bool,
    fields: scan::Paths<2>,
}

impl Orders {
    fn new(key_by_user: bool) -> Self {
        Self { key_by_user, fields: scan::Paths::new(["order_ts", "user_id"]) }
    }

    /// As the plugin's `parse`, with the SDK's `Value` readers inlined.
    fn order(&self, value: &[u8]) -> Result<(i64, Option<u64>), (RecordErrorKind, String)> {
        let [ts, user] = match scan::scan(value, &self.fields) {
            Ok(found) => found,
            Err(scan::ScanError::Duplicate(_)) => {
                return Err((RecordErrorKind::InvalidValue, "duplicate field".into()));
            }
            Err(e) => return Err((RecordErrorKind::Malformed, format!("not a JSON object: {e}"))),
        };
        let ts = ts.ok_or((RecordErrorKind::MissingField, "missing field `order_ts`".to_string()))?;
        let ts = scan::int(ts).ok_or((RecordErrorKind::InvalidValue, "expected an integer".to_string()))?;
        let user = match user {
            Some(b"null") | None => None,
            Some(u) => Some(
                scan::uint(u).ok_or((RecordErrorKind::InvalidValue, "expected a non-negative integer".to_string()))?,
            ),
        };
        Ok((ts, user))
    }
}

impl ParseFns for Orders {
    fn parse(&mut self, input: &RawBatch) -> Result<BatchOutput, PluginError> {
        // Sized up front as the SDK's `Emitter` sizes a parse's output: the same logic on
        // both sides of the sandbox, growth copies included.
        let n = input.value_ends.len();
        let events = EventBatch {
            times: Vec::with_capacity(n),
            key_ends: Vec::with_capacity(n),
            rows: Vec::with_capacity(input.values.len()),
            row_ends: Vec::with_capacity(n),
            origins: Vec::with_capacity(n),
            ..EventBatch::default()
        };
        let mut out = BatchOutput { events, errors: Vec::new() };
        let e = &mut out.events;
        for (i, value) in columns::items(&input.values, &input.value_ends).enumerate() {
            match self.order(value) {
                Ok((ts, user)) => {
                    e.times.push(ts);
                    let mut digits = itoa::Buffer::new();
                    let key = user.filter(|_| self.key_by_user).map_or(&b""[..], |u| digits.format(u).as_bytes());
                    columns::push(&mut e.keys, &mut e.key_ends, key)?;
                    columns::push(&mut e.rows, &mut e.row_ends, value)?;
                    e.origins.push(i as u32);
                }
                Err((kind, message)) => out.errors.push(RecordError { index: i as u32, kind, message }),
            }
        }
        Ok(out)
    }
}

use crate::json::{scan, top_level as field};

/// `plugins/error-rate` with `error_status = "ERROR"`.
struct ErrorRate;

/// The plugin's output row, field for field, so the rows are byte for byte the same.
#[derive(serde::Serialize)]
struct Output {
    count: u64,
    errors: u64,
    error_rate: f64,
}

/// Whether the row's `status` is `"ERROR"`, read as the SDK's `Event::field_is` reads it.
fn is_error(row: &[u8]) -> Result<bool, String> {
    match field::top_level_field(row, "status")? {
        Some([b'"', inner @ .., b'"']) if !inner.contains(&b'\\') => Ok(inner == b"ERROR"),
        Some(raw @ [b'"', ..]) => Ok(serde_json::from_slice::<String>(raw).map_err(|e| e.to_string())? == "ERROR"),
        _ => Ok(false),
    }
}

/// `plugins/error-rate`'s state version, whose accumulator bytes [`encode`] writes.
const STATE_VERSION: u32 = 2;

fn decode(acc: &[u8]) -> (u64, u64) {
    match (acc.get(..8), acc.get(8..16)) {
        (Some(c), Some(e)) => {
            (u64::from_le_bytes(c.try_into().unwrap_or_default()), u64::from_le_bytes(e.try_into().unwrap_or_default()))
        }
        _ => (0, 0),
    }
}

fn encode((count, errors): (u64, u64)) -> Vec<u8> {
    let mut v = Vec::with_capacity(16);
    v.extend_from_slice(&count.to_le_bytes());
    v.extend_from_slice(&errors.to_le_bytes());
    v
}

impl AggregateFns for ErrorRate {
    fn accumulate(
        &mut self,
        accs: &[Vec<u8>],
        events: &EventBatch,
        members: &[u32],
        group_ends: &[u32],
    ) -> Result<Vec<Vec<u8>>, PluginError> {
        let mut out = Vec::with_capacity(accs.len());
        let mut from = 0;
        for (acc, &end) in accs.iter().zip(group_ends) {
            let (mut count, mut errors) = decode(acc);
            for &m in &members[from as usize..end as usize] {
                let row = columns::item(&events.rows, &events.row_ends, m as usize);
                let error = is_error(row).map_err(|e| PluginError::Contract {
                    stage: self.stage().into(),
                    message: format!("bad row: {e}"),
                })?;
                count += 1;
                errors += u64::from(error);
            }
            out.push(encode((count, errors)));
            from = end;
        }
        Ok(out)
    }

    fn merge(&mut self, accs: &[Vec<u8>], group_ends: &[u32]) -> Result<Vec<Vec<u8>>, PluginError> {
        let mut from = 0;
        Ok(group_ends
            .iter()
            .map(|&end| {
                let sum = accs[from as usize..end as usize]
                    .iter()
                    .map(|a| decode(a))
                    .fold((0, 0), |s, a| (s.0 + a.0, s.1 + a.1));
                from = end;
                encode(sum)
            })
            .collect())
    }

    fn finish(&mut self, accs: &[Vec<u8>]) -> Result<Vec<Vec<u8>>, PluginError> {
        accs.iter()
            .map(|a| match decode(a) {
                (0, _) => Ok(Vec::new()),
                (count, errors) => {
                    let row = Output { count, errors, error_rate: errors as f64 / count as f64 };
                    serde_json::to_vec(&row).map_err(|e| PluginError::Contract {
                        stage: self.stage().into(),
                        message: format!("cannot encode a row: {e}"),
                    })
                }
            })
            .collect()
    }

    fn stage(&self) -> &str {
        "native error-rate"
    }

    /// The plugin's: the same bytes, so the same version.
    fn state_version(&mut self) -> Result<u32, PluginError> {
        Ok(STATE_VERSION)
    }
}

#[cfg(test)]
mod runs;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn orders_parse_and_count_like_the_plugins() {
        let lines = [
            r#"{"order_id":1,"user_id":7,"status":"ERROR","amount":1.0,"order_ts":5}"#,
            "not json",
            r#"{"order_id":2,"user_id":8,"status":"OK","amount":2.0,"order_ts":6}"#,
        ];
        let mut input = RawBatch::default();
        for l in lines {
            input.values.extend_from_slice(l.as_bytes());
            input.value_ends.push(input.values.len() as u32); // a test's few bytes
        }
        let out = Orders::new(true).parse(&input).unwrap();
        assert_eq!((out.events.times.clone(), out.events.keys.clone()), (vec![5, 6], b"78".to_vec()));
        assert_eq!(out.errors.iter().map(|e| e.index).collect::<Vec<_>>(), vec![1]);

        let mut agg = ErrorRate;
        let accs = agg.accumulate(&[Vec::new()], &out.events, &[0, 1], &[2]).unwrap();
        let merged = agg.merge(&[accs[0].clone(), accs[0].clone()], &[2]).unwrap();
        let row: serde_json::Value = serde_json::from_slice(&agg.finish(&merged).unwrap()[0]).unwrap();
        assert_eq!(row, serde_json::json!({"count": 4, "errors": 2, "error_rate": 0.5}));
        assert_eq!(agg.finish(&[Vec::new()]).unwrap(), vec![Vec::<u8>::new()], "no events, no row");
    }
}
