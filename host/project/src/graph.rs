//! The project's graph, derived from what each flow reads and writes: flow B depends on flow A
//! when B reads a dataset A writes. [`order`] sorts the flows so each comes after those it
//! depends on, or names a cycle; [`dot`] draws the graph (Graphviz DOT) with each flow's
//! plugins and, when given, each dataset's row count.

use std::collections::BTreeMap;
use std::fmt::Write;

use super::{Dataset, Flow, Project, Storage};
use crate::pipeline::{Keyed, SinkConfig, SourceKind};

/// Flows that depend on each other in a ring: each writes a dataset the next reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cycle {
    /// (flow, the dataset it writes that the next flow reads), around the ring.
    pub steps: Vec<(String, String)>,
}

impl std::fmt::Display for Cycle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let ring: Vec<&str> =
            self.steps.iter().map(|(fl, _)| fl.as_str()).chain(self.steps.first().map(|s| s.0.as_str())).collect();
        write!(f, "the flows {} form a cycle (", ring.join(" → "))?;
        for (i, (fl, ds)) in self.steps.iter().enumerate() {
            let next = &self.steps[(i + 1) % self.steps.len()].0;
            if i > 0 {
                f.write_str("; ")?;
            }
            write!(f, "{fl} writes `{ds}`, which {next} reads")?;
        }
        f.write_str("): a flow cannot depend on its own output; write one of them to another dataset")
    }
}

/// The flows' indices in dependency order (ties by file order), or a cycle.
pub fn order(flows: &[Flow]) -> Result<Vec<usize>, Cycle> {
    // deps[b] = the flows b reads from, with the dataset.
    let deps: Vec<Vec<(usize, &str)>> = flows
        .iter()
        .map(|b| {
            let mut d = Vec::new();
            for (a, fa) in flows.iter().enumerate() {
                if let Some(w) = fa.writes.as_deref()
                    && b.reads.iter().any(|r| r == w)
                {
                    d.push((a, w));
                }
            }
            d
        })
        .collect();
    let mut placed = vec![false; flows.len()];
    let mut out = Vec::with_capacity(flows.len());
    while out.len() < flows.len() {
        let next = (0..flows.len()).find(|&b| !placed[b] && deps[b].iter().all(|&(a, _)| placed[a]));
        match next {
            Some(b) => {
                placed[b] = true;
                out.push(b);
            }
            None => return Err(cycle(flows, &deps, &placed)),
        }
    }
    Ok(out)
}

/// A cycle among the unplaced flows (every one of them has an unplaced dependency, so walking
/// dependencies from any of them must come back round).
fn cycle(flows: &[Flow], deps: &[Vec<(usize, &str)>], placed: &[bool]) -> Cycle {
    let start = placed.iter().position(|p| !p).unwrap_or(0);
    let mut path: Vec<(usize, &str)> = Vec::new();
    let mut at = start;
    loop {
        if let Some(i) = path.iter().position(|&(f, _)| f == at) {
            // ring[k] = (a flow, the dataset it reads that ring[k + 1] writes): against the
            // data. Walk it backwards so each step is a flow and the dataset it writes, which
            // the next step's flow reads.
            let ring = &path[i..];
            let n = ring.len();
            let steps = (0..n)
                .map(|t| {
                    let at = (n - t) % n;
                    (flows[ring[at].0].name().to_string(), ring[(at + n - 1) % n].1.to_string())
                })
                .collect();
            return Cycle { steps };
        }
        let Some(&(dep, ds)) = deps[at].iter().find(|&&(a, _)| !placed[a]) else {
            return Cycle { steps: vec![(flows[at].name().to_string(), String::new())] };
        };
        path.push((at, ds));
        at = dep;
    }
}

/// What a node shows after a run: a dataset's rows (and a table's keys).
#[derive(Debug, Clone, Copy, Default)]
pub struct Counts {
    pub rows: u64,
    pub keys: Option<u64>,
}

/// What a flow has read and delivered since its checkpoint began, after a run.
pub struct FlowCounts {
    pub records_in: u64,
    pub rows_out: u64,
}

