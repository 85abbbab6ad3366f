//! Columnar batches: variable-length items (values, keys, rows) stored flat as one byte buffer
//! plus the end offset of each item, as every batch in `wit/plugin.wit` carries them. Item `i`
//! is `data[ends[i-1]..ends[i]]`, with `ends[-1]` = 0.
//!
//! These are the only functions that index into such a column; the plugin roles check a
//! column's offsets ([`crate::plugin`]) before anything here sees it, so they never fail on a
//! column the host accepted.

use std::ops::Range;

/// Item `i` of a column.
pub(crate) fn item<'a>(data: &'a [u8], ends: &[u32], i: usize) -> &'a [u8] {
    let start = if i == 0 { 0 } else { ends[i - 1] as usize };
    &data[start..ends[i] as usize]
}

/// Items `range` of a column, as a column of their own.
pub(crate) fn slice(data: &[u8], ends: &[u32], range: Range<usize>) -> (Vec<u8>, Vec<u32>) {
    let start = if range.start == 0 { 0 } else { ends[range.start - 1] };
    let end = if range.is_empty() { start } else { ends[range.end - 1] };
    (data[start as usize..end as usize].to_vec(), ends[range].iter().map(|e| e - start).collect())
}

/// Every item of a column, in order.
pub(crate) fn items<'a>(data: &'a [u8], ends: &'a [u32]) -> impl Iterator<Item = &'a [u8]> + 'a {
    ends.iter().scan(0usize, move |start, &end| {
        let item = &data[*start..end as usize];
        *start = end as usize;
        Some(item)
    })
}

/// Appends an item.
pub(crate) fn push(data: &mut Vec<u8>, ends: &mut Vec<u32>, item: &[u8]) {
    data.extend_from_slice(item);
    ends.push(data.len() as u32);
}

/// Appends column `(data, ends)` to `(to, to_ends)`, shifting its offsets.
pub(crate) fn append(to: &mut Vec<u8>, to_ends: &mut Vec<u32>, data: &[u8], ends: &[u32]) {
    let base = to.len() as u32;
    to.extend_from_slice(data);
    to_ends.extend(ends.iter().map(|e| e + base));
}

/// Cuts a column's items into consecutive ranges of about `budget` bytes each (an item larger
/// than the budget goes alone): how a batch is cut into plugin calls that stay below the
/// plugin's output cap.
pub(crate) fn chunks_by_bytes(ends: &[u32], budget: usize) -> Vec<Range<usize>> {
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

    #[test]
    fn items_slices_and_appends_agree() {
        let (mut data, mut ends) = (Vec::new(), Vec::new());
        for s in ["aa", "", "bbb", "c"] {
            push(&mut data, &mut ends, s.as_bytes());
        }
        assert_eq!(item(&data, &ends, 2), b"bbb");
        assert_eq!(items(&data, &ends).collect::<Vec<_>>(), vec![&b"aa"[..], b"", b"bbb", b"c"]);
        let (d, e) = slice(&data, &ends, 1..3);
        assert_eq!((d.as_slice(), e.as_slice()), (&b"bbb"[..], &[0u32, 3][..]));
        let (d, e) = slice(&data, &ends, 2..2);
        assert!(d.is_empty() && e.is_empty());
        let (mut to, mut to_ends) = (b"x".to_vec(), vec![1]);
        append(&mut to, &mut to_ends, &d, &e);
        append(&mut to, &mut to_ends, &data, &ends);
        assert_eq!(items(&to, &to_ends).collect::<Vec<_>>(), vec![&b"x"[..], b"aa", b"", b"bbb", b"c"]);
    }

    #[test]
    fn chunks_stay_within_the_budget_and_cover_every_item_in_order() {
        let (mut data, mut ends) = (Vec::new(), Vec::new());
        for n in [3, 3, 3, 10, 1, 1] {
            push(&mut data, &mut ends, &vec![b'x'; n]);
        }
        assert_eq!(chunks_by_bytes(&ends, 6), vec![0..2, 2..3, 3..4, 4..6]);
        assert_eq!(chunks_by_bytes(&ends, usize::MAX), vec![0..6]);
        assert_eq!(chunks_by_bytes(&[], 6), Vec::<Range<usize>>::new());
    }
}
