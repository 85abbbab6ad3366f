//! The standard filter and projection: keeps the events whose row meets every condition of
//! `where`, and passes on either the row as it is or only the fields of `select`. Part of the
//! standard library (`docs/plugins.md`).
//!
//! Config:
//! - `where = [{ field = "status", eq = "ERROR" }, { field = "amount", gt = 100 }, ...]`: all
//!   must hold. Each names a field path (`"amount"`, `"customer.tier"` inside an object) and one
//!   test: `eq`, `ne` (any JSON value; numbers compare as numbers, `1` equals `1.0`), `lt`,
//!   `le`, `gt`, `ge` (two numbers, or two strings by their bytes), `in` (a list of values) or
//!   `exists` (`true`: present and not null). As in SQL, an absent or null field meets no test
//!   but `exists = false`.
//! - `select = ["order_id", "customer.tier", ...]`: the output row has these fields only, named
//!   by their paths, in this order (absent ones left out). Without it, the row passes whole.
//!
//! The event's time and key pass unchanged. At most [`MAX_FIELDS`] distinct fields in all.

use serde::Deserialize;
use serde_json::Value as Json;
use weir_guest::{Config, Emitter, Event, Paths, PluginError, RecordError, Transformer, export_plugin};

/// The most distinct fields `where` and `select` may name together.
const MAX_FIELDS: usize = 16;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ConditionFile {
    field: String,
    eq: Option<Json>,
    ne: Option<Json>,
    lt: Option<Json>,
    le: Option<Json>,
    gt: Option<Json>,
    ge: Option<Json>,
    #[serde(rename = "in")]
    any_of: Option<Vec<Json>>,
    exists: Option<bool>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Settings {
    #[serde(default, rename = "where")]
    conditions: Vec<ConditionFile>,
    select: Option<Vec<String>>,
}

enum Test {
    Eq(Json),
    Ne(Json),
    Order(std::cmp::Ordering, bool, Json),
    In(Vec<Json>),
    Exists(bool),
}

struct Condition {
    field: usize,
    test: Test,
}

struct Filter {
    conditions: Vec<Condition>,
    /// Indices of the selected fields, with their names as JSON strings.
    select: Option<Vec<(usize, String)>>,
    /// The distinct fields, then paths no row has (a JSON key cannot hold a raw NUL byte).
    paths: Paths<MAX_FIELDS>,
}

/// Two values equal as JSON, numbers by value.
fn same(a: &Json, b: &Json) -> bool {
    match (a.as_f64(), b.as_f64()) {
        (Some(x), Some(y)) if a.is_number() && b.is_number() => x == y,
        _ => a == b,
    }
}

/// How `a` orders against `b`: two numbers, or two strings; `None` for anything else.
fn order(a: &Json, b: &Json) -> Option<std::cmp::Ordering> {
    match (a, b) {
        (Json::Number(_), Json::Number(_)) => a.as_f64()?.partial_cmp(&b.as_f64()?),
        (Json::String(x), Json::String(y)) => Some(x.as_bytes().cmp(y.as_bytes())),
        _ => None,
    }
}

impl Test {
    fn holds(&self, v: Option<&Json>) -> bool {
        let v = v.filter(|v| !v.is_null());
        match (self, v) {
            (Test::Exists(want), v) => v.is_some() == *want,
            (_, None) => false,
            (Test::Eq(x), Some(v)) => same(v, x),
            (Test::Ne(x), Some(v)) => !same(v, x),
            (Test::In(xs), Some(v)) => xs.iter().any(|x| same(v, x)),
            (Test::Order(want, or_equal, x), Some(v)) => match order(v, x) {
                Some(o) => o == *want || (*or_equal && o == std::cmp::Ordering::Equal),
                None => false,
            },
        }
    }
}

impl Transformer for Filter {
    fn new(config: &Config) -> Result<Self, PluginError> {
        use std::cmp::Ordering::{Greater, Less};
        let s: Settings = config.parse()?;
        let mut fields: Vec<String> = Vec::new();
        let mut index = |f: &str| match fields.iter().position(|x| x == f) {
            Some(i) => i,
            None => {
                fields.push(f.to_string());
                fields.len() - 1
            }
        };
        let mut conditions = Vec::new();
        for (i, c) in s.conditions.into_iter().enumerate() {
            let mut tests: Vec<Test> = Vec::new();
            tests.extend(c.eq.map(Test::Eq));
            tests.extend(c.ne.map(Test::Ne));
            tests.extend(c.lt.map(|x| Test::Order(Less, false, x)));
            tests.extend(c.le.map(|x| Test::Order(Less, true, x)));
            tests.extend(c.gt.map(|x| Test::Order(Greater, false, x)));
            tests.extend(c.ge.map(|x| Test::Order(Greater, true, x)));
            tests.extend(c.any_of.map(Test::In));
            tests.extend(c.exists.map(Test::Exists));
            if tests.len() != 1 || c.field.is_empty() {
                return Err(PluginError::InvalidConfig(format!(
                    "where[{i}]: a field and exactly one of eq, ne, lt, le, gt, ge, in, exists; e.g. \
                     {{ field = \"status\", eq = \"ERROR\" }}"
                )));
            }
            let test = tests.remove(0);
            conditions.push(Condition { field: index(&c.field), test });
        }
        let select = match s.select {
            None => None,
            Some(list) if list.is_empty() => {
                return Err(PluginError::InvalidConfig("select: name at least one field, or leave it out".into()));
            }
            Some(list) if list.iter().enumerate().any(|(i, f)| list[..i].contains(f)) => {
                return Err(PluginError::InvalidConfig("select: a field is named twice".into()));
            }
            Some(list) => Some(
                list.iter()
                    .map(|f| {
                        Ok((index(f), serde_json::to_string(f).map_err(|e| PluginError::Internal(e.to_string()))?))
                    })
                    .collect::<Result<Vec<_>, PluginError>>()?,
            ),
        };
        if fields.len() > MAX_FIELDS {
            return Err(PluginError::InvalidConfig(format!(
                "where and select name {} fields; at most {MAX_FIELDS}",
                fields.len()
            )));
        }
        let names: Vec<&str> = fields.iter().map(String::as_str).collect();
        let paths = Paths::up_to(&names).ok_or_else(|| PluginError::Internal("paths".into()))?;
        Ok(Filter { conditions, select, paths })
    }

    fn transform(&self, event: &Event<'_>, out: &mut Emitter) -> Result<(), RecordError> {
        let found = event.fields(&self.paths)?;
        for c in &self.conditions {
            let v = match &found[c.field] {
                Some(v) => Some(
                    serde_json::from_slice::<Json>(v.raw())
                        .map_err(|e| RecordError::invalid_value(format!("a field is not JSON: {e}")))?,
                ),
                None => None,
            };
            if !c.test.holds(v.as_ref()) {
                return Ok(());
            }
        }
        let Some(select) = &self.select else {
            return out.emit_json(event.time, event.key, event.row);
        };
        let mut row = Vec::with_capacity(event.row.len());
        row.push(b'{');
        for (i, name) in select {
            let Some(v) = &found[*i] else { continue };
            if row.len() > 1 {
                row.push(b',');
            }
            row.extend_from_slice(name.as_bytes());
            row.push(b':');
            row.extend_from_slice(v.raw());
        }
        row.push(b'}');
        out.emit_json(event.time, event.key, &row)
    }
}

export_plugin!(transformer: Filter);
