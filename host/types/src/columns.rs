//! Columnar batches: variable-length items (values, keys, rows) stored flat as one byte buffer
//! plus the end offset of each item, as every batch in `wit/plugin.wit` carries them. Item `i`
//! is `data[ends[i-1]..ends[i]]`, with `ends[-1]` = 0.
//!
//! These are the only functions that index into such a column; the plugin roles check a
//! column's offsets (`host/sandbox/src/roles.rs`) before anything here sees it, so they never fail on a
//! column the host accepted. Offsets are `u32`, as the contract has them: a column the host
//! builds is checked as it grows ([`push`], [`append`]) and refused past 4 GiB, never wrapped.

use std::ops::Range;

/// A column the host builds would pass what `u32` offsets reach. Batches are capped well below
/// (1 GiB in, `limits.max_output_mb` per call out); only a stage whose calls' outputs add up past
/// 4 GiB for one batch gets here.
#[derive(Debug, thiserror::Error)]
#[error(
    "one batch's output passed 4 GiB, more than a batch column can hold: lower source.max_offsets_per_trigger \
     (or, for windows emitted at once, their number or the size of their rows)"
)]
pub struct ColumnFull;

/// Where item `i` of a column lies in its data.
#[inline]
pub fn span(ends: &[u32], i: usize) -> Range<usize> {
    (if i == 0 { 0 } else { ends[i - 1] as usize })..ends[i] as usize
}

/// Item `i` of a column.
#[inline]
pub fn item<'a>(data: &'a [u8], ends: &[u32], i: usize) -> &'a [u8] {
    &data[span(ends, i)]
}

/// Items `range` of a column, as a column of their own.
pub fn slice(data: &[u8], ends: &[u32], range: Range<usize>) -> (Vec<u8>, Vec<u32>) {
    let start = if range.start == 0 { 0 } else { ends[range.start - 1] };
    let end = if range.is_empty() { start } else { ends[range.end - 1] };
    (data[start as usize..end as usize].to_vec(), ends[range].iter().map(|e| e - start).collect())
}

/// Every item of a column, in order.
#[inline]
pub fn items<'a>(data: &'a [u8], ends: &'a [u32]) -> impl Iterator<Item = &'a [u8]> + 'a {
    ends.iter().scan(0usize, move |start, &end| {
        let item = &data[*start..end as usize];
        *start = end as usize;
        Some(item)
    })
}

/// The end offset of `more` bytes after `len`, if a `u32` reaches it.
#[inline]
pub fn end_after(len: usize, more: usize) -> Result<u32, ColumnFull> {
    len.checked_add(more).and_then(|e| u32::try_from(e).ok()).ok_or(ColumnFull)
}

/// Appends an item; nothing if the column would pass 4 GiB.
#[inline]
pub fn push(data: &mut Vec<u8>, ends: &mut Vec<u32>, item: &[u8]) -> Result<(), ColumnFull> {
    let end = end_after(data.len(), item.len())?;
    data.extend_from_slice(item);
    ends.push(end);
    Ok(())
}

/// Appends column `(data, ends)` to `(to, to_ends)`, shifting its offsets; nothing if the
/// column would pass 4 GiB.
pub fn append(to: &mut Vec<u8>, to_ends: &mut Vec<u32>, data: &[u8], ends: &[u32]) -> Result<(), ColumnFull> {
    end_after(to.len(), data.len())?;
    let base = to.len() as u32; // below the total just checked
    to.extend_from_slice(data);
    to_ends.extend(ends.iter().map(|e| e + base));
    Ok(())
}

/// Cuts a column's items into consecutive ranges of about `budget` bytes each (an item larger
/// than the budget goes alone): how a batch is cut into plugin calls that stay below the
/// plugin's output cap.
pub fn chunks_by_bytes(ends: &[u32], budget: usize) -> Vec<Range<usize>> {
    let mut out = Vec::new();
    let (mut start, mut from) = (0usize, 0u32);
    for (i, &end) in ends.iter().enumerate() {
        if i > start && (end - from) as usize > budget {
            out.push(start..i);
            start = i;
            from = ends[i - 1];
        }
    }
    if start < ends.len() {
        out.push(start..ends.len());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Offsets never wrap: an end past what a `u32` holds is refused, and so is one whose sum
    /// would overflow `usize` itself.
    #[test]
    fn an_end_past_u32_is_refused() {
        let max = u32::MAX as usize;
        assert_eq!(end_after(max - 1, 1).ok(), Some(u32::MAX));
        assert!(end_after(max, 1).is_err());
        assert!(end_after(1, max).is_err());
        assert!(end_after(usize::MAX, 1).is_err());
        let (mut data, mut ends) = (Vec::new(), Vec::new());
        push(&mut data, &mut ends, b"ab").unwrap();
        append(&mut data, &mut ends, b"cde", &[1, 3]).unwrap();
        assert_eq!((data.as_slice(), ends.as_slice()), (&b"abcde"[..], &[2, 3, 5][..]));
    }

    #[test]
    fn items_slices_and_appends_agree() {
        let (mut data, mut ends) = (Vec::new(), Vec::new());
        for s in ["aa", "", "bbb", "c"] {
            push(&mut data, &mut ends, s.as_bytes()).unwrap();
        }
        assert_eq!(item(&data, &ends, 2), b"bbb");
        assert_eq!(items(&data, &ends).collect::<Vec<_>>(), vec![&b"aa"[..], b"", b"bbb", b"c"]);
        let (d, e) = slice(&data, &ends, 1..3);
        assert_eq!((d.as_slice(), e.as_slice()), (&b"bbb"[..], &[0u32, 3][..]));
        let (d, e) = slice(&data, &ends, 2..2);
        assert!(d.is_empty() && e.is_empty());
        let (mut to, mut to_ends) = (b"x".to_vec(), vec![1]);
        append(&mut to, &mut to_ends, &d, &e).unwrap();
        append(&mut to, &mut to_ends, &data, &ends).unwrap();
        assert_eq!(items(&to, &to_ends).collect::<Vec<_>>(), vec![&b"x"[..], b"aa", b"", b"bbb", b"c"]);
    }

    #[test]
    fn chunks_stay_within_the_budget_and_cover_every_item_in_order() {
        let (mut data, mut ends) = (Vec::new(), Vec::new());
        for n in [3, 3, 3, 10, 1, 1] {
            push(&mut data, &mut ends, &vec![b'x'; n]).unwrap();
        }
        assert_eq!(chunks_by_bytes(&ends, 6), vec![0..2, 2..3, 3..4, 4..6]);
        assert_eq!(chunks_by_bytes(&ends, usize::MAX), vec![0..6]);
        assert_eq!(chunks_by_bytes(&[], 6), Vec::<Range<usize>>::new());
    }
}
