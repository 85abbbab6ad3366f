//! No plugin of any flow reaches a place the host keeps for the project: the datasets' logs,
//! every flow's checkpoint and side outputs, and the project's state folder around them. A
//! grant that contains one of them, or lies inside one, read-only or writable, is refused when
//! the project loads, so `weir validate`, `weir run` and `weir test` all refuse it before any
//! plugin starts, naming the flow and stage, the grant's key, and whose place it reaches.
//!
//! Each flow's run also keeps its own stages clear of its own checkpoint and side outputs
//! (`weir-engine`'s recovery); this is what only the project knows: its other flows and its
//! datasets. Paths are compared with their links resolved (`Grants::keep_clear_of`), so a
//! folder link planted by an earlier run leads nowhere it could not go directly.

use std::path::Path;

use crate::pipeline::LatePolicy;
use crate::plugin::Own;
use crate::{Flow, Project, ProjectError, Storage};

/// Refuses the first grant of any flow's stage that reaches another flow's place, a dataset,
/// or the project's state folder.
pub(crate) fn keep_flows_clear(p: &Project, project_file: &Path) -> Result<(), ProjectError> {
    for flow in &p.flows {
        let mut own: Vec<Own> = Vec::new();
        for d in p.datasets.values() {
            if let Storage::Embedded { dir } = &d.storage {
                let writers: Vec<String> = p.writers(&d.name).map(|f| format!("`{}`", f.name())).collect();
                let by =
                    if writers.is_empty() { String::new() } else { format!(", written by {}", writers.join(", ")) };
                own.push(Own { what: format!("dataset `{}`{by}", d.name).into(), path: dir, any_grant: true });
            }
        }
        for other in p.flows.iter().filter(|o| o.name() != flow.name()) {
            for (what, path) in places(other) {
                own.push(Own { what: format!("flow `{}`'s {what}", other.name()).into(), path, any_grant: true });
            }
        }
        own.push(Own { what: "the project's state folder".into(), path: &p.state, any_grant: true });
        for stage in flow.pipeline.stages() {
            stage
                .grants
                .keep_clear_of(&stage.name, &own)
                .map_err(|error| ProjectError::Grant { path: project_file.to_path_buf(), error })?;
        }
    }
    Ok(())
}

/// A flow's own places: its checkpoint, and its side outputs wherever they are written.
fn places(flow: &Flow) -> Vec<(&'static str, &Path)> {
    let mut out = vec![("checkpoint", flow.checkpoint.as_path())];
    if let Some(path) = flow.pipeline.dead_letter.as_deref() {
        out.push(("dead-letter file", path));
    }
    let late = flow.pipeline.stateful.as_ref().map(|s| &s.time).filter(|t| t.late == LatePolicy::SideOutput);
    if let Some(path) = late.and_then(|t| t.late_path.as_deref()) {
        out.push(("late-event file", path));
    }
    out
}
