//! A `float` or `double` as JSON text: the shortest text that reads back as the same double,
//! with a point or an exponent (`12.0`, `0.25`, `1e16`), so that it reads back as a number
//! that is no integer; `null` for a value that is not finite.
//!
//! The text is ryu's. Ryu's search needs 128-bit products, which Wasm does not have (each is a
//! call to `__multi3`), and the Avro parser runs in Wasm: a tenth of an Avro orders pipeline's
//! CPU went to ryu on the orders' amounts. So a value that a decimal of at most
//! [`SHORT_DIGITS`] fraction digits reads back as exactly (a price, a rate, most amounts) is
//! written from that decimal, which is then ryu's text too (a test holds the two to it); any
//! other value goes to ryu.

/// Fraction digits the short path tries: 0 (`12.0`) to 3 (`0.125`).
const SHORT_DIGITS: usize = 3;
const POWERS: [f64; SHORT_DIGITS + 1] = [1.0, 10.0, 100.0, 1000.0];
/// Below this magnitude, times 10^[`SHORT_DIGITS`], a decimal's digits fit a double's 53 bits
/// exactly, and ryu writes the value without an exponent.
const SHORT_BELOW: f64 = 1e12;

pub(super) fn float(f: f64, out: &mut Vec<u8>) {
    if !f.is_finite() {
        out.extend_from_slice(b"null");
    } else if !short(f, out) {
        out.extend_from_slice(ryu::Buffer::new().format_finite(f).as_bytes());
    }
}

/// Writes `f` as its decimal of fewest fraction digits, if one of at most [`SHORT_DIGITS`]
/// reads back as exactly `f`. Why it is ryu's text: the decimal `m / 10^k` reads back as the
/// double nearest it, which is `m / 10^k` divided in doubles (both exact below
/// [`SHORT_BELOW`]); the fewest fraction digits are the fewest digits, since the integer part
/// is the value's; and below [`SHORT_BELOW`] a double's neighbours are nearer than 10^-3, so
/// no other decimal of as many digits reads back as it.
fn short(f: f64, out: &mut Vec<u8>) -> bool {
    // Zero (ryu writes `0.0` and `-0.0`) and anything below a thousandth go to ryu.
    if !(f.abs() < SHORT_BELOW && f.abs() >= 1e-3) {
        return false;
    }
    for (k, &p) in POWERS.iter().enumerate() {
        let m = (f * p).round();
        if m / p != f {
            continue;
        }
        let m = m as i64;
        let unit = p as u64;
        if m < 0 {
            out.push(b'-');
        }
        let (whole, frac) = (m.unsigned_abs() / unit, m.unsigned_abs() % unit);
        out.extend_from_slice(itoa::Buffer::new().format(whole).as_bytes());
        out.push(b'.');
        if k == 0 {
            out.push(b'0');
        } else {
            let digits = itoa::Buffer::new().format(frac).len();
            out.extend(std::iter::repeat_n(b'0', k - digits));
            out.extend_from_slice(itoa::Buffer::new().format(frac).as_bytes());
        }
        return true;
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn text(f: f64) -> String {
        let mut out = Vec::new();
        float(f, &mut out);
        String::from_utf8(out).unwrap()
    }

    fn ryu(f: f64) -> String {
        if f.is_finite() { ryu::Buffer::new().format_finite(f).to_string() } else { "null".into() }
    }

    #[test]
    fn short_decimals_read_as_ryu_writes_them() {
        for f in
            [0.0, -0.0, 1.0, -1.0, 12.5, 0.1, 0.001, -0.125, 1234.56, 999_999_999_999.9, 1e12, 1e15, 1e16, 5e-4, 0.3]
        {
            assert_eq!(text(f), ryu(f), "{f}");
        }
        assert_eq!(text(f64::NAN), "null");
        assert_eq!(text(f64::INFINITY), "null");
    }

    proptest! {
        /// Any double, and any decimal of up to five fraction digits, is written as ryu writes it.
        #[test]
        fn every_double_is_written_as_ryu_writes_it(bits in any::<u64>(), m in any::<i64>(), k in 0u32..6) {
            let f = f64::from_bits(bits);
            prop_assert_eq!(text(f), ryu(f));
            let d = (m % 1_000_000_000_000_000) as f64 / 10f64.powi(k as i32);
            prop_assert_eq!(text(d), ryu(d));
        }
    }
}
