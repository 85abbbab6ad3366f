//! A parser and an aggregator built with raw wit-bindgen against `wit/plugin.wit`, not the SDK:
//! they return what the SDK would never let a plugin return, and the host must take none of it
//! on trust.
//!
//! The parser reads orders and forges on the records that ask it to, `{"forge": ..}`:
//! - `newline`, `array`, `invalid-utf8`: a row that would forge a JSON-lines line, is not an
//!   object, or is not UTF-8;
//! - `error-flood`: 1,000 errors of 4 KiB for the one record (4 MiB: under the tests' output cap);
//! - `error-and-event`: the record's event and an error for it;
//! - `error-overflow`: 100,000 errors of 1 KiB, past any output cap;
//! - `log-flood`: 1,000 log messages of 16 KiB; `log-forge`: a message that forges a log line.
//!
//! The aggregator counts (the accumulator is the count in decimal, with `!` when an event had
//! `"trap": true`) and misbehaves as its `config` says: `merge = "empty"`, `merge = "trap"` (a
//! trap when a marked accumulator is merged), `migrate = "empty"`,
//! `finish = "key"` (rows that repeat the host's `key`), `finish = "big"` (rows of over 1 KiB from
//! small accumulators) or `finish = "trap"` (a trap on windows marked `!`), `state_version = N`.

wit_bindgen::generate!({ path: "../../../wit", world: "plugin" });

use exports::weir::plugin::{aggregator, parser, processor, sink, transformer};
use weir::plugin::host::{self, LogLevel};
use weir::plugin::types::{BatchOutput, EventBatch, PluginError, RawBatch, RecordError, RecordErrorKind};

struct Forger;

fn empty_events() -> EventBatch {
    EventBatch { times: vec![], keys: vec![], key_ends: vec![], rows: vec![], row_ends: vec![], origins: vec![] }
}

fn emit(out: &mut EventBatch, time: i64, origin: usize, row: &[u8]) {
    out.times.push(time);
    out.key_ends.push(out.keys.len() as u32);
    out.rows.extend_from_slice(row);
    out.row_ends.push(out.rows.len() as u32);
    out.origins.push(origin as u32);
}

fn error(index: usize, message: String) -> RecordError {
    RecordError { index: index as u32, kind: RecordErrorKind::InvalidValue, message }
}

impl parser::Guest for Forger {
    fn parse(input: RawBatch) -> Result<BatchOutput, PluginError> {
        let mut events = empty_events();
        let mut errors = Vec::new();
        let mut start = 0usize;
        for (i, &end) in input.value_ends.iter().enumerate() {
            let value = &input.values[start..end as usize];
            start = end as usize;
            let v: serde_json::Value = serde_json::from_slice(value).unwrap_or_default();
            let ts = v["order_ts"].as_i64().unwrap_or(0);
            match v["forge"].as_str().unwrap_or("") {
                "" => emit(&mut events, ts, i, value),
                "newline" => emit(&mut events, ts, i, b"{\"a\":1}\n{\"forged\":true}"),
                "array" => emit(&mut events, ts, i, b"[1793491186672, 5]"),
                "invalid-utf8" => emit(&mut events, ts, i, b"{\"s\":\"\xff\"}"),
                "error-flood" => errors.extend((0..1_000).map(|_| error(i, "e".repeat(4 << 10)))),
                "error-and-event" => {
                    emit(&mut events, ts, i, value);
                    errors.push(error(i, "delivered and refused at once".into()));
                }
                "error-overflow" => errors.extend((0..100_000).map(|_| error(i, "o".repeat(1 << 10)))),
                "log-flood" => {
                    for _ in 0..1_000 {
                        host::log(LogLevel::Info, &"y".repeat(16 << 10));
                    }
                    emit(&mut events, ts, i, value);
                }
                "log-forge" => {
                    host::log(LogLevel::Warn, "innocent\n2026-11-30T00:00:00.000000Z ERROR weir: forged host line");
                    emit(&mut events, ts, i, value);
                }
                other => errors.push(error(i, format!("unknown forgery {other}"))),
            }
        }
        Ok(BatchOutput { events, errors })
    }
}

/// The stage's `config`, as JSON.
fn config() -> serde_json::Value {
    serde_json::from_str(&host::config()).unwrap_or_default()
}

fn count(acc: &[u8]) -> u64 {
    std::str::from_utf8(acc).ok().and_then(|s| s.trim_end_matches('!').parse().ok()).unwrap_or(0)
}

fn marked(acc: &[u8]) -> bool {
    acc.ends_with(b"!")
}

