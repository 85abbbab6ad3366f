//! Expectations: data-quality rules a flow's rows must meet, checked after its transforms and
//! before its operator (for a stateless flow, on exactly the rows it writes). Each has a name, a
//! check and what a violation does: `drop` sends the row to the dead-letter output under the
//! expectation's name, `warn` counts it and lets it through, `fail` stops the flow naming the
//! row and the rule. Violations are counted per expectation in progress and in the commits log
//! (`weir inspect`).
//!
//! A check is a built-in predicate over a row's JSON fields ([`Rule`], parsed once when the file
//! is validated) or a Wasm transform plugin: the rows it does not return violate.
//!
//! The rule language, one predicate per rule (several expectations make a conjunction):
//! `FIELD is present`, `FIELD is not null`, `FIELD is null`, `FIELD OP VALUE` with `OP` one of
//! `==` `!=` `<` `<=` `>` `>=` and `VALUE` a JSON number, string, `true`, `false` or `null`, and
//! `FIELD in [VALUE, ...]`. `FIELD` is a dotted path (`customer.id`). Numbers compare as numbers
//! and strings as strings; a comparison between other kinds, or with an absent field, fails.

use std::cmp::Ordering;
use std::fmt;

use serde_json::Value;

use crate::json::scan::Paths;
use crate::plugin::{EventBatch, PluginError, TransformFns};

/// The longest rule, in bytes.
pub const MAX_RULE: usize = 4_096;
/// The most expectations one flow may have.
pub const MAX_EXPECTATIONS: usize = 64;

/// What a violation does.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum OnViolation {
    /// The row goes to the dead-letter output, with the expectation's name.
    #[default]
    Drop,
    /// The row is counted and kept.
    Warn,
    /// The flow stops, naming the row and the rule.
    Fail,
}

impl OnViolation {
    pub fn name(self) -> &'static str {
        match self {
            OnViolation::Drop => "drop",
            OnViolation::Warn => "warn",
            OnViolation::Fail => "fail",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
}

/// A built-in predicate.
#[derive(Debug, Clone, PartialEq)]
pub enum Rule {
    Present(String),
    NotNull(String),
    Null(String),
    Compare(String, Op, Value),
    In(String, Vec<Value>),
}

impl Rule {
    pub fn field(&self) -> &str {
        match self {
            Rule::Present(f) | Rule::NotNull(f) | Rule::Null(f) | Rule::Compare(f, ..) | Rule::In(f, _) => f,
        }
    }

    /// Parses a rule; the error says what was expected where.
    pub fn parse(text: &str) -> Result<Rule, String> {
        if text.len() > MAX_RULE {
            return Err(format!("a rule of {} bytes; rules are at most {MAX_RULE}", text.len()));
        }
        let t = text.trim();
        let end = t.find(|c: char| c.is_whitespace() || "=!<>".contains(c)).unwrap_or(t.len());
        let (field, rest) = t.split_at(end);
        if field.is_empty()
            || !field
                .split('.')
                .all(|s| !s.is_empty() && s.chars().all(|c| c.is_alphanumeric() || c == '_' || c == '-'))
        {
            return Err(format!(
                "`{text}`: a rule starts with a field (letters, digits, `_`, `-`, dotted for nested fields), e.g. \
                 \"amount > 0\""
            ));
        }
        let field = field.to_string();
        let rest = rest.trim_start();
        let words: Vec<&str> = rest.split_whitespace().collect();
        match words.as_slice() {
            ["is", "present"] => return Ok(Rule::Present(field)),
            ["is", "not", "null"] => return Ok(Rule::NotNull(field)),
            ["is", "null"] => return Ok(Rule::Null(field)),
            _ => {}
        }
        if let Some(list) = rest.strip_prefix("in").filter(|r| r.starts_with(|c: char| c.is_whitespace() || c == '[')) {
            let values: Vec<Value> = serde_json::from_str(list.trim())
                .map_err(|e| format!("`{text}`: after `in`, a JSON list of values, e.g. [\"OK\", \"ERROR\"] ({e})"))?;
            if let Some(v) = values.iter().find(|v| v.is_array() || v.is_object()) {
                return Err(format!("`{text}`: {v} is not a number, string, true, false or null"));
            }
            return Ok(Rule::In(field, values));
        }
        let ops = [("==", Op::Eq), ("!=", Op::Ne), ("<=", Op::Le), (">=", Op::Ge), ("<", Op::Lt), (">", Op::Gt)];
        let Some((sym, op)) = ops.iter().find(|(s, _)| rest.starts_with(s)) else {
            return Err(format!(
                "`{text}`: after the field, one of `is present`, `is not null`, `is null`, `in [..]` or a comparison \
                 (== != < <= > >=) with a value"
            ));
        };
        let value: Value = serde_json::from_str(rest[sym.len()..].trim()).map_err(|e| {
            format!("`{text}`: after `{sym}`, a JSON number, string (in double quotes), true, false or null ({e})")
        })?;
        if value.is_array() || value.is_object() {
            return Err(format!("`{text}`: compare with a number, string, true, false or null"));
        }
        Ok(Rule::Compare(field, *op, value))
    }

