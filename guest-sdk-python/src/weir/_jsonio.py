"""JSON the way the Rust SDK (serde_json) reads and writes it, so that a Python plugin's rows and
accumulators are byte-identical to a Rust plugin's (serde_json 1.0.154, which formats floats with
the `zmij` crate).

Reading refuses what serde_json refuses and Python's `json` accepts: `NaN`/`Infinity` literals and
a leading byte-order mark. Writing is compact and keeps non-ASCII as it is, like serde_json;
floats are formatted as zmij does, which differs from Python's repr only below 1e-4: zmij writes
`0.00005` and `1e-7` where Python writes `5e-05` and `1e-07` (both write `1e+16`). Non-finite
floats become `null`, as serde_json writes them.
"""

import json
import math

__all__ = ["loads", "dumps"]


class _NotJSON(json.JSONDecodeError):
    """A `NaN`/`Infinity` literal: json's hook does not say where, so the message does not."""

    def __init__(self, name):
        ValueError.__init__(self, f"`{name}` is not JSON")
        self.msg, self.doc, self.pos, self.lineno, self.colno = str(self), name, 0, 1, 1


def _no_constants(name):
    raise _NotJSON(name)


_decoder = json.JSONDecoder(parse_constant=_no_constants)
_scan = _decoder.scan_once
_encoder = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, allow_nan=False)
_OPENERS = ("{", "[", '"')


def loads(data):
    """Decodes JSON text (str, or bytes that must be UTF-8)."""
    if data.__class__ is not str:
        data = str(data, "utf-8")  # strict, and keeps a BOM so that it is refused
    # What JSONDecoder.decode does, minus two frames and two regex calls for the usual text
    # that has no whitespace around it: this runs once per record.
    if data[:1] in _OPENERS:
        try:
            value, end = _scan(data, 0)
        except StopIteration:
            pass
        else:
            if end == len(data):
                return value
    return _decoder.decode(data)


def dumps(value):
    """Encodes `value` as one line of compact JSON, as bytes."""
    try:
        text = _encoder.encode(value)
    except ValueError:  # a NaN or an infinity: serde_json writes null
        text = _slow(value)
    else:
        # Only a negative exponent needs rewriting, and Python writes it as `e-`; the check may
        # also hit a string, which costs the slow path and nothing else.
        if "e-" in text:
            text = _slow(value)
    return text.encode("utf-8")


def rust_float(x):
    """`x` as serde_json (zmij) writes an f64: fixed notation for 1e-5 <= |x| < 1e16."""
    if not math.isfinite(x):
        return "null"
    r = repr(x)
    if "e" not in r:
        return r
    mantissa, exp = r.split("e")
    exp = int(exp)
    if exp == -5:
        sign = "-" if mantissa.startswith("-") else ""
        return f"{sign}0.0000{mantissa.lstrip('-').replace('.', '')}"
    return f"{mantissa}e{exp:+d}"


def _slow(v):
    """The same encoding as `_encoder`, with floats written by `rust_float`."""
    if isinstance(v, float):
        return rust_float(v)
    if isinstance(v, dict):
        return "{" + ",".join(f"{_key(k)}:{_slow(x)}" for k, x in v.items()) + "}"
    if isinstance(v, (list, tuple)):
        return "[" + ",".join(_slow(x) for x in v) + "]"
    return _encoder.encode(v)


def _key(k):
    if isinstance(k, float):
        k = rust_float(k)
    elif not isinstance(k, str):
        k = _encoder.encode(k).strip('"')  # ints, bools and None as json.dumps writes them
    return _encoder.encode(k)
