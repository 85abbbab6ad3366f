"""The glue between componentize-py's generated bindings (`wit_world`) and the batch loops in
`_rt`: the classes componentize-py calls for each exported interface. Only importable inside a
component build; `weir.build` generates the app module that uses it. Not a public API.

Every export catches everything: an exception escaping into componentize-py would trap the
instance, and the host would see a crash where the plugin meant a failed batch.
"""

from componentize_py_types import Err
from wit_world.imports import host, types

try:  # only in components that export the processor interface
    from wit_world.exports import processor as _proc
except ImportError:
    _proc = None

from . import _rt
from .errors import plugin_error_from
from .roles import find_roles

_rt.log_sink = lambda level, message: host.log(getattr(host.LogLevel, level.upper()), message)

_KIND = {
    "malformed": types.RecordErrorKind.MALFORMED,
    "missing-field": types.RecordErrorKind.MISSING_FIELD,
    "invalid-value": types.RecordErrorKind.INVALID_VALUE,
}
_CASE = {
    "invalid-config": types.PluginError_InvalidConfig,
    "bad-state": types.PluginError_BadState,
    "unsupported": types.PluginError_Unsupported,
    "io": types.PluginError_Io,
    "internal": types.PluginError_Internal,
}


def _err(e):
    e = plugin_error_from(e)
    return Err(_CASE[e.case](e.message))


def _output(result):
    c, errors = result
    events = types.EventBatch(c.times, c.keys, c.key_ends, c.rows, c.row_ends, c.origins)
    return types.BatchOutput(events, [types.RecordError(i, _KIND[k], m) for i, k, m in errors])


_DOMAIN = {"event-time": "EVENT_TIME", "processing-time": "PROCESSING_TIME"}


def _wit_timer(t):
    return _proc.Timer(getattr(_proc.TimeDomain, _DOMAIN[t.domain]), t.at)


def _py_timer(t):
    return _rt.Timer("event-time" if t.domain == _proc.TimeDomain.EVENT_TIME else "processing-time", t.at)


def _key_results(outs):
    return [_proc.KeyResult(o.state, o.times, o.rows, o.row_ends, [_wit_timer(t) for t in o.set_timers],
                            [_wit_timer(t) for t in o.delete_timers]) for o in outs]


def _guarded(fn):
    """A method for componentize-py that runs `fn` and answers any exception as a plugin-error."""

    def method(self, *args):
        try:
            return fn(*args)
        except BaseException as e:
            raise _err(e) from None

    return method


def _unsupported(role):
    def method(self, *args):
        raise Err(types.PluginError_Unsupported(f"this component does not implement the {role} role"))

    return method


def exports(module, every_role=False):
    """{class name componentize-py looks for: class} for the roles `module` plays; with
    `every_role` (a component of the `plugin` world, which exports all five interfaces) the
    roles it does not play answer `unsupported`, as the Rust SDK's do."""
    roles = find_roles(module)
    role = {name: _rt.Role(cls, host.config) for name, cls in roles.items()}
    made = {}
    if "parser" in role:
        p = role["parser"]
        made["Parser"] = type("Parser", (), {"parse": _guarded(lambda b: _output(_rt.parse(p, b)))})
    elif every_role:
        made["Parser"] = type("Parser", (), {"parse": _unsupported("parser")})
    if "transformer" in role:
        t = role["transformer"]
        made["Transformer"] = type("Transformer", (), {"transform": _guarded(lambda b: _output(_rt.transform(t, b)))})
    elif every_role:
        made["Transformer"] = type("Transformer", (), {"transform": _unsupported("transformer")})
    if "aggregator" in role:
        a, version = role["aggregator"], roles["aggregator"].STATE_VERSION
        made["Aggregator"] = type("Aggregator", (), {
            "accumulate": _guarded(lambda accs, events, members, ends: _rt.accumulate(a, accs, events, members, ends)),
            "merge": _guarded(lambda accs, ends: _rt.merge(a, accs, ends)),
            "finish": _guarded(lambda accs: _rt.finish(a, accs)),
            "state_version": lambda self: version,
            "migrate": _guarded(lambda from_version, accs: _rt.migrate(a, from_version, accs)),
        })
    elif every_role:
        no = _unsupported("aggregator")
        made["Aggregator"] = type("Aggregator", (), {"accumulate": no, "merge": no, "finish": no, "migrate": no,
                                                     "state_version": lambda self: 1})
    if "processor" in role:
        pr, pversion = role["processor"], roles["processor"].STATE_VERSION
        made["Processor"] = type("Processor", (), {
            "process": _guarded(lambda clock, keys, events, members, ends:
                                _key_results(_rt.process(pr, clock, keys, events, members, ends))),
            "on_timers": _guarded(lambda clock, keys, timers, ends:
                                  _key_results(_rt.on_timers(pr, clock, keys, [_py_timer(t) for t in timers], ends))),
            "state_version": lambda self: pversion,
            "migrate": _guarded(lambda from_version, states: _rt.migrate_states(pr, from_version, states)),
        })
    elif every_role:
        no = _unsupported("processor")
        made["Processor"] = type("Processor", (), {"process": no, "on_timers": no, "migrate": no,
                                                   "state_version": lambda self: 1})
    if "sink" in role:
        s = role["sink"]
        made["Sink"] = type("Sink", (), {
            "open": _guarded(lambda: _rt.sink_open(s)),
            "write_batch": _guarded(lambda delivery, rows: _rt.sink_write(s, delivery, rows)),
            "commit": _guarded(lambda delivery: _rt.sink_commit(s, delivery)),
        })
    elif every_role:
        no = _unsupported("sink")
        made["Sink"] = type("Sink", (), {"open": no, "write_batch": no, "commit": no})
    return made
