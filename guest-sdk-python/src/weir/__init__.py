"""Write Weir plugins in Python.

A plugin module defines one class per role it plays, subclassing `Parser`, `Transformer`,
`Aggregator`, `Processor` or `Sink`; `python -m weir.build` finds them and makes a WebAssembly component
exporting those roles. The SDK owns the batch loop: the host calls the component once per batch
with columnar data, and the SDK walks the batch and calls the class once per record, inside the
sandbox.

    import weir

    class Orders(weir.Parser):
        def __init__(self, config):
            self.key_by_user = config.get("key_by_user", False, type=bool)

        def parse(self, record, out):
            order = record.json()
            out.emit_json(order["order_ts"], None, record.value)

Rows are UTF-8 JSON objects. A plugin keeps nothing between calls that matters for results: the
host may replace an instance at any time. A `config` key the constructor never reads is refused
as `invalid-config`, naming the key: a typo must not silently run with a default.
"""

import sys

from . import _rt
from .batch import Context, Delivery, Emitter, Event, Header, Record, Rows, Timer
from .config import Config
from .errors import (BadState, Internal, InvalidConfig, Io, PluginError, RecordError,
                     Unsupported)
from .roles import Aggregator, Parser, Processor, Sink, Transformer

LOG_LEVELS = ("trace", "debug", "info", "warn", "error")


def log(level, message):
    """Writes a line to the host's log, tagged with the pipeline and stage; `level` is one of
    LOG_LEVELS. Outside a component (tests) it goes to stderr."""
    if level not in LOG_LEVELS:
        raise ValueError(f"log level is one of {', '.join(LOG_LEVELS)}, not {level!r}")
    if _rt.log_sink is not None:
        _rt.log_sink(level, str(message))
    else:
        print(f"weir {level}: {message}", file=sys.stderr)


__all__ = [
    "Parser", "Transformer", "Aggregator", "Processor", "Sink",
    "Record", "Event", "Header", "Emitter", "Rows", "Delivery", "Timer", "Context", "Config",
    "RecordError", "PluginError", "InvalidConfig", "BadState", "Io", "Internal", "Unsupported",
    "log", "LOG_LEVELS",
]