/// The graph in Graphviz DOT: datasets as cylinders with their rows, flows as boxes with their
/// plugins and what they read and wrote, external sources and sinks as plain notes.
pub fn dot(p: &Project, counts: &BTreeMap<String, Counts>, flows: &BTreeMap<String, FlowCounts>) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "digraph {} {{", quote(&p.name));
    s.push_str("  rankdir=LR;\n  node [fontname=\"Helvetica\", fontsize=11];\n");
    for d in p.datasets.values() {
        let mut label = format!("{}\\n{} · {}", d.name, d.kind.name(), storage(d));
        if let Some(c) = counts.get(&d.name) {
            let _ = write!(label, "\\n{} rows", c.rows);
            if let Some(k) = c.keys {
                let _ = write!(label, ", {k} keys");
            }
        }
        let _ = writeln!(s, "  {} [shape=cylinder, label=\"{}\"];", quote(&format!("dataset:{}", d.name)), esc(&label));
    }
    for fl in &p.flows {
        let mut label = format!("{}\\n{}", fl.name(), plugins(fl).join("\\n"));
        if label.ends_with("\\n") {
            label.truncate(label.len() - 2);
        }
        if let Some(c) = flows.get(fl.name()) {
            let _ = write!(label, "\\nread {} · wrote {}", c.records_in, c.rows_out);
        }
        let id = quote(&format!("flow:{}", fl.name()));
        let _ = writeln!(s, "  {id} [shape=box, style=rounded, label=\"{}\"];", esc(&label));
        for r in &fl.reads {
            let _ = writeln!(s, "  {} -> {id};", quote(&format!("dataset:{r}")));
        }
        if !matches!(fl.pipeline.source.kind, SourceKind::Dataset(_)) && !reads_kafka_dataset(p, fl) {
            let src = quote(&format!("source:{}", fl.name()));
            let _ = writeln!(s, "  {src} [shape=note, label=\"{}\"];", esc(&source_label(&fl.pipeline.source.kind)));
            let _ = writeln!(s, "  {src} -> {id};");
        }
        match &fl.writes {
            Some(w) => {
                let _ = writeln!(s, "  {id} -> {};", quote(&format!("dataset:{w}")));
            }
            None => {
                let sink = quote(&format!("sink:{}", fl.name()));
                let _ = writeln!(s, "  {sink} [shape=note, label=\"{}\"];", esc(&sink_label(fl)));
                let _ = writeln!(s, "  {id} -> {sink};");
            }
        }
    }
    s.push_str("}\n");
    s
}

/// Whether the flow's own source was a Kafka-backed dataset (resolved to a Kafka source).
fn reads_kafka_dataset(p: &Project, fl: &Flow) -> bool {
    fl.reads.iter().any(|r| matches!(p.datasets.get(r).map(|d| &d.storage), Some(Storage::Kafka { .. })))
        && matches!(fl.pipeline.source.kind, SourceKind::Kafka(_))
}

fn storage(d: &Dataset) -> String {
    match &d.storage {
        Storage::Embedded { .. } => "embedded".into(),
        Storage::Kafka { topic, .. } => format!("kafka {topic}"),
    }
}

/// The flow's stages, each with its plugin's file name.
pub fn plugins(fl: &Flow) -> Vec<String> {
    let file = |s: &crate::plugin::StageSpec| {
        s.component.file_name().map_or_else(|| s.component.display().to_string(), |n| n.to_string_lossy().into_owned())
    };
    let p = &fl.pipeline;
    let mut out = match &p.parse {
        Some(parse) => vec![format!("parse: {}", file(parse))],
        None => Vec::new(),
    };
    out.extend(p.transforms.iter().map(|t| format!("transform: {}", file(t))));
    if !p.expect.is_empty() {
        out.push(format!("expect: {}", p.expect.iter().map(|e| e.name.as_str()).collect::<Vec<_>>().join(", ")));
    }
    if let Some(s) = &p.stateful {
        if s.dedup.is_some() {
            out.push("dedup".into());
        }
        match &s.keyed {
            Keyed::Window(w) => out.push(format!("window, aggregate: {}", file(&w.aggregate))),
            Keyed::Process(pr) => out.push(format!("process: {}", file(&pr.plugin))),
            Keyed::Rows => {}
        }
    }
    if let Some(SinkConfig::Wasm(s)) = &p.sink {
        out.push(format!("sink: {}", file(s)));
    }
    out
}

fn source_label(k: &SourceKind) -> String {
    match k {
        SourceKind::Replay { path, .. } => {
            format!(
                "replay {}",
                path.file_name().map_or_else(|| path.display().to_string(), |n| n.to_string_lossy().into_owned())
            )
        }
        SourceKind::Kafka(k) => format!("kafka {}", k.topics.join(", ")),
        SourceKind::Dataset(d) => d.name.clone(),
        SourceKind::Repartition(r) => format!("repartition {}", r.kafka.topics.join(", ")),
    }
}

fn sink_label(fl: &Flow) -> String {
    match &fl.pipeline.sink {
        Some(SinkConfig::Wasm(s)) => format!("sink {}", s.name),
        Some(SinkConfig::Kafka(k)) => format!("kafka {}", k.topic),
        Some(SinkConfig::Dataset { dataset, .. }) => dataset.name.clone(),
        Some(SinkConfig::Parquet(p)) => format!(
            "parquet {}",
            p.path.file_name().map_or_else(|| p.path.display().to_string(), |n| n.to_string_lossy().into_owned())
        ),
        Some(SinkConfig::Postgres(p)) => format!("postgres {}", p.table),
        Some(SinkConfig::Iceberg(i)) => format!("iceberg {}.{}", i.namespace, i.table),
        None => "console".into(),
    }
}

fn quote(id: &str) -> String {
    format!("\"{}\"", esc(id))
}

/// Escapes `"` for a DOT string (labels keep their `\n` line breaks).
fn esc(s: &str) -> String {
    s.replace('"', "\\\"")
}
