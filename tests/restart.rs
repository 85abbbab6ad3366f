//! Exactly-once under crashes: `weir run` is killed with SIGKILL again and again at random
//! moments and restarted; its sink output and side outputs must equal an uninterrupted run's.
//!
//! How the kills are timed: `crate::common::kill_repeatedly`.

use crate::common::*;

#[test]
fn output_is_identical_after_repeated_kill_9() {
    let dir = tempfile::tempdir().unwrap();
    let events = orders(dir.path(), 200_000, 13);
    let windows = dir.path().join("windows");
    let late = dir.path().join("late.jsonl");
    // Compared with every window of the input: the run flushes at its end.
    let watermark = format!("late = \"side-output\"\nlate_path = \"{}\"\nflush_at_end = true", late.display());
    let extra =
        format!("{}[checkpoint]\nlocation = \"{}\"", file_sink(&windows), dir.path().join("checkpoint").display());
    let p = pipeline(dir.path(), Spec { window: TUMBLING, watermark: &watermark, extra: &extra, ..Default::default() });
    // Batches of up to 1 000 records: about 200, the last one the end-of-input flush; enough
    // that the kills below land at 60 moments spread over the whole run.
    let text = std::fs::read_to_string(&p)
        .unwrap()
        .replace("max_offsets_per_trigger = 5000", "max_offsets_per_trigger = 1000");
    std::fs::write(&p, text).unwrap();
    let expected = weir_test(&p, &events);

    let kills = kill_repeatedly(&p, 60);
    assert!(kills >= 20, "only {kills} kills landed");

    let rows = sink_rows(&windows);
    assert_eq!(windows_of(&rows), windows_of(&expected));
    assert_eq!(rows, expected, "same rows in the same order");
    let (_, dropped) = kept_orders(&events);
    assert_eq!(json_lines(&std::fs::read_to_string(&late).unwrap()).len(), dropped, "late events once each");
}

/// Sessions keep their open sessions in memory and record each batch's changes to them in one
/// entry of a log: a kill anywhere must still give each session once, with all its events.
#[test]
fn sessions_are_identical_after_repeated_kill_9() {
    let dir = tempfile::tempdir().unwrap();
    let events = orders(dir.path(), 60_000, 17);
    let (p, windows) = sessions_per_user(dir.path(), "5 minutes", "10 minutes");
    let expected = weir_test(&p, &events);
    let (kept, _) = kept_orders(&events);
    assert_eq!(windows_of(&expected), session_reference(&kept, 300_000));

    let kills = kill_repeatedly(&p, 30);
    assert!(kills >= 10, "only {kills} kills landed");
    assert_eq!(sink_rows(&windows), expected, "same rows in the same order");
}

/// Short sessions under a short watermark (the generator's disorder is under 30 s) close all
/// through the run, so their log of changes is rewritten as a snapshot every few batches (`aggregate/session_log.rs`): kills land before,
/// during and after rewrites, and every restart replays a log that some rewrite left. Each
/// session must still come out once, as in the run that was never killed (the test above
/// compares with the naive reference too).
#[test]
fn short_sessions_whose_log_is_rewritten_are_identical_after_repeated_kill_9() {
    let dir = tempfile::tempdir().unwrap();
    let events = orders(dir.path(), 150_000, 19);
    let (p, windows) = sessions_per_user(dir.path(), "2 seconds", "30 seconds");
    let expected = weir_test(&p, &events);
    assert!(expected.len() > 30_000, "{} sessions", expected.len());

    let kills = kill_repeatedly(&p, 30);
    assert!(kills >= 10, "only {kills} kills landed");
    assert_eq!(sink_rows(&windows), expected, "same rows in the same order");
    // The log was rewritten: its first entry (sequence 0, the first batch's) is gone. Without a
    // rewrite it would still be there, replayed at every start.
    let state = dir.path().join("checkpoint").join("state");
    let db = rocksdb::DB::open_for_read_only(&rocksdb::Options::default(), &state, false).unwrap();
    let mut first = b"g".to_vec();
    first.extend_from_slice(&0u64.to_be_bytes());
    assert_eq!(db.get(&first).unwrap(), None, "the log's first entry is still there: no rewrite happened");
}

/// A pipeline of sessions per user with gap `gap` under a watermark of `delay`, in batches of up
/// to 1,000 records, flushed at the end, into a file sink: the pipeline file and the sink's
/// directory.
fn sessions_per_user(dir: &std::path::Path, gap: &str, delay: &str) -> (std::path::PathBuf, std::path::PathBuf) {
    let windows = dir.join("windows");
    let extra = format!("{}[checkpoint]\nlocation = \"{}\"", file_sink(&windows), dir.join("checkpoint").display());
    let window = format!("type = \"session\"\ngap = \"{gap}\"");
    let p = pipeline(
        dir,
        Spec {
            window: &window,
            parse_config: "key_by_user = true",
            watermark: "flush_at_end = true",
            extra: &extra,
            source: "type = \"replay\"\npath = \"orders.jsonl\"\nmax_offsets_per_trigger = 1000",
        },
    );
    let text = std::fs::read_to_string(&p).unwrap().replace("delay = \"10 minutes\"", &format!("delay = \"{delay}\""));
    std::fs::write(&p, text).unwrap();
    (p, windows)
}

/// `weir test --restarts`: the orders pipeline is replay-safe through crashes at random batch
/// boundaries; a parser that reads a real clock is not, and the first differing row says so.
#[test]
fn weir_test_restarts_finds_a_plugin_that_is_not_replay_safe() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let events = orders(d, 30_000, 17);
    let p = pipeline(d, Spec { window: TUMBLING, ..Default::default() });
    let safe = |p: &std::path::Path, events: &std::path::Path| {
        weir()
            .arg("test")
            .arg(p)
            .arg("--events")
            .arg(events)
            .args(["--restarts", "4", "--out"])
            .arg(d.join("rows.jsonl"))
            .output()
            .unwrap()
    };
    let out = safe(&p, &events);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(err.contains("replay safety: the same") && err.contains("crashes at batches"), "{err}");

    // Orders with a record asking the hostile parser for the time, which it can see only when
    // granted the clocks.
    let mut text = std::fs::read_to_string(&events).unwrap();
    text.push_str("{\"attack\":\"clock\"}\n");
    let with_clock = d.join("with-clock.jsonl");
    std::fs::write(&with_clock, text).unwrap();
    let hostile = |clocks: bool| {
        let f = d.join(format!("clock-{clocks}.toml"));
        let t = format!(
            "name = \"clock\"\n[source]\ntype = \"replay\"\npath = \"x\"\nmax_offsets_per_trigger = 5000\n\
             [parse]\nplugin = \"{}\"\ngrants.clocks = {clocks}\n",
            component("hostile").display()
        );
        std::fs::write(&f, t).unwrap();
        f
    };
    let out = safe(&hostile(false), &with_clock);
    assert!(out.status.success(), "a frozen clock is replay-safe: {}", String::from_utf8_lossy(&out.stderr));
    let out = safe(&hostile(true), &with_clock);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("differs") && err.contains("clock_ms"), "{err}");
}
