//! The standard aggregator: several aggregates of named fields at once, per window and key, so
//! that a `GROUP BY window, key` needs no code. With the standard JSON parser
//! (`plugins/json-parser`) it is the no-code pipeline of `docs/plugins.md`, "The standard
//! library".
//!
//! Config: `aggregates = [{ op = "count" }, { op = "sum", field = "amount" }, ...]`, each with
//! - `op`: `count` (events; with `field`, events where it is present and not null), `sum`,
//!   `min`, `max` or `avg` (of a numeric field), or `distinct`: the number of distinct values of
//!   a field, estimated by a HyperLogLog++ sketch of precision [`DISTINCT_PRECISION`] (a
//!   relative error around 1.6%; exact while few values have been seen), which merges across
//!   panes and sessions like every other accumulator;
//! - `field`: a field path (`"amount"`, `"price.net"` inside an object); required but for
//!   `count`;
//! - `as`: the output field's name (default `count`, or `OP_FIELD` with dots as `_`: `sum_amount`).
//!
//! As in SQL, an absent or null field is skipped by every aggregate but a bare `count`; a value
//! that is not a number fails the event (its dead letter says which field). Sums of integers
//! are exact (in `i128`) until a fraction appears; `avg` divides the sum by the values counted.
//! At most [`MAX_FIELDS`] distinct fields.

use hyperloglogplus::HyperLogLog as _;
use serde::{Deserialize, Serialize};
use weir_guest::{Aggregator, Config, Event, Paths, PluginError, export_plugin};

/// The most distinct fields the aggregates may read.
const MAX_FIELDS: usize = 8;

/// The distinct count's sketch: 2^12 registers, about 3 KiB once dense.
const DISTINCT_PRECISION: u8 = 12;

/// SipHash-1-3 with fixed keys: the same hash in every build and on every machine.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize)]
struct FixedHash;

impl std::hash::BuildHasher for FixedHash {
    type Hasher = siphasher::sip::SipHasher13;
    fn build_hasher(&self) -> Self::Hasher {
        siphasher::sip::SipHasher13::new_with_keys(0x5745_4952_0000_0001, 0x5745_4952_0000_0002)
    }
}

