"""Hand-made cases of `docs/semantics.md`'s rules for the reference oracle, `orders_oracle.py`.

    python3 -m unittest discover -s tests/oracle
"""

import json
import os
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import orders_oracle as oracle  # noqa: E402

MIN = 60_000
T0 = 1_793_491_200_000  # a minute boundary (2026-11-01T00:00:00Z)


def order(ts, status="OK", order_id=1):
    return json.dumps({"order_id": order_id, "user_id": 7, "status": status, "amount": 1.5, "order_ts": ts})


def per_record(lines, **kw):
    """Batches of one record: the watermark in force for each record is the one its predecessor
    left, which makes hand-made cases short."""
    return oracle.run(lines, max_offsets_per_trigger=1, **kw)


class BatchesTest(unittest.TestCase):
    def test_batches_start_at_64_records_and_double_up_to_the_maximum(self):
        sizes = oracle.batch_sizes(1_000)
        self.assertEqual([next(sizes) for _ in range(7)], [64, 128, 256, 512, 1_000, 1_000, 1_000])
        sizes = oracle.batch_sizes(50_000)
        self.assertEqual([next(sizes) for _ in range(11)][-2:], [32_768, 50_000])

    def test_the_records_are_cut_in_order_and_the_last_batch_is_short(self):
        records = [b"%d" % i for i in range(500)]
        got = list(oracle.batches(records, 1_000))
        self.assertEqual([len(b) for b in got], [64, 128, 256, 52])
        self.assertEqual(sum(got, []), records)

    def test_a_batch_also_ends_at_its_byte_limit(self):
        got = [len(b) for b in oracle.batches([b"12345"] * 100, 1_000, max_bytes=50)]
        self.assertEqual(got, [10] * 10)

    def test_a_value_is_its_line_without_the_newline(self):
        self.assertEqual([oracle.value(v) for v in [b"{}\r\n", b"{}\n", b"{}", b"\n"]], [b"{}", b"{}", b"{}", b""])


class OnTimeTest(unittest.TestCase):
    def test_an_on_time_event_counts_in_its_one_minute_window(self):
        r = oracle.run([order(T0 + 5 * MIN + 59_999)])
        self.assertEqual(r.rows(), [(T0 + 5 * MIN, T0 + 6 * MIN, 1, 0, 0.0)])
        self.assertEqual((r.events, r.late), (1, 0))

    def test_windows_are_half_open_and_aligned_to_the_epoch(self):
        r = oracle.run([order(T0 + MIN - 1), order(T0 + MIN), order(-1)])
        self.assertEqual([row[:3] for row in r.rows()], [(-MIN, 0, 1), (T0, T0 + MIN, 1), (T0 + MIN, T0 + 2 * MIN, 1)])

    def test_out_of_order_events_within_the_delay_are_on_time(self):
        lines = [order(T0 + 20 * MIN), order(T0 + 10 * MIN + 1), order(T0 + 20 * MIN + 1)]
        r = per_record(lines)
        self.assertEqual(r.late, 0)
        self.assertEqual([row[0] for row in r.rows()], [T0 + 10 * MIN, T0 + 20 * MIN])

    def test_an_event_behind_the_watermark_whose_window_is_still_open_counts(self):
        # Watermark T0 + 10:30; the event's window [T0 + 10:00, T0 + 11:00) is still open.
        lines = [order(T0 + 20 * MIN + 30_000), order(T0 + 10 * MIN + 10_000)]
        r = per_record(lines)
        self.assertEqual(r.late, 0)
        self.assertEqual(r.rows()[0][:3], (T0 + 10 * MIN, T0 + 11 * MIN, 1))


class LateTest(unittest.TestCase):
    def test_an_event_whose_window_ended_at_or_below_the_watermark_is_dropped(self):
        # Watermark T0 + 10:00 after the first record: the window [T0 + 9:00, T0 + 10:00) is final.
        lines = [order(T0 + 20 * MIN), order(T0 + 10 * MIN - 1, "ERROR"), order(T0 + 10 * MIN)]
        r = per_record(lines)
        self.assertEqual((r.events, r.late), (2, 1))
        self.assertEqual([row[:4] for row in r.rows()], [(T0 + 10 * MIN, T0 + 11 * MIN, 1, 0),
                                                          (T0 + 20 * MIN, T0 + 21 * MIN, 1, 0)])

    def test_nothing_in_the_first_batch_is_late(self):
        # Hours behind, but no watermark exists before the first batch (64 records) ends.
        lines = [order(T0 + 3 * 60 * MIN)] + [order(T0)] + [order(T0 + 3 * 60 * MIN)] * 62
        r = oracle.run(lines)
        self.assertEqual((r.batches, r.late), (1, 0))
        self.assertEqual([row[:3] for row in r.rows()], [(T0, T0 + MIN, 1), (T0 + 180 * MIN, T0 + 181 * MIN, 63)])

    def test_the_watermark_moves_at_the_end_of_the_batch_not_per_record(self):
        # Batch 1: 64 records at T0; batch 2 opens with a record an hour ahead, then one at T0.
        # The watermark in force for batch 2 is batch 1's (T0 - 10 min): the record at T0 counts,
        # although an hour-ahead event came before it in its batch.
        lines = [order(T0)] * 64 + [order(T0 + 60 * MIN), order(T0)]
        r = oracle.run(lines)
        self.assertEqual((r.batches, r.late), (2, 0))
        self.assertEqual(r.rows()[0][:3], (T0, T0 + MIN, 65))
        # In batch 3, the same record is late: batch 2 moved the watermark to T0 + 50 min.
        r = oracle.run(lines + [order(T0 + 60 * MIN)] * 126 + [order(T0)])
        self.assertEqual((r.batches, r.late), (3, 1))
        self.assertEqual(r.rows()[0][:3], (T0, T0 + MIN, 65))


