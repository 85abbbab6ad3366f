//! Exactly-once under crashes: `weir run` is killed with SIGKILL again and again at random
//! moments and restarted; its sink output and side outputs must equal an uninterrupted run's.
//!
//! How the kills are timed: `common::kill_repeatedly`.

mod common;

use common::*;

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

/// Sessions keep their open sessions in memory and write each one to the store once per batch
/// that changed it: a kill anywhere must still give each session once, with all its events.
#[test]
fn sessions_are_identical_after_repeated_kill_9() {
    let dir = tempfile::tempdir().unwrap();
    let events = orders(dir.path(), 60_000, 17);
    let windows = dir.path().join("windows");
    let extra =
        format!("{}[checkpoint]\nlocation = \"{}\"", file_sink(&windows), dir.path().join("checkpoint").display());
    let p = pipeline(
        dir.path(),
        Spec {
            window: "type = \"session\"\ngap = \"5 minutes\"",
            parse_config: "key_by_user = true",
            watermark: "flush_at_end = true",
            extra: &extra,
            source: "type = \"replay\"\npath = \"orders.jsonl\"\nmax_offsets_per_trigger = 1000",
        },
    );
    let expected = weir_test(&p, &events);
    let (kept, _) = kept_orders(&events);
    assert_eq!(windows_of(&expected), session_reference(&kept, 300_000));

    let kills = kill_repeatedly(&p, 30);
    assert!(kills >= 10, "only {kills} kills landed");
    assert_eq!(sink_rows(&windows), expected, "same rows in the same order");
}
