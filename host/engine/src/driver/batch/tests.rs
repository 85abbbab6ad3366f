//! Tests of the batch loop's sizing: a batch's size depends on its id alone (a re-run reads its
//! plan's range, whatever its size), and a timed trigger reads nothing ahead of when it fires.

use super::*;

#[test]
fn batches_start_small_and_double_up_to_the_maximum() {
    let sizes: Vec<usize> = (0..10).map(|b| batch_size(b, 5_000)).collect();
    assert_eq!(sizes, vec![64, 128, 256, 512, 1024, 2048, 4096, 5000, 5000, 5000]);
    assert_eq!(batch_size(u64::MAX, 10), 10);
    assert_eq!(batch_size(0, 10), 10);
}

#[test]
fn batches_back_to_back_are_read_ahead_and_a_timed_trigger_reads_when_it_fires() {
    let timed = Trigger::ProcessingTime { interval: Duration::from_secs(1) };
    let back_to_back = Trigger::ProcessingTime { interval: Duration::ZERO };
    assert_eq!(read_ahead(timed, 2), 1);
    assert_eq!(read_ahead(back_to_back, 2), 3);
    assert_eq!(read_ahead(Trigger::AvailableNow, 2), 3);
    assert_eq!(read_ahead(Trigger::Once, 4), 5);
}
