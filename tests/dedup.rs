//! `[dedup]` against a naive reference computed here: orders with repeats close by (exact copies
//! and copies that changed a field), repeats hours late, and the windows counted over what is
//! left. Then the same through repeated `kill -9`.

use std::collections::HashMap;
use std::path::Path;

use crate::common::*;

const DELAY: i64 = 600_000;

/// The generated orders with repeats: every 7th order again 3 lines later, every 13th again 40
/// lines later with another status (the first one counts), and every 500th once more at the
/// end, hours late. Returns the file and the lines in input order.
fn orders_with_repeats(dir: &Path) -> (std::path::PathBuf, Vec<serde_json::Value>) {
    let generated = orders(dir, 30_000, 11);
    let lines = json_lines(&std::fs::read_to_string(&generated).unwrap());
    let mut out: Vec<serde_json::Value> = Vec::new();
    let mut pending: Vec<(usize, serde_json::Value)> = Vec::new();
    for (i, o) in lines.iter().enumerate() {
        out.push(o.clone());
        if i % 7 == 0 {
            pending.push((i + 3, o.clone()));
        }
        if i % 13 == 0 {
            let mut changed = o.clone();
            changed["status"] = serde_json::json!(if o["status"] == "ERROR" { "OK" } else { "ERROR" });
            pending.push((i + 40, changed));
        }
        let (due, later): (Vec<_>, Vec<_>) = pending.into_iter().partition(|(at, _)| *at <= i);
        out.extend(due.into_iter().map(|(_, o)| o));
        pending = later;
    }
    out.extend(pending.into_iter().map(|(_, o)| o));
    out.extend(lines.iter().step_by(500).cloned());
    let path = dir.join("orders-with-repeats.jsonl");
    let text: String = out.iter().map(|o| format!("{o}\n")).collect();
    std::fs::write(&path, text).unwrap();
    (path, out)
}

/// The rule of `docs/semantics.md`, naively: an order is late when more than the delay behind
/// the largest time before it, else a repeat when an order kept earlier has its `order_id` and a
/// time at most `within` away. Returns the kept orders and the number of repeats.
fn reference(input: &[serde_json::Value], within: i64) -> (Vec<Order>, usize) {
    let mut max: Option<i64> = None;
    let mut seen: HashMap<i64, Vec<i64>> = HashMap::new();
    let (mut kept, mut repeats) = (Vec::new(), 0);
    for o in input {
        let ts = o["order_ts"].as_i64().unwrap();
        if max.is_some_and(|m| ts < m - DELAY) {
            continue;
        }
        max = Some(max.map_or(ts, |m| m.max(ts)));
        let times = seen.entry(o["order_id"].as_i64().unwrap()).or_default();
        if times.iter().any(|&t| (t - ts).abs() <= within) {
            repeats += 1;
            continue;
        }
        times.push(ts);
        kept.push(Order { ts, user: o["user_id"].as_u64().unwrap(), error: o["status"] == "ERROR" });
    }
    (kept, repeats)
}

/// The orders pipeline over `events` with `[dedup] key = "order_id"` and `dedup` more lines of
/// it, `watermark` more lines of `[watermark]`, then `extra`.
fn dedup_pipeline(dir: &Path, events: &Path, dedup: &str, watermark: &str, extra: &str) -> std::path::PathBuf {
    let extra = format!("[dedup]\nkey = \"order_id\"\n{dedup}\n{extra}");
    let p = pipeline(dir, Spec { window: TUMBLING, watermark, extra: &extra, ..Default::default() });
    with_events(&p, events);
    p
}

/// Points the pipeline file `p` at `events`.
fn with_events(p: &Path, events: &Path) {
    let text = std::fs::read_to_string(p).unwrap().replace("path = \"orders.jsonl\"", &format!("path = {events:?}"));
    std::fs::write(p, text).unwrap();
}

#[test]
fn repeats_within_the_watermark_are_dropped_and_the_windows_count_the_rest() {
    let dir = tempfile::tempdir().unwrap();
    let (events, input) = orders_with_repeats(dir.path());
    let p = dedup_pipeline(dir.path(), &events, "", "", "");
    let out = ok(weir().arg("test").arg(&p).arg("--events").arg(&events).output().unwrap());
    let rows = json_lines(&String::from_utf8(out.stdout).unwrap());
    let (kept, repeats) = reference(&input, DELAY);
    assert!(repeats > 5_000, "the input has repeats: {repeats}");
    assert_eq!(windows_of(&rows), sliding_reference(&kept, 60_000, 60_000));
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(stderr.contains(&format!(" {repeats} duplicates,")), "{stderr}");

    // Without [dedup] the repeats are counted: the test can tell the difference.
    let plain = pipeline(dir.path(), Spec { window: TUMBLING, ..Default::default() });
    with_events(&plain, &events);
    assert_ne!(windows_of(&weir_test(&plain, &events)), sliding_reference(&kept, 60_000, 60_000));
}

