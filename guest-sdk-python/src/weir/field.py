"""Reading one top-level field of a JSON object without decoding the rest of it; a port of
guest-sdk/src/field.rs, with the same results (keys compared as written, first match wins, only
the object's structure checked, not its contents).

Byte-by-byte loops are slow in Python, so strings and scalars are skipped with compiled regular
expressions and nested values by jumping between their delimiters. Most rows are flat (no
nested value, no escape): there the quotes alternate, so a quoted name found by a substring
search is a key exactly when an even number of quotes precede it and a `:` follows, and the
field is found with a few C-level searches instead of a walk. Where the quoted name or value
does not occur at all, the answer is known without looking further. Those shortcuts check less
of the row's structure than the walk (rows were checked when they were made).
"""

import re

from . import _jsonio

_WS = re.compile(rb"[ \t\n\r]*")
_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_SCALAR = re.compile(rb"[^,}\] \t\n\r]+")
_DELIM = re.compile(rb'["{}\[\]]')
_COLON = re.compile(rb"[ \t\n\r]*:[ \t\n\r]*")


class FieldError(ValueError):
    """The row is not a JSON object (or is cut short)."""


def top_level_field(row, name):
    """The raw bytes of top-level field `name` (bytes) of the JSON object `row`; None if absent."""
    i = _WS.match(row, 0).end()
    if row[i:i + 1] != b"{":
        raise FieldError("row is not a JSON object")
    i = _WS.match(row, i + 1).end()
    if row[i:i + 1] == b"}":
        return None
    while True:
        if row[i:i + 1] != b'"':
            raise FieldError("expected a key")
        key_end = _string_end(row, i)
        is_name = row[i + 1:key_end - 1] == name
        i = _WS.match(row, key_end).end()
        if row[i:i + 1] != b":":
            raise FieldError("expected `:`")
        i = _WS.match(row, i + 1).end()
        end = _value_end(row, i)
        if is_name:
            return row[i:end]
        i = _WS.match(row, end).end()
        c = row[i:i + 1]
        if c == b",":
            i = _WS.match(row, i + 1).end()
        elif c == b"}":
            return None
        else:
            raise FieldError("expected `,` or `}`")


def _string_end(b, i):
    """`b[i]` is an opening quote; the index after the closing one."""
    m = _STRING.match(b, i)
    if m is None:
        raise FieldError("unterminated string")
    return m.end()


def _value_end(b, i):
    c = b[i:i + 1]
    if c == b'"':
        return _string_end(b, i)
    if c in (b"{", b"["):
        depth = 0
        while True:
            m = _DELIM.search(b, i)
            if m is None:
                raise FieldError("unterminated value")
            j = m.start()
            d = b[j]
            if d == 0x22:  # a string: skip it whole, it may hold delimiters
                i = _string_end(b, j)
                continue
            depth += 1 if d in (0x7B, 0x5B) else -1
            i = j + 1
            if depth == 0:
                return i
    m = _SCALAR.match(b, i)
    if m is None:
        raise FieldError("expected a value")
    return m.end()


_QUOTED = {}


def _quoted(s):
    """`s` quoted, as bytes: `"s"`. Kept, since plugins ask for the same few names per event."""
    q = _QUOTED.get(s)
    if q is None:
        q = b'"' + s.encode() + b'"'
        if len(_QUOTED) < 1024:
            _QUOTED[s] = q
    return q


def field(row, name):
    """`top_level_field` for a str name, with the shortcuts for absent fields and flat rows."""
    quoted = _quoted(name)
    at = row.find(quoted)
    if at == -1:
        return None
    if row[:1] == b"{" and row.find(b"{", 1) == -1 and b"[" not in row and b"\\" not in row:
        return _flat_field(row, quoted, at)
    return top_level_field(row, quoted[1:-1])


def _flat_field(row, quoted, at):
    """`top_level_field` in a row that opens with `{` and holds no other `{`, no `[` and no
    backslash, `at` being the first occurrence of the quoted name."""
    while at != -1:
        colon = None if row.count(b'"', 0, at) & 1 else _COLON.match(row, at + len(quoted))
        if colon:  # an opening quote (even count before it), and a key (a colon after it)
            i = colon.end()
            if row[i:i + 1] == b'"':
                end = row.find(b'"', i + 1)
                if end == -1:
                    raise FieldError("unterminated string")
                return row[i:end + 1]
            m = _SCALAR.match(row, i)
            if m is None:
                raise FieldError("expected a value")
            return row[i:m.end()]
        at = row.find(quoted, at + 1)
    return None


def field_is(row, name, value):
    """Whether top-level field `name` is the string `value` (False if absent or not a string)."""
    want = _quoted(value)
    # A field can only hold this string if the quoted value occurs, unless it is spelt with
    # escapes: most rows are answered here, without scanning.
    if want not in row and b"\\" not in row:
        return False
    raw = field(row, name)
    if raw is None or raw[:1] != b'"':
        return False
    if raw == want:
        return True
    # The rare escaped spelling: decode the string itself.
    return b"\\" in raw and _jsonio.loads(raw) == value
