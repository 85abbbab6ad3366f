//! Reading a few fields of a JSON object in one pass that also checks the whole object is valid
//! JSON: what a parser needs of a record, without building a struct from it.
//!
//! A parser that takes two fields from an order and passes the record on as its row must still
//! refuse a record that is not JSON, or the row would carry it on. `serde_json` into a struct
//! does both, at a clearly higher cost than this scanner: it is a general decoder, and this is one
//! loop over the bytes that skips values by their grammar and keeps the raw text of the fields
//! asked for. What it accepts is exactly RFC 8259 JSON text whose top level is an object (UTF-8,
//! strings without control characters and with valid escapes, numbers by the grammar, nothing
//! but white space after the object), checked by a property test against `serde_json`.
//!
//! Fields are named by path: `"order_ts"` at the top level, `"customer.id"` inside a nested
//! object. A path that appears twice is refused (`serde_json` refuses a duplicate field too), so
//! a record cannot carry two values for a field a parser reads.

mod number;

pub use number::{int, uint};

/// How deep objects and arrays may nest (serde_json's default limit is 128).
const MAX_DEPTH: usize = 128;

/// Paths one scan can look for.
pub const MAX_PATHS: usize = 16;

/// Why a value is not what the scan accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ScanError {
    /// Not JSON, or not an object: a message and the byte offset where it was found.
    Syntax(&'static str, usize),
    /// A path asked for appears more than once.
    Duplicate(usize),
}

impl std::fmt::Display for ScanError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ScanError::Syntax(m, at) => write!(f, "{m} at byte {at}"),
            ScanError::Duplicate(_) => f.write_str("a field appears twice"),
        }
    }
}

/// Fields to look for, each a dotted path (`"order_ts"`, `"customer.id"`), split once so that
/// scanning a record splits nothing. A key that itself contains a dot cannot be named.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Paths<const N: usize> {
    segments: [Vec<Segment>; N],
}

/// One segment of a path, with what a key is compared to: its length, and its first eight
/// bytes as a word (most keys are that short: one comparison, no loop).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Segment {
    text: String,
    word: u64,
}

impl Segment {
    fn new(text: &str) -> Self {
        let mut w = [0u8; 8];
        let n = text.len().min(8);
        w[..n].copy_from_slice(&text.as_bytes()[..n]);
        Self { text: text.to_string(), word: u64::from_le_bytes(w) }
    }

    /// Whether `key` (whose first eight bytes, zero-padded, are `word`) is this segment.
    #[inline(always)]
    fn is(&self, key: &[u8], word: u64) -> bool {
        key.len() == self.text.len() && word == self.word && (key.len() <= 8 || same(key, self.text.as_bytes()))
    }
}

impl<const N: usize> Paths<N> {
    pub fn new(paths: [&str; N]) -> Self {
        const { assert!(N <= MAX_PATHS, "at most MAX_PATHS paths per scan") };
        Self { segments: paths.map(|p| p.split('.').map(Segment::new).collect()) }
    }

    /// Up to `N` paths from a list known only at run time (a plugin's config): the slots past
    /// them hold names no key can have (a raw NUL byte cannot appear in a JSON string), so they
    /// are never found. `None` for more than `N`.
    pub fn up_to(paths: &[&str]) -> Option<Self> {
        const { assert!(N <= MAX_PATHS, "at most MAX_PATHS paths per scan") };
        if paths.len() > N {
            return None;
        }
        Some(Self {
            segments: std::array::from_fn(|i| match paths.get(i) {
                Some(p) => p.split('.').map(Segment::new).collect(),
                None => vec![Segment::new(&format!("\0unused{i}"))],
            }),
        })
    }

    /// Path `i` as written.
    pub fn name(&self, i: usize) -> String {
        self.segments[i].iter().map(|s| s.text.as_str()).collect::<Vec<_>>().join(".")
    }
}

