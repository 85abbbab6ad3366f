"""The batch loops that adapt the WIT exports to the role classes: one call per batch, the
plugin's method once per record. Not a public API.

They take and return plain Python values (any objects with the WIT records' attribute names),
so that `_guest` (inside the component) and `testing` (plain CPython) run the very same code.
A loop raises `PluginError` for a failed call; parse and transform return the output `Columns`
and the record errors as `(index, kind, message)` tuples.
"""

from collections import namedtuple
from itertools import accumulate as _running_sums  # `accumulate` is the WIT function below

from . import _jsonio
from .batch import I64_MAX, I64_MIN, Context, Delivery, Emitter, Event, Header, Record, Rows, Timer
from .config import Config
from .errors import BadState, Internal, PluginError, plugin_error_from, record_error_from

_U32 = 1 << 32


class Role:
    """A role's object for this instance, built from the config on first use. A failed
    construction is not kept, so every call reports the config error (as in the Rust SDK)."""

    def __init__(self, cls, config_json):
        self.cls = cls
        self._config_json = config_json  # () -> str: the host's `config()`
        self._obj = None

    def get(self):
        if self._obj is None:
            config = Config.from_json(self._config_json())
            try:
                obj = self.cls(config)
            except Exception as e:
                raise plugin_error_from(e) from None
            config.check_all_read()
            self._obj = obj
        return self._obj


def _check_ends(ends, size, what):
    # The host promises well-formed columns; a slice past a bad offset cannot crash Python, so
    # the cheap checks (which catch a truncated or mixed-up column) are the ones made.
    if ends and ends[-1] > size:
        raise Internal(f"{what}: offsets past the end of the data")


class RawView:
    """A raw batch with its headers grouped by record, for `Record`."""

    __slots__ = ("values", "value_ends", "keys", "key_ends", "timestamps", "partitions", "offsets", "_headers", "_by_index")

    def __init__(self, b):
        n = len(b.value_ends)
        if not len(b.key_ends) == len(b.timestamps) == len(b.partitions) == len(b.offsets) == n:
            raise Internal("raw batch columns differ in length")
        _check_ends(b.value_ends, len(b.values), "values")
        _check_ends(b.key_ends, len(b.keys), "keys")
        self.values, self.value_ends, self.keys, self.key_ends = b.values, b.value_ends, b.keys, b.key_ends
        self.timestamps, self.partitions, self.offsets = b.timestamps, b.partitions, b.offsets
        self._headers, self._by_index = b.headers, None

    def headers_of(self, i):
        if not self._headers:
            return []
        if self._by_index is None:
            self._by_index = {}
            for h in self._headers:
                self._by_index.setdefault(h.index, []).append(Header(h.name, h.value))
        return list(self._by_index.get(i, ()))


def _check_events(b):
    n = len(b.times)
    if not len(b.key_ends) == len(b.row_ends) == n:
        raise Internal("event batch columns differ in length")
    _check_ends(b.key_ends, len(b.keys), "keys")
    _check_ends(b.row_ends, len(b.rows), "rows")
    return n


def _starts(ends):
    """Item i's start offset is starts[i], item i's end ends[i] (one C-level list copy)."""
    return [0] + ends[:-1]


def _each(method, kind, batch, data, ends):
    """Calls `method(kind((batch, i, item i of data)), out)` for every input `i`; a failed one's
    events are taken back and its error kept. Returns (columns, errors)."""
    out = Emitter()
    errors = []
    new = tuple.__new__
    start = 0
    for i, end in enumerate(ends):
        item = new(kind, (batch, i, data[start:end]))
        start = end
        out.origin = i
        try:
            method(item, out)
        except PluginError:
            raise
        except Exception as e:
            out._rollback(i)
            err = record_error_from(e)
            errors.append((i, err.kind, err.message))
    return _columns(out, errors), errors


def _columns(out, errors):
    """The output event batch's columns, once times out of the s64 range became their inputs'
    errors (checked here for the whole batch at once, not per event)."""
    times = out.times
    if times and (min(times) < I64_MIN or max(times) > I64_MAX):
        bad = {o for t, o in zip(times, out.origins) if not I64_MIN <= t <= I64_MAX}
        errors += [(o, "invalid-value", "event time is out of the 64-bit range") for o in sorted(bad)]
        errors.sort(key=lambda e: e[0])
        keep = [j for j, o in enumerate(out.origins) if o not in bad]
        for col in ("times", "keys", "rows", "origins"):
            setattr(out, col, [getattr(out, col)[j] for j in keep])
    rows, keys = b"".join(out.rows), b"".join(out.keys)
    if len(rows) >= _U32 or len(keys) >= _U32:
        raise Internal("batch output exceeds 4 GiB")
    return Columns(out.times, keys, list(_running_sums(map(len, out.keys))), rows,
                   list(_running_sums(map(len, out.rows))), out.origins)


Columns = namedtuple("Columns", "times keys key_ends rows row_ends origins")


def parse(role, batch):
    view = RawView(batch)
    return _each(role.get().parse, Record, view, view.values, view.value_ends)


def transform(role, batch):
    _check_events(batch)
    return _each(role.get().transform, Event, batch, batch.rows, batch.row_ends)


def _groups(ends, items):
    """Each group's (start, end), from group ends over `items` items."""
    start = 0
    for end in ends:
        if end < start or end > items:
            raise Internal("group ends out of order or past the end")
        yield start, end
        start = end