    /// Whether the row meets the rule, given the field's raw JSON text (`None`: absent).
    fn holds(&self, raw: Option<&[u8]>) -> bool {
        // The common cases without a decoder: a number against a number, a string without
        // escapes against a string (the scan that found the field checked its grammar).
        if let (Rule::Compare(_, op, want), Some(raw)) = (self, raw) {
            match (want, raw.first()) {
                (Value::Number(n), Some(b'-' | b'0'..=b'9')) => {
                    let (Some(a), Some(b)) =
                        (std::str::from_utf8(raw).ok().and_then(|t| t.parse::<f64>().ok()), n.as_f64())
                    else {
                        return false;
                    };
                    return a.partial_cmp(&b).is_some_and(|o| op.admits(o));
                }
                (Value::String(w), Some(b'"')) if !raw.contains(&b'\\') => {
                    let inner = &raw[1..raw.len().saturating_sub(1)];
                    return op.admits(inner.cmp(w.as_bytes()));
                }
                _ => {}
            }
        }
        if let (Rule::In(_, set), Some(raw @ [b'"', inner @ .., b'"'])) = (self, raw)
            && !raw.contains(&b'\\')
        {
            return set.iter().any(|w| w.as_str().is_some_and(|w| w.as_bytes() == inner));
        }
        let value = || raw.and_then(|r| serde_json::from_slice::<Value>(r).ok());
        match self {
            Rule::Present(_) => raw.is_some(),
            Rule::NotNull(_) => raw.is_some_and(|r| r != b"null"),
            Rule::Null(_) => raw.is_none_or(|r| r == b"null"),
            Rule::Compare(_, op, want) => value().is_some_and(|v| compare(&v, *op, want)),
            Rule::In(_, set) => value().is_some_and(|v| set.iter().any(|w| compare(&v, Op::Eq, w))),
        }
    }
}

fn compare(v: &Value, op: Op, want: &Value) -> bool {
    let ord = match (v, want) {
        (Value::Number(a), Value::Number(b)) => match (a.as_f64(), b.as_f64()) {
            (Some(a), Some(b)) => a.partial_cmp(&b),
            _ => None,
        },
        (Value::String(a), Value::String(b)) => Some(a.cmp(b)),
        (a, b) if matches!(op, Op::Eq | Op::Ne) => return (a == b) == (op == Op::Eq),
        _ => None,
    };
    ord.is_some_and(|o| op.admits(o))
}

impl Op {
    /// Whether a value that compares `ord` to the rule's value meets it.
    fn admits(self, ord: Ordering) -> bool {
        match self {
            Op::Eq => ord == Ordering::Equal,
            Op::Ne => ord != Ordering::Equal,
            Op::Lt => ord == Ordering::Less,
            Op::Le => ord != Ordering::Greater,
            Op::Gt => ord == Ordering::Greater,
            Op::Ge => ord != Ordering::Less,
        }
    }
}

impl fmt::Display for Rule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Rule::Present(x) => write!(f, "{x} is present"),
            Rule::NotNull(x) => write!(f, "{x} is not null"),
            Rule::Null(x) => write!(f, "{x} is null"),
            Rule::Compare(x, op, v) => {
                let op = match op {
                    Op::Eq => "==",
                    Op::Ne => "!=",
                    Op::Lt => "<",
                    Op::Le => "<=",
                    Op::Gt => ">",
                    Op::Ge => ">=",
                };
                write!(f, "{x} {op} {v}")
            }
            Rule::In(x, set) => write!(f, "{x} in {}", Value::Array(set.clone())),
        }
    }
}

/// A rule, checked row by row with its path split once.
pub struct Checker {
    rule: Rule,
    paths: Paths<1>,
}

impl Checker {
    pub fn new(rule: Rule) -> Self {
        let paths = Paths::new([rule.field()]);
        Self { rule, paths }
    }

    /// Whether `row` meets the rule; a row that is not one line of a JSON object does not
    /// (the same check a stateless pipeline makes of its output rows, `host/engine/src/operator/passthrough.rs`,
    /// which then need not make it again).
    pub fn check(&self, row: &[u8]) -> bool {
        match crate::json::check_object_for(row, &self.paths) {
            Ok([raw]) => self.rule.holds(raw),
            Err(_) => false,
        }
    }
}

/// An expectation as a flow checks it: a rule, or a plugin's verdicts.
pub struct ExpectStage {
    pub name: String,
    pub on: OnViolation,
    /// The rule as written, or the plugin's stage name: what errors and dead letters show.
    pub shown: String,
    check: ExpectFns,
}

