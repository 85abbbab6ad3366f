use std::sync::Arc;
use std::time::Duration;

use super::*;

fn rows(n: std::ops::Range<u32>) -> Vec<(Vec<u8>, Vec<u8>)> {
    n.map(|i| (format!("k{}", i % 7).into_bytes(), format!("{{\"i\":{i}}}").into_bytes())).collect()
}

fn append(log: &Log, writer: &str, batch: u64, records: &[(Vec<u8>, Vec<u8>)]) -> Appended {
    let ts = 1_000 + batch as i64;
    log.append(writer, batch, 0, records.iter().map(|(k, v)| (k.as_slice(), v.as_slice(), ts))).expect("append")
}

fn values(records: &[LogRecord]) -> Vec<(u64, Vec<u8>, Vec<u8>)> {
    records.iter().map(|r| (r.offset, r.key.clone(), r.value.clone())).collect()
}

fn expected(from: u64, records: &[(Vec<u8>, Vec<u8>)]) -> Vec<(u64, Vec<u8>, Vec<u8>)> {
    records.iter().enumerate().map(|(i, (k, v))| (from + i as u64, k.clone(), v.clone())).collect()
}

#[test]
fn appends_and_reads_from_any_offset() {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = Log::open(dir.path(), false).expect("open");
    let all = rows(0..100);
    assert_eq!(append(&log, "w", 0, &all[..40]), Appended::Written { first: 0, end: 40 });
    assert_eq!(append(&log, "w", 1, &all[40..]), Appended::Written { first: 40, end: 100 });
    assert_eq!(log.end(), 100);
    for from in [0, 1, 39, 40, 99, 100] {
        let got = log.read(from, u64::MAX, usize::MAX).expect("read");
        assert_eq!(values(&got), expected(from, &all[from as usize..]), "from {from}");
    }
    // A bound on the end and on the count.
    assert_eq!(values(&log.read(10, 20, usize::MAX).expect("read")), expected(10, &all[10..20]));
    assert_eq!(values(&log.read(10, 90, 5).expect("read")), expected(10, &all[10..15]));
    let stamped = log.read(39, 41, usize::MAX).expect("read");
    assert_eq!((stamped[0].timestamp, stamped[1].timestamp), (1_000, 1_001));
}

#[test]
fn a_batch_appended_again_by_its_writer_is_skipped_but_another_writers_is_not() {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = Log::open(dir.path(), false).expect("open");
    let a = rows(0..5);
    assert!(matches!(append(&log, "flow-a", 3, &a), Appended::Written { .. }));
    // The same batch after a crash, and an older one: both already in.
    assert_eq!(append(&log, "flow-a", 3, &a), Appended::Again);
    assert_eq!(append(&log, "flow-a", 2, &a), Appended::Again);
    // Another flow's batch 3 is other rows.
    assert_eq!(append(&log, "flow-b", 3, &a), Appended::Written { first: 5, end: 10 });
    assert_eq!(log.delivered("flow-a").expect("mark"), Some(3));
    assert_eq!(log.delivered("flow-c").expect("mark"), None);
    assert_eq!(log.end(), 10);
}

#[test]
fn survives_a_restart() {
    let dir = tempfile::tempdir().expect("tempdir");
    let all = rows(0..30);
    {
        let log = Log::open(dir.path(), false).expect("open");
        append(&log, "w", 0, &all[..10]);
        append(&log, "w", 1, &all[10..]);
    }
    let log = Log::open(dir.path(), false).expect("reopen");
    assert_eq!(log.end(), 30);
    assert_eq!(log.delivered("w").expect("mark"), Some(1));
    assert_eq!(append(&log, "w", 1, &all[10..]), Appended::Again);
    assert_eq!(values(&log.read(0, u64::MAX, usize::MAX).expect("read")), expected(0, &all));
}

#[test]
fn one_process_shares_one_handle_per_log() {
    let dir = tempfile::tempdir().expect("tempdir");
    let a = Log::open(dir.path(), false).expect("open");
    let b = Log::open(dir.path(), false).expect("open again");
    assert!(Arc::ptr_eq(&a, &b));
    append(&a, "w", 0, &rows(0..3));
    assert_eq!(b.end(), 3);
}

