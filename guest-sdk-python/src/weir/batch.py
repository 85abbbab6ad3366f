"""Views over the columnar batches the host passes in, and the `Emitter` that builds the
columnar batch a parser or transformer passes back.

A `Record` or `Event` is a small tuple pointing into its batch. Its value (or row) is sliced once,
as bytes, when the object is made, since every plugin reads it and a C-level slice is cheaper
than a property call in Python; the key, headers and the rest are sliced on access. Emitting
appends to flat lists that become the output columns in one pass at the end of the batch. So a
record costs a few Python objects and no per-field copies.
"""

from collections import namedtuple
from operator import itemgetter

from . import _jsonio
from .errors import RecordError
from .field import _QUOTED, _quoted, field, field_is

Header = namedtuple("Header", "name value")
Header.__doc__ = "A header of a source record: `name` (str) and `value` (bytes)."

I64_MIN, I64_MAX = -(1 << 63), (1 << 63) - 1


def _start(ends, i):
    return ends[i - 1] if i else 0


class Record(tuple):
    """One raw source record of the batch being parsed: (batch view, index, value)."""

    __slots__ = ()

    value = property(itemgetter(2), doc="The record's value as bytes (for Kafka: the message payload).")

    @property
    def key(self):
        """The record's key as bytes, or None when it has none."""
        b, i = self[0], self[1]
        return b.keys[_start(b.key_ends, i):b.key_ends[i]] or None

    @property
    def timestamp(self):
        """The source timestamp in epoch milliseconds, or None when the source has none."""
        ts = self[0].timestamps[self[1]]
        return ts if ts >= 0 else None

    @property
    def partition(self):
        """The partition it was read from (Kafka partition; 0 for an unpartitioned file)."""
        return self[0].partitions[self[1]]

    @property
    def offset(self):
        """Its offset in the partition (Kafka offset; the line index in a file)."""
        return self[0].offsets[self[1]]

    @property
    def headers(self):
        """The record's headers, a list of `Header(name, value)`."""
        return self[0].headers_of(self[1])

    def text(self):
        """The value as UTF-8 text; `RecordError.malformed` if it is not UTF-8."""
        try:
            return self[2].decode("utf-8")
        except UnicodeDecodeError as e:
            raise RecordError.malformed(f"value is not UTF-8: {e}") from None

    def json(self):
        """The value decoded as JSON (the whole value checked to be UTF-8 first, as in Rust, so a
        parser passing the record on as its row never passes on invalid JSON text)."""
        try:
            return _jsonio.loads(self[2])
        except UnicodeDecodeError as e:
            raise RecordError.malformed(f"value is not UTF-8: {e}") from None
        except ValueError as e:
            raise RecordError.malformed(str(e)) from None

    def __repr__(self):
        return f"Record(value={self.value!r}, key={self.key!r}, offset={self.offset})"


class Event(tuple):
    """One event of the batch being transformed or aggregated: (batch, index, row)."""

    __slots__ = ()

    row = property(itemgetter(2), doc="The event's row as bytes: a UTF-8 JSON object.")

    @property
    def time(self):
        """Event time, epoch milliseconds."""
        return self[0].times[self[1]]

    @property
    def key(self):
        """The event's key as bytes, or None when it has none."""
        b, i = self[0], self[1]
        return b.keys[_start(b.key_ends, i):b.key_ends[i]] or None

    def json(self):
        """The row decoded (a dict)."""
        try:
            return _jsonio.loads(self[2])
        except ValueError as e:
            raise RecordError.malformed(str(e)) from None

    def field(self, name, default=None):
        """One top-level field of the row, decoded, without decoding the rest of the row;
        `default` when the row has no such field."""
        try:
            raw = field(self[2], name)
            return default if raw is None else _jsonio.loads(raw)
        except ValueError as e:  # FieldError, a bad value
            raise RecordError.malformed(str(e)) from None

    def field_str(self, name):
        """A top-level string field (None when absent); `invalid-value` if it is not a string."""
        value = self.field(name)
        if value is not None and not isinstance(value, str):
            raise RecordError.invalid_value(f"field `{name}` is not a string")
        return value

    def field_is(self, name, value):
        """Whether top-level field `name` is the string `value`, comparing bytes when the field
        holds no escapes (False when absent or not a string): an aggregator's filter on a
        status, once per event, at the cost of a substring search for most rows."""
        row = self[2]
        # The answer for most rows, inlined: this runs once per event.
        if (_QUOTED.get(value) or _quoted(value)) not in row and b"\\" not in row:
            return False
        try:
            return field_is(row, name, value)
        except ValueError as e:
            raise RecordError.malformed(str(e)) from None

    def __repr__(self):
        return f"Event(time={self.time}, key={self.key!r}, row={self.row!r})"


class Rows:
    """The rows of one sink batch: `len(rows)`, `rows[i]` and iteration give bytes, each a UTF-8
    JSON object."""

    __slots__ = ("_rows", "_ends")

    def __init__(self, rows, ends):
        self._rows = rows
        self._ends = ends

    def __len__(self):
        return len(self._ends)

    def __getitem__(self, i):
        ends = self._ends
        if i < 0:
            i += len(ends)
        if not 0 <= i < len(ends):
            raise IndexError("row index out of range")
        return self._rows[_start(ends, i):ends[i]]

    def __iter__(self):
        rows, start = self._rows, 0
        for end in self._ends:
            yield rows[start:end]
            start = end


