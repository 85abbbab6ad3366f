//! Avro decoding straight to JSON rows, natively: records per second of
//! `weir_schema::avro::Plan::decode_json` over generated orders in the schema of
//! `tests/formats/order.avsc`, the event time noted as the standard parser asks. The same code
//! runs in the sandbox in `plugins/avro-parser` (`host/benches/formats/avro.py` measures it
//! there); this shows what the decoder costs apart from the sandbox and the engine.
//!
//!   cargo bench -p weir-schema --bench avro_decode [-- RECORDS]
//!
//! A benchmark, not a test: it prints its rate and asserts only that every record decoded.

use std::time::Instant;

use weir_schema::avro::{Encoder, Names, Plan, parse};

const ORDER: &str = include_str!("../../../tests/formats/order.avsc");
const STATUSES: [&str; 4] = ["NEW", "PAID", "SHIPPED", "ERROR"];

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let records: usize = std::env::args().skip(1).find(|a| !a.starts_with('-')).map_or(Ok(1_000_000), |a| a.parse())?;
    let schema = parse(ORDER, &[])?;
    let names = Names::of([&schema]);
    let encoder = Encoder::new(schema.clone(), vec![]);
    let mut encoded = Vec::with_capacity(records);
    for i in 0..records as i64 {
        let row = format!(
            r#"{{"order_id":{},"user_id":{},"status":"{}","amount":{}.{:02},"order_ts":{}}}"#,
            1_000_000 + i,
            i * 7919 % 50_000,
            STATUSES[(i % 4) as usize],
            i % 500,
            i % 100,
            1_793_491_200_000 + i * 3
        );
        let mut bytes = Vec::new();
        encoder.encode(row.as_bytes(), &mut bytes).map_err(|e| format!("{e:?}"))?;
        encoded.push(bytes);
    }
    let plan = Plan::new(&schema, &names, &[vec!["order_ts".to_string()]])?;
    let mut out = Vec::with_capacity(256);
    for round in 0..3 {
        let started = Instant::now();
        let mut bytes_out = 0usize;
        for record in &encoded {
            out.clear();
            let mut found = [None];
            let mut input = &record[..];
            plan.decode_json(&mut input, &mut out, &mut found)?;
            assert!(input.is_empty() && found[0].is_some(), "a record decoded whole, its time found");
            bytes_out += out.len();
        }
        let s = started.elapsed().as_secs_f64();
        println!(
            "round {round}: {records} records in {s:.3} s = {:.2}M records/s, {:.0} ns each, {} bytes of JSON",
            records as f64 / s / 1e6,
            s * 1e9 / records as f64,
            bytes_out
        );
    }
    Ok(())
}