#[test]
fn a_torn_tail_is_cut_at_the_last_whole_append() {
    let dir = tempfile::tempdir().expect("tempdir");
    let all = rows(0..60);
    {
        let log = Log::open(dir.path(), false).expect("open");
        append(&log, "w", 0, &all[..20]);
        append(&log, "w", 1, &all[20..40]);
        append(&log, "w", 2, &all[40..]);
    }
    // A kill -9 during the last append's write leaves part of it in the write-ahead log: cut
    // the newest one short, inside that append.
    let wal = std::fs::read_dir(dir.path())
        .expect("list")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "log"))
        .max_by_key(|p| std::fs::metadata(p).map(|m| m.len()).unwrap_or(0))
        .expect("a write-ahead log");
    let len = std::fs::metadata(&wal).expect("stat").len();
    assert!(len > 200, "the appends are in the write-ahead log ({len} bytes)");
    std::fs::OpenOptions::new().write(true).open(&wal).expect("open wal").set_len(len - 40).expect("truncate");

    let log = Log::open(dir.path(), false).expect("reopen after the torn write");
    assert_eq!(log.end(), 40, "the torn append is gone, the whole ones stay");
    assert_eq!(log.delivered("w").expect("mark"), Some(1), "so its batch is delivered again");
    assert_eq!(values(&log.read(0, u64::MAX, usize::MAX).expect("read")), expected(0, &all[..40]));
    assert_eq!(append(&log, "w", 2, &all[40..]), Appended::Written { first: 40, end: 60 });
}

#[test]
fn retention_drops_a_prefix_and_a_reader_behind_it_is_told() {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = Log::open(dir.path(), false).expect("open");
    let all = rows(0..30);
    for b in 0..3u64 {
        append(&log, "w", b, &all[b as usize * 10..(b as usize + 1) * 10]);
    }
    // Stamps are 1000, 1001, 1002 per batch: keep what is stamped 1001 or later.
    log.retain_since(1_001).expect("retain");
    assert_eq!((log.start(), log.end()), (10, 30));
    assert_eq!(values(&log.read(10, u64::MAX, usize::MAX).expect("read")), expected(10, &all[10..]));
    assert!(matches!(log.read(5, u64::MAX, usize::MAX), Err(LogError::Trimmed { from: 5, start: 10, .. })));
    log.trim_before(25).expect("trim");
    drop(log);
    let log = Log::open(dir.path(), false).expect("reopen");
    assert_eq!((log.start(), log.end()), (25, 30), "retention survives a restart");
    assert_eq!(values(&log.read(25, u64::MAX, usize::MAX).expect("read")), expected(25, &all[25..]));
}

#[test]
fn a_table_keeps_each_keys_latest_row_and_forgets_a_tombstoned_key() {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = Log::open(dir.path(), true).expect("open");
    let batch: Vec<(Vec<u8>, Vec<u8>)> = vec![
        (b"u1".to_vec(), b"{\"n\":1}".to_vec()),
        (b"u2".to_vec(), b"{\"n\":1}".to_vec()),
        (b"u1".to_vec(), b"{\"n\":2}".to_vec()),
    ];
    append(&log, "w", 0, &batch);
    append(&log, "w", 1, &[(b"u2".to_vec(), Vec::new()), (b"u3".to_vec(), b"{\"n\":7}".to_vec())]);
    assert_eq!(log.row(b"u1").expect("row"), Some(b"{\"n\":2}".to_vec()));
    assert_eq!(log.row(b"u2").expect("row"), None);
    assert_eq!(
        log.rows().expect("rows"),
        vec![(b"u1".to_vec(), b"{\"n\":2}".to_vec()), (b"u3".to_vec(), b"{\"n\":7}".to_vec())]
    );
    // The changelog keeps every change, the tombstone too.
    assert_eq!(log.end(), 5);
    assert_eq!(log.read(3, 4, 1).expect("read")[0].value, b"");
}

#[test]
fn a_reader_in_another_process_sees_what_was_appended_before_it_opened() {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = Log::open(dir.path(), true).expect("open");
    append(&log, "w", 0, &rows(0..12));
    let reader = Log::open_read_only(dir.path()).expect("read-only beside the writer");
    assert_eq!(reader.end(), 12);
    assert_eq!(reader.read(0, u64::MAX, usize::MAX).expect("read").len(), 12);
}

#[test]
fn a_waiting_reader_wakes_when_a_writer_appends() {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = Log::open(dir.path(), false).expect("open");
    log.expect_writers(1);
    let writer = {
        let log = log.clone();
        std::thread::spawn(move || append(&log, "w", 0, &rows(0..4)))
    };
    // Woken by the append (the timeout only bounds a broken wake-up).
    let (end, closed) = log.wait_past(0, Duration::from_secs(60));
    assert_eq!((end, closed), (4, false));
    writer.join().expect("writer");
    // And when its last writer finishes, with nothing more.
    let done = {
        let log = log.clone();
        std::thread::spawn(move || log.writer_done())
    };
    assert_eq!(log.wait_past(4, Duration::from_secs(60)), (4, true));
    done.join().expect("writer done");
}

