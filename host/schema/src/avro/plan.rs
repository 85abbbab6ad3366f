//! A writer's schema compiled, once per schema id, into the steps that decode its records
//! straight to JSON (`direct.rs` runs them). Compiling takes off each record what a walk over
//! apache-avro's `Schema` paid per field and per record: a field's name is JSON text made once
//! (`,"status":`), an enum's symbols too, a named type is looked up once instead of through a
//! map by name, and whether a field is one the parser wants noted (its event time, its keys) is
//! decided here, not by comparing paths while decoding.
//!
//! Invariant: a plan is finite whatever the schema. A named record is compiled once and shared
//! (a recursive schema becomes a loop of nodes), except where a wanted path still runs through
//! it: there it is compiled afresh for that path, which ends after at most [`MAX_PATH`] fields.

use std::collections::HashMap;

use apache_avro::Schema;
use apache_avro::schema::{InnerDecimalSchema, Name, UuidSchema};

use super::Names;
use super::decode::DecodeError;
use super::direct::{MAX_PATH, string};
use super::read::{MAX_DEPTH, err};

/// A node's place in [`Plan::nodes`].
pub(super) type NodeId = usize;

/// What an `int` or `long` is, for a parser that takes it as an event time.
#[derive(Debug, Clone, Copy)]
pub(super) enum Kind {
    Int,
    /// A `date`, `time-millis` or `time-micros`: a number, but no instant.
    NotATime,
    /// A timestamp, in units per millisecond (1, 1,000 or 1,000,000).
    Timestamp(i64),
}

pub(super) enum Node {
    Null,
    Boolean,
    Int(Kind),
    Long(Kind),
    Float,
    Double,
    String,
    /// `bytes`, and a `big-decimal`: base64 text.
    Bytes,
    Fixed(usize),
    UuidBytes,
    UuidFixed(usize),
    Duration,
    /// A `decimal` of `bytes` (`fixed: None`) or of a `fixed` of that size.
    Decimal {
        fixed: Option<usize>,
        scale: usize,
    },
    /// The enum's name, for errors, and each symbol as JSON text.
    Enum(String, Vec<Box<[u8]>>),
    Union(Vec<NodeId>),
    Array(NodeId),
    Map(NodeId),
    Record(Vec<Field>),
}

pub(super) struct Field {
    /// `{"name":` for the first field, `,"name":` after it.
    pub(super) prefix: Box<[u8]>,
    pub(super) name: String,
    pub(super) node: NodeId,
    /// The wanted paths (their indices) this field is.
    pub(super) notes: Box<[usize]>,
}

/// A writer's schema, compiled for the paths a parser wants noted.
pub struct Plan {
    pub(super) nodes: Vec<Node>,
    pub(super) root: NodeId,
    pub(super) wanted: usize,
}

impl Plan {
    /// `schema` (its named types in `names`) compiled; `paths[i]` is a wanted path of record
    /// field names from the top, noted as `found[i]` when a record is decoded. A schema that
    /// names a type it does not define, or nests deeper than the decoder allows, is refused.
    pub fn new(schema: &Schema, names: &Names, paths: &[Vec<String>]) -> Result<Plan, DecodeError> {
        let mut c = Compiler { names, paths, nodes: Vec::new(), shared: HashMap::new() };
        let root = c.node(schema, Some(&mut Vec::new()), 0)?;
        Ok(Plan { nodes: c.nodes, root, wanted: paths.len() })
    }
}

struct Compiler<'a> {
    names: &'a Names,
    paths: &'a [Vec<String>],
    nodes: Vec<Node>,
    /// Named records compiled with nothing beneath them to note: shared by every use.
    shared: HashMap<Name, NodeId>,
}

