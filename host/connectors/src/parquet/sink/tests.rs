use super::*;
use crate::avro_arrow::UTC;
use arrow_array::cast::AsArray;
use arrow_array::types::Int64Type;
use arrow_schema::{Field, Schema};
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use proptest::prelude::*;

fn schema() -> Schema {
    Schema::new(vec![
        Field::new("window_start", DataType::Timestamp(TimeUnit::Millisecond, Some(UTC.into())), false),
        Field::new("status", DataType::Utf8, true),
        Field::new("count", DataType::Int64, false),
    ])
}

fn sink(dir: &Path, by: Option<&str>) -> ParquetSink {
    let s = Settings::new(Some(dir.to_path_buf()), "w.avsc".into(), schema(), Some("zstd"), Some(2), by).unwrap();
    ParquetSink::open(&s).unwrap()
}

fn rows(items: &[&str]) -> Rows {
    let mut r = Rows::default();
    for (i, row) in items.iter().enumerate() {
        r.push(b"k", row.as_bytes(), i as i64).unwrap();
    }
    r
}

/// Every `.parquet` file under `dir`, by path, and the counts it holds.
fn read(dir: &Path) -> BTreeMap<String, Vec<i64>> {
    let mut out = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
                continue;
            }
            let name = p.strip_prefix(dir).unwrap().to_string_lossy().into_owned();
            assert!(name.ends_with(".parquet"), "only whole files are left: {name}");
            let reader = ParquetRecordBatchReaderBuilder::try_new(File::open(&p).unwrap()).unwrap().build().unwrap();
            let counts = reader
                .flat_map(|b| b.unwrap().column_by_name("count").unwrap().as_primitive::<Int64Type>().values().to_vec())
                .collect();
            out.insert(name, counts);
        }
    }
    out
}

const DAY: i64 = 1_793_491_200_000; // 2026-11-01T00:00:00Z