#[test]
fn a_short_within_keeps_a_repeat_that_is_further_away_in_event_time() {
    let dir = tempfile::tempdir().unwrap();
    let generated = orders(dir.path(), 2_000, 12);
    let mut input = json_lines(&std::fs::read_to_string(&generated).unwrap());
    // The same order_id again, 5 s later in event time: a repeat within 10 s, a new order
    // within 1 s.
    let mut again = input[1_000].clone();
    again["order_ts"] = serde_json::json!(again["order_ts"].as_i64().unwrap() + 5_000);
    input.insert(1_001, again);
    let events = dir.path().join("again.jsonl");
    std::fs::write(&events, input.iter().map(|o| format!("{o}\n")).collect::<String>()).unwrap();
    for (within, ms) in [("10 seconds", 10_000), ("1 second", 1_000)] {
        let p = dedup_pipeline(dir.path(), &events, &format!("within = \"{within}\""), "", "");
        let rows = weir_test(&p, &events);
        let (kept, _) = reference(&input, ms);
        assert_eq!(windows_of(&rows), sliding_reference(&kept, 60_000, 60_000), "within {within}");
    }
}

#[test]
fn a_row_without_the_key_field_is_a_dead_letter_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let events = dir.path().join("orders.jsonl");
    std::fs::write(
        &events,
        "{\"order_id\":1,\"user_id\":1,\"status\":\"OK\",\"amount\":1.0,\"order_ts\":1793491186670}\n\
         {\"user_id\":2,\"status\":\"OK\",\"amount\":1.0,\"order_ts\":1793491186671}\n",
    )
    .unwrap();
    let p = dedup_pipeline(dir.path(), &events, "", "", "");
    let tested = weir_test_dead_letters(&p, &events);
    assert_eq!(tested.dead.len(), 1, "{:?}", tested.dead);
    let why = tested.dead[0].to_string();
    assert!(why.contains("order_id") && why.contains("dedup.key"), "{why}");
    assert_eq!(windows_of(&tested.rows).values().map(|c| c.0).sum::<u64>(), 1);
}

#[test]
fn dedup_state_survives_repeated_kill_9() {
    let dir = tempfile::tempdir().unwrap();
    let (events, input) = orders_with_repeats(dir.path());
    let out = dir.path().join("windows");
    std::fs::create_dir_all(&out).unwrap();
    let extra = format!("{}[checkpoint]\nlocation = \"{}\"", file_sink(&out), dir.path().join("cp").display());
    let p = dedup_pipeline(dir.path(), &events, "", "flush_at_end = true", &extra);
    let kills = kill_repeatedly(&p, 10);
    assert!(kills >= 4, "only {kills} kills landed");
    let (kept, _) = reference(&input, DELAY);
    assert_eq!(
        windows_of(&sink_rows(&out)),
        sliding_reference(&kept, 60_000, 60_000),
        "each window once, repeats once"
    );
}

/// `[dedup]` with no window: the orders it lets through reach the sink as they came, in input
/// order, and they are the reference's kept orders.
#[test]
fn dedup_alone_passes_the_first_of_each_order_through_in_input_order() {
    let dir = tempfile::tempdir().unwrap();
    let (events, input) = orders_with_repeats(dir.path());
    let text = format!(
        "name = \"dedup-rows\"\n[source]\ntype = \"replay\"\npath = {events:?}\n[trigger]\nmode = \"available-now\"\n\
         [parse]\nplugin = \"{}\"\n[watermark]\ndelay = \"10 minutes\"\n[dedup]\nkey = \"order_id\"\n",
        component("orders_json").display(),
    );
    let p = dir.path().join("dedup-rows.toml");
    std::fs::write(&p, text).unwrap();
    let rows = weir_test(&p, &events);
    let (kept, repeats) = reference(&input, DELAY);
    assert!(repeats > 5_000, "the input has repeats: {repeats}");
    let got: Vec<(i64, u64)> =
        rows.iter().map(|r| (r["order_ts"].as_i64().unwrap(), r["user_id"].as_u64().unwrap())).collect();
    let want: Vec<(i64, u64)> = kept.iter().map(|o| (o.ts, o.user)).collect();
    assert_eq!(got.len(), want.len());
    assert_eq!(got, want);
}
