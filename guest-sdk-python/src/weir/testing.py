"""Run a plugin's classes in plain CPython, without Wasm or the host, for unit tests.

Each helper builds the columnar batch the host would pass, runs the same batch loop the
component runs (`weir._rt`), and gives back plain values; what the host then does to a parser's
or transformer's output (a row that is not one line of a JSON object becomes its input's dead
letter; one dead letter per input, and no events from it) is done here too.

    from weir import testing
    events, errors = testing.run_parser(Orders, {"key_by_user": True}, [b'{"order_ts": 1}'])
    assert events[0].time == 1 and errors == []

A `PluginError` (a refused config, a failed call) is raised as it is.
"""

from collections import namedtuple
from types import SimpleNamespace

from . import _jsonio, _rt
from .batch import Delivery, Event, Record

__all__ = ["record", "event", "make_record", "make_event", "run_parser", "run_transformer", "run_aggregator",
           "accumulate", "merge", "finish", "migrate", "run_processor", "fire_timers", "run_sink", "Emitted",
           "Rejected", "Processed"]


class Emitted(namedtuple("Emitted", "time key row origin")):
    """An event a parser or transformer emitted: `row` is bytes, `origin` its input's index."""

    def json(self):
        return _jsonio.loads(self.row)


Rejected = namedtuple("Rejected", "index kind message")
Rejected.__doc__ = "A dead letter: the input's index, the record-error kind and the message."

_Record = namedtuple("_Record", "value key timestamp partition offset headers")
_Event = namedtuple("_Event", "time row key")


def _json_bytes(v):
    if isinstance(v, (bytes, bytearray)):
        return bytes(v)
    if isinstance(v, str):
        return v.encode("utf-8")
    return _jsonio.dumps(v)


def record(value, key=None, timestamp=None, partition=0, offset=None, headers=()):
    """A source record: `value` as bytes, str or a JSON value (a dict is written as JSON);
    `headers` as (name, value) pairs; `offset` defaults to the record's index in its batch."""
    return _Record(_json_bytes(value), key, timestamp, partition, offset, tuple(headers))


def event(time, row, key=None):
    """An event: `row` as a dict (written as JSON) or JSON bytes/str."""
    return _Event(time, _json_bytes(row), key)


def make_record(*args, **kwargs):
    """The `weir.Record` a plugin's `parse` gets for `record(*args, **kwargs)`, to call plugin
    methods directly."""
    view = _rt.RawView(_raw_batch([record(*args, **kwargs)]))
    return tuple.__new__(Record, (view, 0, view.values))


def make_event(time, row, key=None):
    """The `weir.Event` a plugin gets for `event(time, row, key)`, to call `add` or `transform`
    directly."""
    batch = _event_batch([event(time, row, key)])
    return tuple.__new__(Event, (batch, 0, batch.rows))


def _config(config):
    text = _jsonio.dumps({} if config is None else config).decode()
    return lambda: text


def _key(k):
    return k.encode("utf-8") if isinstance(k, str) else bytes(k or b"")


def _raw_batch(records):
    b = SimpleNamespace(values=bytearray(), value_ends=[], keys=bytearray(), key_ends=[], timestamps=[],
                        partitions=[], offsets=[], headers=[])
    for i, r in enumerate(records):
        if not isinstance(r, _Record):
            r = record(r)
        b.values += r.value
        b.value_ends.append(len(b.values))
        b.keys += _key(r.key)
        b.key_ends.append(len(b.keys))
        b.timestamps.append(-1 if r.timestamp is None else r.timestamp)
        b.partitions.append(r.partition)
        b.offsets.append(i if r.offset is None else r.offset)
        b.headers += [SimpleNamespace(index=i, name=n, value=_key(v)) for n, v in r.headers]
    b.values, b.keys = bytes(b.values), bytes(b.keys)
    return b


def _event_batch(events):
    b = SimpleNamespace(times=[], keys=bytearray(), key_ends=[], rows=bytearray(), row_ends=[], origins=[])
    for i, e in enumerate(events):
        if not isinstance(e, _Event):
            e = event(*e)
        b.times.append(e.time)
        b.keys += _key(e.key)
        b.key_ends.append(len(b.keys))
        b.rows += e.row
        b.row_ends.append(len(b.rows))
        b.origins.append(i)
    b.keys, b.rows = bytes(b.keys), bytes(b.rows)
    return b


def _misshapen(row):
    """The host's check of a returned row (host/src/json.rs), or None if it passes."""
    try:
        text = row.decode("utf-8")
    except UnicodeDecodeError:
        return "row is not UTF-8"
    if "\n" in text or "\r" in text:
        return "row spans more than one line"
    text = text.strip(" \t\x0c")
    return None if text[:1] == "{" and text[-1:] == "}" else "row is not a JSON object"


def _settle(result):
    """What the host makes of a batch output: events and one dead letter per failed input."""
    out, errs = result
    events, errors = [], [Rejected(*e) for e in errs]
    start = kstart = 0
    for i, time in enumerate(out.times):
        row = out.rows[start:out.row_ends[i]]
        key = out.keys[kstart:out.key_ends[i]] or None
        start, kstart = out.row_ends[i], out.key_ends[i]
        why = _misshapen(row)
        if why:
            errors.append(Rejected(out.origins[i], "invalid-value", why))
        events.append(Emitted(time, key, row, out.origins[i]))
    errors.sort(key=lambda e: e.index)  # stable: an input's first error stays first
    first = {}
    for e in errors:
        first.setdefault(e.index, e)
    return [e for e in events if e.origin not in first], list(first.values())


