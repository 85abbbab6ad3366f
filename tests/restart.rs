//! Exactly-once under crashes: `weir run` is killed with SIGKILL again and again at random
//! moments and restarted; its sink output and side outputs must equal an uninterrupted run's.
//!
//! Kills synchronise on the run's own progress (a JSON line per committed batch on stderr): the
//! test waits for a random number of batches (zero included, which kills during start-up) and
//! kills at once, while the next batch is in flight at whatever step it has reached.

mod common;

use std::io::{BufRead, BufReader};
use std::process::Stdio;

use common::*;

/// xorshift: the kill schedule is reproducible from the printed seed.
struct Rng(u64);
impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

#[test]
fn output_is_identical_after_repeated_kill_9() {
    let dir = tempfile::tempdir().unwrap();
    let events = orders(dir.path(), 200_000, 13);
    let windows = dir.path().join("windows");
    let late = dir.path().join("late.jsonl");
    let watermark = format!("late = \"side-output\"\nlate_path = \"{}\"", late.display());
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

    let seed = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos() as u64 | 1;
    eprintln!("kill schedule seed: {seed}");
    let mut rng = Rng(seed);
    let mut kills = 0;
    loop {
        let mut child = weir()
            .arg("run")
            .arg(&p)
            .arg("--progress-json")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let wait_for = rng.below(3);
        let mut batches = 0;
        let mut killed = false;
        let mut log = String::new();
        for line in BufReader::new(child.stderr.take().unwrap()).lines() {
            let line = line.unwrap();
            if line.starts_with('{') {
                batches += 1;
            } else {
                log.push_str(&line);
                log.push('\n');
            }
            if batches >= wait_for && kills < 60 {
                child.kill().unwrap();
                killed = true;
                break;
            }
        }
        let status = child.wait().unwrap();
        if killed && !status.success() {
            kills += 1;
            continue;
        }
        assert!(status.success(), "weir run failed: {status}\n{log}");
        if !killed || batches == 0 {
            break;
        }
    }
    eprintln!("{kills} kills");
    assert!(kills >= 20, "only {kills} kills landed");

    let rows = sink_rows(&windows);
    assert_eq!(windows_of(&rows), windows_of(&expected));
    assert_eq!(rows, expected, "same rows in the same order");
    let (_, dropped) = kept_orders(&events);
    assert_eq!(json_lines(&std::fs::read_to_string(&late).unwrap()).len(), dropped, "late events once each");
}
