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

    /// `-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?`
    #[inline(always)]
    fn number(&mut self) -> Result<(), ScanError> {
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

/// Byte equality without a `memcmp` call: the keys compared here are a few bytes long, and inside
/// Wasm a call to the guest's `memcmp` costs more than the comparison.
#[inline]
pub fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x == y)
}

#[cfg(test)]
pub mod tests {
    use super::*;

    const ORDER: &[u8] =
        br#"{"order_id":1,"user_id":26537,"status":"PENDING","amount":38.82,"order_ts":1793491193304}"#;

    #[test]
    fn finds_fields_and_nested_paths_in_one_pass() {
        let [ts, user, missing] = scan(ORDER, &Paths::new(["order_ts", "user_id", "nope"])).unwrap();
        assert_eq!(ts, Some(&b"1793491193304"[..]));
        assert_eq!(user, Some(&b"26537"[..]));
        assert_eq!(missing, None);
        let row = br#" {"a": {"b": [1, {"c": 2}], "c": "x\"y"}, "c": null} "#;
        let [ac, c, abc, a] = scan(row, &Paths::new(["a.c", "c", "a.b.c", "a"])).unwrap();
        assert_eq!(ac, Some(&br#""x\"y""#[..]));
        assert_eq!(c, Some(&b"null"[..]));
        assert_eq!(abc, None, "paths go through objects only, not arrays");
        assert!(a.is_some_and(|v| v.starts_with(b"{") && v.ends_with(b"}")));
    }

    #[test]
    fn fewer_paths_than_slots_leave_the_rest_unfound() {
        let paths = Paths::<4>::up_to(&["status", "user_id"]).unwrap();
        let [status, user, a, b] = scan(ORDER, &paths).unwrap();
        assert_eq!((status, user), (Some(&br#""PENDING""#[..]), Some(&b"26537"[..])));
        assert_eq!((a, b), (None, None));
        assert!(Paths::<1>::up_to(&["a", "b"]).is_none());
    }

    #[test]
    fn refuses_what_serde_refuses() {
        for bad in [
            &br#"[1, 2]"#[..],
            br#"{"a":1} {}"#,
            br#"{"a":01}"#,
            br#"{"a":1.}"#,
            br#"{"a":-}"#,
            br#"{"a":"\x"}"#,
            br#"{"a":"\u12"}"#,
            b"{\"a\":\"\x01\"}",
            b"{\"a\":\"\xff\"}",
            br#"{"a":tru}"#,
            br#"{"a":1,}"#,
            br#"{"a" 1}"#,
            br#"{"a":[1,]}"#,
            br#"{"order_ts":1,"order_ts":2}"#,
            b"",
        ] {
            let r = scan(bad, &Paths::new(["order_ts"]));
            assert!(r.is_err(), "{:?} accepted", String::from_utf8_lossy(bad));
        }
    }

    proptest::proptest! {
        /// Any JSON value serialized (compact or pretty): accepted exactly when it is an object,
        /// and each top-level field found is the text serde reads back as that field's value.
        #[test]
        fn serialized_values_scan_as_serde_reads_them(v in json_value(), pretty: bool) {
            let text = if pretty { serde_json::to_vec_pretty(&v) } else { serde_json::to_vec(&v) }.unwrap();
            let keys: Vec<String> = v.as_object().map(|o| o.keys().take(3).cloned().collect()).unwrap_or_default();
            let names: [&str; 3] = [0, 1, 2].map(|i| keys.get(i).map_or("absent", String::as_str));
            match scan(&text, &Paths::new(names)) {
                Ok(found) => {
                    proptest::prop_assert!(v.is_object());
                    // What serde reads the whole text as (its float parsing is not exact, so not `v`).
                    let read: serde_json::Value = serde_json::from_slice(&text).unwrap();
                    for (name, raw) in names.iter().zip(found) {
                        let want = read.get(*name);
                        let got = raw.map(|r| serde_json::from_slice::<serde_json::Value>(r).unwrap());
                        proptest::prop_assert_eq!(got.as_ref(), want);
                    }
                }
                Err(e) => proptest::prop_assert!(!v.is_object(), "{e}"),
            }
        }

        /// Any bytes at all: accepted exactly when serde_json accepts them as a JSON object
        /// (keys are not decoded, so serde's check of surrogate escapes in keys is left out).
        #[test]
        fn whatever_bytes_are_judged_as_serde_judges_them(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..48), json in json_ish()) {
            for input in [&bytes[..], json.as_bytes()] {
                let ours = scan(input, &Paths::new([])).is_ok();
                let serde = std::str::from_utf8(input).is_ok_and(|t| {
                    t.trim_start().starts_with('{') && serde_json::from_str::<serde::de::IgnoredAny>(t).is_ok()
                });
                proptest::prop_assert_eq!(ours, serde, "{:?}", String::from_utf8_lossy(input));
            }
        }
    }

    fn json_value() -> impl proptest::strategy::Strategy<Value = serde_json::Value> {
        json_values("\\PC{0,8}", "[a-z\\\\\"é]{0,4}")
    }

    /// Any JSON value, nested a few levels, with strings and object keys drawn from `strings`
    /// and `keys` (regular expressions): what the SDK's scanners are tested against.
    pub fn json_values(
        strings: &'static str,
        keys: &'static str,
    ) -> impl proptest::strategy::Strategy<Value = serde_json::Value> {
        use proptest::prelude::*;
        let leaf = prop_oneof![
            Just(serde_json::Value::Null),
            any::<bool>().prop_map(serde_json::Value::Bool),
            any::<i64>().prop_map(serde_json::Value::from),
            any::<f64>().prop_filter("finite", |f| f.is_finite()).prop_map(serde_json::Value::from),
            strings.prop_map(serde_json::Value::String),
        ];
        leaf.prop_recursive(4, 32, 6, move |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..5).prop_map(serde_json::Value::Array),
                proptest::collection::btree_map(keys, inner, 0..5)
                    .prop_map(|m| serde_json::Value::Object(m.into_iter().collect())),
            ]
        })
    }

    /// Text that is nearly JSON: JSON's own characters, so mistakes are near misses.
    fn json_ish() -> impl proptest::strategy::Strategy<Value = String> {
        "[{}\\[\\]\"\\\\:,0-9.eE+\\- tnulrfasu\u{e9}\u{1}]{0,40}"
    }

    #[test]
    fn eight_byte_steps_find_the_first_stop() {
        let at = |text: &[u8; 8], f: fn(u64) -> u64| (f(u64::from_le_bytes(*text)).trailing_zeros() / 8) as usize;
        assert_eq!(at(b"abc\"defg", string_stops), 3);
        assert_eq!(at(b"abcdef\\g", string_stops), 6);
        assert_eq!(at(b"a\x01\"\"\"\"\"\"", string_stops), 1);
        assert_eq!(at(b"\xc3\xa9abcdef", string_stops), 0);
        assert_eq!(at(b"abcdefgh", string_stops), 8);
        assert_eq!(at(b"1234567,", non_digits), 7);
        assert_eq!(at(b"12/45678", non_digits), 2);
        assert_eq!(at(b"12:45678", non_digits), 2);
        assert_eq!(at(b"\xb12345678", non_digits), 0);
        assert_eq!(at(b"01234567", non_digits), 8);
    }

    #[test]
    fn a_key_word_is_the_first_eight_bytes_zero_padded() {
        for text in [&b"abcdefghijkl"[..], &[0xff; 12][..], b"\x01\x02\x03\x04\x05\x06\x07\x08\x09"] {
            for n in 0..=text.len() {
                let mut w = [0u8; 8];
                w[..n.min(8)].copy_from_slice(&text[..n.min(8)]);
                assert_eq!(key_word(&text[..n]), u64::from_le_bytes(w), "{n} bytes of {text:?}");
            }
        }
    }

    #[test]
    fn reads_integers_as_serde_does() {
        assert_eq!(int(b"1793491193304"), Some(1_793_491_193_304));
        assert_eq!(int(b"-9223372036854775808"), Some(i64::MIN));
        assert_eq!(int(b"9223372036854775808"), None);
        assert_eq!(int(b"1.5"), None);
        assert_eq!(int(b"1e3"), None);
        assert_eq!(int(b"-"), None);
        assert_eq!(int(b"-0"), Some(0));
        assert_eq!(uint(b"18446744073709551615"), Some(u64::MAX));
        assert_eq!(uint(b"18446744073709551616"), None);
        for n in [0u64, 7, 12_345_678, 98_765_432_109, 1_793_491_193_304, u64::MAX, u64::MAX / 3] {
            assert_eq!(uint(n.to_string().as_bytes()), Some(n));
        }
        assert_eq!(uint(b"1234567a90"), None);
        assert_eq!(uint(b"12345678a"), None);
    }
}