type Sketch = hyperloglogplus::HyperLogLogPlus<Vec<u8>, FixedHash>;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
enum Op {
    Count,
    Sum,
    Min,
    Max,
    Avg,
    Distinct,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct AggregateFile {
    op: Op,
    field: Option<String>,
    #[serde(rename = "as")]
    name: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Settings {
    aggregates: Vec<AggregateFile>,
}

struct Aggregate {
    op: Op,
    /// Index of its field among the scanned paths.
    field: Option<usize>,
    name: String,
}

struct Stats {
    aggregates: Vec<Aggregate>,
    /// The distinct fields, then paths no row has (a JSON key cannot hold a raw NUL byte).
    paths: Paths<MAX_FIELDS>,
    fields: Vec<String>,
}

/// A sum: exact while every value is an integer.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
struct Sum {
    int: i128,
    float: f64,
    /// A value with a fraction (or out of `i64`) was added: the sum is `int + float` in `f64`.
    inexact: bool,
}

impl Sum {
    fn add(&mut self, raw: &[u8], v: f64) {
        match std::str::from_utf8(raw).ok().and_then(|s| s.parse::<i64>().ok()) {
            Some(i) if !self.inexact => self.int += i128::from(i),
            Some(i) => self.float += i as f64,
            None => {
                self.inexact = true;
                self.float += v;
            }
        }
    }

    fn merge(&mut self, o: Sum) {
        self.int += o.int;
        self.float += o.float;
        self.inexact |= o.inexact;
    }

    fn value(&self) -> serde_json::Value {
        if self.inexact {
            serde_json::json!(self.int as f64 + self.float)
        } else {
            match i64::try_from(self.int) {
                Ok(i) => serde_json::json!(i),
                Err(_) => serde_json::json!(self.int as f64),
            }
        }
    }

    fn as_f64(&self) -> f64 {
        self.int as f64 + self.float
    }
}

/// One aggregate's state.
#[derive(Debug, Clone, Serialize, Deserialize)]
enum State {
    Count(u64),
    Sum(Sum),
    Min(Option<f64>),
    Max(Option<f64>),
    Avg(Sum, u64),
    Distinct(Box<Sketch>),
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct Acc(Vec<State>);

impl Stats {
    fn empty(&self) -> Result<Vec<State>, PluginError> {
        self.aggregates
            .iter()
            .map(|a| {
                Ok(match a.op {
                    Op::Count => State::Count(0),
                    Op::Sum => State::Sum(Sum::default()),
                    Op::Min => State::Min(None),
                    Op::Max => State::Max(None),
                    Op::Avg => State::Avg(Sum::default(), 0),
                    Op::Distinct => State::Distinct(Box::new(
                        Sketch::new(DISTINCT_PRECISION, FixedHash)
                            .map_err(|e| PluginError::Internal(format!("{e:?}")))?,
                    )),
                })
            })
            .collect()
    }
}

impl Aggregator for Stats {
    type Acc = Acc;
    type Output = serde_json::Map<String, serde_json::Value>;

    fn new(config: &Config) -> Result<Self, PluginError> {
        let s: Settings = config.parse()?;
        if s.aggregates.is_empty() {
            return Err(PluginError::InvalidConfig(
                "aggregates: name at least one, e.g. aggregates = [{ op = \"count\" }]".into(),
            ));
        }
        let mut fields: Vec<String> = Vec::new();
        let mut aggregates = Vec::new();
        for (i, a) in s.aggregates.into_iter().enumerate() {
            let field = match (a.op, a.field) {
                (Op::Count, None) => None,
                (_, Some(f)) if !f.is_empty() => Some(match fields.iter().position(|x| *x == f) {
                    Some(p) => p,
                    None => {
                        fields.push(f);
                        fields.len() - 1
                    }
                }),
                (op, _) => {
                    return Err(PluginError::InvalidConfig(format!(
                        "aggregates[{i}]: {op:?} needs a field, e.g. field = \"amount\""
                    )));
                }
            };
            let op_name = format!("{:?}", a.op).to_lowercase();
            let name = a.name.unwrap_or_else(|| match field {
                None => op_name.clone(),
                Some(f) => format!("{op_name}_{}", fields[f].replace('.', "_")),
            });
            if aggregates.iter().any(|x: &Aggregate| x.name == name) {
                return Err(PluginError::InvalidConfig(format!(
                    "aggregates[{i}]: a second output named {name:?}; give one an `as`"
                )));
            }
            aggregates.push(Aggregate { op: a.op, field, name });
        }
        if fields.len() > MAX_FIELDS {
            return Err(PluginError::InvalidConfig(format!(
                "aggregates read {} fields; at most {MAX_FIELDS}",
                fields.len()
            )));
        }
        let names: Vec<&str> = fields.iter().map(String::as_str).collect();
        let paths = Paths::up_to(&names).ok_or_else(|| PluginError::Internal("paths".into()))?;
        Ok(Stats { aggregates, paths, fields })
    }

    fn add(&self, acc: &mut Acc, event: &Event<'_>) -> Result<(), PluginError> {
        if acc.0.is_empty() {
            acc.0 = self.empty()?;
        }
        let found = event.fields(&self.paths).map_err(|e| PluginError::Internal(format!("bad row: {e:?}")))?;
        for (a, st) in self.aggregates.iter().zip(acc.0.iter_mut()) {
            let value = match a.field {
                None => None,
                Some(f) => match &found[f] {
                    Some(v) if !v.is_null() => Some(v),
                    _ => continue,
                },
            };
            let number = || -> Result<f64, PluginError> {
                let v = value.ok_or_else(|| PluginError::Internal("no value".into()))?;
                v.as_f64().map_err(|_| {
                    let field = a.field.map_or("", |f| self.fields[f].as_str());
                    PluginError::Internal(format!("{}: field {field:?} is not a number", a.name))
                })
            };
            match st {
                State::Count(n) => *n += 1,
                State::Sum(s) => {
                    let x = number()?;
                    s.add(value.map_or(&[][..], |v| v.raw()), x);
                }
                State::Min(m) => {
                    let x = number()?;
                    *m = Some(m.map_or(x, |m| m.min(x)));
                }
                State::Max(m) => {
                    let x = number()?;
                    *m = Some(m.map_or(x, |m| m.max(x)));
                }
                State::Avg(s, n) => {
                    let x = number()?;
                    s.add(value.map_or(&[][..], |v| v.raw()), x);
                    *n += 1;
                }
                State::Distinct(sketch) => {
                    // A string by its text, any other value by its JSON text: `"7"` and `7`
                    // are one value, as keys are.
                    let Some(v) = value else { continue };
                    match v.as_str() {
                        Ok(s) if v.raw().first() == Some(&b'"') => sketch.insert(s.as_bytes()),
                        _ => sketch.insert(v.raw()),
                    }
                }
            }
        }
        Ok(())
    }

    fn merge(&self, acc: &mut Acc, other: Acc) {
        if acc.0.is_empty() {
            *acc = other;
            return;
        }
        for (a, b) in acc.0.iter_mut().zip(other.0) {
            match (a, b) {
                (State::Count(x), State::Count(y)) => *x += y,
                (State::Sum(x), State::Sum(y)) => x.merge(y),
                (State::Min(x), State::Min(y)) => *x = [*x, y].into_iter().flatten().reduce(f64::min),
                (State::Max(x), State::Max(y)) => *x = [*x, y].into_iter().flatten().reduce(f64::max),
                (State::Avg(x, n), State::Avg(y, m)) => {
                    x.merge(y);
                    *n += m;
                }
                (State::Distinct(x), State::Distinct(y)) => {
                    // Same precision and hash on both sides: merging cannot fail.
                    let _ = x.merge(&y);
                }
                _ => {}
            }
        }
    }

    fn finish(&self, acc: &Acc) -> Option<Self::Output> {
        if acc.0.is_empty() {
            return None;
        }
        let mut row = serde_json::Map::new();
        for (a, st) in self.aggregates.iter().zip(&acc.0) {
            let v = match st {
                State::Count(n) => serde_json::json!(n),
                State::Sum(s) => s.value(),
                State::Min(m) | State::Max(m) => serde_json::json!(m),
                State::Avg(_, 0) => serde_json::Value::Null,
                State::Avg(s, n) => serde_json::json!(s.as_f64() / *n as f64),
                State::Distinct(sketch) => serde_json::json!(sketch.clone().count().round() as u64),
            };
            row.insert(a.name.clone(), v);
        }
        Some(row)
    }
}

export_plugin!(aggregator: Stats);