enum ExpectFns {
    Rule(Checker),
    /// A transform whose output keeps the rows that meet the expectation.
    Plugin(Box<dyn TransformFns>),
}

impl ExpectStage {
    pub fn rule(name: String, on: OnViolation, rule: Rule) -> Self {
        Self { name, on, shown: rule.to_string(), check: ExpectFns::Rule(Checker::new(rule)) }
    }

    pub fn plugin(name: String, on: OnViolation, shown: String, plugin: Box<dyn TransformFns>) -> Self {
        Self { name, on, shown, check: ExpectFns::Plugin(plugin) }
    }

    /// The indices of the events that violate the expectation, in order.
    pub fn violations(&mut self, events: &EventBatch) -> Result<Vec<u32>, PluginError> {
        match &mut self.check {
            ExpectFns::Rule(c) => Ok(crate::columns::items(&events.rows, &events.row_ends)
                .enumerate()
                .filter(|(_, row)| !c.check(row))
                .map(|(i, _)| i as u32)
                .collect()),
            ExpectFns::Plugin(t) => {
                let out = t.transform(events)?;
                let mut kept = vec![false; events.times.len()];
                for &o in &out.events.origins {
                    if let Some(k) = kept.get_mut(o as usize) {
                        *k = true;
                    }
                }
                Ok(kept.iter().enumerate().filter(|(_, k)| !**k).map(|(i, _)| i as u32).collect())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn holds(rule: &str, row: &str) -> bool {
        Checker::new(Rule::parse(rule).expect("rule")).check(row.as_bytes())
    }

    #[test]
    fn each_kind_of_rule() {
        let row = r#"{"amount": 12.5, "status": "OK", "note": null, "customer": {"id": 7}}"#;
        assert!(holds("amount > 0", row));
        assert!(!holds("amount > 12.5", row));
        assert!(holds("amount >= 12.5", row));
        assert!(holds("amount<=12.5", row));
        assert!(holds("amount != 3", row));
        assert!(holds("customer.id == 7", row));
        assert!(holds(r#"status == "OK""#, row));
        assert!(holds(r#"status in ["OK", "ERROR"]"#, row));
        assert!(!holds(r#"status in ["PENDING"]"#, row));
        assert!(holds("status is present", row));
        assert!(!holds("missing is present", row));
        assert!(holds("note is null", row));
        assert!(holds("missing is null", row));
        assert!(!holds("note is not null", row));
        assert!(holds("amount is not null", row));
        // Kinds that do not compare fail, absent fields fail, and so does a row that is not JSON.
        assert!(!holds("status > 3", row));
        assert!(!holds("missing > 3", row));
        assert!(!holds("amount > 0", "not json"));
        // Nor a row that is JSON but not one line: the check a stateless pipeline's output needs.
        assert!(!holds("amount > 0", "{\"amount\":\n1}"));
    }

    #[test]
    fn a_bad_rule_says_what_was_expected() {
        for (rule, says) in [
            ("", "starts with a field"),
            ("amount", "after the field"),
            ("amount >", "after `>`"),
            ("amount > [1]", "compare with"),
            ("status in OK", "JSON list"),
            ("amount ~ 3", "after the field"),
            ("a..b > 1", "starts with a field"),
        ] {
            let e = Rule::parse(rule).expect_err(rule);
            assert!(e.contains(says), "{rule}: {e}");
        }
    }

    proptest::proptest! {
        /// Any text either parses or is refused with a message: never a panic.
        #[test]
        fn any_text_parses_or_is_refused(text in "\\PC{0,60}") {
            let _ = Rule::parse(&text);
        }

        /// A rule written out parses back to itself.
        #[test]
        fn a_rule_round_trips(
            field in "[a-z_][a-z0-9_]{0,8}(\\.[a-z_][a-z0-9_]{0,8})?",
            n in -1_000i64..1_000,
            s in "[A-Za-z ]{0,10}",
            which in 0usize..6,
        ) {
            let rule = match which {
                0 => Rule::Present(field),
                1 => Rule::NotNull(field),
                2 => Rule::Null(field),
                3 => Rule::Compare(field, Op::Ge, Value::from(n)),
                4 => Rule::Compare(field, Op::Ne, Value::from(s)),
                _ => Rule::In(field, vec![Value::from(n), Value::from(s), Value::Null]),
            };
            proptest::prop_assert_eq!(Rule::parse(&rule.to_string()), Ok(rule));
        }

        /// A comparison agrees with comparing the numbers.
        #[test]
        fn numbers_compare_as_numbers(a in -1e6f64..1e6, b in -1e6f64..1e6) {
            let row = format!("{{\"x\": {a}}}");
            proptest::prop_assert_eq!(holds(&format!("x < {b}"), &row), a < b);
            proptest::prop_assert_eq!(holds(&format!("x >= {b}"), &row), a >= b);
        }
    }
}
