//! Turns the windows leaving a batch into result rows: one `finish` call for all of them, then
//! each row gets its window (and key) spliced in front of the plugin's own fields.

use crate::aggregate::WindowAcc;
use crate::plugin::{AggregateFns, PluginError};
use crate::sink::{Rows, RowsExt};

#[derive(Debug, thiserror::Error)]
pub enum EmitError {
    #[error(transparent)]
    Plugin(#[from] PluginError),
    #[error("stage {stage}: finish returned a row that is not a JSON object: {message}")]
    NotAnObject { stage: String, message: String },
}

/// Finishes `windows` and appends their rows to `out`; returns how many rows it added.
pub fn finish(windows: &[WindowAcc], agg: &mut dyn AggregateFns, out: &mut Rows) -> Result<usize, EmitError> {
    if windows.is_empty() {
        return Ok(0);
    }
    let accs: Vec<Vec<u8>> = windows.iter().map(|w| w.acc.clone()).collect();
    let rows = agg.finish(&accs)?;
    let mut added = 0;
    for (w, row) in windows.iter().zip(rows) {
        if row.is_empty() {
            continue; // the plugin chose not to emit this window
        }
        let body =
            object_body(&row).map_err(|message| EmitError::NotAnObject { stage: agg.stage().to_string(), message })?;
        let mut line = format!("{{\"window_start\":{},\"window_end\":{}", w.start, w.end).into_bytes();
        if !w.key.is_empty() {
            line.extend_from_slice(b",\"key\":");
            let key = serde_json::to_vec(&String::from_utf8_lossy(&w.key)).unwrap_or_else(|_| b"\"\"".to_vec());
            line.extend_from_slice(&key);
        }
        if !body.is_empty() {
            line.push(b',');
            line.extend_from_slice(body);
        }
        line.push(b'}');
        out.push(&line);
        added += 1;
    }
    Ok(added)
}

/// The inside of a JSON object (between its braces, trimmed), after checking it is one.
fn object_body(row: &[u8]) -> Result<&[u8], String> {
    serde_json::from_slice::<serde_json::Map<String, serde_json::Value>>(row).map_err(|e| e.to_string())?;
    let s = row.trim_ascii();
    Ok(s[1..s.len() - 1].trim_ascii())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn object_bodies_are_checked_and_trimmed() {
        assert_eq!(object_body(b" {\"count\":3} ").unwrap(), b"\"count\":3");
        assert_eq!(object_body(b"{}").unwrap(), b"");
        assert!(object_body(b"[1]").is_err());
        assert!(object_body(b"{\"a\":").is_err());
    }
}
