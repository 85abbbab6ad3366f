"""The errors a plugin raises, one class per case of the WIT's `plugin-error` and
`record-error-kind`.

`RecordError` sends one record (or event) to the dead-letter output and lets the batch go on;
a `PluginError` fails the whole call, and the pipeline's failure policy decides what follows.
`describe` turns any other exception into a short message for either of them.
"""

import json
import os
import traceback


class RecordError(Exception):
    """What was wrong with one record. Build it with the constructors, as in the Rust SDK."""

    MALFORMED = "malformed"
    MISSING_FIELD = "missing-field"
    INVALID_VALUE = "invalid-value"

    def __init__(self, kind, message):
        if kind not in (self.MALFORMED, self.MISSING_FIELD, self.INVALID_VALUE):
            raise ValueError(f"unknown record error kind {kind!r}")
        message = str(message)  # what crosses into the WIT must be a string
        super().__init__(message)
        self.kind = kind
        self.message = message

    @classmethod
    def malformed(cls, message):
        """Not decodable at all (bad UTF-8, bad JSON, truncated)."""
        return cls(cls.MALFORMED, message)

    @classmethod
    def missing_field(cls, field):
        """A required field is absent (the message names it the way the Rust SDK does)."""
        return cls(cls.MISSING_FIELD, f"missing field `{field}`")

    @classmethod
    def invalid_value(cls, message):
        """A field has a value out of range or of the wrong type."""
        return cls(cls.INVALID_VALUE, message)

    def __repr__(self):
        return f"RecordError({self.kind!r}, {self.message!r})"

    def __eq__(self, other):
        return isinstance(other, RecordError) and (self.kind, self.message) == (other.kind, other.message)

    __hash__ = Exception.__hash__


class PluginError(Exception):
    """Why a whole call failed. Raise one of the subclasses; `case` is the WIT variant's name."""

    case = "internal"

    def __init__(self, message):
        message = str(message)
        super().__init__(message)
        self.message = message

    def __repr__(self):
        return f"{type(self).__name__}({self.message!r})"

    def __eq__(self, other):
        return type(self) is type(other) and self.message == other.message

    __hash__ = Exception.__hash__


class InvalidConfig(PluginError):
    """The `config` table in the pipeline file is missing a key or has a bad value."""

    case = "invalid-config"


class BadState(PluginError):
    """Accumulator bytes this build cannot decode."""

    case = "bad-state"


class Io(PluginError):
    """An external effect failed (a sink could not write)."""

    case = "io"


class Internal(PluginError):
    """Any other failure of the plugin's logic."""

    case = "internal"


class Unsupported(PluginError):
    """This build cannot do what was asked (e.g. migrate an unknown state version)."""

    case = "unsupported"


# Dead letters and failures are read by people in a log or a file: a type, a message and where
# it was raised is what helps; a whole traceback would be cut by the host (1 KiB) anyway.
MAX_MESSAGE = 300


_LOOPS = os.path.join("weir", "_rt.py")  # the SDK's batch loop: in every traceback, telling nothing


def describe(exc):
    """`Type: message (at file.py:12 in fn <- file.py:30 in caller)`, at most MAX_MESSAGE chars."""
    text = f"{type(exc).__name__}: {exc}"
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if not f.filename.endswith(_LOOPS)][-2:]
    if frames:
        where = " <- ".join(f"{f.filename.rsplit('/', 1)[-1]}:{f.lineno} in {f.name}" for f in reversed(frames))
        text = f"{text} (at {where})"
    return text if len(text) <= MAX_MESSAGE else text[: MAX_MESSAGE - 3] + "..."


def record_error_from(exc):
    """The dead letter for an exception plugin code raised for one record.

    The kind follows the exception: undecodable input is `malformed`, a `KeyError` (a missing key
    in the decoded row) is `missing-field`, anything else `invalid-value`, the record's data
    being the likeliest culprit.
    """
    if isinstance(exc, RecordError):
        return exc
    if isinstance(exc, (UnicodeDecodeError, json.JSONDecodeError)):
        return RecordError(RecordError.MALFORMED, describe(exc))
    if isinstance(exc, KeyError):
        return RecordError(RecordError.MISSING_FIELD, describe(exc))
    return RecordError(RecordError.INVALID_VALUE, describe(exc))


def plugin_error_from(exc):
    """The call failure for an exception raised where a record error is not possible."""
    if isinstance(exc, PluginError):
        return exc
    if isinstance(exc, OSError):
        return Io(describe(exc))
    if isinstance(exc, RecordError):
        return Internal(f"{exc.kind}: {exc.message}")
    return Internal(describe(exc))