class WatermarkTest(unittest.TestCase):
    def test_a_window_is_emitted_when_the_watermark_passes_its_end_and_never_again(self):
        lines = [order(T0 + 30_000), order(T0 + 11 * MIN), order(T0 + 45_000)]
        r = per_record(lines, flush=False)
        # The second record moved the watermark to T0 + 1:00: [T0, T0 + 1:00) is final, with one
        # event; the third record is late for it. [T0 + 11:00, ...) is still open.
        self.assertEqual(r.watermark, T0 + MIN)
        self.assertEqual([row[:3] for row in r.rows()], [(T0, T0 + MIN, 1)])
        self.assertEqual(r.late, 1)

    def test_the_end_of_input_flushes_every_open_window(self):
        lines = [order(T0 + 30_000), order(T0 + 5 * MIN), order(T0 + 9 * MIN)]
        self.assertEqual(per_record(lines, flush=False).rows(), [])
        self.assertEqual([row[0] for row in per_record(lines).rows()], [T0, T0 + 5 * MIN, T0 + 9 * MIN])


class ErrorsTest(unittest.TestCase):
    def test_errors_are_orders_with_status_error_and_the_rate_is_their_share(self):
        statuses = ["ERROR", "OK", "PENDING", "error", "ERROR", "OK", "OK", "OK"]
        r = oracle.run([order(T0 + i, s, i) for i, s in enumerate(statuses)])
        self.assertEqual(r.rows(), [(T0, T0 + MIN, 8, 2, 0.25)])

    def test_late_errors_are_not_counted(self):
        lines = [order(T0 + 30 * MIN), order(T0, "ERROR"), order(T0 + 30 * MIN, "ERROR")]
        self.assertEqual(per_record(lines).rows(), [(T0 + 30 * MIN, T0 + 31 * MIN, 2, 1, 0.5)])


class BadInputTest(unittest.TestCase):
    def test_bad_records_are_dead_letters_that_take_their_place_in_a_batch(self):
        bad = ["not json", json.dumps({"order_id": 2}), json.dumps({"order_ts": "soon"}), "[1]",
               b'{"order_id":4,"status":"\xff\xfe","order_ts":2000}', json.dumps({"order_ts": 1.5})]
        lines = bad + ["", "   "] + [order(T0)] * 58 + [order(T0 + 60 * MIN), order(T0)]
        r = oracle.run(lines)
        self.assertEqual((r.records, r.dead_letters, r.batches), (66, 6, 2))
        # The 65th record is the first of batch 2: the record at T0 after it is on time.
        self.assertEqual((r.late, r.rows()[0][:3]), (0, (T0, T0 + MIN, 59)))


class CommandLineTest(unittest.TestCase):
    def test_it_writes_csv_by_window_start_and_a_summary(self):
        script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "orders_oracle.py")
        with tempfile.TemporaryDirectory() as d:
            events = os.path.join(d, "orders.jsonl")
            with open(events, "w") as f:
                f.write("\n".join([order(T0 + 2 * MIN, "ERROR"), order(T0 + 1), order(T0 + 2, "ERROR")]) + "\n")
            out = subprocess.run([sys.executable, script, events], capture_output=True, text=True, check=True)
            self.assertEqual(out.stdout.splitlines(), [
                "window_start_ms,window_end_ms,count,errors,error_rate",
                f"{T0},{T0 + MIN},2,1,0.5",
                f"{T0 + 2 * MIN},{T0 + 3 * MIN},1,1,1.0",
            ])
            self.assertIn("3 records in 1 batches: 3 in windows, 0 late, 0 dead letters; 2 windows", out.stderr)
            csv = os.path.join(d, "w.csv")
            subprocess.run([sys.executable, script, events, "-o", csv], capture_output=True, check=True)
            with open(csv) as f:
                self.assertEqual(f.read(), out.stdout)


if __name__ == "__main__":
    unittest.main()