#[test]
fn a_batch_is_its_files_and_delivered_again_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = sink(dir.path(), Some("day(window_start)"));
    let batch = rows(&[
        &format!(r#"{{"window_start":{DAY},"status":"PAID","count":1}}"#),
        &format!(r#"{{"window_start":{},"status":null,"count":2}}"#, DAY + 86_400_000),
        &format!(r#"{{"window_start":{},"count":3}}"#, DAY + 60_000),
    ]);
    let d = Delivery { checkpoint: "c1", batch_id: 7 };
    s.deliver(&d, &batch).unwrap();
    assert!(s.rejected().is_empty());
    let first = read(dir.path());
    let name = "part-c1-00000000000000000007.parquet";
    assert_eq!(
        first,
        BTreeMap::from([
            (format!("window_start_day=2026-11-01/{name}"), vec![1, 3]),
            (format!("window_start_day=2026-11-02/{name}"), vec![2]),
        ])
    );
    s.deliver(&d, &batch).unwrap();
    // A batch cut off after one of its files is finished on its next delivery.
    std::fs::remove_file(dir.path().join(format!("window_start_day=2026-11-02/{name}"))).unwrap();
    sink(dir.path(), Some("day(window_start)")).deliver(&d, &batch).unwrap();
    assert_eq!(read(dir.path()), first);
    // Another checkpoint's batch 7 is other rows.
    s.deliver(&Delivery { checkpoint: "c2", batch_id: 7 }, &batch).unwrap();
    assert_eq!(read(dir.path()).len(), 4);
}

#[test]
fn rows_that_do_not_fit_and_tombstones_are_rejected_and_the_rest_written() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = sink(dir.path(), None);
    let mut batch = rows(&[
        &format!(r#"{{"window_start":{DAY},"count":1}}"#),
        &format!(r#"{{"window_start":{DAY},"count":"many"}}"#),
        &format!(r#"{{"window_start":{DAY}}}"#),
        &format!(r#"{{"window_start":{DAY},"count":4}}"#),
    ]);
    batch.push_tombstone(b"k", 0).unwrap();
    s.deliver(&Delivery { checkpoint: "c", batch_id: 0 }, &batch).unwrap();
    let rejected = s.rejected();
    let at: Vec<usize> = rejected.iter().map(|r| r.0).collect();
    assert_eq!(at, vec![4, 1, 2], "{rejected:?}");
    assert!(rejected[1].1.contains("count"), "names the column: {rejected:?}");
    assert!(rejected[2].1.contains("count"), "names the column: {rejected:?}");
    assert_eq!(read(dir.path()).into_values().collect::<Vec<_>>(), vec![vec![1, 4]]);
    // Delivered again after a crash, the file is there and the same rows are rejected again.
    s.deliver(&Delivery { checkpoint: "c", batch_id: 0 }, &batch).unwrap();
    assert_eq!(s.rejected().iter().map(|r| r.0).collect::<Vec<_>>(), vec![4, 1, 2]);
    assert_eq!(read(dir.path()).len(), 1);
}

#[test]
fn partition_values_are_directory_names_that_stay_inside() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = sink(dir.path(), Some("status"));
    let batch = rows(&[
        &format!(r#"{{"window_start":{DAY},"status":"../x","count":1}}"#),
        &format!(r#"{{"window_start":{DAY},"count":2}}"#),
        &format!(r#"{{"window_start":{DAY},"status":"\u002e./x","count":3}}"#),
    ]);
    s.deliver(&Delivery { checkpoint: "c", batch_id: 1 }, &batch).unwrap();
    let files = read(dir.path());
    assert_eq!(files.values().cloned().collect::<Vec<_>>(), vec![vec![1, 3], vec![2]], "one value, one file");
    // A value whose escape does not read is its row's dead letter, not the batch's failure.
    let bad = rows(&[&format!(r#"{{"window_start":{DAY},"status":"\uZZZZ","count":4}}"#)]);
    s.deliver(&Delivery { checkpoint: "c", batch_id: 2 }, &bad).unwrap();
    let rejected = s.rejected();
    assert!(rejected.len() == 1 && rejected[0].1.contains("`status` is not a JSON string"), "{rejected:?}");
    let names: Vec<String> = read(dir.path()).into_keys().collect();
    assert_eq!(
        names,
        vec![
            "status=%2E%2E%2Fx/part-c-00000000000000000001.parquet".to_string(),
            format!("status={NULL_PARTITION}/part-c-00000000000000000001.parquet"),
        ]
    );
}

#[test]
fn civil_dates_are_the_calendar_s() {
    assert_eq!(civil(0), (1970, 1, 1));
    assert_eq!(civil(DAY / 86_400_000), (2026, 11, 1));
    assert_eq!(civil(-1), (1969, 12, 31));
    assert_eq!(civil(11_016), (2000, 2, 29));
}

proptest! {
    /// Whatever a value holds, its directory is one name: no separator, no dot, never empty.
    #[test]
    fn an_escaped_value_is_one_plain_name(v in any::<String>()) {
        let e = escape(&v);
        prop_assert!(!e.is_empty() && e.bytes().all(|b| b.is_ascii_alphanumeric() || b"-_%".contains(&b)));
    }
}

#[test]
fn dates_timestamps_and_decimals_read_as_the_docs_say() {
    let avro = r#"{"type":"record","name":"R","fields":[
        {"name":"d","type":{"type":"int","logicalType":"date"}},
        {"name":"t","type":{"type":"long","logicalType":"timestamp-millis"}},
        {"name":"p","type":{"type":"bytes","logicalType":"decimal","precision":9,"scale":2}}]}"#;
    let avro = weir_schema::avro::parse(avro, &[]).unwrap();
    let columns = crate::avro_arrow::arrow_schema(&avro, &weir_schema::avro::Names::of([&avro])).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let s = Settings::new(Some(dir.path().to_path_buf()), "r.avsc".into(), columns, None, None, None).unwrap();
    let mut sink = ParquetSink::open(&s).unwrap();
    let batch = rows(&[
        r#"{"d":"2026-11-01","t":"2026-11-01T00:00:01Z","p":"12.50"}"#,
        r#"{"d":20758,"t":1793491201000,"p":12.5}"#,
    ]);
    sink.deliver(&Delivery { checkpoint: "c", batch_id: 0 }, &batch).unwrap();
    assert!(sink.rejected().is_empty(), "{:?}", sink.rejected());
    let file = dir.path().join("part-c-00000000000000000000.parquet");
    let b = ParquetRecordBatchReaderBuilder::try_new(File::open(file).unwrap()).unwrap().build().unwrap().next();
    let b = b.unwrap().unwrap();
    let d = b.column(0).as_primitive::<arrow_array::types::Date32Type>().values().to_vec();
    let t = b.column(1).as_primitive::<arrow_array::types::TimestampMillisecondType>().values().to_vec();
    let p = b.column(2).as_primitive::<arrow_array::types::Decimal128Type>().values().to_vec();
    assert_eq!((d, t, p), (vec![20758, 20758], vec![DAY + 1000, DAY + 1000], vec![1250, 1250]));
}
