"""Error rate per window (and per key, when events are keyed): `count`, `errors` (rows whose
`status` is `config.error_status`, default "ERROR") and `error_rate` = errors / count. The Python
twin of plugins/error-rate: the same rows, and the same accumulator bytes
(`{"count":N,"errors":M}`), so either build can resume the other's checkpoint.
"""

import weir


class ErrorRate(weir.Aggregator):
    def __init__(self, config):
        self.error_status = config.get("error_status", "ERROR", type=str)

    def create(self):
        return {"count": 0, "errors": 0}

    def add(self, acc, event):
        # One field of a row the parser already validated: no need to decode the whole row.
        acc["count"] += 1
        if event.field_is("status", self.error_status):
            acc["errors"] += 1

    def merge(self, acc, other):
        acc["count"] += other["count"]
        acc["errors"] += other["errors"]

    def finish(self, acc):
        if acc["count"] == 0:
            return None
        return {"count": acc["count"], "errors": acc["errors"], "error_rate": acc["errors"] / acc["count"]}
