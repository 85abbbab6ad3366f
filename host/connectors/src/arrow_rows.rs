//! A batch's JSON rows as one Arrow record batch in a sink's columns (arrow-json), shared by
//! the table sinks: the rows that fit are decoded together, and each row that does not is set
//! aside with arrow's reason, which names the column.

use arrow_array::RecordBatch;
use arrow_json::ReaderBuilder;
use arrow_schema::SchemaRef;

use crate::ConnectorError;

/// The rows `idx` of `rows` in `schema`'s columns; a row that does not fit goes to `rejected`
/// as `(index, "does not fit the WHAT columns: why")`. `None`: no row fits.
pub fn decode(
    schema: &SchemaRef,
    rows: &[&[u8]],
    idx: &[usize],
    what: &str,
    rejected: &mut Vec<(usize, String)>,
) -> Result<Option<RecordBatch>, ConnectorError> {
    if let Ok(batch) = decode_all(schema, rows, idx) {
        return Ok(batch);
    }
    // Some row does not fit: find which, one by one, and decode the others.
    let mut fit = Vec::with_capacity(idx.len());
    for &i in idx {
        match decode_all(schema, rows, &[i]) {
            Ok(_) => fit.push(i),
            Err(why) => rejected.push((i, format!("does not fit the {what} columns: {why}"))),
        }
    }
    decode_all(schema, rows, &fit).map_err(|e| ConnectorError::Parquet(format!("rows that fit one by one: {e}")))
}

fn decode_all(schema: &SchemaRef, rows: &[&[u8]], idx: &[usize]) -> Result<Option<RecordBatch>, String> {
    let mut d = ReaderBuilder::new(schema.clone())
        .with_batch_size(idx.len().max(1))
        .build_decoder()
        .map_err(|e| e.to_string())?;
    for &i in idx {
        d.decode(rows[i]).map_err(|e| e.to_string())?;
    }
    d.flush().map_err(|e| e.to_string())
}
