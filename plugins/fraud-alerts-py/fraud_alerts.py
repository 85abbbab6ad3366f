"""Per-user fraud alerts, a keyed processor: the Python twin of plugins/fraud-alerts, giving the
same rows and the same state bytes. `threshold` ERROR orders (rows whose `status` is `status`) of
one user within `within_ms` of the first of them emit one alert. The first error of a streak sets
an event-time timer at its time + `within_ms`; when the watermark reaches it, the streak is over
and the count resets.

Config: `status` (default "ERROR"), `threshold` (default 3), `within_ms` (default 120000),
`reset_timer` (default true), `report_resets` (default false).
"""

import weir
from weir import Timer


class FraudAlerts(weir.Processor):
    def __init__(self, config):
        self.status = config.get("status", "ERROR", type=str)
        self.threshold = config.get("threshold", 3, type=int)
        self.within_ms = config.get("within_ms", 120_000, type=int)
        self.reset_timer = config.get("reset_timer", True, type=bool)
        self.report_resets = config.get("report_resets", False, type=bool)
        if self.threshold <= 0 or self.within_ms <= 0:
            raise weir.InvalidConfig("threshold and within_ms must be positive")

    def process(self, key, events, ctx):
        user = key.decode("utf-8", "replace")
        for e in events:
            if not e.field_is("status", self.status):
                continue
            s = ctx.state
            if s is not None and e.time - s["first"] <= self.within_ms:
                s["errors"] += 1
            else:
                if s is not None and self.reset_timer:
                    ctx.delete_timer(Timer.event_time(s["first"] + self.within_ms))
                # The field order is the Rust build's, so the state bytes are the same.
                s = ctx.state = {"first": e.time, "errors": 1, "alerted": False}
                if self.reset_timer:
                    ctx.set_timer(Timer.event_time(e.time + self.within_ms))
            if s["errors"] >= self.threshold and not s["alerted"]:
                s["alerted"] = True
                ctx.emit(e.time, {"user": user, "errors": s["errors"], "first_error": s["first"], "alert_at": e.time})

    def on_timers(self, key, timers, ctx):
        s = ctx.state
        if s is None:
            return
        for t in timers:
            if t.at == s["first"] + self.within_ms:
                if self.report_resets:
                    ctx.emit(t.at, {"user": key.decode("utf-8", "replace"), "reset_at": t.at, "errors": s["errors"]})
                ctx.state = None
                return
