//! Emission: the aggregator's calls when windows leave (`merge` of a sliding window's panes,
//! `finish` into rows), under the same failure policy as `accumulate`. Calls are made in chunks
//! that stay well below the plugin's output cap; a call that fails is retried, then its windows
//! are bisected until the ones it fails on alone are found. Those become dead letters with their
//! accumulators; every other window goes on. A finished row must be one line of JSON object that
//! does not repeat the host's own fields; one that is not is the window's dead letter too.

use std::collections::BTreeMap;
use std::ops::Range;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use serde::de::IgnoredAny;

use super::WindowAcc;
use crate::isolate;
use crate::json;
use crate::operator::{FailedWindow, OperatorError};
use crate::pipeline::FailurePolicy;
use crate::plugin::{AggregateFns, PluginError};
use crate::sink::Rows;

/// Windows per `merge` or `finish` call at most.
const WINDOWS_PER_CALL: usize = 10_000;

/// The fields the host puts in every result row; a plugin's row may not have them too (a
/// last-wins reader would see the plugin's value instead of the host's).
const HOST_FIELDS: [&str; 3] = ["window_start", "window_end", "key"];

/// The failure policy for the calls made at emission, and the run's stop flag.
#[derive(Clone)]
pub(crate) struct Policy {
    pub failure: FailurePolicy,
    pub stop: Arc<AtomicBool>,
}

/// What a plugin call gave for each item: its result, or why it failed on that item alone.
type Results = Vec<Result<Vec<u8>, String>>;

/// Runs `call` over items `0..n` in chunks of at most [`WINDOWS_PER_CALL`] and half the output
/// cap, under the failure policy; returns each item's result.
fn each(
    n: usize,
    bytes: impl Fn(usize) -> usize,
    agg: &mut dyn AggregateFns,
    policy: &Policy,
    mut call: impl FnMut(&mut dyn AggregateFns, Range<usize>) -> Result<Vec<Vec<u8>>, PluginError>,
) -> Result<Results, OperatorError> {
    let chunks = isolate::calls(n, WINDOWS_PER_CALL, bytes, agg.max_call_bytes() / 2);
    isolate::each(chunks, &policy.failure, &policy.stop, |r| call(agg, r))
}

/// A window whose accumulators (a sliding window's panes) are yet to be merged into one.
pub(super) struct Unmerged {
    pub start: i64,
    pub end: i64,
    pub key: Vec<u8>,
    pub accs: Vec<Vec<u8>>,
}

/// Merges each window's accumulators into one; windows the plugin fails on go to `failed`.
pub(super) fn merge(
    groups: Vec<Unmerged>,
    agg: &mut dyn AggregateFns,
    policy: &Policy,
    failed: &mut Vec<FailedWindow>,
) -> Result<Vec<WindowAcc>, OperatorError> {
    let mut out = Vec::with_capacity(groups.len());
    let bytes = |i: usize| groups[i].accs.iter().map(Vec::len).sum();
    let call = |agg: &mut dyn AggregateFns, r: Range<usize>| {
        let mut flat = Vec::new();
        let mut ends = Vec::with_capacity(r.len());
        for g in &groups[r] {
            flat.extend(g.accs.iter().cloned());
            ends.push(flat.len() as u32);
        }
        agg.merge(&flat, &ends)
    };
    let merged = each(groups.len(), bytes, agg, policy, call)?;
    for (Unmerged { start, end, key, accs }, r) in groups.into_iter().zip(merged) {
        match r {
            Ok(acc) => out.push(WindowAcc { start, end, key, acc }),
            Err(error) => failed.push(FailedWindow { start, end, key, accs, kind: "plugin-failure", error }),
        }
    }
    Ok(out)
}

/// Finishes `windows` into rows appended to `out`, each with its window (and key) spliced in
/// front of the plugin's own fields; returns how many rows. Windows the plugin fails on, or
/// whose row is not one it may emit, go to `failed`.
pub(super) fn finish(
    windows: Vec<WindowAcc>,
    agg: &mut dyn AggregateFns,
    policy: &Policy,
    out: &mut Rows,
    failed: &mut Vec<FailedWindow>,
) -> Result<usize, OperatorError> {
    let bytes = |i: usize| windows[i].acc.len();
    let call = |agg: &mut dyn AggregateFns, r: Range<usize>| {
        let accs: Vec<Vec<u8>> = windows[r].iter().map(|w| w.acc.clone()).collect();
        agg.finish(&accs)
    };
    let rows = each(windows.len(), bytes, agg, policy, call)?;
    let mut added = 0;
    for (w, row) in windows.into_iter().zip(rows) {
        let (kind, error) = match row {
            Ok(row) if row.is_empty() => continue, // the plugin chose not to emit this window
            Ok(row) => match body(&row) {
                Ok(body) => {
                    out.push(&window_key(w.start, w.end, &w.key), &line(&w, body))?;
                    added += 1;
                    continue;
                }
                Err(why) => ("invalid-value", why),
            },
            Err(error) => ("plugin-failure", error),
        };
        failed.push(FailedWindow { start: w.start, end: w.end, key: w.key, accs: vec![w.acc], kind, error });
    }
    Ok(added)
}

/// A window's row key: `[start,end,"key"]` (`[start,end]` unkeyed), the JSON of the fields the
/// host puts in its row. The same window and key always get the same message key, so a
/// compacted topic keeps a window's latest row.
pub(super) fn window_key(start: i64, end: i64, key: &[u8]) -> Vec<u8> {
    let mut k = format!("[{start},{end}").into_bytes();
    if !key.is_empty() {
        k.push(b',');
        k.extend_from_slice(&serde_json::to_vec(&String::from_utf8_lossy(key)).unwrap_or_else(|_| b"\"\"".to_vec()));
    }
    k.push(b']');
    k
}

/// The result row: the window, the key (keyed windows), then the plugin's fields.
fn line(w: &WindowAcc, body: &[u8]) -> Vec<u8> {
    let mut line = format!("{{\"window_start\":{},\"window_end\":{}", w.start, w.end).into_bytes();
    if !w.key.is_empty() {
        line.extend_from_slice(b",\"key\":");
        let key = serde_json::to_vec(&String::from_utf8_lossy(&w.key)).unwrap_or_else(|_| b"\"\"".to_vec());
        line.extend_from_slice(&key);
    }
    if !body.is_empty() {
        line.push(b',');
        line.extend_from_slice(body);
    }
    line.push(b'}');
    line
}

/// The inside of a finished row (between its braces, trimmed), after checking it is one line of
/// JSON object without the host's fields.
fn body(row: &[u8]) -> Result<&[u8], String> {
    json::check_object(row)?;
    let fields: BTreeMap<String, IgnoredAny> = serde_json::from_slice(row).map_err(|e| e.to_string())?;
    if let Some(f) = HOST_FIELDS.iter().find(|f| fields.contains_key(**f)) {
        return Err(format!(
            "finish returned a row with the field `{f}`, which the host sets; rename the plugin's field"
        ));
    }
    let s = row.trim_ascii();
    Ok(s[1..s.len() - 1].trim_ascii())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bodies_are_checked_and_trimmed() {
        assert_eq!(body(b" {\"count\":3} ").unwrap(), b"\"count\":3");
        assert_eq!(body(b"{}").unwrap(), b"");
        assert!(body(b"[1]").is_err());
        assert!(body(b"{\"a\":").is_err());
        assert!(body(b"{\"count\":1}\n{\"window_start\":0}").is_err());
        let e = body(b"{\"ke\\u0079\":\"forged\"}").unwrap_err();
        assert!(e.contains("`key`"), "{e}");
    }
}
