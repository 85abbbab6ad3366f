"""The top-level field scanner gives field.rs's answers."""

import json
import random
import unittest

import _paths  # noqa: F401

from weir import RecordError, testing
from weir.field import FieldError, field, field_is, top_level_field

ROW = rb' { "id" : 1, "nested": {"status": "no", "a": [1, "}"]}, "s\"x": "q", "status":"ERROR" ,"n":-1.5e3} '


class FieldTest(unittest.TestCase):
    def test_finds_top_level_fields_only(self):
        self.assertEqual(top_level_field(ROW, b"status"), b'"ERROR"')
        self.assertEqual(top_level_field(ROW, b"id"), b"1")
        self.assertEqual(top_level_field(ROW, b"n"), b"-1.5e3")
        self.assertEqual(top_level_field(ROW, b"nested"), rb'{"status": "no", "a": [1, "}"]}')
        self.assertIsNone(top_level_field(ROW, b"a"))
        self.assertIsNone(top_level_field(b"{}", b"a"))

    def test_rejects_what_is_not_an_object(self):
        for bad in [b"[1]", b'{"a" 1}', b'{"a":"1}', b'{"b":1 "a":2}', b'{"b":[1,2}']:
            with self.assertRaises(FieldError, msg=bad):
                top_level_field(bad, b"a")

    def test_the_flat_row_shortcut_agrees_with_the_walk(self):
        rng = random.Random(7)
        names = ["status", "s", "a", "statuses", "x"]
        values = ['"status"', '"ERROR"', '"a:b"', "1", "-2.5e3", "true", "null", '""', '"{"', '"x,y"']
        for _ in range(2000):
            members = [f'"{rng.choice(names)}"{rng.choice(["", " "])}:{rng.choice(["", " "])}{rng.choice(values)}'
                       for _ in range(rng.randrange(0, 5))]
            row = ("{" + ",".join(members) + "}").encode()
            for name in names:
                self.assertEqual(field(row, name), top_level_field(row, name.encode()), (row, name))

    def test_field_is_compares_strings_escaped_or_not_and_nothing_else(self):
        def is_error(row):
            return field_is(row, "status", "ERROR")
        self.assertTrue(is_error(b'{"id":1,"status":"ERROR"}'))
        self.assertTrue(is_error(rb'{"status":"ERR\u004fR"}'))
        self.assertFalse(is_error(b'{"status":"OK"}'))
        self.assertFalse(is_error(b'{"status":1}'))
        self.assertFalse(is_error(b'{"nested":{"status":"ERROR"}}'))
        self.assertFalse(is_error(b'{"note":"ERROR","status":"OK"}'))

    def test_agrees_with_json_on_generated_orders(self):
        for i, status in enumerate(["OK", "ERROR", "PENDING"]):
            row = (f'{{"order_id":{i},"user_id":26537,"status":"{status}","amount":38.82,'
                   f'"order_ts":1793491193304}}').encode()
            decoded = json.loads(row)
            ev = testing.make_event(0, row)
            for name in decoded:
                self.assertEqual(ev.field(name), decoded[name])
            self.assertEqual(ev.field_str("status"), status)
            self.assertIsNone(ev.field("absent"))
            self.assertEqual(ev.field("absent", 3), 3)

    def test_event_errors_are_record_errors(self):
        ev = testing.make_event(0, b'{"status": 1, "x": [1, }')
        with self.assertRaises(RecordError) as e:
            ev.field_str("status")
        self.assertEqual(e.exception.kind, "invalid-value")
        with self.assertRaises(RecordError) as e:
            ev.field("x")
        self.assertEqual(e.exception.kind, "malformed")


if __name__ == "__main__":
    unittest.main()