/// The first eight bytes of `key` (zero-padded), as [`Segment::is`] compares them.
///
/// A shorter key is read as two loads that overlap or meet (its first and last four bytes, or
/// two), joined by a shift, so the padding is zero and no byte goes through memory. Copying it
/// into a zeroed word on the stack and reading that back whole stalls the read behind the
/// bytes' stores, and in Wasm the copy is a call to `memcpy`, which showed up in the compiled
/// parser's profile for keys such as `status` and `user_id`.
#[inline(always)]
fn key_word(key: &[u8]) -> u64 {
    let n = key.len();
    if let Some(head) = key.first_chunk::<8>() {
        return u64::from_le_bytes(*head);
    }
    if let (Some(lo), Some(hi)) = (key.first_chunk::<4>(), key.last_chunk::<4>()) {
        return u64::from(u32::from_le_bytes(*lo)) | u64::from(u32::from_le_bytes(*hi)) << (8 * (n - 4));
    }
    if let (Some(lo), Some(hi)) = (key.first_chunk::<2>(), key.last_chunk::<2>()) {
        return u64::from(u16::from_le_bytes(*lo)) | u64::from(u16::from_le_bytes(*hi)) << (8 * (n - 2));
    }
    key.first().map_or(0, |&b| u64::from(b))
}

/// Scans `json`, which must be one JSON object, and returns the raw text of each of `paths`
/// (`None` where absent).
pub fn scan<'a, const N: usize>(json: &'a [u8], paths: &Paths<N>) -> Result<[Option<&'a [u8]>; N], ScanError> {
    let paths = &paths.segments;
    let mut s = Scanner { b: json, i: 0, non_ascii: false };
    let mut found = [None; N];
    s.ws();
    if s.peek() != Some(b'{') {
        return Err(s.err("expected a JSON object"));
    }
    let all = if N == 0 { 0 } else { u64::MAX >> (64 - N) };
    s.object(0, paths, all, &mut found)?;
    s.ws();
    if s.i != json.len() {
        return Err(s.err("trailing characters after the object"));
    }
    // Bytes at or above 0x80 occur only inside strings (anything else is a syntax error
    // above); one pass of the standard check over the whole value settles their encoding.
    if s.non_ascii && std::str::from_utf8(json).is_err() {
        return Err(ScanError::Syntax("invalid UTF-8", 0));
    }
    Ok(found)
}

struct Scanner<'a> {
    b: &'a [u8],
    i: usize,
    non_ascii: bool,
}

/// Eight bytes at `i`, little-endian, if there are eight.
#[inline(always)]
pub(super) fn word(b: &[u8], i: usize) -> Option<u64> {
    let w: [u8; 8] = b.get(i..i + 8)?.try_into().ok()?;
    Some(u64::from_le_bytes(w))
}

const ONES: u64 = 0x0101_0101_0101_0101;
const HIGHS: u64 = 0x8080_8080_8080_8080;

/// The high bit of each byte of `x` that is zero. Exact for the lowest such byte; a higher one
/// may be flagged after a borrow, which does not matter to a search for the first (nor does it
/// to [`equal_bytes`] and [`bytes_below`], built on the same arithmetic).
#[inline(always)]
fn zero_bytes(x: u64) -> u64 {
    x.wrapping_sub(ONES) & !x & HIGHS
}

/// The high bit of each byte of `x` equal to `byte`.
#[inline(always)]
pub(super) fn equal_bytes(x: u64, byte: u8) -> u64 {
    zero_bytes(x ^ (ONES * byte as u64))
}

/// The high bit of each ASCII byte of `x` below `n` (`n` at most 0x80).
#[inline(always)]
pub(super) fn bytes_below(x: u64, n: u8) -> u64 {
    x.wrapping_sub(ONES * n as u64) & !x & HIGHS
}