proptest::proptest! {
    /// Any split of any rows into batches reads back as the rows in order, from any offset,
    /// across a restart.
    #[test]
    fn reads_back_what_was_appended(
        batches in proptest::collection::vec(
            proptest::collection::vec((proptest::collection::vec(0u8..4, 0..3), proptest::collection::vec(1u8.., 0..40)), 0..20),
            0..6,
        ),
        from_frac in 0.0f64..=1.0,
    ) {
        let dir = tempfile::tempdir().expect("tempdir");
        let all: Vec<(Vec<u8>, Vec<u8>)> = batches.iter().flatten().cloned().collect();
        {
            let log = Log::open(dir.path(), false).expect("open");
            for (b, rows) in batches.iter().enumerate() {
                append(&log, "w", b as u64, rows);
            }
        }
        let log = Log::open(dir.path(), false).expect("reopen");
        proptest::prop_assert_eq!(log.end(), all.len() as u64);
        let from = (all.len() as f64 * from_frac) as u64;
        let got = log.read(from, u64::MAX, usize::MAX).expect("read");
        proptest::prop_assert_eq!(values(&got), expected(from, &all[from as usize..]));
    }
}

/// Reads that cross chunks, from sorted files rather than the memtable, in a directory where
/// flushes use direct I/O (the temp dir, on disk) and where they cannot (tmpfs, when present).
#[test]
fn reads_across_chunks_from_flushed_files_with_or_without_direct_io() {
    let disk = tempfile::tempdir().expect("tempdir");
    let shm = Path::new("/dev/shm");
    let tmpfs = shm.is_dir().then(|| tempfile::tempdir_in(shm).expect("tempdir in /dev/shm"));
    for dir in std::iter::once(&disk).chain(tmpfs.as_ref()) {
        let log = Log::open(dir.path(), false).expect("open");
        // 3 MiB and more in one append: dozens of chunks.
        let all: Vec<(Vec<u8>, Vec<u8>)> =
            (0..3_500u32).map(|i| (format!("k{i}").into_bytes(), vec![b'a' + (i % 26) as u8; 1_000])).collect();
        append(&log, "w", 0, &all);
        log.db.flush().expect("flush to a sorted file");
        for from in [0u64, 1, 1_040, 2_000, 3_499] {
            let got = log.read(from, 3_400, usize::MAX).expect("read");
            assert_eq!(values(&got), expected(from, &all[from as usize..3_400.max(from as usize)]), "from {from}");
        }
    }
}

/// An append large enough to be ingested as a sorted file skips the write-ahead log and reads
/// back like any other, after a restart too. Chunks an ingest left past the end (its append
/// killed before the end was written) are deleted when the log opens, so the re-run append's
/// chunks are the only ones a read finds.
#[test]
fn an_ingested_append_reads_back_and_chunks_past_the_end_are_dropped_on_open() {
    let dir = tempfile::tempdir().expect("tempdir");
    let small = rows(0..10);
    let big: Vec<(Vec<u8>, Vec<u8>)> =
        (0..6_000u32).map(|i| (format!("k{i}").into_bytes(), vec![b'a' + (i % 26) as u8; 1_000])).collect();
    let bytes = big.iter().map(|(k, v)| k.len() + v.len()).sum();
    let wal_bytes = |dir: &Path| -> u64 {
        std::fs::read_dir(dir)
            .expect("list")
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "log"))
            .map(|p| std::fs::metadata(p).map(|m| m.len()).unwrap_or(0))
            .sum()
    };
    {
        let log = Log::open(dir.path(), false).expect("open");
        append(&log, "w", 0, &small);
        let big_rows = big.iter().map(|(k, v)| (k.as_slice(), v.as_slice(), 7));
        assert_eq!(log.append("w", 1, bytes, big_rows).expect("append"), Appended::Written { first: 10, end: 6_010 });
        assert!(
            wal_bytes(dir.path()) < 1 << 20,
            "6 MB appended, {} bytes of it in the write-ahead log",
            wal_bytes(dir.path())
        );
        // What a kill between an ingest and the write of its end leaves: chunks past the end.
        log.db.put(record_key(6_013), b"a stale chunk").expect("put");
        log.db.put(record_key(6_700), b"another").expect("put");
    }
    let log = Log::open(dir.path(), false).expect("reopen");
    assert_eq!(log.end(), 6_010);
    let mut all = small.clone();
    all.extend(big);
    assert_eq!(values(&log.read(0, u64::MAX, usize::MAX).expect("read")), expected(0, &all));
    let next = rows(0..1_000);
    assert_eq!(append(&log, "w", 2, &next), Appended::Written { first: 6_010, end: 7_010 });
    assert_eq!(values(&log.read(6_500, u64::MAX, usize::MAX).expect("read")), expected(6_500, &next[490..]));
}
