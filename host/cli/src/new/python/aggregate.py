"""{{name}}: an aggregator. Per window and key: how many events, and the sum of their `amount`.
The host keeps the accumulators (stored as JSON) in its state store; the plugin keeps nothing
between calls.

`weir build`, then `weir test pipeline.toml --events events.jsonl --expect expected.jsonl`.
"""

import weir


class {{Type}}(weir.Aggregator):
    def create(self):
        return {"count": 0, "total": 0.0}

    def add(self, acc, event):
        acc["count"] += 1
        acc["total"] += float(event.field("amount", 0))

    def merge(self, acc, other):
        acc["count"] += other["count"]
        acc["total"] += other["total"]

    def finish(self, acc):
        return {"count": acc["count"], "total": acc["total"]} if acc["count"] else None
{{events}}
