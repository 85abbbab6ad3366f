"""JSON as serde_json reads and writes it."""

import unittest

import _paths  # noqa: F401

from weir._jsonio import dumps, loads, rust_float


class JsonTest(unittest.TestCase):
    def test_floats_are_written_as_serde_json_writes_them(self):
        # serde_json 1.0.154 formats with zmij: fixed notation for 1e-5 <= |x| < 1e16, else
        # scientific with a signed, unpadded exponent.
        cases = [(0.02, "0.02"), (1.0, "1.0"), (0.0, "0.0"), (-0.0, "-0.0"), (1 / 3, "0.3333333333333333"),
                 (0.0001, "0.0001"), (5e-05, "0.00005"), (1.5e-05, "0.000015"), (-1e-05, "-0.00001"), (1e-06, "1e-6"),
                 (1.25e-07, "1.25e-7"), (1e15, "1000000000000000.0"), (1e16, "1e+16"), (1.5e300, "1.5e+300"),
                 (5e-324, "5e-324")]
        for x, want in cases:
            self.assertEqual(rust_float(x), want, repr(x))
            self.assertEqual(dumps({"x": x}), b'{"x":' + want.encode() + b"}")

    def test_rows_are_compact_utf8_and_non_finite_floats_are_null(self):
        self.assertEqual(dumps({"a": [1, 2.5], "é": "ü\n", "e-1": None}), '{"a":[1,2.5],"é":"ü\\n","e-1":null}'.encode())
        self.assertEqual(dumps({"nan": float("nan"), "inf": [float("inf")], "t": True}), b'{"nan":null,"inf":[null],"t":true}')
        self.assertEqual(dumps({1: 2}), b'{"1":2}')

    def test_reading_refuses_what_serde_json_refuses(self):
        self.assertEqual(loads(b'{"a": 1}'), {"a": 1})
        for bad in [b'{"a": NaN}', b"[Infinity]", b'\xef\xbb\xbf{"a": 1}', b'{"a": 1} x', b"\xff", b'{"a": "\x01"}']:
            with self.assertRaises(ValueError, msg=bad):
                loads(bad)


if __name__ == "__main__":
    unittest.main()
