"""The batch loops (`_rt`, through `weir.testing`): what a plugin's classes see and what the host
gets back, role by role."""

import unittest

import _paths  # noqa: F401

import weir
from weir import testing


class Echo(weir.Parser):
    """Emits each record twice, then fails the ones whose value says so."""

    def parse(self, record, out):
        out.emit_json(1, record.key, record.value)
        out.emit(2, "k", {"offset": record.offset, "ts": record.timestamp, "headers": [[h.name, h.value.decode()] for h in record.headers]})
        v = record.json()
        if v.get("fail") == "record":
            raise weir.RecordError.missing_field("x")
        if v.get("fail") == "key":
            return v["absent"]
        if v.get("fail") == "type":
            out.emit(1.5, None, {})
        if v.get("fail") == "row":
            out.emit(3, None, [1])
        if v.get("fail") == "batch":
            raise weir.Io("disk full")


class LoopTest(unittest.TestCase):
    def test_records_are_read_and_events_emitted(self):
        rec = testing.record({"a": 1}, key=b"k1", timestamp=5, offset=40, headers=[("h", b"v")])
        events, errors = testing.run_parser(Echo, None, [rec, b'{"b":2}'])
        self.assertEqual(errors, [])
        self.assertEqual(events[0], testing.Emitted(1, b"k1", b'{"a":1}', 0))
        self.assertEqual(events[1].json(), {"offset": 40, "ts": 5, "headers": [["h", "v"]]})
        self.assertEqual(events[1].key, b"k")
        self.assertEqual(events[3].json(), {"offset": 1, "ts": None, "headers": []})
        self.assertEqual([e.origin for e in events], [0, 0, 1, 1])

    def test_a_failed_record_s_events_are_taken_back(self):
        events, errors = testing.run_parser(Echo, None, [b'{"fail":"record"}', b"{}", b'{"fail":"key"}', b"{", b'{"fail":"type"}', b'{"fail":"row"}'])
        self.assertEqual([e.origin for e in events], [1, 1])
        self.assertEqual([(e.index, e.kind) for e in errors],
                         [(0, "missing-field"), (2, "missing-field"), (3, "malformed"), (4, "invalid-value"), (5, "invalid-value")])
        self.assertEqual(errors[0].message, "missing field `x`")
        # Any other exception: its type, message and where it was raised, kept short.
        self.assertRegex(errors[1].message, r"^KeyError: 'absent' \(at test_loops.py:\d+ in parse")
        self.assertLessEqual(max(len(e.message) for e in errors), weir.errors.MAX_MESSAGE)
        self.assertIn("event time is epoch milliseconds", errors[3].message)

    def test_a_plugin_error_fails_the_batch(self):
        with self.assertRaises(weir.Io):
            testing.run_parser(Echo, None, [b"{}", b'{"fail":"batch"}'])

    def test_rows_the_host_would_refuse_are_dead_letters(self):
        class Bad(weir.Transformer):
            def transform(self, event, out):
                out.emit_json(event.time, None, event.row + b"\n" if event.time == 1 else event.row)

        events, errors = testing.run_transformer(Bad, None, [(1, {"a": 1}), (2, b"[2]"), (3, {"c": 3}, "key")])
        self.assertEqual(events, [testing.Emitted(3, None, b'{"c":3}', 2)])
        self.assertEqual(errors, [testing.Rejected(0, "invalid-value", "row spans more than one line"),
                                  testing.Rejected(1, "invalid-value", "row is not a JSON object")])

    def test_transformers_see_time_key_and_row(self):
        class Upper(weir.Transformer):
            def __init__(self, config):
                self.keep = config.get("keep", type=list)

            def transform(self, event, out):
                row = event.json()
                if self.keep is None or row["status"] in self.keep:
                    out.emit(event.time + 1, event.key, {"status": row["status"].lower()})

        events, errors = testing.run_transformer(Upper, {"keep": ["OK"]}, [(5, {"status": "OK"}, b"k"), (6, {"status": "ERROR"})])
        self.assertEqual((events, errors), ([testing.Emitted(6, b"k", b'{"status":"ok"}', 0)], []))
        with self.assertRaises(weir.InvalidConfig):
            testing.run_transformer(Upper, {"keep": "OK"}, [])


