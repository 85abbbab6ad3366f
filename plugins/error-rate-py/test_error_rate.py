"""Unit tests of the error-rate aggregator, run natively with weir.testing (no Wasm, no host):
`PYTHONPATH=../../guest-sdk-python/src python -m unittest` in this folder."""

import unittest

from weir import testing

from error_rate import ErrorRate


def orders(*statuses):
    return [testing.event(i, {"order_id": i, "status": s, "order_ts": i}) for i, s in enumerate(statuses)]


class ErrorRateTest(unittest.TestCase):
    def test_counts_errors_and_their_rate(self):
        row = testing.run_aggregator(ErrorRate, None, orders("OK", "ERROR", "OK", "OK"))
        self.assertEqual(row, {"count": 4, "errors": 1, "error_rate": 0.25})

    def test_the_row_and_the_accumulator_are_the_rust_plugin_s_bytes(self):
        acc = testing.accumulate(ErrorRate, None, orders(*["OK"] * 49, "ERROR"))
        self.assertEqual(acc, b'{"count":50,"errors":1}')
        self.assertEqual(testing.accumulate(ErrorRate, None, [], acc=acc), acc)
        rows = [testing.finish(ErrorRate, None, a, raw=True) for a in (acc, b'{"count":1,"errors":1}', b'{"count":20000,"errors":1}')]
        # serde_json writes 1.0 and 0.00005 (Python's repr: 1.0 and 5e-05).
        self.assertEqual(rows, [b'{"count":50,"errors":1,"error_rate":0.02}', b'{"count":1,"errors":1,"error_rate":1.0}',
                                b'{"count":20000,"errors":1,"error_rate":0.00005}'])

    def test_merging_panes_gives_the_same_row(self):
        events = orders("ERROR", "OK", "OK", "ERROR", "OK", "OK", "OK")
        self.assertEqual(testing.run_aggregator(ErrorRate, None, events, panes=3),
                         testing.run_aggregator(ErrorRate, None, events))

    def test_an_empty_window_has_no_row(self):
        self.assertIsNone(testing.run_aggregator(ErrorRate, None, []))

    def test_the_error_status_is_configurable(self):
        row = testing.run_aggregator(ErrorRate, {"error_status": "PENDING"}, orders("PENDING", "ERROR"))
        self.assertEqual(row["errors"], 1)


if __name__ == "__main__":
    unittest.main()
