//! The failure policy for every stage that works on records or events (parse, transform,
//! aggregate): when a plugin call traps, runs past its deadline, or breaks a limit, the batch is
//! retried with backoff (the failure may be passing: a loaded machine, a deadline missed once;
//! output over a cap is not, so it is halved at once); if it keeps failing, the batch is cut in
//! halves, and halves of halves, until the items that
//! fail on their own are found. Those go to the dead-letter output with the error; every other
//! item goes on, in its order. With the fail-fast policy the pipeline stops at the first
//! failure instead.
//!
//! A poison item costs about log2(batch) failed calls, each bounded by the stage's limits; a
//! batch of good items costs one call, as before. The caller's `call` must leave no trace when
//! it fails (the aggregate stage rolls its state back), so that the halves add up to the whole.

use std::ops::Range;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::columns::{self, ColumnFull};
use crate::pipeline::FailurePolicy;
use crate::plugin::{BatchOutput, EventBatch, LimitExceeded, PluginError, RawBatch, WitError};

/// A failure the input may have caused, which retrying or isolating can get past. Anything else
/// (a component that cannot be instantiated, a plugin that says its configuration is wrong or
/// that it cannot read its state) stops the pipeline.
pub fn isolatable(e: &PluginError) -> bool {
    matches!(
        e,
        PluginError::Trap { .. }
            | PluginError::Limit { .. }
            | PluginError::Contract { .. }
            | PluginError::Failed { error: WitError::Internal(_), .. }
    )
}

/// A failure that the same call would meet again: its output was over the cap (the plugin's or
/// the host's copy budget). Retrying it only waits; halving the call is what helps.
pub fn too_much_output(e: &PluginError) -> bool {
    matches!(e, PluginError::Limit { limit: LimitExceeded::Output { .. } | LimitExceeded::Copy(_), .. })
}

/// An error of a stage `isolate` can work on.
pub trait StageFailure: std::fmt::Display {
    fn isolatable(&self) -> bool;
    /// Worth the same call again after a wait (a passing failure), rather than halving at once.
    fn retriable(&self) -> bool;
    /// The error for a run stopped (by SIGTERM) in the middle of isolating after `self`.
    fn stopped(&self) -> Self;
    /// The error for output that grew past what a batch column holds while isolating.
    fn too_large(&self, full: ColumnFull) -> Self;
}

impl StageFailure for PluginError {
    fn isolatable(&self) -> bool {
        isolatable(self)
    }
    fn retriable(&self) -> bool {
        isolatable(self) && !too_much_output(self)
    }
    fn stopped(&self) -> Self {
        PluginError::Stopped { stage: self.stage().to_string() }
    }
    fn too_large(&self, full: ColumnFull) -> Self {
        PluginError::Columns(full)
    }
}

/// What a stage returns for a range of items, and how the parts join up.
pub trait StageOutput {
    fn empty() -> Self;
    /// Appends `o`, whose item indices count from `offset`; nothing if a column would pass
    /// what its offsets reach.
    fn append(&mut self, o: Self, offset: u32) -> Result<(), ColumnFull>;
}

/// Parse and transform: events and record errors.
impl StageOutput for BatchOutput {
    fn empty() -> Self {
        BatchOutput { events: EventBatch::default(), errors: Vec::new() }
    }
    fn append(&mut self, o: Self, offset: u32) -> Result<(), ColumnFull> {
        let (d, s) = (&mut self.events, o.events);
        // Both checked before either grows, so a refusal leaves `self` as it was.
        columns::end_after(d.rows.len(), s.rows.len())?;
        columns::end_after(d.keys.len(), s.keys.len())?;
        columns::append(&mut d.rows, &mut d.row_ends, &s.rows, &s.row_ends)?;
        columns::append(&mut d.keys, &mut d.key_ends, &s.keys, &s.key_ends)?;
        d.times.extend(s.times);
        d.origins.extend(s.origins.iter().map(|o| o + offset));
        self.errors.extend(o.errors.into_iter().map(|mut e| {
            e.index += offset;
            e
        }));
        Ok(())
    }
}

/// Calls `call` on each of `ranges` of a batch's items and joins the outputs in order, so they
/// are those of one call over all; with one range, on the whole batch (`None`), uncopied. How
/// parse and transform keep each call below the plugin's output cap.
pub fn joined<O: StageOutput>(
    ranges: Vec<Range<usize>>,
    mut call: impl FnMut(Option<Range<usize>>) -> Result<O, PluginError>,
) -> Result<O, PluginError> {
    if ranges.len() <= 1 {
        return call(None);
    }
    let mut out = O::empty();
    for r in ranges {
        let start = r.start as u32; // an item index: batches hold far fewer than 2^32 items
        out.append(call(Some(r))?, start)?;
    }
    Ok(out)
}