/// The bytes that end a run of plain string characters: `"`, `\`, control characters and
/// non-ASCII bytes (whose encoding is checked once, at the end). Eight at a time (SWAR, plain
/// integer arithmetic, so the same code serves natively and inside Wasm).
#[inline(always)]
fn string_stops(x: u64) -> u64 {
    equal_bytes(x, b'"') | equal_bytes(x, b'\\') | bytes_below(x, 0x20) | (x & HIGHS)
}

/// The bytes of `x` that are not ASCII digits.
#[inline(always)]
fn non_digits(x: u64) -> u64 {
    let y = x ^ (ONES * b'0' as u64); // digits become 0..=9
    (y.wrapping_add(ONES * (0x80 - 10)) | y) & HIGHS
}

impl<'a> Scanner<'a> {
    #[inline(always)]
    fn peek(&self) -> Option<u8> {
        self.b.get(self.i).copied()
    }

    fn err(&self, m: &'static str) -> ScanError {
        ScanError::Syntax(m, self.i)
    }

    #[inline(always)]
    fn ws(&mut self) {
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = self.peek() {
            self.i += 1;
        }
    }

    /// At `{`: walks the object's members. `want` is the set of paths (bits of `paths`) whose
    /// first `depth` segments led here.
    fn object<const N: usize>(
        &mut self,
        depth: usize,
        paths: &[Vec<Segment>; N],
        want: u64,
        found: &mut [Option<&'a [u8]>; N],
    ) -> Result<(), ScanError> {
        if depth >= MAX_DEPTH {
            return Err(self.err("nested too deeply"));
        }
        self.i += 1; // `{`
        self.ws();
        if self.peek() == Some(b'}') {
            self.i += 1;
            return Ok(());
        }
        loop {
            if self.peek() != Some(b'"') {
                return Err(self.err("expected a key"));
            }
            let (start, end, escaped) = self.string()?;
            let key = &self.b[start..end];
            self.ws();
            if self.peek() != Some(b':') {
                return Err(self.err("expected `:`"));
            }
            self.i += 1;
            self.ws();
            // The paths this key continues: their segment at `depth` is the key (decoded, for
            // the rare key spelt with escapes, so `"order\u005fts"` is `order_ts` as for serde).
            let mut next = 0u64;
            if want != 0 {
                let decoded;
                let key: &[u8] = if escaped {
                    decoded = serde_json::from_slice::<String>(&self.b[start - 1..end + 1]).unwrap_or_default();
                    decoded.as_bytes()
                } else {
                    key
                };
                let word = key_word(key);
                let mut bits = want;
                while bits != 0 {
                    let p = bits.trailing_zeros() as usize;
                    bits &= bits - 1;
                    if paths[p].get(depth).is_some_and(|seg| seg.is(key, word)) {
                        next |= 1 << p;
                    }
                }
            }
            let value_start = self.i;
            // Paths ending here take the value; longer ones go into it if it is an object.
            let (ending, deeper) = split(next, paths, depth);
            match self.peek() {
                // Scalars here, without a call: most members are one.
                Some(b'"') => drop(self.string()?),
                Some(b'-' | b'0'..=b'9') => self.number()?,
                Some(b'{') if deeper != 0 => self.object(depth + 1, paths, deeper, found)?,
                _ => self.value(depth + 1)?,
            }
            if ending != 0 {
                let raw = &self.b[value_start..self.i];
                let mut bits = ending;
                while bits != 0 {
                    let p = bits.trailing_zeros() as usize;
                    bits &= bits - 1;
                    if found[p].replace(raw).is_some() {
                        return Err(ScanError::Duplicate(p));
                    }
                }
            }
            self.ws();
            match self.peek() {
                Some(b',') => {
                    self.i += 1;
                    self.ws();
                }
                Some(b'}') => {
                    self.i += 1;
                    return Ok(());
                }
                _ => return Err(self.err("expected `,` or `}`")),
            }
        }
    }

    /// Skips one value, checking it.
    fn value(&mut self, depth: usize) -> Result<(), ScanError> {
        match self.peek() {
            Some(b'"') => self.string().map(drop),
            Some(b'{') => self.object::<0>(depth, &[], 0, &mut []),
            Some(b'[') => self.array(depth),
            Some(b't') => self.literal(b"true"),
            Some(b'f') => self.literal(b"false"),
            Some(b'n') => self.literal(b"null"),
            Some(b'-' | b'0'..=b'9') => self.number(),
            _ => Err(self.err("expected a value")),
        }
    }

    fn array(&mut self, depth: usize) -> Result<(), ScanError> {
        if depth >= MAX_DEPTH {
            return Err(self.err("nested too deeply"));
        }
        self.i += 1; // `[`
        self.ws();
        if self.peek() == Some(b']') {
            self.i += 1;
            return Ok(());
        }
        loop {
            self.value(depth + 1)?;
            self.ws();
            match self.peek() {
                Some(b',') => {
                    self.i += 1;
                    self.ws();
                }
                Some(b']') => {
                    self.i += 1;
                    return Ok(());
                }
                _ => return Err(self.err("expected `,` or `]`")),
            }
        }
    }

    fn literal(&mut self, lit: &[u8]) -> Result<(), ScanError> {
        if self.b.get(self.i..self.i + lit.len()) == Some(lit) {
            self.i += lit.len();
            Ok(())
        } else {
            Err(self.err("expected a value"))
        }
    }

    /// At `"`: skips the string; returns its contents' range and whether it holds escapes.
    #[inline(always)]
    fn string(&mut self) -> Result<(usize, usize, bool), ScanError> {
        self.i += 1;
        let start = self.i;
        let mut escaped = false;
        loop {
            // The common run of plain characters, eight bytes a step, then the tail a byte.
            loop {
                match word(self.b, self.i) {
                    Some(w) => {
                        let stops = string_stops(w);
                        if stops != 0 {
                            self.i += (stops.trailing_zeros() / 8) as usize;
                            break;
                        }
                        self.i += 8;
                    }
                    None => {
                        while let Some(&c) = self.b.get(self.i) {
                            if c < 0x20 || c == b'"' || c == b'\\' || c >= 0x80 {
                                break;
                            }
                            self.i += 1;
                        }
                        break;
                    }
                }
            }
            match self.peek() {
                Some(b'"') => {
                    let end = self.i;
                    self.i += 1;
                    return Ok((start, end, escaped));
                }
                Some(b'\\') => {
                    escaped = true;
                    self.i += 1;
                    match self.peek() {
                        Some(b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't') => self.i += 1,
                        Some(b'u') => {
                            let hex = self.b.get(self.i + 1..self.i + 5);
                            if !hex.is_some_and(|h| h.iter().all(u8::is_ascii_hexdigit)) {
                                return Err(self.err("bad \\u escape"));
                            }
                            self.i += 5;
                        }
                        _ => return Err(self.err("bad escape")),
                    }
                }
                Some(c) if c >= 0x80 => {
                    self.non_ascii = true;
                    self.i += 1;
                }
                Some(_) => return Err(self.err("control character in a string")),
                None => return Err(self.err("unterminated string")),
            }
        }
    }
}

/// The paths of `bits` that end at segment `depth`, and those that go deeper.
fn split<const N: usize>(bits: u64, paths: &[Vec<Segment>; N], depth: usize) -> (u64, u64) {
    let (mut ending, mut deeper) = (0, 0);
    let mut b = bits;
    while b != 0 {
        let p = b.trailing_zeros() as usize;
        b &= b - 1;
        if paths[p].len() == depth + 1 { ending |= 1 << p } else { deeper |= 1 << p }
    }
    (ending, deeper)
}

/// Byte equality without a `memcmp` call: the keys compared here are a few bytes long, and inside
/// Wasm a call to the guest's `memcmp` costs more than the comparison.
#[inline]
pub fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x == y)
}

#[cfg(test)]
pub mod tests;
