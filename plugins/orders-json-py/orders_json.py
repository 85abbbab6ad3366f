"""Parses order events (`{"order_id":..,"user_id":..,"status":..,"amount":..,"order_ts":..}`), one
JSON object per record: the Python twin of plugins/orders-json, giving the same events. Event
time is `order_ts`; the row is the record itself, passed on unchanged so nothing is
re-serialized. With `key_by_user = true` the key is the `user_id`, in decimal.
"""

import json

import weir
from weir import RecordError

_I64 = (-(1 << 63), (1 << 63) - 1)
_U64_MAX = (1 << 64) - 1
_ABSENT = object()
_JSON_WS = b" \t\n\r\x0c"  # what Rust's trim_ascii_start strips (not \x0b, unlike bytes.lstrip)


class Orders(weir.Parser):
    def __init__(self, config):
        self.key_by_user = config.get("key_by_user", False, type=bool)

    def parse(self, record, out):
        value = record.value
        # A JSON array would decode too: only an object is an order, and only an object may be
        # passed on as a row.
        if value[:1] != b"{" and value.lstrip(_JSON_WS)[:1] != b"{":
            raise RecordError.malformed("an order is a JSON object")
        order = record.json()
        # serde refuses a repeated field where Python keeps the last one; only look closer when
        # a name occurs twice at all.
        if value.count(b'"order_ts"') > 1 or value.count(b'"user_id"') > 1:
            _refuse_duplicates(value)
        ts, user = order.get("order_ts", _ABSENT), order.get("user_id")
        # `__class__ is int` also keeps out bools, which JSON's true and false decode to.
        if not (ts.__class__ is int and _I64[0] <= ts <= _I64[1]
                and (user is None or user.__class__ is int and 0 <= user <= _U64_MAX)):
            raise _bad_order(order, ts, user)
        out.emit_json(ts, str(user).encode() if self.key_by_user and user is not None else None, value)


def _bad_order(order, ts, user):
    """The error serde gives: the first bad field of the record, else the missing one."""
    bad = []
    if ts is not _ABSENT and not (ts.__class__ is int and _I64[0] <= ts <= _I64[1]):
        bad.append(("order_ts", "an i64", ts))
    if user is not None and not (user.__class__ is int and 0 <= user <= _U64_MAX):
        bad.append(("user_id", "a u64", user))
    if not bad:
        return RecordError.missing_field("order_ts")
    name, want, got = min(bad, key=lambda b: list(order).index(b[0]))
    return RecordError.invalid_value(f"{name}: expected {want}, got {json.dumps(got)}")


def _refuse_duplicates(value):
    """Refuses a repeated `order_ts` or `user_id` at the top level, as serde does."""
    names = []  # each object's keys, innermost first: the record itself comes last

    def keep_names(items):
        names.append([k for k, _ in items])
        return dict(items)

    json.loads(value, object_pairs_hook=keep_names)
    for name in ("order_ts", "user_id"):
        if names[-1].count(name) > 1:
            raise RecordError.invalid_value(f"duplicate field `{name}`")
