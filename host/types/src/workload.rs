//! Generator of the reference order workload (the schema and statistics of the reference
//! benchmark's order generator, with its own deterministic random stream):
//! `{"order_id","user_id","status","amount","order_ts"}`,
//! ~1000 events per simulated second from 2026-11-01T00:00:00Z, event times out of order by
//! < 30 s, ~2% ERROR and ~8% PENDING, zipf-skewed users, and ~0.1% very late events (2-3 h
//! behind the newest so far), none in the first quarter of the stream.

use std::io::Write;

pub const START_MS: i64 = 1_793_491_200_000;
const USERS: usize = 100_000;
const ZIPF_S: f64 = 1.1;
const P_ERROR: f64 = 0.02;
const P_PENDING: f64 = 0.08;
const P_VERY_LATE: f64 = 0.001;
const MAX_DELAY_MS: f64 = 30_000.0;
const VERY_LATE_MIN_MS: i64 = 2 * 3600 * 1000;
const VERY_LATE_SPAN_MS: f64 = 3600.0 * 1000.0;

/// SplitMix64: tiny, fast, and stable forever, so a seed names the same file in every version.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> f64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        (z >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// Writes the user table the orders refer to, as recorded-event envelopes keyed by `user_id`
/// (a `[join]` table, `docs/semantics.md`): a tier and a country per user, from `seed`.
pub fn users(seed: u64, out: &mut impl Write) -> std::io::Result<u64> {
    const TIERS: [&str; 3] = ["gold", "silver", "bronze"];
    const COUNTRIES: [&str; 6] = ["DE", "FR", "GB", "IN", "JP", "US"];
    let mut rng = Rng(seed);
    for user in 1..=USERS {
        let tier = TIERS[(rng.next() * TIERS.len() as f64) as usize % TIERS.len()];
        let country = COUNTRIES[(rng.next() * COUNTRIES.len() as f64) as usize % COUNTRIES.len()];
        writeln!(out, r#"{{"key":"{user}","value":{{"user_id":{user},"tier":"{tier}","country":"{country}"}}}}"#)?;
    }
    Ok(USERS as u64)
}

/// Writes `n` order events for `seed`, one JSON object per line; returns how many are very late.
pub fn orders(n: u64, seed: u64, out: &mut impl Write) -> std::io::Result<u64> {
    let mut g = OrderStream::new(n, seed);
    while let Some(line) = g.next_line() {
        out.write_all(line.as_bytes())?;
    }
    Ok(g.very_late)
}

/// The order events of [`orders`], one line at a time (with its newline), for producers that
/// pace them (`weir demo`).
pub struct OrderStream {
    cdf: Vec<f64>,
    total: f64,
    rng: Rng,
    n: u64,
    i: u64,
    late_after: u64,
    p_late: f64,
    max_ts: Option<i64>,
    /// Very-late events so far.
    pub very_late: u64,
    line: String,
}

impl OrderStream {
    pub fn new(n: u64, seed: u64) -> Self {
        let mut cdf = Vec::with_capacity(USERS);
        let mut acc = 0.0;
        for k in 1..=USERS {
            acc += (k as f64).powf(-ZIPF_S);
            cdf.push(acc);
        }
        Self {
            cdf,
            total: acc,
            rng: Rng(seed),
            n,
            i: 0,
            late_after: n / 4,
            p_late: P_VERY_LATE / 0.75,
            max_ts: None,
            very_late: 0,
            line: String::with_capacity(128),
        }
    }

    pub fn next_line(&mut self) -> Option<&str> {
        if self.i >= self.n {
            return None;
        }
        let i = self.i;
        self.i += 1;
        let t = START_MS + i as i64;
        let u = self.rng.next() * self.total;
        let rank = self.cdf.partition_point(|&c| c < u).min(USERS - 1);
        let user_id = (rank * 48_271) % USERS + 1;
        let r = self.rng.next();
        let status = if r < P_ERROR {
            "ERROR"
        } else if r < P_ERROR + P_PENDING {
            "PENDING"
        } else {
            "OK"
        };
        let a = self.rng.next();
        let cents = 100 + (a * a * 50_000.0) as u64;
        let d = self.rng.next();
        let ts = match self.max_ts {
            Some(m) if i >= self.late_after && self.rng.next() < self.p_late => {
                self.very_late += 1;
                m - VERY_LATE_MIN_MS - (d * VERY_LATE_SPAN_MS) as i64
            }
            _ => t - (d * MAX_DELAY_MS) as i64,
        };
        self.max_ts = Some(self.max_ts.map_or(ts, |m| m.max(ts)));
        self.line.clear();
        use std::fmt::Write as _;
        let _ = writeln!(
            self.line,
            r#"{{"order_id":{},"user_id":{user_id},"status":"{status}","amount":{}.{:02},"order_ts":{ts}}}"#,
            i + 1,
            cents / 100,
            cents % 100
        );
        Some(&self.line)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn is_deterministic_per_seed_and_follows_the_model() {
        let (mut a, mut b, mut c) = (Vec::new(), Vec::new(), Vec::new());
        let late = orders(20_000, 7, &mut a).unwrap();
        orders(20_000, 7, &mut b).unwrap();
        orders(20_000, 8, &mut c).unwrap();
        assert_eq!(a, b);
        assert_ne!(a, c);
        let text = String::from_utf8(a).unwrap();
        let rows: Vec<serde_json::Value> = text.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
        assert_eq!(rows.len(), 20_000);
        let errors = rows.iter().filter(|r| r["status"] == "ERROR").count();
        assert!((200..600).contains(&errors), "{errors} errors");
        assert!((5..60).contains(&late), "{late} very late");
        // None in the first quarter: every event there is within 30 s of its slot.
        for (i, r) in rows.iter().take(5_000).enumerate() {
            let lag = START_MS + i as i64 - r["order_ts"].as_i64().unwrap();
            assert!((0..30_000).contains(&lag));
        }
    }
}