impl Compiler<'_> {
    fn push(&mut self, n: Node) -> NodeId {
        self.nodes.push(n);
        self.nodes.len() - 1
    }

    /// Whether a wanted path goes on below `path`.
    fn live(&self, path: &[String]) -> bool {
        self.paths.iter().any(|p| p.len() > path.len() && p[..path.len()] == *path)
    }

    /// The node of `s`; `path` is the field names down to it while a wanted path may lie below
    /// (`None` inside an array or a map, whose items are never noted, or off every path).
    fn node(&mut self, s: &Schema, path: Option<&mut Vec<String>>, depth: usize) -> Result<NodeId, DecodeError> {
        if depth > MAX_DEPTH {
            return err(format!("nested deeper than {MAX_DEPTH}"));
        }
        let path = path.filter(|p| p.len() < MAX_PATH && self.live(p));
        let node = match s {
            Schema::Null => Node::Null,
            Schema::Boolean => Node::Boolean,
            Schema::Int => Node::Int(Kind::Int),
            Schema::Date | Schema::TimeMillis => Node::Int(Kind::NotATime),
            Schema::Long => Node::Long(Kind::Int),
            Schema::TimeMicros => Node::Long(Kind::NotATime),
            Schema::TimestampMillis | Schema::LocalTimestampMillis => Node::Long(Kind::Timestamp(1)),
            Schema::TimestampMicros | Schema::LocalTimestampMicros => Node::Long(Kind::Timestamp(1_000)),
            Schema::TimestampNanos | Schema::LocalTimestampNanos => Node::Long(Kind::Timestamp(1_000_000)),
            Schema::Float => Node::Float,
            Schema::Double => Node::Double,
            Schema::String | Schema::Uuid(UuidSchema::String) => Node::String,
            Schema::Bytes | Schema::BigDecimal => Node::Bytes,
            Schema::Uuid(UuidSchema::Bytes) => Node::UuidBytes,
            Schema::Uuid(UuidSchema::Fixed(f)) => Node::UuidFixed(f.size),
            Schema::Fixed(f) => Node::Fixed(f.size),
            Schema::Duration(_) => Node::Duration,
            Schema::Decimal(d) => Node::Decimal {
                fixed: match &d.inner {
                    InnerDecimalSchema::Bytes => None,
                    InnerDecimalSchema::Fixed(f) => Some(f.size),
                },
                scale: d.scale,
            },
            Schema::Enum(e) => Node::Enum(
                e.name.fullname(None),
                e.symbols
                    .iter()
                    .map(|sym| {
                        let mut t = Vec::new();
                        string(sym, &mut t);
                        t.into_boxed_slice()
                    })
                    .collect(),
            ),
            Schema::Union(u) => {
                let mut path = path;
                let mut branches = Vec::with_capacity(u.variants().len());
                for v in u.variants() {
                    branches.push(self.node(v, path.as_deref_mut(), depth + 1)?);
                }
                Node::Union(branches)
            }
            Schema::Array(a) => Node::Array(self.node(&a.items, None, depth + 1)?),
            Schema::Map(m) => Node::Map(self.node(&m.types, None, depth + 1)?),
            Schema::Record(r) => return self.record(&r.name, &r.fields, path, depth),
            Schema::Ref { name } => {
                let names = self.names;
                let Some(named) = names.get(name) else {
                    return err(format!("the schema names {name}, undefined"));
                };
                return self.node(named, path, depth + 1);
            }
        };
        Ok(self.push(node))
    }

    fn record(
        &mut self,
        name: &Name,
        fields: &[apache_avro::schema::RecordField],
        path: Option<&mut Vec<String>>,
        depth: usize,
    ) -> Result<NodeId, DecodeError> {
        if path.is_none()
            && let Some(&id) = self.shared.get(name)
        {
            return Ok(id);
        }
        // Its place is taken before its fields are compiled, so a field of its own type (a
        // recursive schema) finds it.
        let id = self.push(Node::Null);
        if path.is_none() {
            self.shared.insert(name.clone(), id);
        }
        let mut path = path;
        let mut compiled = Vec::with_capacity(fields.len());
        for (i, f) in fields.iter().enumerate() {
            let mut prefix = vec![if i == 0 { b'{' } else { b',' }];
            string(&f.name, &mut prefix);
            prefix.push(b':');
            let (node, notes) = match path.as_deref_mut() {
                Some(p) => {
                    p.push(f.name.clone());
                    let notes: Vec<usize> = (0..self.paths.len()).filter(|&i| self.paths[i] == *p).collect();
                    let node = self.node(&f.schema, Some(&mut *p), depth + 1);
                    p.pop();
                    (node?, notes)
                }
                None => (self.node(&f.schema, None, depth + 1)?, Vec::new()),
            };
            compiled.push(Field { prefix: prefix.into(), name: f.name.clone(), node, notes: notes.into() });
        }
        self.nodes[id] = Node::Record(compiled);
        Ok(id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIST: &str = r#"{"type":"record","name":"Node","fields":[
        {"name":"value","type":"long"},
        {"name":"tags","type":{"type":"array","items":{"type":"record","name":"Tag","fields":[{"name":"value","type":"long"}]}}},
        {"name":"next","type":["null","Node"]}]}"#;

    fn plan(paths: &[&str]) -> (Plan, Schema) {
        let s = crate::avro::parse(LIST, &[]).unwrap();
        let paths: Vec<Vec<String>> = paths.iter().map(|p| p.split('.').map(String::from).collect()).collect();
        (Plan::new(&s, &Names::of([&s]), &paths).unwrap(), s)
    }

    fn decode(plan: &Plan, s: &Schema, row: &serde_json::Value) -> (String, Vec<Option<(String, i64)>>) {
        let mut bytes = Vec::new();
        crate::avro::Encoder::new(s.clone(), vec![]).encode(row.to_string().as_bytes(), &mut bytes).unwrap();
        let (mut out, mut found) = (Vec::new(), vec![None; plan.wanted]);
        let mut input = &bytes[..];
        plan.decode_json(&mut input, &mut out, &mut found).unwrap();
        assert!(input.is_empty());
        let text = |f: &super::super::Found| String::from_utf8(out[f.start..f.end].to_vec()).unwrap();
        let notes = found
            .iter()
            .map(|f| {
                f.map(|f| match f.number {
                    Some(super::super::Number::Int(n)) => (text(&f), n),
                    other => panic!("{other:?}"),
                })
            })
            .collect();
        (String::from_utf8(out).unwrap(), notes)
    }

    #[test]
    fn a_recursive_schema_compiles_to_a_loop_and_a_path_through_it_is_noted_at_its_depth() {
        let row = serde_json::json!({"value":1,"tags":[{"value":7}],"next":{"value":2,"tags":[],
            "next":{"value":3,"tags":[{"value":8}],"next":null}}});
        let (p, s) = plan(&["next.next.value", "value", "value"]);
        // The top record and the two below it on the path, then one shared record for the rest.
        assert!(p.nodes.len() < 40, "{} nodes", p.nodes.len());
        let (text, notes) = decode(&p, &s, &row);
        assert_eq!(serde_json::from_str::<serde_json::Value>(&text).unwrap(), row);
        assert_eq!(notes, vec![Some(("3".into(), 3)), Some(("1".into(), 1)), Some(("1".into(), 1))]);
    }

    #[test]
    fn fields_inside_arrays_are_never_noted() {
        let row = serde_json::json!({"value":1,"tags":[{"value":7}],"next":null});
        let (p, s) = plan(&["tags.value", "next.value"]);
        assert_eq!(decode(&p, &s, &row).1, vec![None, None]);
    }

    #[test]
    fn a_schema_naming_an_undefined_type_is_refused() {
        let s = Schema::Ref { name: Name::new("Missing").unwrap() };
        let refused = Plan::new(&s, &Names::of([&s]), &[]).err().unwrap();
        assert!(refused.0.contains("Missing"), "{refused}");
    }
}