class Delivery:
    """Which delivery a sink's batch is: the identity of the checkpoint that planned it (a UUID,
    later checkpoints sorting after earlier ones) and its batch id there. An exactly-once sink
    keeps each delivery once, keyed on both."""

    __slots__ = ("checkpoint", "batch_id")

    def __init__(self, checkpoint, batch_id):
        self.checkpoint = checkpoint
        self.batch_id = batch_id

    def key(self):
        """`CHECKPOINT-BATCHID`, the batch id zero-padded to 20 digits: sorts by checkpoint, then
        batch."""
        return f"{self.checkpoint}-{self.batch_id:020d}"

    def __eq__(self, other):
        return isinstance(other, Delivery) and (self.checkpoint, self.batch_id) == (other.checkpoint, other.batch_id)

    def __repr__(self):
        return f"Delivery({self.checkpoint!r}, {self.batch_id})"


class Emitter:
    """Collects the events a parser or transformer produces for the current input.

    If the plugin raises for a record, everything it emitted for that record is taken back, so a
    record yields either all of its events or a dead letter, never half.
    """

    __slots__ = ("times", "keys", "rows", "origins", "origin")

    def __init__(self):
        # One item per event, joined into columns at the end of the batch (`_rt._columns`):
        # appending to lists and joining once costs less per event than growing flat buffers
        # and their offsets as we go.
        self.times, self.keys, self.rows, self.origins = [], [], [], []
        self.origin = 0

    def emit(self, time, key, row):
        """Emits an event whose row is the dict `row`, written as one line of compact JSON."""
        if not isinstance(row, dict):
            raise RecordError.invalid_value(f"a row is a dict (a JSON object), not {type(row).__name__}")
        try:
            data = _jsonio.dumps(row)
        except (TypeError, ValueError) as e:
            raise RecordError.invalid_value(f"row does not serialize: {e}") from None
        self.emit_json(time, key, data)

    def emit_json(self, time, key, row):
        """Emits an event whose row is already a JSON object (bytes, such as the input record's
        value). `key` is bytes, str or None; `time` is epoch milliseconds (an int; its range is
        checked once for the whole batch, at its end)."""
        # Everything is checked before anything is appended, so the columns stay aligned even if
        # the plugin catches the error and goes on.
        if time.__class__ is not int:
            time = _time(time)
        if key is None:
            key = b""
        elif key.__class__ is not bytes:
            key = _bytes(key, "key")
        if row.__class__ is not bytes:
            row = _bytes(row, "row")
        self.times.append(time)
        self.keys.append(key)
        self.rows.append(row)
        self.origins.append(self.origin)

    def _rollback(self, origin):
        """Takes back the events of input `origin`: the last ones, since inputs go in order."""
        o, n = self.origins, len(self.origins)
        while n and o[n - 1] == origin:
            n -= 1
        del self.times[n:], self.keys[n:], self.rows[n:], self.origins[n:]


class Timer(namedtuple("Timer", "domain at")):
    """A key's timer: `domain` is "event-time" (fires in the first batch whose watermark reaches
    `at`) or "processing-time" (fires in the first batch planned at or after `at`, the host's
    clock, epoch ms). A key has at most one timer per domain and time."""

    __slots__ = ()

    @classmethod
    def event_time(cls, at):
        return cls("event-time", _time(at))

    @classmethod
    def processing_time(cls, at):
        return cls("processing-time", _time(at))


TIME_DOMAINS = ("event-time", "processing-time")


class Context:
    """What a processor can do for the key it is handling: read and replace its state, emit rows,
    set and cancel timers, and read the batch's clocks (`watermark`: the lowest int64 before
    there is one; `processing_time`: when the batch was planned, the same when it is re-run)."""

    __slots__ = ("state", "watermark", "processing_time", "times", "rows", "set_timers", "delete_timers")

    def __init__(self, watermark, processing_time, state):
        self.watermark, self.processing_time, self.state = watermark, processing_time, state
        self.times, self.rows, self.set_timers, self.delete_timers = [], [], [], []

    def emit(self, time, row):
        """Emits the dict `row` (one line of compact JSON) at event time `time`."""
        if not isinstance(row, dict):
            raise TypeError(f"a row is a dict (a JSON object), not {type(row).__name__}")
        self.emit_json(time, _jsonio.dumps(row))

    def emit_json(self, time, row):
        """Emits a row that is already a JSON object (bytes, such as an input event's row)."""
        t = _time(time)
        if not I64_MIN <= t <= I64_MAX:
            raise ValueError("event time is out of the 64-bit range")
        self.times.append(t)
        self.rows.append(_bytes(row, "row"))

    def set_timer(self, timer):
        """Sets a `Timer` for this key (setting one that is set changes nothing)."""
        self.set_timers.append(_timer(timer))

    def delete_timer(self, timer):
        """Cancels a `Timer` of this key (cancelling one that is not set changes nothing)."""
        self.delete_timers.append(_timer(timer))


def _timer(t):
    if not isinstance(t, Timer) or t.domain not in TIME_DOMAINS:
        raise TypeError(f"a timer is weir.Timer.event_time(at) or weir.Timer.processing_time(at), not {t!r}")
    if not I64_MIN <= t.at <= I64_MAX:
        raise ValueError("timer time is out of the 64-bit range")
    return t


def _time(t):
    if isinstance(t, bool) or not isinstance(t, int):
        raise RecordError.invalid_value(f"event time is epoch milliseconds (an int), not {type(t).__name__}")
    return int(t)  # an int subclass


def _bytes(v, what):
    if isinstance(v, str):
        return v.encode("utf-8")
    if isinstance(v, (bytes, bytearray, memoryview)):
        return bytes(v)
    raise RecordError.invalid_value(f"{what} must be bytes or str, not {type(v).__name__}")


__all__ = ["Record", "Event", "Header", "Rows", "Delivery", "Emitter", "Timer", "Context"]