/// The items that failed on their own, with their errors.
pub type Isolated<E> = Vec<(usize, E)>;

/// Calls `call` over items `0..n` under `policy`; returns the output of the items that went
/// through (indices relative to `0..n`) and the items that failed alone.
pub fn isolate<O: StageOutput, E: StageFailure>(
    n: usize,
    policy: &FailurePolicy,
    stop: &AtomicBool,
    mut call: impl FnMut(Range<usize>) -> Result<O, E>,
) -> Result<(O, Isolated<E>), E> {
    let first = match policy.retry().run(stop, "the batch failed", || call(0..n), E::retriable) {
        Ok(out) => return Ok((out, Vec::new())),
        Err(e) => e.into_inner(),
    };
    if policy.fail_fast || !first.isolatable() {
        return Err(first);
    }
    tracing::warn!("{first}; isolating the items that cause it");
    let mut out = O::empty();
    let mut failed = Vec::new();
    if n == 1 {
        failed.push((0, first));
    } else {
        bisect(&first, stop, 0..n, &mut call, &mut out, &mut failed)?;
    }
    Ok((out, failed))
}

fn bisect<O: StageOutput, E: StageFailure>(
    first: &E,
    stop: &AtomicBool,
    range: Range<usize>,
    call: &mut impl FnMut(Range<usize>) -> Result<O, E>,
    out: &mut O,
    failed: &mut Isolated<E>,
) -> Result<(), E> {
    let mid = range.start + range.len() / 2;
    for half in [range.start..mid, mid..range.end] {
        if half.is_empty() {
            continue;
        }
        if stop.load(Ordering::Relaxed) {
            return Err(first.stopped());
        }
        match call(half.clone()) {
            Ok(o) => out.append(o, half.start as u32).map_err(|full| first.too_large(full))?,
            Err(e) if !e.isolatable() => return Err(e),
            Err(e) if half.len() == 1 => failed.push((half.start, e)),
            Err(_) => bisect(first, stop, half, call, out, failed)?,
        }
    }
    Ok(())
}

/// Cuts `n` items into calls of at most `max_items` items and about `budget` bytes (`bytes`
/// gives an item's); an item over the budget goes alone. How the calls made per window or per
/// key (`aggregate/emit.rs`, the keyed processor) stay below a plugin's output cap.
pub fn calls(n: usize, max_items: usize, bytes: impl Fn(usize) -> usize, budget: usize) -> Vec<Range<usize>> {
    let mut out = Vec::new();
    let (mut start, mut used) = (0, 0);
    for i in 0..n {
        let b = bytes(i);
        if i > start && (i - start >= max_items || used + b > budget) {
            out.push(start..i);
            (start, used) = (i, 0);
        }
        used += b;
    }
    if start < n {
        out.push(start..n);
    }
    out
}

/// One result per item, joined across calls.
struct PerItem<T>(Vec<T>);

impl<T> StageOutput for PerItem<T> {
    fn empty() -> Self {
        PerItem(Vec::new())
    }
    fn append(&mut self, o: Self, _offset: u32) -> Result<(), ColumnFull> {
        self.0.extend(o.0);
        Ok(())
    }
}

/// How a stage's plugin calls fail: the pipeline's failure policy, and the run's stop flag that
/// ends isolating early.
#[derive(Clone)]
pub struct Policy {
    pub failure: FailurePolicy,
    pub stop: Arc<AtomicBool>,
}

/// Runs `call` (one result per item of its range) over each of `chunks` under `policy`: each
/// item's result, in order, or why the plugin failed on that item alone. A failure isolating
/// cannot get past (the plugin cannot read its state) is the error.
pub fn each<T>(
    chunks: Vec<Range<usize>>,
    policy: &FailurePolicy,
    stop: &AtomicBool,
    mut call: impl FnMut(Range<usize>) -> Result<Vec<T>, PluginError>,
) -> Result<Vec<Result<T, String>>, PluginError> {
    let mut results = Vec::with_capacity(chunks.last().map_or(0, |c| c.end));
    for chunk in chunks {
        let offset = chunk.start;
        let (ok, failed) = isolate(chunk.len(), policy, stop, |r| call(offset + r.start..offset + r.end).map(PerItem))?;
        let mut ok = ok.0.into_iter();
        let mut failed = failed.into_iter().peekable();
        for i in 0..chunk.len() {
            results.push(match failed.next_if(|(f, _)| *f == i) {
                Some((_, e)) => Err(e.to_string()),
                None => ok.next().ok_or_else(|| "the plugin returned fewer results than items".to_string()),
            });
        }
    }
    Ok(results)
}

