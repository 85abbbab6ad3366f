"""Error rate per window (and per key, when events are keyed): `count`, `errors` (rows whose
`status` is `config.error_status`, default "ERROR") and `error_rate` = errors / count. The Python
twin of plugins/error-rate: the same rows, and the same accumulator bytes (state version 2:
`count` then `errors`, each a little-endian u64), so either build can resume the other's
checkpoint.
"""

import json
import struct

import weir

#: What state version 2 stores: two little-endian u64s.
_ACC = struct.Struct("<QQ")


class ErrorRate(weir.Aggregator):
    STATE_VERSION = 2

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

    def encode_acc(self, acc):
        return _ACC.pack(acc["count"], acc["errors"])

    def decode_acc(self, data):
        if len(data) != _ACC.size:
            raise weir.BadState(f"an accumulator is {_ACC.size} bytes, not {len(data)}")
        count, errors = _ACC.unpack(data)
        return {"count": count, "errors": errors}

    def migrate(self, from_version, data):
        # Version 1 stored the accumulator as JSON: {"count":N,"errors":M}.
        if from_version == 1:
            return _version_1(data)
        return super().migrate(from_version, data)


def _version_1(data):
    """Version 1's accumulator, refused as bad state (as the Rust build refuses it) unless it
    holds two counts that fit a u64."""
    try:
        old = json.loads(data)
    except ValueError as e:
        raise weir.BadState(f"not a version-1 accumulator: {e}") from None
    counts = [old.get(name) if isinstance(old, dict) else None for name in ("count", "errors")]
    if not all(type(n) is int and 0 <= n < 2**64 for n in counts):
        raise weir.BadState(f"not a version-1 accumulator: {data[:64]!r}")
    return {"count": counts[0], "errors": counts[1]}
