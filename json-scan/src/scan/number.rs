//! JSON numbers: skipping one by the grammar while scanning, and reading an integer's raw text
//! as `i64` or `u64`. Both take eight digits a step with the parent's word arithmetic (plain
//! integer operations, the same natively and inside Wasm), and what [`int`] and [`uint`] accept
//! is what serde_json reads into an integer field.

use super::{ONES, ScanError, Scanner, non_digits, word};

impl Scanner<'_> {
    /// `-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?`
    #[inline(always)]
    pub(super) fn number(&mut self) -> Result<(), ScanError> {
        if self.peek() == Some(b'-') {
            self.i += 1;
        }
        match self.peek() {
            Some(b'0') => self.i += 1,
            Some(b'1'..=b'9') => self.digits(),
            _ => return Err(self.err("expected a digit")),
        }
        if self.peek() == Some(b'.') {
            self.i += 1;
            if !matches!(self.peek(), Some(b'0'..=b'9')) {
                return Err(self.err("expected a digit after `.`"));
            }
            self.digits();
        }
        if let Some(b'e' | b'E') = self.peek() {
            self.i += 1;
            if let Some(b'+' | b'-') = self.peek() {
                self.i += 1;
            }
            if !matches!(self.peek(), Some(b'0'..=b'9')) {
                return Err(self.err("expected a digit in the exponent"));
            }
            self.digits();
        }
        Ok(())
    }

    #[inline(always)]
    fn digits(&mut self) {
        while let Some(w) = word(self.b, self.i) {
            let stops = non_digits(w);
            if stops != 0 {
                self.i += (stops.trailing_zeros() / 8) as usize;
                return;
            }
            self.i += 8;
        }
        while let Some(b'0'..=b'9') = self.peek() {
            self.i += 1;
        }
    }
}

/// A JSON number's raw text as an `i64`, if it is an integer in range (no fraction, no
/// exponent), as serde_json reads one into an `i64` field. (`u64` arithmetic: `i128` would be a
/// library call per digit inside Wasm.)
#[inline]
pub fn int(raw: &[u8]) -> Option<i64> {
    let (neg, digits) = match raw {
        [b'-', rest @ ..] => (true, rest),
        rest => (false, rest),
    };
    let magnitude = uint(digits)?;
    match (neg, i64::try_from(magnitude)) {
        (false, Ok(v)) => Some(v),
        (true, Ok(v)) => Some(-v),
        (true, Err(_)) if magnitude == i64::MIN.unsigned_abs() => Some(i64::MIN),
        _ => None,
    }
}

/// Digits only, in `u64`'s range. Overflow is settled by comparing the text with `u64::MAX`'s,
/// not by checked multiplication: that is a 128-bit multiply, a library call inside Wasm.
#[inline]
pub fn uint(digits: &[u8]) -> Option<u64> {
    const MAX: &[u8] = b"18446744073709551615";
    if digits.is_empty() || digits.len() > MAX.len() || (digits.len() == MAX.len() && digits > MAX) {
        return None;
    }
    let mut v: u64 = 0;
    let mut rest = digits;
    // Eight digits at a time (a timestamp in milliseconds has thirteen).
    while let Some((head, tail)) = rest.split_first_chunk::<8>() {
        let w = u64::from_le_bytes(*head);
        if non_digits(w) != 0 {
            return None;
        }
        v = v.wrapping_mul(100_000_000).wrapping_add(eight_digits(w));
        rest = tail;
    }
    for &d in rest {
        let d = d.wrapping_sub(b'0');
        if d > 9 {
            return None;
        }
        v = v.wrapping_mul(10).wrapping_add(u64::from(d));
    }
    Some(v)
}

/// The value of eight ASCII digits, the first in the lowest byte: pairs, then quads, then the
/// whole, three multiplications instead of eight.
#[inline(always)]
fn eight_digits(w: u64) -> u64 {
    let w = w - ONES * b'0' as u64;
    let w = (w.wrapping_mul(10) + (w >> 8)) & 0x00ff_00ff_00ff_00ff;
    let w = (w.wrapping_mul(100) + (w >> 16)) & 0x0000_ffff_0000_ffff;
    (w.wrapping_mul(10_000) + (w >> 32)) & 0xffff_ffff
}
