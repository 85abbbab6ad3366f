"""The plugin's configuration: the `config` table of its stage in the pipeline file.

The SDK notes every key a plugin reads. A key the plugin never read by the time its constructor
returns is a typo or a setting this build does not have, and the SDK refuses it as an
`invalid-config` error naming the key (and the closest key the plugin does read), word for word
as the Rust SDK: a pipeline with `error_statsu = "PENDING"` must not run with the default.
"""

from collections.abc import Mapping

from . import _jsonio
from .errors import InvalidConfig

_MISSING = object()

# What a pipeline file's TOML value decodes to, by the name a message should use for it.
_KINDS = ((bool, "a boolean"), (int, "an integer"), (float, "a float"), (str, "a string"),
          (list, "an array"), (dict, "a table"))


class Config(Mapping):
    """The `config` table, a read-only dict: `config["key"]`, `config.get(key, default, type=…)`,
    `key in config`, iteration. Every key looked up counts as read (`table()` reads them all)."""

    def __getitem__(self, key):
        self._read.add(key)
        return self._table[key]

    def __iter__(self):
        return iter(self._table)

    def __len__(self):
        return len(self._table)

    def __init__(self, table):
        if not isinstance(table, dict):
            raise InvalidConfig(f"expected a table, got {_jsonio.dumps(table).decode()}")
        self._table = table
        self._read = set()  # keys the plugin asked for, present or not

    @classmethod
    def from_json(cls, text):
        try:
            return cls(_jsonio.loads(text))
        except ValueError as e:
            raise InvalidConfig(str(e)) from None

    def get(self, key, default=None, type=None):
        """The value of `key`, or `default` when the table does not have it.

        With `type` (bool, int, float, str, list or dict) a value of another type is refused as
        `invalid-config` naming the key; an integer is accepted where a float is asked for.
        """
        self._read.add(key)
        if key not in self._table:
            return default
        value = self._table[key]
        if type is not None:
            value = _checked(key, value, type)
        return value

    def __contains__(self, key):
        self._read.add(key)
        return key in self._table

    def table(self):
        """The whole table, for a plugin that takes free-form settings: every key counts as read."""
        self._read.update(self._table)
        return dict(self._table)

    def check_all_read(self):
        """Refuses the first key (in sorted order, as the Rust SDK) the plugin never read."""
        unread = next((k for k in sorted(self._table) if k not in self._read), None)
        if unread is None:
            return
        read = sorted(self._read)
        close = min(read, key=lambda k: distance(k, unread), default=None)
        if close is not None and distance(close, unread) <= 2:
            hint = f"did you mean `{close}`?"
        elif not read:
            hint = "this plugin reads no configuration"
        else:
            hint = "this plugin reads " + ", ".join(f"`{k}`" for k in read)
        raise InvalidConfig(f"config.{unread}: unknown key; {hint}")


def _checked(key, value, want):
    if want is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    # bool is an int in Python, not in TOML.
    ok = isinstance(value, want) and not (want is int and isinstance(value, bool))
    if not ok:
        wanted = dict(_KINDS).get(want, want.__name__)
        got = next((name for t, name in _KINDS if isinstance(value, t)), type(value).__name__)
        raise InvalidConfig(f"config.{key}: expected {wanted}, got {got} {_jsonio.dumps(value).decode()}")
    return value


def distance(a, b):
    """Edit distance (Levenshtein), for the "did you mean" hint."""
    row = list(range(len(b) + 1))
    for i, ca in enumerate(a):
        prev, row[0] = row[0], i + 1
        for j, cb in enumerate(b):
            here = row[j + 1]
            row[j + 1] = min(prev + (ca != cb), row[j] + 1, here + 1)
            prev = here
    return row[len(b)]
