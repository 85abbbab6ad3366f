//! Progress of a running pipeline: one record per batch (shaped like Spark's
//! StreamingQueryProgress, printed as JSON with `--progress-json`), a periodic human line on
//! long runs, and the totals at the end. All of it goes to stderr; stdout carries only rows. The
//! last batch's record is also kept in the checkpoint (`progress.json`) for `weir inspect --json`,
//! and handed to a [`Tap`] where one listens (`weir serve`'s API and console).

use std::collections::BTreeMap;
use std::io::Write;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde::Serialize;

use crate::plugin::metrics::Snapshot;
use crate::source::Offsets;

#[derive(Debug, Default, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Durations {
    /// Reading the batch from the source (ahead, on the reading thread, except for the first
    /// batch and processing-time triggers).
    pub read_ms: f64,
    /// Waiting for the reading thread to hand the batch over: the part of reading and parsing
    /// that the previous batch's work did not cover.
    pub read_wait_ms: f64,
    /// Writing the batch's plan to the offsets log (its sync runs beside the batch).
    pub plan_ms: f64,
    /// Parsing (on the reading thread, like reading).
    pub parse_ms: f64,
    pub transform_ms: f64,
    pub aggregate_ms: f64,
    pub emit_ms: f64,
    /// Waiting, before the sink, for the plan's and the previous state's syncs to finish.
    pub sync_wait_ms: f64,
    pub sink_ms: f64,
    pub commit_ms: f64,
    pub total_ms: f64,
}

/// A source's part in a batch: Spark's `sources` entry.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SourceProgress {
    pub description: String,
    /// Where the batch began and ended reading (the plan's offsets).
    pub start_offset: Offsets,
    pub end_offset: Offsets,
    /// The latest position the source knew of when it read the batch (`Source::latest`);
    /// `null` for a file.
    pub latest_offset: Option<Offsets>,
    pub num_input_rows: usize,
    /// Records between the batch's end and the latest offset, per partition.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub lag: BTreeMap<String, u64>,
}

/// The event times of a batch's events, epoch ms.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EventTimes {
    pub min: i64,
    pub max: i64,
}

impl EventTimes {
    pub fn of(times: &[i64]) -> Option<Self> {
        let min = *times.iter().min()?;
        Some(Self { min, max: times.iter().copied().max().unwrap_or(min) })
    }

    /// The times of two batches together (continuous mode's report covers several).
    pub fn merge(a: Option<Self>, b: Option<Self>) -> Option<Self> {
        match (a, b) {
            (Some(a), Some(b)) => Some(Self { min: a.min.min(b.min), max: a.max.max(b.max) }),
            (a, b) => a.or(b),
        }
    }
}

/// What one batch did. Every count is this batch's; gauges (`watermark`, `stateKeys`,
/// `stateBytes`) are as of its end; only `plugins` is cumulative, since the run began.
#[derive(Debug, Default, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct BatchProgress {
    pub batch_id: u64,
    #[serde(rename = "numInputRows")]
    pub input_rows: usize,
    #[serde(rename = "numEvents")]
    pub events: usize,
    #[serde(rename = "numDeadLetters")]
    pub dead_letters: usize,
    #[serde(rename = "numLateEvents")]
    pub late_events: usize,
    /// Dropped by `[dedup]` as repeats.
    #[serde(rename = "numDuplicates")]
    pub duplicates: usize,
    /// Dropped by an inner `[join]`: no table row has their key.
    #[serde(rename = "numUnmatched")]
    pub unmatched: usize,
    #[serde(rename = "numWindowsEmitted")]
    pub windows_emitted: usize,
    /// Rows that violated each expectation (`expect`), by name.
    #[serde(rename = "expectationViolations", skip_serializing_if = "BTreeMap::is_empty")]
    pub expectations: BTreeMap<String, u64>,
    #[serde(rename = "numRowsOut")]
    pub rows_out: usize,
    /// Epoch ms; absent for pipelines without event time. The real watermark: the largest
    /// event time seen, less the delay, over the partitions (never +∞, even when flushing).
    pub watermark: Option<i64>,
    /// Where a flush at the end of input advanced the operator to (this run's or an earlier
    /// one's): windows final under it were emitted.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub flushed_to: Option<i64>,
    pub state_keys: u64,
    /// The state store's live data and memtables, estimated by RocksDB.
    pub state_bytes: u64,
    /// The event times of this batch's events (before the operator): `eventTime` with the
    /// watermark.
    #[serde(skip)]
    pub event_times: Option<EventTimes>,
    /// The batch's source (micro-batch triggers; continuous mode reports none).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub sources: Vec<SourceProgress>,
    #[serde(rename = "durationMs")]
    pub durations: Durations,
    /// Each plugin stage's metrics so far (cumulative), by stage.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub plugins: BTreeMap<String, Snapshot>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct ProgressLine<'a> {
    name: &'a str,
    /// The checkpoint's identity: the same across restarts (Spark's `id`).
    id: &'a str,
    /// This run's: new at every start (Spark's `runId`).
    run_id: &'a str,
    timestamp: String,
    /// The batch's rows over the time since the previous batch's report (the first: since the
    /// run began), as Spark's input rate.
    input_rows_per_second: f64,
    /// The batch's rows over its own duration.
    processed_rows_per_second: f64,
    watermark_time: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    event_time: Option<EventTimeLine>,
    #[serde(flatten)]
    batch: &'a BatchProgress,
}

