//! Catch-up runs and replays, as operators run them: a bounded run on a checkpoint that the next
//! run resumes (a file that grew, a topic with new records), a replay from a fresh checkpoint
//! into the same output, the same pipeline started from another directory, a start that fails,
//! two processes on one checkpoint, a last line without its newline.
//!
//! Each is compared with one uninterrupted run over everything, and with the reference.

use std::path::{Path, PathBuf};

use crate::common::apache_kafka::ApacheKafka;
use crate::common::kafka::*;
use crate::common::*;

/// Splits the orders file in `dir` in two: the first `num/den` of its lines stay, the rest is
/// returned to be appended later.
fn keep_first(events: &Path, num: usize, den: usize) -> String {
    let text = std::fs::read_to_string(events).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    let (first, rest) = lines.split_at(lines.len() * num / den);
    std::fs::write(events, first.join("\n") + "\n").unwrap();
    rest.join("\n") + "\n"
}

fn append(path: &Path, text: &str) {
    let mut f = std::fs::OpenOptions::new().append(true).open(path).unwrap();
    std::io::Write::write_all(&mut f, text.as_bytes()).unwrap();
}

/// The orders pipeline over `orders.jsonl` in `dir`, with a checkpoint and the file sink.
fn checkpointed(dir: &Path, watermark: &str) -> (PathBuf, PathBuf) {
    let windows = dir.join("windows");
    let extra = format!("{}[checkpoint]\nlocation = \"{}\"", file_sink(&windows), dir.join("checkpoint").display());
    (pipeline(dir, Spec { window: TUMBLING, watermark, extra: &extra, ..Default::default() }), windows)
}

/// The checkpoint's identity, as `weir inspect` shows it.
fn identity(checkpoint: &Path) -> String {
    let out = ok(weir().arg("inspect").arg(checkpoint).output().unwrap());
    let text = String::from_utf8(out.stdout).unwrap();
    let line = text.lines().find_map(|l| l.trim().strip_prefix("identity")).unwrap_or_else(|| panic!("{text}"));
    line.trim_start_matches([' ', ':']).trim().to_string()
}

fn late_count(stderr: &[u8]) -> u64 {
    let text = String::from_utf8_lossy(stderr);
    let summary = text.lines().find(|l| l.contains(" late, ")).unwrap_or_else(|| panic!("no summary in:\n{text}"));
    let before = summary.split(" late, ").next().unwrap();
    before.rsplit(' ').next().unwrap().parse().unwrap()
}

/// The catch-up pattern: `available-now` on a schedule over a file that grows. The first run
/// must not close the windows the second run's events belong to; together they give exactly the
/// rows of one run over the whole file, and drop only what the reference drops.
#[test]
fn a_file_that_grows_between_runs_gives_the_rows_of_one_run_over_all_of_it() {
    let dir = tempfile::tempdir().unwrap();
    let events = orders(dir.path(), 60_000, 17);
    let (kept, dropped) = kept_orders(&events);
    let rest = keep_first(&events, 1, 2);
    let (p, windows) = checkpointed(dir.path(), "");

    let first = ok(weir().arg("run").arg(&p).output().unwrap());
    append(&events, &rest);
    let second = ok(weir().arg("run").arg(&p).arg("--flush").output().unwrap());

    assert_eq!(windows_of(&sink_rows(&windows)), sliding_reference(&kept, 60_000, 60_000));
    assert_eq!(late_count(&first.stderr) + late_count(&second.stderr), dropped as u64, "late = what the oracle drops");

    // One run over the whole file, for comparison: the same rows.
    let once = tempfile::tempdir().unwrap();
    std::fs::copy(&events, once.path().join("orders.jsonl")).unwrap();
    let (p, once_windows) = checkpointed(once.path(), "");
    ok(weir().arg("run").arg(&p).arg("--flush").output().unwrap());
    assert_eq!(windows_of(&sink_rows(&once_windows)), windows_of(&sink_rows(&windows)));
}