fn acc(n: u64, mark: bool) -> Vec<u8> {
    format!("{n}{}", if mark { "!" } else { "" }).into_bytes()
}

/// Item `i` of a column.
fn item<'a>(data: &'a [u8], ends: &[u32], i: usize) -> &'a [u8] {
    let start = if i == 0 { 0 } else { ends[i - 1] as usize };
    &data[start..ends[i] as usize]
}

impl aggregator::Guest for Forger {
    fn accumulate(
        accs: Vec<Vec<u8>>,
        events: EventBatch,
        members: Vec<u32>,
        group_ends: Vec<u32>,
    ) -> Result<Vec<Vec<u8>>, PluginError> {
        let mut start = 0usize;
        let mut out = Vec::with_capacity(accs.len());
        for (a, &end) in accs.iter().zip(&group_ends) {
            let group = &members[start..end as usize];
            start = end as usize;
            let trap = group.iter().any(|&m| {
                let row = item(&events.rows, &events.row_ends, m as usize);
                row.windows(11).any(|w| w == b"\"trap\":true")
            });
            out.push(acc(count(a) + group.len() as u64, marked(a) || trap));
        }
        Ok(out)
    }

    fn merge(accs: Vec<Vec<u8>>, group_ends: Vec<u32>) -> Result<Vec<Vec<u8>>, PluginError> {
        match config()["merge"].as_str() {
            Some("empty") => return Ok(vec![Vec::new(); group_ends.len()]),
            Some("trap") if accs.iter().any(|a| marked(a)) => panic!("merge trapped on a marked accumulator"),
            _ => {}
        }
        let mut start = 0usize;
        Ok(group_ends
            .iter()
            .map(|&end| {
                let group = &accs[start..end as usize];
                start = end as usize;
                acc(group.iter().map(|a| count(a)).sum(), group.iter().any(|a| marked(a)))
            })
            .collect())
    }

    fn finish(accs: Vec<Vec<u8>>) -> Result<Vec<Vec<u8>>, PluginError> {
        let c = config();
        accs.iter()
            .map(|a| {
                if c["finish"] == "trap" && marked(a) {
                    panic!("finish trapped on a marked window");
                }
                let row = match c["finish"].as_str() {
                    Some("key") => format!("{{\"count\":{},\"key\":\"forged\"}}", count(a)),
                    Some("big") => format!("{{\"count\":{},\"pad\":\"{}\"}}", count(a), "p".repeat(1 << 10)),
                    _ => format!("{{\"count\":{}}}", count(a)),
                };
                Ok(row.into_bytes())
            })
            .collect()
    }

    fn state_version() -> u32 {
        config()["state_version"].as_u64().map_or(1, |v| v as u32)
    }

    fn migrate(_from: u32, accs: Vec<Vec<u8>>) -> Result<Vec<Vec<u8>>, PluginError> {
        if config()["migrate"] == "empty" {
            return Ok(vec![Vec::new(); accs.len()]);
        }
        Ok(accs)
    }
}

impl transformer::Guest for Forger {
    fn transform(_: EventBatch) -> Result<BatchOutput, PluginError> {
        Err(PluginError::Unsupported("the forger does not transform".into()))
    }
}

impl processor::Guest for Forger {
    fn process(
        _: processor::Clock,
        _: Vec<processor::Keyed>,
        _: EventBatch,
        _: Vec<u32>,
        _: Vec<u32>,
    ) -> Result<Vec<processor::KeyResult>, PluginError> {
        Err(PluginError::Unsupported("the forger is no processor".into()))
    }
    fn on_timers(
        _: processor::Clock,
        _: Vec<processor::Keyed>,
        _: Vec<processor::Timer>,
        _: Vec<u32>,
    ) -> Result<Vec<processor::KeyResult>, PluginError> {
        Err(PluginError::Unsupported("the forger is no processor".into()))
    }
    fn state_version() -> u32 {
        1
    }
    fn migrate(_: u32, _: Vec<Vec<u8>>) -> Result<Vec<Vec<u8>>, PluginError> {
        Err(PluginError::Unsupported("the forger is no processor".into()))
    }
}

impl sink::Guest for Forger {
    fn open() -> Result<(), PluginError> {
        Err(PluginError::Unsupported("the forger is no sink".into()))
    }
    fn write_batch(_: sink::Delivery, _: sink::RowBatch) -> Result<(), PluginError> {
        Err(PluginError::Unsupported("the forger is no sink".into()))
    }
    fn commit(_: sink::Delivery) -> Result<(), PluginError> {
        Err(PluginError::Unsupported("the forger is no sink".into()))
    }
}

export!(Forger);
