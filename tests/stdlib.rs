//! The standard library (`plugins/json-parser`, `plugins/stats`, `plugins/json-filter`,
//! `plugins/stdout-sink`): the no-code pipeline of `plugins/orders-by-status` against a naive
//! reference computed here, with the event time as epoch milliseconds, as epoch seconds and as
//! RFC 3339 strings with an offset; a filter and projection against the same kind of reference;
//! distinct counts against exact ones, within the sketch's error; the stdout sink and its grant;
//! and the records and configs they refuse.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::common::*;
use serde_json::{Value, json};

/// The example pipeline over `events`, its parser's config replaced by `parse_config`.
fn by_status(dir: &Path, parse_config: &str) -> PathBuf {
    let text = std::fs::read_to_string(root().join("plugins/orders-by-status/pipeline.toml"))
        .unwrap()
        .replace(
            r#"config = { time_field = "order_ts", key_fields = ["status"] }"#,
            &format!("config = {{ {parse_config} }}"),
        )
        .replace("../dist/", &format!("{}/", root().join("plugins/dist").display()))
        // Five seconds, not minutes: the generator makes a thousand orders a second.
        .replace(r#"size = "5 minutes""#, r#"size = "5 seconds""#)
        .replace("../../out/orders-by-status/checkpoint", &dir.join("cp").display().to_string());
    let p = dir.join(format!("by-status-{}.toml", parse_config.len()));
    std::fs::write(&p, text).unwrap();
    p
}

/// The window the tests run the example with.
const WINDOW: i64 = 5_000;

/// Per (5-second window, status) of the orders a 10-minute watermark keeps: count, sum, min,
/// max of `amount`.
fn reference(orders: &[Value]) -> BTreeMap<(i64, String), (u64, f64, f64, f64)> {
    let mut max: Option<i64> = None;
    let mut w: BTreeMap<(i64, String), (u64, f64, f64, f64)> = BTreeMap::new();
    for o in orders {
        let ts = o["order_ts"].as_i64().unwrap();
        if max.is_some_and(|m| ts < m - 600_000) {
            continue;
        }
        max = Some(max.map_or(ts, |m| m.max(ts)));
        let a = o["amount"].as_f64().unwrap();
        let e = w.entry((ts.div_euclid(WINDOW) * WINDOW, o["status"].as_str().unwrap().to_string())).or_insert((
            0,
            0.0,
            f64::INFINITY,
            f64::NEG_INFINITY,
        ));
        e.0 += 1;
        e.1 += a;
        e.2 = e.2.min(a);
        e.3 = e.3.max(a);
    }
    w
}

fn check(rows: &[Value], want: &BTreeMap<(i64, String), (u64, f64, f64, f64)>) {
    assert_eq!(rows.len(), want.len(), "one row per window and status");
    for r in rows {
        let k = (r["window_start"].as_i64().unwrap(), r["key"].as_str().unwrap().to_string());
        let (count, sum, min, max) = want[&k];
        assert_eq!(r["window_end"].as_i64().unwrap(), k.0 + WINDOW);
        assert_eq!(r["count"].as_u64().unwrap(), count, "{r}");
        let close = |a: f64, b: f64| (a - b).abs() <= 1e-6 * b.abs().max(1.0);
        assert!(close(r["sum_amount"].as_f64().unwrap(), sum), "{r}: sum {sum}");
        assert!(close(r["avg_amount"].as_f64().unwrap(), sum / count as f64), "{r}");
        assert_eq!((r["min_amount"].as_f64().unwrap(), r["max_amount"].as_f64().unwrap()), (min, max), "{r}");
    }
}

#[test]
fn orders_per_status_need_no_code_whatever_the_time_s_format() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let events = orders(d, 20_000, 61);
    let all = json_lines(&std::fs::read_to_string(&events).unwrap());
    let want = reference(&all);
    assert!(want.keys().any(|(_, s)| s == "ERROR") && want.len() > 20);

    let rows = weir_test(&by_status(d, r#"time_field = "order_ts", key_fields = ["status"]"#), &events);
    check(&rows, &want);

    // The same times as epoch seconds (with their milliseconds as a fraction), and as RFC 3339
    // strings one hour east of UTC, in a field inside an object.
    let secs = d.join("seconds.jsonl");
    let rfc = d.join("rfc3339.jsonl");
    let mut s_text = String::new();
    let mut r_text = String::new();
    for o in &all {
        let ms = o["order_ts"].as_i64().unwrap();
        let mut s = o.clone();
        s["ts"] = json!(ms as f64 / 1000.0);
        s_text.push_str(&format!("{s}\n"));
        let mut r = o.clone();
        let t = time_of(ms + 3_600_000);
        r["meta"] = json!({ "at": format!("{t}+01:00") });
        r_text.push_str(&format!("{r}\n"));
    }
    std::fs::write(&secs, s_text).unwrap();
    std::fs::write(&rfc, r_text).unwrap();
    let rows = weir_test(&by_status(d, r#"time_field = "ts", time_unit = "s", key_fields = ["status"]"#), &secs);
    check(&rows, &want);
    let rows = weir_test(&by_status(d, r#"time_field = "meta.at", key_fields = ["status"]"#), &rfc);
    check(&rows, &want);
}

/// `ms` (epoch milliseconds) as `YYYY-MM-DDTHH:MM:SS.mmm`, by the civil-from-days algorithm.
fn time_of(ms: i64) -> String {
    let (days, rem) = (ms.div_euclid(86_400_000), ms.rem_euclid(86_400_000));
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    let (h, m, s, milli) = (rem / 3_600_000, rem / 60_000 % 60, rem / 1000 % 60, rem % 1000);
    format!("{year:04}-{month:02}-{day:02}T{h:02}:{m:02}:{s:02}.{milli:03}")
}

#[test]
fn records_without_a_usable_time_are_dead_letters_and_bad_configs_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let events = d.join("events.jsonl");
    std::fs::write(
        &events,
        concat!(
            r#"{"order_ts":1793491200000,"status":"OK","amount":1.5}"#,
            "\n",
            r#"{"status":"OK","amount":2}"#,
            "\n",
            r#"{"order_ts":"yesterday","status":"OK","amount":2}"#,
            "\n",
            r#"{"order_ts":1793491200001,"status":"OK","amount":"two"}"#,
            "\n",
            "not json\n",
        ),
    )
    .unwrap();
    let t = weir_test_dead_letters(&by_status(d, r#"time_field = "order_ts", key_fields = ["status"]"#), &events);
    let kinds: Vec<(u64, &str)> =
        t.dead.iter().map(|l| (l["line"].as_u64().unwrap(), l["kind"].as_str().unwrap())).collect();
    assert_eq!(kinds[..3], [(2, "missing-field"), (3, "invalid-value"), (5, "malformed")], "{:?}", t.dead);
    assert!(
        t.dead.iter().any(|l| l["line"] == 4 && l["error"].as_str().unwrap().contains("not a number")),
        "{:?}",
        t.dead
    );
    assert_eq!(t.rows.len(), 1);
    assert_eq!((t.rows[0]["count"].as_u64(), t.rows[0]["sum_amount"].as_f64()), (Some(1), Some(1.5)));

    for (config, says) in [
        (r#"key_fields = ["status"]"#, "time_field"),
        (r#"time_field = "t", key_fields = ["a", "b", "c", "d", "e"]"#, "at most 4"),
        (r#"time_field = "t", time_unit = "minutes""#, "`minutes`"),
    ] {
        let out = weir().arg("test").arg(by_status(d, config)).arg("--events").arg(&events).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success() && err.contains(says), "{config}: {err}");
    }
}

#[test]
fn the_filter_keeps_rows_that_meet_every_condition_and_projects_their_fields() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let events = orders(d, 5_000, 62);
    let all = json_lines(&std::fs::read_to_string(&events).unwrap());
    let p = d.join("filter.toml");
    let text = format!(
        r#"
name = "big-errors"
[source]
type = "replay"
path = "{events}"
[parse]
plugin = "{parse}"
config = {{ time_field = "order_ts", key_fields = ["user_id"] }}
[[transform]]
plugin = "{filter}"
config = {{ where = [{{ field = "status", in = ["ERROR", "PENDING"] }}, {{ field = "amount", ge = 100 }}, {{ field = "coupon", exists = false }}], select = ["order_id", "amount", "status", "absent"] }}
"#,
        events = events.display(),
        parse = component("json_parser").display(),
        filter = component("json_filter").display(),
    );
    std::fs::write(&p, text).unwrap();
    let want: Vec<Value> = all
        .iter()
        .filter(|o| {
            ["ERROR", "PENDING"].contains(&o["status"].as_str().unwrap()) && o["amount"].as_f64().unwrap() >= 100.0
        })
        .map(|o| json!({"order_id": o["order_id"], "amount": o["amount"], "status": o["status"]}))
        .collect();
    assert!(want.len() > 50 && want.len() < all.len() / 5, "{}", want.len());
    let out = ok(weir().arg("test").arg(&p).arg("--events").arg(&events).output().unwrap());
    let text = String::from_utf8(out.stdout).unwrap();
    assert_eq!(json_lines(&text), want);
    // The projection keeps the order `select` gives, and the fields' text as written.
    let first = text.lines().next().unwrap();
    let o = &want[0];
    let input = std::fs::read_to_string(&events).unwrap();
    let line = input.lines().find(|l| l.starts_with(&format!(r#"{{"order_id":{},"#, o["order_id"]))).unwrap();
    let amount = line.split(r#""amount":"#).nth(1).unwrap().split(',').next().unwrap();
    assert_eq!(first, format!(r#"{{"order_id":{},"amount":{amount},"status":{}}}"#, o["order_id"], o["status"]));

    let bad = std::fs::read_to_string(&p).unwrap().replace("ge = 100", "ge = 100, le = 200");
    std::fs::write(&p, bad).unwrap();
    let out = weir().arg("test").arg(&p).arg("--events").arg(&events).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("where[1]") && err.contains("exactly one"), "{err}");
}

#[test]
fn distinct_counts_are_estimated_within_the_sketch_s_error_and_merge_across_panes() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let events = orders(d, 40_000, 63);
    let all = json_lines(&std::fs::read_to_string(&events).unwrap());
    // Sliding 10 s windows every 5 s: each window's sketch is the merge of two panes'.
    let text = std::fs::read_to_string(by_status(d, r#"time_field = "order_ts""#))
        .unwrap()
        .replace(r#"type = "tumbling""#, "type = \"sliding\"\nslide = \"5 seconds\"")
        .replace(r#"size = "5 seconds""#, r#"size = "10 seconds""#);
    let a = text.find("config = { aggregates").unwrap();
    let b = text[a..].find("] }").unwrap() + a + 3;
    let text = format!(
        "{}config = {{ aggregates = [{{ op = \"count\" }}, {{ op = \"distinct\", field = \"user_id\", as = \"users\" }}] }}{}",
        &text[..a],
        &text[b..]
    );
    let p = d.join("distinct.toml");
    std::fs::write(&p, text).unwrap();
    let rows = weir_test(&p, &events);

    let mut max: Option<i64> = None;
    let mut exact: BTreeMap<i64, std::collections::HashSet<u64>> = BTreeMap::new();
    for o in &all {
        let ts = o["order_ts"].as_i64().unwrap();
        if max.is_some_and(|m| ts < m - 600_000) {
            continue;
        }
        max = Some(max.map_or(ts, |m| m.max(ts)));
        let pane = ts.div_euclid(5_000) * 5_000;
        for start in [pane, pane - 5_000] {
            exact.entry(start).or_default().insert(o["user_id"].as_u64().unwrap());
        }
    }
    assert_eq!(rows.len(), exact.len());
    for r in &rows {
        let want = exact[&r["window_start"].as_i64().unwrap()].len() as f64;
        let got = r["users"].as_f64().unwrap();
        assert!((got - want).abs() <= 0.05 * want, "{r}: {want} distinct users");
    }
    assert!(exact.values().any(|u| u.len() > 3_000), "windows with many users");
}

/// The stdout sink writes each row as a line of the process's standard output, but only with
/// `grants.stdout` (without it, a plugin's writes there go nowhere); `delivery = true` tags each
/// row with its delivery, so a reader can drop a batch printed again after a crash.
#[test]
fn the_stdout_sink_prints_each_row_only_when_granted() {
    let dir = tempfile::tempdir().unwrap();
    let events = orders(dir.path(), 3_000, 21);
    let pipeline = |name: &str, sink: &str| {
        let p = dir.path().join(format!("{name}.toml"));
        let text = format!(
            "name = \"{name}\"\n[source]\ntype = \"replay\"\npath = \"{}\"\nmax_offsets_per_trigger = 1000\n[parse]\nplugin = \"{}\"\n[watermark]\ndelay = \"10 minutes\"\n[window]\n{TUMBLING}\n[aggregate]\nplugin = \"{}\"\n[sink]\nplugin = \"{}\"\n{sink}\n[checkpoint]\nlocation = \"{}\"\n",
            events.display(),
            component("orders_json").display(),
            component("error_rate").display(),
            component("stdout_sink").display(),
            dir.path().join(format!("cp-{name}")).display(),
        );
        std::fs::write(&p, text).unwrap();
        p
    };
    let stdout = |p: &Path| {
        let out = ok(weir().arg("run").arg("--flush").arg(p).output().unwrap());
        String::from_utf8(out.stdout).unwrap()
    };
    let want = weir_test(&pipeline("reference", ""), &events);
    assert!(!want.is_empty());
    assert_eq!(json_lines(&stdout(&pipeline("granted", "grants.stdout = true"))), want);
    assert_eq!(stdout(&pipeline("denied", "")), "", "no grant, no output");
    let tagged = json_lines(&stdout(&pipeline("tagged", "config = { delivery = true }\ngrants.stdout = true")));
    assert_eq!(tagged.iter().map(|r| r["row"].clone()).collect::<Vec<_>>(), want);
    assert!(tagged.iter().all(|r| r["delivery"].as_str().is_some_and(|d| d.len() > 20)), "{tagged:?}");
}

#[test]
fn only_a_sink_may_be_granted_standard_output() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("p.toml");
    std::fs::write(
        &p,
        format!(
            "name = \"p\"\n[source]\ntype = \"replay\"\npath = \"x.jsonl\"\n[parse]\nplugin = \"{}\"\ngrants.stdout = true\n",
            component("orders_json").display()
        ),
    )
    .unwrap();
    let out = weir().arg("run").arg(&p).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("parse.grants.stdout") && stderr.contains("only a [sink]"), "{stderr}");
}
