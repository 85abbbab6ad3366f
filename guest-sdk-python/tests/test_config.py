"""Config: reads are recorded, unread keys refused word for word as the Rust SDK (config.rs)."""

import unittest

import _paths  # noqa: F401

from weir import Config, InvalidConfig


def refusal(config):
    with unittest.TestCase().assertRaises(InvalidConfig) as e:
        config.check_all_read()
    return e.exception.message


class ConfigTest(unittest.TestCase):
    def test_a_key_never_read_is_refused_with_the_closest_one(self):
        c = Config.from_json('{"error_statsu": "PENDING"}')
        self.assertIsNone(c.get("error_status"))
        self.assertEqual(refusal(c), "config.error_statsu: unknown key; did you mean `error_status`?")

    def test_far_keys_list_what_the_plugin_reads(self):
        c = Config.from_json('{"colour": 1}')
        c.get("threshold")
        c.get("window")
        self.assertEqual(refusal(c), "config.colour: unknown key; this plugin reads `threshold`, `window`")
        self.assertEqual(refusal(Config.from_json('{"a": 1}')), "config.a: unknown key; this plugin reads no configuration")

    def test_keys_are_checked_in_sorted_order(self):
        c = Config.from_json('{"zz": 1, "aa": 2}')
        self.assertTrue(refusal(c).startswith("config.aa:"))

    def test_everything_read_passes(self):
        c = Config.from_json('{"threshold": 1, "free": {"x": 1}}')
        self.assertEqual(c.get("threshold", 5), 1)
        self.assertTrue("free" in c)
        c.check_all_read()
        c = Config.from_json('{"a": 1, "b": {"c": 2}}')
        self.assertEqual(c.table(), {"a": 1, "b": {"c": 2}})
        c.check_all_read()

    def test_typed_get_names_the_key_on_a_bad_value(self):
        c = Config.from_json('{"threshold": "high", "flag": 1, "ratio": 2}')
        with self.assertRaises(InvalidConfig) as e:
            c.get("threshold", type=float)
        self.assertEqual(e.exception.message, 'config.threshold: expected a float, got a string "high"')
        with self.assertRaises(InvalidConfig):
            c.get("flag", type=bool)
        self.assertEqual(c.get("ratio", type=float), 2.0)
        self.assertEqual(c.get("absent", 7, type=int), 7)

    def test_it_reads_as_a_dict_and_lookups_count_as_reads(self):
        c = Config.from_json('{"alpha": 1, "b": [2]}')
        self.assertEqual(c["alpha"], 1)
        self.assertEqual(refusal(c), "config.b: unknown key; this plugin reads `alpha`")
        self.assertEqual(dict(c), {"alpha": 1, "b": [2]})
        c.check_all_read()
        self.assertEqual(len(c), 2)
        with self.assertRaises(KeyError):
            c["missing"]

    def test_a_non_table_is_refused(self):
        with self.assertRaises(InvalidConfig):
            Config.from_json("[1]")
        with self.assertRaises(InvalidConfig):
            Config.from_json("{")


if __name__ == "__main__":
    unittest.main()