/// Records `range` of a raw batch, as a batch of their own.
pub fn slice_records(b: &RawBatch, range: Range<usize>) -> RawBatch {
    let (v, vends) = columns::slice(&b.values, &b.value_ends, range.clone());
    let (k, kends) = columns::slice(&b.keys, &b.key_ends, range.clone());
    let headers = b
        .headers
        .iter()
        .filter(|h| range.contains(&(h.index as usize)))
        .map(|h| crate::plugin::Header { index: h.index - range.start as u32, ..h.clone() })
        .collect();
    RawBatch {
        values: v,
        value_ends: vends,
        keys: k,
        key_ends: kends,
        timestamps: b.timestamps[range.clone()].to_vec(),
        partitions: b.partitions[range.clone()].to_vec(),
        offsets: b.offsets[range].to_vec(),
        headers,
    }
}

/// Events `range` of a batch, as a batch of their own (origins kept as they are).
pub fn slice_events(b: &EventBatch, range: Range<usize>) -> EventBatch {
    let (rows, row_ends) = columns::slice(&b.rows, &b.row_ends, range.clone());
    let (keys, key_ends) = columns::slice(&b.keys, &b.key_ends, range.clone());
    EventBatch {
        times: b.times[range.clone()].to_vec(),
        keys,
        key_ends,
        rows,
        row_ends,
        origins: b.origins[range].to_vec(),
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    /// A fake stage over items 0..n: item i becomes event i; items in `poison` make any call
    /// that contains them fail.
    fn stage<'a>(
        poison: &[usize],
        calls: &'a mut usize,
    ) -> impl FnMut(Range<usize>) -> Result<BatchOutput, PluginError> + 'a {
        let poison = poison.to_vec();
        move |r: Range<usize>| {
            *calls += 1;
            if poison.iter().any(|p| r.contains(p)) {
                return Err(PluginError::Trap { stage: "t".into(), message: format!("poison in {r:?}") });
            }
            let mut out = BatchOutput::empty();
            for (k, i) in r.clone().enumerate() {
                out.events.times.push(i as i64);
                out.events.origins.push(k as u32);
                out.events.row_ends.push(0);
                out.events.key_ends.push(0);
            }
            Ok(out)
        }
    }

    #[test]
    fn poison_items_are_isolated_and_the_rest_keeps_its_order() {
        let policy = FailurePolicy { fail_fast: false, retries: 1, backoff: Duration::ZERO };
        let stop = AtomicBool::new(false);
        let mut calls = 0;
        let (out, failed) = isolate(100, &policy, &stop, stage(&[3, 70], &mut calls)).unwrap();
        assert_eq!(failed.iter().map(|f| f.0).collect::<Vec<_>>(), vec![3, 70]);
        let want: Vec<i64> = (0..100).filter(|i| ![3, 70].contains(i)).collect();
        assert_eq!(out.events.times, want);
        assert_eq!(out.events.origins, want.iter().map(|&i| i as u32).collect::<Vec<_>>());
        assert!(calls < 40, "{calls} calls for two poison items in 100");
    }

    #[test]
    fn fail_fast_stops_after_the_retries() {
        let policy = FailurePolicy { fail_fast: true, retries: 2, backoff: Duration::ZERO };
        let mut calls = 0;
        let e = isolate(10, &policy, &AtomicBool::new(false), stage(&[5], &mut calls)).unwrap_err();
        assert!(e.to_string().contains("poison"), "{e}");
        assert_eq!(calls, 3);
    }

    #[test]
    fn calls_are_cut_by_count_and_bytes() {
        assert_eq!(calls(0, 10_000, |_| 1, 10), Vec::<Range<usize>>::new());
        assert_eq!(calls(5, 10_000, |_| 4, 10), vec![0..2, 2..4, 4..5]);
        assert_eq!(calls(3, 10_000, |_| 100, 10), vec![0..1, 1..2, 2..3], "an item over the budget goes alone");
        assert_eq!(calls(25_000, 10_000, |_| 0, 10).len(), 3);
    }

    #[test]
    fn slices_are_batches_of_their_own() {
        let b = RawBatch {
            values: b"aabbbc".to_vec(),
            value_ends: vec![2, 5, 6],
            keys: b"k".to_vec(),
            key_ends: vec![0, 1, 1],
            timestamps: vec![1, 2, 3],
            partitions: vec![0, 1, 2],
            offsets: vec![10, 11, 12],
            headers: vec![crate::plugin::Header { index: 1, name: "h".into(), value: vec![] }],
        };
        let s = slice_records(&b, 1..3);
        assert_eq!((s.values.as_slice(), s.value_ends.as_slice()), (&b"bbbc"[..], &[3u32, 4][..]));
        assert_eq!((s.keys.as_slice(), s.key_ends.as_slice()), (&b"k"[..], &[1u32, 1][..]));
        assert_eq!((s.offsets, s.headers[0].index), (vec![11, 12], 0));
    }
}
