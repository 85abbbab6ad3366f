//! The pieces of Avro's binary encoding both strict decoders read with (`decode.rs` into
//! values, `direct.rs` straight to JSON), each refusing what a schema does not allow: bytes
//! that are not there, a varint past 10 bytes, a length past what is left, and more array or
//! map items than [`MAX_ITEMS`].

use super::decode::DecodeError;

/// How deep values may nest (a recursive schema could otherwise take the stack).
pub(super) const MAX_DEPTH: usize = 64;
/// The most items a record's arrays and maps may hold together: items of `null` take no bytes,
/// so a count alone could otherwise ask for any amount of memory.
pub(super) const MAX_ITEMS: usize = 1 << 20;

pub(super) fn err<T>(m: impl Into<String>) -> Result<T, DecodeError> {
    Err(DecodeError(m.into()))
}

pub(super) fn take<'b>(bytes: &mut &'b [u8], n: usize, what: &str) -> Result<&'b [u8], DecodeError> {
    if bytes.len() < n {
        return err(format!("{what}: {n} bytes wanted, {} left", bytes.len()));
    }
    let (head, rest) = bytes.split_at(n);
    *bytes = rest;
    Ok(head)
}

/// A zigzag varint `long`.
#[inline]
pub(super) fn long(bytes: &mut &[u8]) -> Result<i64, DecodeError> {
    let mut z: u64 = 0;
    for i in 0..10 {
        let Some((&b, rest)) = bytes.split_first() else { return err("a number is cut short") };
        *bytes = rest;
        z |= u64::from(b & 0x7f) << (7 * i);
        if b & 0x80 == 0 {
            return Ok(((z >> 1) as i64) ^ -((z & 1) as i64));
        }
    }
    err("a number runs past 10 bytes")
}

/// A zigzag varint `int`.
pub(super) fn int(bytes: &mut &[u8]) -> Result<i32, DecodeError> {
    let n = long(bytes)?;
    i32::try_from(n).or_else(|_| err(format!("{n} does not fit an int")))
}

/// A length: not negative, and no more than what is left.
pub(super) fn length(bytes: &mut &[u8], what: &str) -> Result<usize, DecodeError> {
    let n = long(bytes)?;
    let n = usize::try_from(n).or_else(|_| err(format!("{what}: a negative length ({n})")))?;
    if n > bytes.len() {
        return err(format!("{what}: {n} bytes wanted, {} left", bytes.len()));
    }
    Ok(n)
}

/// The next array or map block's item count (0: the end): a count, negative when a byte size
/// follows. `items` counts every item of the record so far, against [`MAX_ITEMS`].
pub(super) fn block(bytes: &mut &[u8], items: &mut usize) -> Result<usize, DecodeError> {
    let mut count = long(bytes)?;
    if count < 0 {
        count = count.checked_neg().ok_or_else(|| DecodeError("a block count out of range".into()))?;
        length(bytes, "a block")?;
    }
    let count = usize::try_from(count).unwrap_or(usize::MAX);
    *items = items.saturating_add(count);
    if *items > MAX_ITEMS {
        return err(format!("more than {MAX_ITEMS} array or map items"));
    }
    Ok(count)
}
