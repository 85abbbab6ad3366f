"""{{name}}: a keyed processor. Keeps a running total of each user's `amount` and emits it with
every event; a minute after a user's first event (event time) a timer emits the total and clears
the state. The host owns each key's state (`ctx.state`, stored as JSON) and timers.

`weir build`, then `weir test pipeline.toml --events events.jsonl --expect expected.jsonl`.
"""

import weir
from weir import Timer

SPAN_MS = 60_000  # a minute, the span a total covers


class {{Type}}(weir.Processor):
    def process(self, key, events, ctx):
        user = key.decode()
        for e in events:
            if ctx.state is None:
                ctx.state = {"since": e.time, "total": 0.0}
                ctx.set_timer(Timer.event_time(e.time + SPAN_MS))
            ctx.state["total"] += float(e.field("amount", 0))
            ctx.emit(e.time, {"user": user, "total": ctx.state["total"]})

    def on_timers(self, key, timers, ctx):
        if ctx.state is not None and timers:
            s = ctx.state
            ctx.emit(timers[0].at, {"user": key.decode(), "since": s["since"], "closed_total": s["total"]})
            ctx.state = None
{{events}}
