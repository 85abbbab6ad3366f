#!/usr/bin/env python3
"""The reference oracle: the windows the reference query must output, from its documented rules.

The query is `plugins/orders-error-rate/pipeline.toml` run by `weir test` (the README's "A
pipeline"): order events from a recorded-events file, event time `order_ts`, a 10-minute
watermark, 1-minute tumbling event-time windows, per window `count`, `errors` (status "ERROR")
and `error_rate` = errors / count, output mode append, and the end-of-input flush of a one-off
run. It is computed here from `docs/semantics.md`, independently of the engine's code, with
Python's standard library only:

- Batches ("Event time and the watermark"): the file is replayed in bounded batches of 64
  records, then 128, doubling up to `max_offsets_per_trigger` (the pipeline leaves it at its
  default, 50,000; `docs/pipeline.md`); a batch also ends once its records' values reach 1 GiB
  (`docs/security.md`). A record is a non-blank line (`docs/recorded-events.md`,
  the `lines` layout: one partition). A line that is not UTF-8 JSON text of an object with an
  integer `order_ts` is a dead letter ("Bad input"): it takes its place in its batch but has no
  event.
- Watermark: the largest event time seen minus the delay; it moves only forward and only once
  per batch, at the batch's end. No watermark exists before the first batch ends, so nothing in
  the first batch is late.
- Lateness ("Lateness"): an event is late when its window's end plus `allowed_lateness` (0) is
  at or below the watermark in force for its batch (the one the previous batch reached). A late
  event counts in no window (the pipeline writes it to its late-event file).
- Windows ("Windows"): half-open [start, end) in epoch ms, tumbling, aligned to the epoch.
- Output ("Output modes", append; "End of bounded input"): a window is emitted once, in the
  batch whose new watermark reaches its end plus the lateness; at the end of the input every
  window still open is emitted (the flush of `weir test`).

Usage:

    python3 tests/oracle/orders_oracle.py EVENTS.jsonl [-o OUT.csv] [--max-offsets-per-trigger N]

Writes CSV (to stdout, or OUT): the header `window_start_ms,window_end_ms,count,errors,error_rate`,
then one line per window, by start. A summary (records, late events, dead letters, windows)
goes to stderr. `weir gen orders N --seed S --out EVENTS.jsonl` makes the reference workload;
`tests/oracle/test_orders_oracle.py` tests this file (`python3 -m unittest discover -s
tests/oracle`).
"""

import argparse
import json
import sys

WINDOW_MS = 60_000  # [window] size = "1 minute"
DELAY_MS = 600_000  # [watermark] delay = "10 minutes"
ALLOWED_LATENESS_MS = 0  # [watermark] allowed_lateness, unset
ERROR_STATUS = "ERROR"  # [aggregate] config error_status
FIRST_BATCH = 64  # semantics.md: batches start at 64 records and double
MAX_OFFSETS_PER_TRIGGER = 50_000  # pipeline.md: the default, which the pipeline keeps
MAX_BATCH_BYTES = 1 << 30  # security.md: a source batch ends at 1 GiB of record values

HEADER = "window_start_ms,window_end_ms,count,errors,error_rate"


def batch_sizes(max_offsets_per_trigger):
    """64, 128, 256, ... records, each at most `max_offsets_per_trigger`, forever."""
    size = FIRST_BATCH
    while True:
        yield min(size, max_offsets_per_trigger)
        size *= 2


def value(line):
    """A record's value: its line without the newline (and a carriage return before it)."""
    if line.endswith(b"\n"):
        line = line[:-1]
    if line.endswith(b"\r"):
        line = line[:-1]
    return line


def batches(records, max_offsets_per_trigger, max_bytes=MAX_BATCH_BYTES):
    """The records' values cut into the replay's batches, in order."""
    sizes = batch_sizes(max_offsets_per_trigger)
    batch, size, held = [], next(sizes), 0
    for record in records:
        batch.append(record)
        held += len(record)
        if len(batch) == size or held >= max_bytes:
            yield batch
            batch, size, held = [], next(sizes), 0
    if batch:
        yield batch