class Sum(weir.Aggregator):
    STATE_VERSION = 2

    def create(self):
        return 0

    def add(self, acc, event):
        return acc + event.field("n", 0)

    def merge(self, acc, other):
        return acc + other

    def finish(self, acc):
        return {"sum": acc} if acc else None

    def migrate(self, from_version, data):
        if from_version == 1:
            return int(data.decode().strip("[]"))
        return super().migrate(from_version, data)


class AggregatorTest(unittest.TestCase):
    def test_accumulators_are_json_and_empty_means_new(self):
        acc = testing.accumulate(Sum, None, [(0, {"n": 2}), (0, {"n": 3})])
        self.assertEqual(acc, b"5")
        self.assertEqual(testing.accumulate(Sum, None, [(0, {"x": 1})], acc=acc), b"5")
        self.assertEqual(testing.merge(Sum, None, [acc, b"", b"1"]), b"6")
        self.assertEqual(testing.finish(Sum, None, b"6"), {"sum": 6})
        self.assertIsNone(testing.finish(Sum, None, b""))
        self.assertEqual(testing.finish(Sum, None, b"", raw=True), b"")
        self.assertEqual(testing.run_aggregator(Sum, None, [(0, {"n": i}) for i in range(10)], panes=4), {"sum": 45})

    def test_groups_share_events_by_index(self):
        from weir import _rt
        batch = testing._event_batch([(0, {"n": 1}), (0, {"n": 10}), (0, {"n": 100})])
        accs = _rt.accumulate(_rt.Role(Sum, lambda: "{}"), [b"", b"1000", b""], batch, [0, 1, 1, 2, 2], [2, 4, 4])
        self.assertEqual(accs, [b"11", b"1110", b"0"])
        with self.assertRaises(weir.Internal):
            _rt.accumulate(_rt.Role(Sum, lambda: "{}"), [b""], batch, [3], [1])

    def test_state_versions_and_migration(self):
        self.assertEqual(testing.migrate(Sum, None, 1, [b"[7]"]), [b"7"])
        with self.assertRaises(weir.Unsupported) as e:
            testing.migrate(Sum, None, 3, [b"7"])
        self.assertEqual(e.exception.message, "no migration from state version 3 to 2")

    def test_bad_state_and_failures(self):
        with self.assertRaises(weir.BadState):
            testing.finish(Sum, None, b"{oops")
        with self.assertRaises(weir.Internal) as e:
            testing.accumulate(Sum, None, [(0, {"n": "x"})])
        self.assertIn("TypeError", e.exception.message)

        class Listy(Sum):
            def finish(self, acc):
                return [acc]

        with self.assertRaises(weir.Internal):
            testing.finish(Listy, None, b"1")


class SinkTest(unittest.TestCase):
    def test_deliveries_are_written_then_committed(self):
        class Memory(weir.Sink):
            def __init__(self, config):
                self.log = []

            def open(self):
                self.log.append("open")

            def write_batch(self, delivery, rows):
                self.log.append((delivery.key(), len(rows), list(rows), rows[-1] if rows else None))

            def commit(self, delivery):
                self.log.append(("commit", delivery.batch_id))

        sink = testing.run_sink(Memory, None, [[{"a": 1}, b'{"b":2}'], []], checkpoint="c")
        self.assertEqual(sink.log, ["open", ("c-00000000000000000000", 2, [b'{"a":1}', b'{"b":2}'], b'{"b":2}'),
                                    ("commit", 0), ("c-00000000000000000001", 0, [], None), ("commit", 1)])

    def test_os_errors_are_io_errors(self):
        class Broken(weir.Sink):
            def write_batch(self, delivery, rows):
                open("/nonexistent/dir/file", "w")

        with self.assertRaises(weir.Io) as e:
            testing.run_sink(Broken, None, [[{"a": 1}]])
        self.assertIn("FileNotFoundError", e.exception.message)


if __name__ == "__main__":
    unittest.main()