/// Spark's `eventTime`: the batch's earliest and latest event time, and the watermark.
#[derive(Serialize)]
struct EventTimeLine {
    min: String,
    max: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    watermark: Option<String>,
}

/// Totals of a run.
#[derive(Debug, Default, Clone, Serialize)]
pub struct Summary {
    pub batches: u64,
    pub input_rows: u64,
    pub events: u64,
    pub dead_letters: u64,
    pub late_events: u64,
    pub duplicates: u64,
    pub unmatched: u64,
    pub windows_emitted: u64,
    pub rows_out: u64,
    /// Violations of each expectation.
    pub expectations: BTreeMap<String, u64>,
    pub elapsed_s: f64,
    pub rows_per_s: f64,
    pub final_watermark: Option<i64>,
    /// From the start of the run (engine, checkpoint and state opened, plugins instantiated)
    /// to the end of its first batch.
    pub first_batch_s: Option<f64>,
    /// Each plugin stage's metrics at the end.
    pub plugins: BTreeMap<String, Snapshot>,
    /// A stop (SIGTERM, Ctrl-C) ended the run before the end of its bounded input.
    pub interrupted: bool,
}

impl Summary {
    /// The human summary printed at the end of a run.
    pub fn render(&self) -> String {
        let wm = self.final_watermark.map_or("none".to_string(), show_time);
        let mut plugins = String::new();
        for (stage, m) in &self.plugins {
            plugins.push_str(&format!(
                "\n  {stage}: {} calls, {} in, {} out, {} errors, {:.3}s in the plugin, memory high-water {} KiB{}",
                m.calls,
                m.records_in,
                m.records_out,
                m.errors,
                m.seconds,
                m.memory_high_water_bytes >> 10,
                if m.fuel > 0 { format!(", {} fuel", m.fuel) } else { String::new() },
            ));
        }
        let expectations: String =
            self.expectations.iter().map(|(name, n)| format!("\n  expectation {name}: {n} violations")).collect();
        format!(
            "{} input rows in {:.2}s ({:.0} rows/s), {} batches; {} events, {} late,{}{} {} dead letters; \
             {} windows emitted, {} rows out; final watermark {wm}{expectations}{plugins}",
            self.input_rows,
            self.elapsed_s,
            self.rows_per_s,
            self.batches,
            self.events,
            self.late_events,
            // Only where `[dedup]` dropped some: the line stays as it was for other pipelines.
            if self.duplicates > 0 { format!(" {} duplicates,", self.duplicates) } else { String::new() },
            if self.unmatched > 0 { format!(" {} unmatched,", self.unmatched) } else { String::new() },
            self.dead_letters,
            self.windows_emitted,
            self.rows_out,
        )
    }
}

/// An event time as RFC 3339, or `-inf`/`+inf` for the watermark's extremes.
pub fn show_time(ms: i64) -> String {
    match ms {
        i64::MIN => "-inf".into(),
        i64::MAX => "+inf".into(),
        // RFC 3339 has four-digit years: 0 to 9999-12-31T23:59:59.999Z.
        0..=LAST_RFC3339_MS => {
            humantime::format_rfc3339_millis(UNIX_EPOCH + Duration::from_millis(ms as u64)).to_string()
        }
        ms => format!("{ms} ms"),
    }
}

/// The last instant RFC 3339 can write, in epoch milliseconds.
const LAST_RFC3339_MS: i64 = 253_402_300_799_999;

/// Where a batch's progress record (one JSON object) also goes, as it is made.
pub trait Tap: Send + Sync {
    fn record(&self, json: &str);
    /// The run has recovered its checkpoint and begins its batches.
    fn started(&self) {}
}