/// Without `--flush` a bounded run leaves its trailing windows open; asking for the flush emits
/// them, and a later run on the checkpoint counts events of those windows as late instead of
/// emitting a window twice. The checkpoint's watermark stays the real one throughout.
#[test]
fn a_flushed_run_remembers_what_it_emitted_and_keeps_the_real_watermark() {
    let dir = tempfile::tempdir().unwrap();
    // 1,000 orders per simulated second: 200 s of event time, the flush after 100 s.
    let events = orders(dir.path(), 200_000, 3);
    let rest = keep_first(&events, 1, 2);
    let (p, windows) = checkpointed(dir.path(), "");
    ok(weir().arg("run").arg(&p).arg("--flush").output().unwrap());
    let flushed = windows_of(&sink_rows(&windows));
    let inspect = ok(weir().arg("inspect").arg(dir.path().join("checkpoint")).output().unwrap());
    let text = String::from_utf8(inspect.stdout).unwrap();
    assert!(!text.contains("+inf"), "the checkpointed watermark is the real one:\n{text}");
    assert!(text.contains("flushed "), "{text}");
    assert!(identity(&dir.path().join("checkpoint")).len() >= 32, "inspect names the checkpoint's identity:\n{text}");

    append(&events, &rest);
    let second = ok(weir().arg("run").arg(&p).arg("--flush").output().unwrap());
    let rows = sink_rows(&windows);
    let all = windows_of(&rows); // panics on a window emitted twice
    for (w, counts) in &flushed {
        assert_eq!(all.get(w), Some(counts), "a flushed window is never emitted again");
    }
    assert!(late_count(&second.stderr) > 0, "events of flushed windows are late, not lost silently");
    assert!(all.len() > flushed.len(), "windows after the flush are emitted");
}

/// The same with Kafka: a topic with new records between two `available-now` runs.
#[test]
fn a_topic_that_grows_between_available_now_runs_gives_the_rows_of_one_run() {
    let dir = tempfile::tempdir().unwrap();
    let broker = ApacheKafka::start(&dir.path().join("kafka"));
    broker.create_topic("orders", 2);
    let events = orders(dir.path(), 40_000, 23);
    let (kept, dropped) = kept_orders(&events);
    let rest = keep_first(&events, 1, 2);
    produce_lines(&broker.brokers(), "orders", 2, &events, false);

    let windows = dir.path().join("windows");
    let extra =
        format!("{}[checkpoint]\nlocation = \"{}\"", file_sink(&windows), dir.path().join("checkpoint").display());
    let source = kafka_source(&broker.brokers(), "orders", 2_000);
    let p = pipeline(dir.path(), Spec { window: TUMBLING, extra: &extra, source: &source, ..Default::default() });
    let first = ok(weir().arg("run").arg(&p).output().unwrap());

    let second_half = dir.path().join("rest.jsonl");
    std::fs::write(&second_half, rest).unwrap();
    produce_lines(&broker.brokers(), "orders", 2, &second_half, false);
    let second = ok(weir().arg("run").arg(&p).arg("--flush").output().unwrap());
    assert_eq!(windows_of(&sink_rows(&windows)), sliding_reference(&kept, 60_000, 60_000));
    assert_eq!(late_count(&first.stderr) + late_count(&second.stderr), dropped as u64, "late = what the oracle drops");
}

/// Spark's documented replay: delete the checkpoint, start from the beginning. The new
/// checkpoint has an identity of its own, so the sink writes its batches beside the first run's
/// instead of taking them for re-deliveries; a crash-retry within one checkpoint still writes
/// nothing twice (`tests/restart.rs`).
#[test]
fn a_replay_from_a_fresh_checkpoint_writes_its_output() {
    let dir = tempfile::tempdir().unwrap();
    let events = orders(dir.path(), 20_000, 5);
    let (p, windows) = checkpointed(dir.path(), "flush_at_end = true");
    ok(weir().arg("run").arg(&p).output().unwrap());
    let first = sink_rows(&windows);
    assert!(!first.is_empty());
    let before = identity(&dir.path().join("checkpoint"));

    std::fs::remove_dir_all(dir.path().join("checkpoint")).unwrap();
    ok(weir().arg("run").arg(&p).output().unwrap());
    assert_ne!(identity(&dir.path().join("checkpoint")), before, "a new checkpoint has an identity of its own");
    let both = sink_rows(&windows);
    assert_eq!(both.len(), 2 * first.len(), "the replay wrote every window again");
    assert_eq!(&both[..first.len()], &first[..], "the first run's files come first, untouched");
    assert_eq!(&both[first.len()..], &first[..], "the replay computed the same rows");
    let (kept, _) = kept_orders(&events);
    assert_eq!(windows_of(&first), sliding_reference(&kept, 60_000, 60_000));
}