def event_of(record):
    """(event time, is an error) of a record's value (bytes), or None for a dead letter."""
    try:
        order = json.loads(record.decode("utf-8"))
    except ValueError:  # UnicodeDecodeError included
        return None
    if not isinstance(order, dict):
        return None
    ts = order.get("order_ts")
    if isinstance(ts, bool) or not isinstance(ts, int) or not -(2**63) <= ts < 2**63:
        return None
    return ts, order.get("status") == ERROR_STATUS


def window_start(ts):
    """The start of the tumbling window holding `ts` (floor division: right for negatives too)."""
    return ts // WINDOW_MS * WINDOW_MS


class Result:
    """The emitted windows and the counts beside them."""

    def __init__(self):
        self.windows = {}  # start -> (count, errors), each window once
        self.records = 0
        self.events = 0
        self.late = 0
        self.dead_letters = 0
        self.batches = 0
        self.watermark = None  # the last batch's, None while there is none

    def emit(self, start, acc):
        assert start not in self.windows, f"window {start} emitted twice"
        self.windows[start] = acc

    def rows(self):
        """(start, end, count, errors, error_rate) per window, by start."""
        return [(s, s + WINDOW_MS, c, e, e / c) for s, (c, e) in sorted(self.windows.items())]


def run(lines, max_offsets_per_trigger=MAX_OFFSETS_PER_TRIGGER, flush=True):
    """The reference query over `lines`: the file's lines (bytes, or str), newlines or not."""
    records = (value(line.encode("utf-8") if isinstance(line, str) else line) for line in lines)
    records = (record for record in records if record.strip(b" \t\n\r\x0c"))  # blank: skipped
    result = Result()
    open_windows = {}  # start -> [count, errors]
    max_ts = None  # largest event time seen
    watermark = None  # in force for the next batch; None: there is none yet
    for batch in batches(records, max_offsets_per_trigger):
        result.batches += 1
        for record in batch:
            result.records += 1
            event = event_of(record)
            if event is None:
                result.dead_letters += 1
                continue
            ts, error = event
            max_ts = ts if max_ts is None else max(max_ts, ts)
            start = window_start(ts)
            if watermark is not None and start + WINDOW_MS + ALLOWED_LATENESS_MS <= watermark:
                result.late += 1
                continue
            result.events += 1
            acc = open_windows.setdefault(start, [0, 0])
            acc[0] += 1
            acc[1] += error
        # The batch's end: the watermark moves (forward only), then the windows it makes final.
        if max_ts is not None:
            candidate = max_ts - DELAY_MS
            watermark = candidate if watermark is None else max(watermark, candidate)
            for start in sorted(s for s in open_windows if s + WINDOW_MS + ALLOWED_LATENESS_MS <= watermark):
                result.emit(start, tuple(open_windows.pop(start)))
    result.watermark = watermark
    if flush:
        for start in sorted(open_windows):
            result.emit(start, tuple(open_windows.pop(start)))
    return result


def write_csv(result, out):
    out.write(HEADER + "\n")
    for start, end, count, errors, rate in result.rows():
        out.write(f"{start},{end},{count},{errors},{rate!r}\n")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("events", help="recorded order events, one JSON object per line")
    ap.add_argument("-o", "--out", help="write the CSV here instead of stdout")
    ap.add_argument("--max-offsets-per-trigger", type=int, default=MAX_OFFSETS_PER_TRIGGER,
                    help="most records per batch, as the pipeline's [source] key (default: %(default)s)")
    args = ap.parse_args(argv)
    if args.max_offsets_per_trigger < 1:
        ap.error("--max-offsets-per-trigger must be at least 1")
    with open(args.events, "rb") as f:
        result = run(f, args.max_offsets_per_trigger)
    if args.out:
        with open(args.out, "w") as out:
            write_csv(result, out)
    else:
        write_csv(result, sys.stdout)
    print(f"{result.records} records in {result.batches} batches: {result.events} in windows, "
          f"{result.late} late, {result.dead_letters} dead letters; {len(result.windows)} windows",
          file=sys.stderr)


if __name__ == "__main__":
    main()