/// Collects batch reports; prints them as configured.
pub struct Progress {
    name: String,
    id: String,
    run_id: String,
    /// When the previous batch was reported (or the run began).
    last_batch: Instant,
    /// Where the last batch's record is kept for `weir inspect --json` (the checkpoint's
    /// `progress.json`).
    keep: Option<std::path::PathBuf>,
    /// When it was last written, and the newer record not written yet ([`KEEP_EVERY`]).
    kept_at: Option<Instant>,
    unkept: Option<String>,
    /// Also handed each batch's record (`weir serve`'s API and console).
    tap: Option<std::sync::Arc<dyn Tap>>,
    json: bool,
    human_every: Option<Duration>,
    last_line: Instant,
    started: Instant,
    total: Summary,
}

impl Progress {
    /// `json`: a JSON line per batch. `human_every`: a progress line at most this often.
    pub fn new(name: &str, json: bool, human_every: Option<Duration>) -> Self {
        let now = Instant::now();
        Self {
            name: name.into(),
            id: String::new(),
            run_id: uuid::Uuid::now_v7().to_string(),
            last_batch: now,
            keep: None,
            kept_at: None,
            unkept: None,
            tap: None,
            json,
            human_every,
            last_line: now,
            started: now,
            total: Summary::default(),
        }
    }

    /// The checkpoint's identity, once recovery has it, and the checkpoint directory whose
    /// `progress.json` keeps the last batch's record.
    pub fn identify(&mut self, id: &str, checkpoint: &std::path::Path) {
        self.id = id.to_string();
        self.keep = Some(checkpoint.join(PROGRESS_FILE));
        if let Some(tap) = &self.tap {
            tap.started();
        }
    }

    /// Hands every batch's record to `tap` too.
    pub fn tap(mut self, tap: std::sync::Arc<dyn Tap>) -> Self {
        self.tap = Some(tap);
        self
    }

    pub fn batch(&mut self, b: &BatchProgress) {
        let t = &mut self.total;
        t.first_batch_s.get_or_insert_with(|| self.started.elapsed().as_secs_f64());
        t.batches += 1;
        t.input_rows += b.input_rows as u64;
        t.events += b.events as u64;
        t.dead_letters += b.dead_letters as u64;
        t.late_events += b.late_events as u64;
        t.duplicates += b.duplicates as u64;
        t.unmatched += b.unmatched as u64;
        t.windows_emitted += b.windows_emitted as u64;
        t.rows_out += b.rows_out as u64;
        for (name, n) in &b.expectations {
            *t.expectations.entry(name.clone()).or_default() += n;
        }
        let since = std::mem::replace(&mut self.last_batch, Instant::now()).elapsed();
        // stderr is locked only to write a line: a tap takes locks of its own (a group's
        // roll-up writes to stderr while holding its own), and holding stderr across one
        // deadlocked the two.
        if self.json || self.keep.is_some() || self.tap.is_some() {
            let line = ProgressLine {
                name: &self.name,
                id: &self.id,
                run_id: &self.run_id,
                timestamp: humantime::format_rfc3339_millis(SystemTime::now()).to_string(),
                input_rows_per_second: rate(b.input_rows as u64, since.as_secs_f64()),
                processed_rows_per_second: rate(b.input_rows as u64, b.durations.total_ms / 1e3),
                watermark_time: b.watermark.map(show_time),
                event_time: b.event_times.map(|t| EventTimeLine {
                    min: show_time(t.min),
                    max: show_time(t.max),
                    watermark: b.watermark.map(show_time),
                }),
                batch: b,
            };
            if let Ok(s) = serde_json::to_string(&line) {
                if self.json {
                    let _ = writeln!(std::io::stderr().lock(), "{s}");
                }
                if let Some(tap) = &self.tap {
                    tap.record(&s);
                }
                if let Some(path) = &self.keep {
                    if self.kept_at.is_none_or(|at| at.elapsed() >= KEEP_EVERY) {
                        keep(path, s.as_bytes());
                        self.kept_at = Some(Instant::now());
                        self.unkept = None;
                    } else {
                        self.unkept = Some(s);
                    }
                }
            }
        }
        if let Some(every) = self.human_every
            && self.last_line.elapsed() >= every
        {
            self.last_line = Instant::now();
            let wm = b.watermark.map_or(String::new(), |w| format!(", watermark {}", show_time(w)));
            let _ = writeln!(
                std::io::stderr().lock(),
                "[{}] batch {}: {} rows so far, {:.0} rows/s{wm}",
                self.name,
                b.batch_id,
                t.input_rows,
                rate(t.input_rows, self.started.elapsed().as_secs_f64()),
            );
        }
    }

