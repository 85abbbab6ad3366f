"""Unit tests of the orders parser, run natively with weir.testing (no Wasm, no host):
`PYTHONPATH=../../guest-sdk-python/src python -m unittest` in this folder."""

import unittest

from weir import InvalidConfig, testing

from orders_json import Orders

ORDER = b'{"order_id":1,"user_id":26537,"status":"PENDING","amount":38.82,"order_ts":1793491193304}'


class OrdersTest(unittest.TestCase):
    def test_the_row_is_the_record_and_the_time_is_order_ts(self):
        events, errors = testing.run_parser(Orders, None, [ORDER])
        self.assertEqual(errors, [])
        self.assertEqual(events, [testing.Emitted(1793491193304, None, ORDER, 0)])

    def test_key_by_user_keys_by_the_decimal_user_id(self):
        events, _ = testing.run_parser(Orders, {"key_by_user": True}, [ORDER, b'{"order_ts":5}'])
        self.assertEqual([e.key for e in events], [b"26537", None])

    def test_bad_records_are_dead_letters_of_the_kind_the_rust_parser_gives(self):
        records = [b"[1793491186672, 5]", b"not json", b'{"user_id": 5}', b'{"order_ts": "x"}',
                   b'{"order_ts": 1, "user_id": -1}', b'{"order_ts":1,"order_ts":2}', b'{"order_ts": 1} x',
                   b'{"order_ts": 1, "a": NaN}', b"\xff", b'{"user_id": -1}', ORDER]
        events, errors = testing.run_parser(Orders, None, records)
        self.assertEqual([e.origin for e in events], [10])
        self.assertEqual([(e.index, e.kind) for e in errors], [
            (0, "malformed"), (1, "malformed"), (2, "missing-field"), (3, "invalid-value"), (4, "invalid-value"),
            (5, "invalid-value"), (6, "malformed"), (7, "malformed"), (8, "malformed"), (9, "invalid-value")])

    def test_a_misspelt_key_is_refused(self):
        with self.assertRaises(InvalidConfig) as e:
            testing.run_parser(Orders, {"key_by_usr": True}, [])
        self.assertEqual(e.exception.message, "config.key_by_usr: unknown key; did you mean `key_by_user`?")
        with self.assertRaises(InvalidConfig):
            testing.run_parser(Orders, {"key_by_user": "yes"}, [])


if __name__ == "__main__":
    unittest.main()
