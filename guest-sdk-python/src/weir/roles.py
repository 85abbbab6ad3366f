"""The base classes a plugin subclasses, one per role, and how the build finds them in a module.

Each role's object is built once per instance, `cls(config)`, from the stage's `config` table and
then reused for every batch that instance serves; it should hold configuration, not results
(the host may replace an instance at any time).
"""

import inspect

from . import _jsonio
from .errors import Unsupported


class Parser:
    """Turns raw source records into events."""

    def __init__(self, config):
        pass

    def parse(self, record, out):
        """Parses one `Record` into 0..n events via `out` (an `Emitter`). Raising sends the
        record to the dead-letter output and takes back whatever was emitted for it."""
        raise NotImplementedError


class Transformer:
    """Filters, maps or flat-maps events."""

    def __init__(self, config):
        pass

    def transform(self, event, out):
        """Emits 0..n events for `event` via `out` (emit nothing to filter it out). Raising sends
        the event to the dead-letter output."""
        raise NotImplementedError


class Aggregator:
    """An incremental aggregate. The host owns the accumulators (as bytes, by default the compact
    JSON of the accumulator value), stores them in its state store and passes them back in; the
    plugin keeps none of them.

    `add` and `merge` may change `acc` in place and return None, or return the new accumulator
    (for an accumulator that is an int or a tuple). An exception in any of these fails the call.
    """

    #: The version of the accumulator's encoding. Raise it whenever a new build could not read
    #: the accumulators an older build wrote: the host then asks `migrate` to convert the
    #: checkpointed state, and refuses to run if it cannot.
    STATE_VERSION = 1

    def __init__(self, config):
        pass

    def create(self):
        """A new, empty accumulator (what the Rust SDK's `Acc::default()` is)."""
        raise NotImplementedError

    def add(self, acc, event):
        """Adds one `Event` to the accumulator."""
        raise NotImplementedError

    def merge(self, acc, other):
        """Folds accumulator `other` into `acc` (session windows that grow together, sliding-
        window panes)."""
        raise NotImplementedError

    def finish(self, acc):
        """The result row of a group as a dict, or None for no row."""
        raise NotImplementedError

    def migrate(self, from_version, data):
        """Converts one accumulator's bytes written by state version `from_version` into an
        accumulator of this build. The default converts nothing: a checkpoint of another version
        is refused."""
        raise Unsupported(f"no migration from state version {from_version} to {self.STATE_VERSION}")

    def encode_acc(self, acc):
        """An accumulator's bytes (never empty). Override both this and `decode_acc` to store
        something other than JSON."""
        return _jsonio.dumps(acc)

    def decode_acc(self, data):
        return _jsonio.loads(data)


class Processor:
    """A keyed, stateful processor with timers (Flink's `KeyedProcessFunction`, in a sandbox).

    The host owns each key's state and timers and hands them in: `ctx.state` is the key's state
    (None when it has none; assign None to delete it), `ctx.emit` writes a row, `ctx.set_timer`
    and `ctx.delete_timer` change the key's timers. What a call does to a key is applied only when
    the whole call succeeds, so an exception here fails the call and changes nothing; the host's
    failure policy then isolates the poison events, as for an aggregator.
    """

    #: The version of the state's encoding, as `Aggregator.STATE_VERSION`.
    STATE_VERSION = 1

    def __init__(self, config):
        pass

    def process(self, key, events, ctx):
        """Handles one key's events of a batch (`key`: bytes), in event-time order."""
        raise NotImplementedError

    def on_timers(self, key, timers, ctx):
        """Handles one key's timers that fired (a list of `Timer`), by time. The default ignores
        them."""

    def migrate(self, from_version, data):
        """One state's bytes written by state version `from_version`, as a state of this build.
        The default converts nothing: a checkpoint of another version is refused."""
        raise Unsupported(f"no migration from state version {from_version} to {self.STATE_VERSION}")

    def encode_state(self, state):
        """A state's bytes. Override both this and `decode_state` to store something other than
        JSON."""
        return _jsonio.dumps(state)

    def decode_state(self, data):
        return _jsonio.loads(data)


class Sink:
    """A foreachBatch-style sink. The same `Delivery` always carries the same rows, and a batch
    may be delivered again after a crash: skip (or overwrite) a delivery already written to be
    exactly-once. Key on the whole delivery (`delivery.key()`), not the batch id alone."""

    def __init__(self, config):
        pass

    def open(self):
        """Called on each new instance before its first write."""

    def write_batch(self, delivery, rows):
        """Writes, or stages for `commit`, the `Rows` of one delivery."""
        raise NotImplementedError

    def commit(self, delivery):
        """Makes a staged delivery visible. Must be idempotent."""


#: Role name (as the WIT interface is called) -> (base class, methods a plugin must define, world).
ROLES = {
    "parser": (Parser, ("parse",), "parse-plugin"),
    "transformer": (Transformer, ("transform",), "transform-plugin"),
    "aggregator": (Aggregator, ("create", "add", "merge", "finish"), "aggregate-plugin"),
    "processor": (Processor, ("process",), "process-plugin"),
    "sink": (Sink, ("write_batch",), "sink-plugin"),
}


class ExportError(Exception):
    """The module does not say unambiguously which class plays which role."""


def find_roles(module):
    """{role: class} for the roles the classes defined in `module` play.

    A class plays a role when it subclasses the role's base class; one class may play several.
    Of several classes playing one role, a base class of the others is a helper and is skipped;
    more than one left is an error.
    """
    mine = [c for _, c in inspect.getmembers(module, inspect.isclass) if c.__module__ == module.__name__]
    found = {}
    for role, (base, required, _) in ROLES.items():
        cands = [c for c in mine if issubclass(c, base) and c is not base]
        leaves = [c for c in cands if not any(o is not c and issubclass(o, c) for o in cands)]
        if len(leaves) > 1:
            names = ", ".join(sorted(c.__name__ for c in leaves))
            raise ExportError(f"{module.__name__}: several classes play the {role} role ({names}); keep one per module")
        if leaves:
            cls = leaves[0]
            missing = [m for m in required if getattr(cls, m) is getattr(base, m)]
            if missing:
                raise ExportError(f"{module.__name__}.{cls.__name__} is a {base.__name__} but does not define {', '.join(missing)}")
            found[role] = cls
    if not found:
        raise ExportError(f"{module.__name__} defines no subclass of weir.Parser, Transformer, Aggregator, Processor or Sink")
    for role in ("aggregator", "processor"):
        v = found[role].STATE_VERSION if role in found else 1
        if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v < 1 << 32:
            raise ExportError(f"{found[role].__name__}.STATE_VERSION must be an int in 0..2**32, not {v!r}")
    return found