    pub fn finish(mut self, elapsed: Duration, watermark: Option<i64>, plugins: BTreeMap<String, Snapshot>) -> Summary {
        self.total.plugins = plugins;
        self.total.elapsed_s = elapsed.as_secs_f64();
        self.total.rows_per_s = rate(self.total.input_rows, self.total.elapsed_s);
        self.total.final_watermark = watermark;
        std::mem::take(&mut self.total)
    }
}

/// However the run ends, its last batch's record is kept.
impl Drop for Progress {
    fn drop(&mut self) {
        if let (Some(path), Some(record)) = (&self.keep, self.unkept.take()) {
            keep(path, record.as_bytes());
        }
    }
}

/// The last batch's progress record, in the checkpoint directory (`weir inspect --json`).
pub const PROGRESS_FILE: &str = "progress.json";

/// How often [`PROGRESS_FILE`] is written at most while a run goes on (and once more at its
/// end): a new file per batch was a file created and renamed every few milliseconds per task.
const KEEP_EVERY: Duration = Duration::from_secs(1);

/// Replaces the kept record: written beside it and renamed over it, so a reader sees a whole
/// one. Not synced: it is a report, not state (a crash may leave an older batch's). A failure is
/// logged, never the batch's.
fn keep(path: &std::path::Path, record: &[u8]) {
    let next = path.with_extension("json.next");
    // Never through a link planted where the file goes (`own_files.rs`).
    let written = crate::own_files::open(&next, std::fs::OpenOptions::new().create(true).write(true).truncate(true))
        .and_then(|mut f| f.write_all(record))
        .and_then(|()| std::fs::rename(&next, path));
    if let Err(e) = written {
        tracing::warn!("cannot keep the progress record in {}: {e}", path.display());
    }
}

fn rate(n: u64, secs: f64) -> f64 {
    if secs > 0.0 { n as f64 / secs } else { 0.0 }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_show_as_rfc3339_and_extremes_by_name() {
        assert_eq!(show_time(1_793_491_200_000), "2026-11-01T00:00:00.000Z");
        assert_eq!(show_time(i64::MIN), "-inf");
        assert_eq!(show_time(i64::MAX), "+inf");
        assert_eq!(show_time(LAST_RFC3339_MS), "9999-12-31T23:59:59.999Z");
        assert_eq!(show_time(LAST_RFC3339_MS + 1), "253402300800000 ms");
        assert_eq!(show_time(i64::MAX - 600_000), format!("{} ms", i64::MAX - 600_000));
    }

    #[test]
    fn event_times_span_their_batches() {
        assert_eq!(EventTimes::of(&[]), None);
        let a = EventTimes::of(&[5, 3, 9]);
        assert_eq!(a, Some(EventTimes { min: 3, max: 9 }));
        let b = EventTimes::of(&[1, 4]);
        assert_eq!(EventTimes::merge(a, b), Some(EventTimes { min: 1, max: 9 }));
        assert_eq!(EventTimes::merge(None, b), b);
        assert_eq!(EventTimes::merge(a, None), a);
    }

    #[test]
    fn the_kept_record_is_written_at_most_once_a_second_and_the_last_at_the_end() {
        let dir = tempfile::tempdir().unwrap();
        let kept = || -> serde_json::Value {
            serde_json::from_slice(&std::fs::read(dir.path().join(PROGRESS_FILE)).unwrap()).unwrap()
        };
        let mut p = Progress::new("t", false, None);
        p.identify("id", dir.path());
        let since = Instant::now();
        p.batch(&BatchProgress { batch_id: 1, ..Default::default() });
        assert_eq!(kept()["batchId"], 1, "the first batch's record is kept at once");
        p.batch(&BatchProgress { batch_id: 2, ..Default::default() });
        p.batch(&BatchProgress { batch_id: 3, ..Default::default() });
        if since.elapsed() < KEEP_EVERY {
            assert_eq!(kept()["batchId"], 1, "batches within a second of the last kept are not written");
        }
        drop(p);
        assert_eq!(kept()["batchId"], 3, "the run's end keeps its last batch's record");
    }

    #[test]
    fn totals_add_up_batches() {
        let mut p = Progress::new("t", false, None);
        p.batch(&BatchProgress { input_rows: 10, late_events: 1, ..Default::default() });
        p.batch(&BatchProgress { input_rows: 5, dead_letters: 2, ..Default::default() });
        let s = p.finish(Duration::from_secs(1), Some(0), BTreeMap::new());
        assert_eq!((s.batches, s.input_rows, s.late_events, s.dead_letters), (2, 15, 1, 2));
        assert_eq!(s.rows_per_s, 15.0);
    }
}