def run_parser(cls, config, records):
    """Parses `records` (bytes, str, dicts or `record(...)`s) as one batch:
    (events, errors), lists of `Emitted` and `Rejected`."""
    return _settle(_rt.parse(_rt.Role(cls, _config(config)), _raw_batch(records)))


def run_transformer(cls, config, events):
    """Transforms `events` (`event(...)`s or (time, row[, key]) tuples) as one batch:
    (events, errors)."""
    return _settle(_rt.transform(_rt.Role(cls, _config(config)), _event_batch(events)))


def accumulate(cls, config, events, acc=b""):
    """Folds `events` into accumulator bytes `acc` (empty: a new one); the new bytes."""
    batch = _event_batch(events)
    n = len(batch.times)
    return _rt.accumulate(_rt.Role(cls, _config(config)), [acc], batch, list(range(n)), [n])[0]


def merge(cls, config, accs):
    """Merges accumulator bytes `accs` into one; its bytes."""
    return _rt.merge(_rt.Role(cls, _config(config)), list(accs), [len(accs)])[0]


def finish(cls, config, acc, raw=False):
    """The result row (a dict) of accumulator bytes `acc`, or None for no row; with `raw`, the
    row's bytes as the host gets them (empty for no row)."""
    row = _rt.finish(_rt.Role(cls, _config(config)), [acc])[0]
    return row if raw else _jsonio.loads(row) if row else None


def migrate(cls, config, from_version, accs):
    """Accumulator bytes written by state version `from_version`, converted to this build's."""
    return _rt.migrate(_rt.Role(cls, _config(config)), from_version, list(accs))


def run_aggregator(cls, config, events, panes=1):
    """The result row (dict or None) of one group holding `events`. With `panes` > 1 the events
    are split into that many accumulators, which are then merged, as for sliding windows and
    sessions: a correct aggregator gives the same row either way."""
    events = list(events)
    size = -(-len(events) // panes) if events else 0
    accs = [accumulate(cls, config, events[i * size:(i + 1) * size]) for i in range(panes)]
    return finish(cls, config, accs[0] if panes == 1 else merge(cls, config, accs))


class Processed(namedtuple("Processed", "state rows set_timers delete_timers")):
    """What a processor made of one key: its new state (decoded; None: deleted), the rows it
    emitted as (time, dict) pairs, and the `Timer`s it set and cancelled."""


def _processed(proc_cls, config, out):
    role = _rt.Role(proc_cls, _config(config))
    state = None if out.state is None else role.get().decode_state(out.state)
    rows, start = [], 0
    for t, end in zip(out.times, out.row_ends):
        rows.append((t, _jsonio.loads(out.rows[start:end])))
        start = end
    return Processed(state, rows, list(out.set_timers), list(out.delete_timers))


def _keyed(cls, config, key, state):
    data = None if state is None else _rt.Role(cls, _config(config)).get().encode_state(state)
    return SimpleNamespace(key=_key(key), state=data)


def run_processor(cls, config, events, key=b"k", state=None, watermark=-(1 << 63), processing_time=0):
    """Runs `process` for one key holding `events` (`event(...)`s or (time, row) tuples, put in
    event-time order as the host does) and state `state` (a decoded state, or None): a
    `Processed`. The state goes through `encode_state` and `decode_state` both ways, as in the
    host."""
    events = sorted((e if isinstance(e, _Event) else event(*e) for e in events), key=lambda e: e.time)
    batch = _event_batch(events)
    clock = SimpleNamespace(watermark=watermark, processing_time=processing_time)
    out = _rt.process(_rt.Role(cls, _config(config)), clock, [_keyed(cls, config, key, state)], batch,
                      list(range(len(events))), [len(events)])[0]
    return _processed(cls, config, out)


def fire_timers(cls, config, timers, key=b"k", state=None, watermark=-(1 << 63), processing_time=0):
    """Runs `on_timers` for one key whose `timers` (a list of `weir.Timer`) fired: a
    `Processed`."""
    clock = SimpleNamespace(watermark=watermark, processing_time=processing_time)
    timers = sorted(timers, key=lambda t: t.at)
    out = _rt.on_timers(_rt.Role(cls, _config(config)), clock, [_keyed(cls, config, key, state)], timers,
                        [len(timers)])[0]
    return _processed(cls, config, out)


def run_sink(cls, config, batches, checkpoint="00000000-0000-7000-8000-000000000000"):
    """Opens the sink, then writes and commits each batch (a list of rows: dicts or JSON bytes)
    as deliveries 0, 1, ... of `checkpoint`. Returns the sink object, for a test to inspect."""
    role = _rt.Role(cls, _config(config))
    _rt.sink_open(role)
    for batch_id, rows in enumerate(batches):
        data = [_json_bytes(r) for r in rows]
        ends, n = [], 0
        for r in data:
            n += len(r)
            ends.append(n)
        d = Delivery(checkpoint, batch_id)
        _rt.sink_write(role, d, SimpleNamespace(rows=b"".join(data), row_ends=ends))
        _rt.sink_commit(role, d)
    return role.get()
