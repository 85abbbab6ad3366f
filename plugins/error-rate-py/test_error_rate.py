"""Unit tests of the error-rate aggregator, run natively with weir.testing (no Wasm, no host):
`PYTHONPATH=../../guest-sdk-python/src python -m unittest` in this folder."""

import unittest

import weir
from weir import testing

from error_rate import ErrorRate


def orders(*statuses):
    return [testing.event(i, {"order_id": i, "status": s, "order_ts": i}) for i, s in enumerate(statuses)]


def counts(count, errors):
    return count.to_bytes(8, "little") + errors.to_bytes(8, "little")


class ErrorRateTest(unittest.TestCase):
    def test_counts_errors_and_their_rate(self):
        row = testing.run_aggregator(ErrorRate, None, orders("OK", "ERROR", "OK", "OK"))
        self.assertEqual(row, {"count": 4, "errors": 1, "error_rate": 0.25})

    def test_the_row_and_the_accumulator_are_the_rust_plugin_s_bytes(self):
        acc = testing.accumulate(ErrorRate, None, orders(*["OK"] * 49, "ERROR"))
        self.assertEqual(acc, (50).to_bytes(8, "little") + (1).to_bytes(8, "little"))
        self.assertEqual(testing.accumulate(ErrorRate, None, [], acc=acc), acc)
        accs = (acc, counts(1, 1), counts(20000, 1))
        rows = [testing.finish(ErrorRate, None, a, raw=True) for a in accs]
        # serde_json writes 1.0 and 0.00005 (Python's repr: 1.0 and 5e-05).
        self.assertEqual(rows, [b'{"count":50,"errors":1,"error_rate":0.02}', b'{"count":1,"errors":1,"error_rate":1.0}',
                                b'{"count":20000,"errors":1,"error_rate":0.00005}'])

    def test_version_one_json_accumulators_migrate_and_others_are_refused(self):
        self.assertEqual(testing.migrate(ErrorRate, None, 1, [b'{"count":7,"errors":2}']), [counts(7, 2)])
        with self.assertRaises(weir.PluginError):
            testing.migrate(ErrorRate, None, 3, [counts(7, 2)])
        with self.assertRaises(weir.BadState):
            testing.accumulate(ErrorRate, None, [], acc=b'{"count":7,"errors":2}')
        for bad in (b'{"count":7', b'[7,2]', b'{"count":true,"errors":0}', b'{"count":-1,"errors":0}',
                    b'{"count":7}'):
            with self.subTest(bad=bad), self.assertRaises(weir.BadState):
                testing.migrate(ErrorRate, None, 1, [bad])

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