def _decode(agg, data):
    if not data:
        return agg.create()
    try:
        return agg.decode_acc(data)
    except Exception as e:
        raise BadState(f"accumulator does not decode: {e}") from None


def _encode(agg, acc):
    try:
        data = agg.encode_acc(acc)
    except Exception as e:
        raise Internal(f"accumulator does not encode: {e}") from None
    if not data:
        raise Internal("an accumulator encoded to no bytes (empty stands for a new one)")
    return bytes(data)


def _failing(fn):
    """Runs a loop, turning any exception the plugin raised into its call's `PluginError`."""

    def run(*args):
        try:
            return fn(*args)
        except PluginError:
            raise
        except Exception as e:
            raise plugin_error_from(e) from None

    run.__name__ = fn.__name__
    return run


@_failing
def accumulate(role, accs, events, members, group_ends):
    agg = role.get()
    n = _check_events(events)
    if len(accs) != len(group_ends):
        raise Internal("one accumulator per group expected")
    if members and max(members) >= n:
        raise Internal("group member past the end of the events")
    add, new, rows, ends, starts = agg.add, tuple.__new__, events.rows, events.row_ends, _starts(events.row_ends)
    out = []
    for data, (start, end) in zip(accs, _groups(group_ends, len(members))):
        acc = _decode(agg, data)
        for m in members[start:end]:
            r = add(acc, new(Event, (events, m, rows[starts[m]:ends[m]])))
            if r is not None:
                acc = r
        out.append(_encode(agg, acc))
    return out


@_failing
def merge(role, accs, group_ends):
    agg = role.get()
    out = []
    for start, end in _groups(group_ends, len(accs)):
        acc = agg.create()
        for data in accs[start:end]:
            r = agg.merge(acc, _decode(agg, data))
            if r is not None:
                acc = r
        out.append(_encode(agg, acc))
    return out


@_failing
def finish(role, accs):
    agg = role.get()
    out = []
    for data in accs:
        row = agg.finish(_decode(agg, data))
        if row is None:
            out.append(b"")
            continue
        if not isinstance(row, dict):
            raise Internal(f"finish returns a dict or None, not {type(row).__name__}")
        try:
            out.append(_jsonio.dumps(row))
        except (TypeError, ValueError) as e:
            raise Internal(f"result row does not serialize: {e}") from None
    return out


@_failing
def migrate(role, from_version, accs):
    agg = role.get()
    return [_encode(agg, agg.migrate(from_version, data)) for data in accs]


KeyOut = namedtuple("KeyOut", "state times rows row_ends set_timers delete_timers")
KeyOut.__doc__ = "One key's result of a processor call, as the WIT `key-result` (timers as `Timer`s)."


def _key_state(proc, state):
    if state is None:
        return None
    try:
        return proc.decode_state(state)
    except Exception as e:
        raise BadState(f"state does not decode: {e}") from None


def _key_out(proc, ctx):
    if ctx.state is None:
        state = None
    else:
        try:
            state = bytes(proc.encode_state(ctx.state))
        except Exception as e:
            raise Internal(f"state does not encode: {e}") from None
    rows = b"".join(ctx.rows)
    if len(rows) >= _U32:
        raise Internal("a key's rows exceed 4 GiB")
    return KeyOut(state, ctx.times, rows, list(_running_sums(map(len, ctx.rows))), ctx.set_timers, ctx.delete_timers)


@_failing
def process(role, clock, keys, events, members, group_ends):
    proc = role.get()
    n = _check_events(events)
    if len(keys) != len(group_ends):
        raise Internal("one key per group expected")
    if members and max(members) >= n:
        raise Internal("group member past the end of the events")
    new, rows, ends, starts = tuple.__new__, events.rows, events.row_ends, _starts(events.row_ends)
    out = []
    for keyed, (start, end) in zip(keys, _groups(group_ends, len(members))):
        ctx = Context(clock.watermark, clock.processing_time, _key_state(proc, keyed.state))
        group = [new(Event, (events, m, rows[starts[m]:ends[m]])) for m in members[start:end]]
        proc.process(bytes(keyed.key), group, ctx)
        out.append(_key_out(proc, ctx))
    return out


@_failing
def on_timers(role, clock, keys, timers, timer_ends):
    proc = role.get()
    if len(keys) != len(timer_ends):
        raise Internal("one key per group of timers expected")
    out = []
    for keyed, (start, end) in zip(keys, _groups(timer_ends, len(timers))):
        ctx = Context(clock.watermark, clock.processing_time, _key_state(proc, keyed.state))
        proc.on_timers(bytes(keyed.key), list(timers[start:end]), ctx)
        out.append(_key_out(proc, ctx))
    return out


@_failing
def migrate_states(role, from_version, states):
    proc = role.get()
    out = []
    for data in states:
        state = proc.migrate(from_version, data)
        if state is None:
            raise Internal("migrate returned None: a state to keep is a value")
        out.append(bytes(proc.encode_state(state)))
    return out


@_failing
def sink_open(role):
    role.get().open()


@_failing
def sink_write(role, delivery, rows):
    _check_ends(rows.row_ends, len(rows.rows), "rows")
    role.get().write_batch(Delivery(delivery.checkpoint, delivery.batch_id), Rows(rows.rows, rows.row_ends))


@_failing
def sink_commit(role, delivery):
    role.get().commit(Delivery(delivery.checkpoint, delivery.batch_id))


# Where `weir.log` writes: the host's log inside a component, stderr in plain CPython.
log_sink = None