/// The checkpoint is the pipeline's, whichever directory `weir` runs in and however the paths
/// in it are spelled.
#[test]
fn the_same_pipeline_from_another_directory_or_spelling_resumes_its_checkpoint() {
    let dir = tempfile::tempdir().unwrap();
    orders(dir.path(), 5_000, 9);
    let (p, _) = checkpointed(dir.path(), "");
    let text = std::fs::read_to_string(&p).unwrap();
    ok(weir().arg("run").arg("pipeline.toml").current_dir(dir.path()).output().unwrap());
    std::fs::write(&p, text.replace("path = \"orders.jsonl\"", "path = \"./orders.jsonl\"")).unwrap();
    let sub = dir.path().join("elsewhere");
    std::fs::create_dir(&sub).unwrap();
    ok(weir().arg("run").arg("../pipeline.toml").current_dir(&sub).output().unwrap());
    ok(weir().arg("run").arg(&p).output().unwrap());
}

/// A start that fails on something the user fixes (a typo in the input's path) leaves no
/// metadata behind: the fixed pipeline, and any other, is not refused afterwards.
#[test]
fn a_start_that_fails_leaves_the_checkpoint_unclaimed() {
    let dir = tempfile::tempdir().unwrap();
    orders(dir.path(), 2_000, 9);
    let (p, windows) = checkpointed(dir.path(), "flush_at_end = true");
    let good = std::fs::read_to_string(&p).unwrap();
    std::fs::write(&p, good.replace("path = \"orders.jsonl\"", "path = \"ordres.jsonl\"")).unwrap();
    let out = weir().arg("run").arg(&p).output().unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stderr).contains("ordres.jsonl"));
    assert!(!dir.path().join("checkpoint/metadata").exists());

    std::fs::write(&p, good).unwrap();
    ok(weir().arg("run").arg(&p).output().unwrap());
    assert!(!sink_rows(&windows).is_empty());
}

/// A second process on a running pipeline's checkpoint is refused with the first one's pid,
/// not RocksDB's lock error; the first finishes undisturbed. (The first is held still with
/// SIGSTOP after its first batch, so the second surely meets it running.)
#[test]
fn a_second_process_on_a_checkpoint_is_refused_naming_the_first() {
    use std::io::{BufRead, BufReader};
    let signal =
        |sig: &str, pid: u32| ok(std::process::Command::new("kill").args([sig, &pid.to_string()]).output().unwrap());
    let dir = tempfile::tempdir().unwrap();
    orders(dir.path(), 50_000, 2);
    let (p, _) = checkpointed(dir.path(), "flush_at_end = true");
    let mut first = weir()
        .arg("run")
        .arg(&p)
        .arg("--progress-json")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(first.stderr.take().unwrap()).lines();
    // The first batch is committed: the first process holds the checkpoint.
    while !lines.next().expect("the first run ended early").unwrap().starts_with('{') {}
    signal("-STOP", first.id());
    let out = weir().arg("run").arg(&p).output().unwrap();
    signal("-CONT", first.id());
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{err}");
    assert!(err.contains(&format!("in use by process {}", first.id())), "{err}");
    assert!(!err.contains("LOCK"), "{err}");
    for line in lines {
        line.unwrap();
    }
    assert!(first.wait().unwrap().success());
}

/// A recorded-events file whose last line has no newline loses nothing at the end of bounded
/// input.
#[test]
fn a_last_line_without_its_newline_is_read() {
    let dir = tempfile::tempdir().unwrap();
    let events = orders(dir.path(), 3_000, 4);
    let text = std::fs::read_to_string(&events).unwrap();
    std::fs::write(&events, text.trim_end()).unwrap();
    let (p, _) = checkpointed(dir.path(), "");
    let rows = weir_test(&p, &events);
    let total: u64 = rows.iter().map(|r| r["count"].as_u64().unwrap()).sum();
    let (kept, _) = kept_orders(&events);
    assert_eq!(total, kept.len() as u64);
    assert_eq!(windows_of(&rows), sliding_reference(&kept, 60_000, 60_000));
}
