//! Emission: the aggregator's calls when windows leave (`merge` of a sliding window's panes,
//! `finish` into rows), under the same failure policy as `accumulate`. Calls are made in chunks
//! that stay well below the plugin's output cap; a call that fails is retried, then its windows
//! are bisected until the ones it fails on alone are found. Those become dead letters with their
//! accumulators; every other window goes on. A finished row must be one line of JSON object that
//! does not repeat the host's own fields; one that is not is the window's dead letter too.

use std::ops::Range;
use std::sync::LazyLock;

use super::WindowAcc;
use crate::isolate::{self, Policy};
use crate::json;
use crate::operator::OperatorError;
use crate::plugin::{AggregateFns, PluginError};
use crate::rows::Rows;
use crate::side_output::FailedWindow;

/// Windows per `merge` or `finish` call at most.
const WINDOWS_PER_CALL: usize = 10_000;

/// The fields the host puts in every result row; a plugin's row may not have them too (a
/// last-wins reader would see the plugin's value instead of the host's).
const HOST_FIELDS: [&str; 3] = ["window_start", "window_end", "key"];

/// [`HOST_FIELDS`] as paths for the scanner, split once.
static HOST_PATHS: LazyLock<json::scan::Paths<3>> = LazyLock::new(|| json::scan::Paths::new(HOST_FIELDS));

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
    Ok(isolate::each(chunks, &policy.failure, &policy.stop, |r| call(agg, r))?)
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
    // The accumulators apart from the windows, so the calls borrow them instead of copying.
    let (windows, mut accs): (Vec<WindowAcc>, Vec<Vec<u8>>) =
        windows.into_iter().map(|w| (WindowAcc { acc: Vec::new(), ..w }, w.acc)).unzip();
    let bytes = |i: usize| accs[i].len();
    let rows = each(windows.len(), bytes, agg, policy, |agg, r| agg.finish(&accs[r]))?;
    let mut added = 0;
    // One key and one row built at a time, in buffers reused from window to window.
    let (mut quoted, mut key, mut line) = (Vec::new(), Vec::new(), Vec::new());
    for ((w, row), acc) in windows.into_iter().zip(rows).zip(accs.iter_mut()) {
        let (kind, error) = match row {
            Ok(row) if row.is_empty() => continue, // the plugin chose not to emit this window
            Ok(row) => match body(&row) {
                Ok(body) => {
                    quote(&w.key, &mut quoted);
                    window_key_into(w.start, w.end, &quoted, &mut key);
                    line_into(&w, &quoted, body, &mut line);
                    out.push(&key, &line, w.end.saturating_sub(1))?;
                    added += 1;
                    continue;
                }
                Err(why) => ("invalid-value", why),
            },
            Err(error) => ("plugin-failure", error),
        };
        let acc = std::mem::take(acc);
        failed.push(FailedWindow { start: w.start, end: w.end, key: w.key, accs: vec![acc], kind, error });
    }
    Ok(added)
}

/// A window's row key: `[start,end,"key"]` (`[start,end]` unkeyed), the JSON of the fields the
/// host puts in its row. The same window and key always get the same message key, so a
/// compacted topic keeps a window's latest row.
pub(super) fn window_key(start: i64, end: i64, key: &[u8]) -> Vec<u8> {
    let (mut quoted, mut k) = (Vec::new(), Vec::new());
    quote(key, &mut quoted);
    window_key_into(start, end, &quoted, &mut k);
    k
}

/// `key` as a JSON string into `buf` (nothing for the empty key of an unkeyed window).
fn quote(key: &[u8], buf: &mut Vec<u8>) {
    buf.clear();
    if !key.is_empty() && serde_json::to_writer(&mut *buf, &*String::from_utf8_lossy(key)).is_err() {
        buf.clear();
        buf.extend_from_slice(b"\"\"");
    }
}

/// [`window_key`] into `buf`, the key already quoted.
fn window_key_into(start: i64, end: i64, quoted: &[u8], buf: &mut Vec<u8>) {
    let mut n = itoa::Buffer::new();
    buf.clear();
    buf.push(b'[');
    buf.extend_from_slice(n.format(start).as_bytes());
    buf.push(b',');
    buf.extend_from_slice(n.format(end).as_bytes());
    if !quoted.is_empty() {
        buf.push(b',');
        buf.extend_from_slice(quoted);
    }
    buf.push(b']');
}

/// The result row into `buf`: the window, the key (keyed windows, already quoted), then the
/// plugin's fields.
fn line_into(w: &WindowAcc, quoted: &[u8], body: &[u8], buf: &mut Vec<u8>) {
    let mut n = itoa::Buffer::new();
    buf.clear();
    buf.extend_from_slice(b"{\"window_start\":");
    buf.extend_from_slice(n.format(w.start).as_bytes());
    buf.extend_from_slice(b",\"window_end\":");
    buf.extend_from_slice(n.format(w.end).as_bytes());
    if !quoted.is_empty() {
        buf.extend_from_slice(b",\"key\":");
        buf.extend_from_slice(quoted);
    }
    if !body.is_empty() {
        buf.push(b',');
        buf.extend_from_slice(body);
    }
    buf.push(b'}');
}

/// The inside of a finished row (between its braces, trimmed), after checking it is one line of
/// JSON object without the host's fields: one pass of the scanner does both.
fn body(row: &[u8]) -> Result<&[u8], String> {
    let found = json::check_object_for(row, &HOST_PATHS)?;
    if let Some(f) = HOST_FIELDS.iter().zip(found).find_map(|(f, v)| v.map(|_| f)) {
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
