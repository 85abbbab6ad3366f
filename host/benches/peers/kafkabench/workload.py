"""The workload both sides of kafka_compare.py see, and what a right answer is.

The events are the project's order events (`weir gen orders N --seed S`, or this module's port
of it when no weir binary is there: the same bytes). The windows' right answer is the project's
oracle (tests/oracle/orders_oracle.py, read by `read_oracle`); the per-user sessions have no
oracle in the project, so `session_reference` computes them here. `agreement` compares an
engine's output with either, exactly, and says what differs: a benchmark row is only worth its
speed if it computed the same result.
"""
import bisect
import csv
import json
import os

from . import ROOT

ORACLE = os.path.join(ROOT, "tests", "oracle", "orders_oracle.py")
WINDOW_MS = 60_000
DELAY_MS = 600_000
GAP_MS = 60_000
TOPIC = "orders"


def gen_orders_py(n, seed, path):
    """host/types/src/workload.rs's `orders`, line for line, for when no weir binary is there
    (kafka_compare.py's report says which of the two wrote the events)."""
    users, zipf_s = 100_000, 1.1
    mask = (1 << 64) - 1
    cdf, acc = [], 0.0
    for k in range(1, users + 1):
        acc += float(k) ** -zipf_s
        cdf.append(acc)
    total = acc
    state = seed & mask

    def nxt():
        nonlocal state
        state = (state + 0x9E3779B97F4A7C15) & mask
        z = state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & mask
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & mask
        z ^= z >> 31
        return (z >> 11) / 9007199254740992.0

    start, late_after, p_late = 1_793_491_200_000, n // 4, 0.001 / 0.75
    max_ts = None
    with open(path, "w") as out:
        buf = []
        for i in range(n):
            u = nxt() * total
            rank = min(bisect.bisect_left(cdf, u), users - 1)
            user_id = (rank * 48_271) % users + 1
            r = nxt()
            status = "ERROR" if r < 0.02 else "PENDING" if r < 0.10 else "OK"
            a = nxt()
            cents = 100 + int(a * a * 50_000.0)
            d = nxt()
            if max_ts is not None and i >= late_after and nxt() < p_late:
                ts = max_ts - 7_200_000 - int(d * 3_600_000.0)
            else:
                ts = start + i - int(d * 30_000.0)
            max_ts = ts if max_ts is None else max(max_ts, ts)
            buf.append(f'{{"order_id":{i + 1},"user_id":{user_id},"status":"{status}",'
                       f'"amount":{cents // 100}.{cents % 100:02d},"order_ts":{ts}}}\n')
            if len(buf) >= 10_000:
                out.write("".join(buf))
                buf = []
        out.write("".join(buf))


def read_oracle(path):
    with open(path) as f:
        return {int(r["window_start_ms"]): (int(r["count"]), int(r["errors"])) for r in csv.DictReader(f)}


def session_reference(events_path):
    """Per-user sessions (gap 1 minute, sessions that touch merge, as docs/semantics.md and Kafka
    Streams both say), each (user, first event time) -> (count, errors). Not the project's
    oracle: an event is dropped as late when its time + gap + 10 minutes is at or below the
    largest event time before it in the file (Weir's rule for sessions with the watermark taken
    per event rather than per batch); the generator's late events are hours late and the others
    at most 30 s out of order, so the two rules drop the same events."""
    per_user = {}
    max_ts = None
    late = 0
    with open(events_path, "rb") as f:
        for line in f:
            o = json.loads(line)
            ts = o["order_ts"]
            if max_ts is not None and ts + GAP_MS + DELAY_MS <= max_ts:
                late += 1
                continue
            max_ts = ts if max_ts is None else max(max_ts, ts)
            per_user.setdefault(o["user_id"], []).append((ts, o["status"] == "ERROR"))
    sessions = {}
    for user, evs in per_user.items():
        evs.sort()
        start, last, count, errors = None, None, 0, 0
        for ts, err in evs:
            if start is not None and ts - last > GAP_MS:
                sessions[(user, start)] = (count, errors)
                start, count, errors = None, 0, 0
            if start is None:
                start = ts
            last = ts
            count += 1
            errors += err
        sessions[(user, start)] = (count, errors)
    return sessions, late


def agreement(got, want, dups=0, unit="windows"):
    """`yes (N windows)`, or what differs: windows missing, extra (those before the first
    expected one are late events the engine kept, counted with their events), differing."""
    if got == want and not dups:
        return f"yes ({len(want)} {unit})"
    missing = set(want) - set(got)
    extra = set(got) - set(want)
    differ = [w for w in set(got) & set(want) if got[w] != want[w]]
    parts = [f"{len(missing)} missing"] if missing else []
    if extra:
        first = min(want) if want else None
        early = [w for w in extra if unit == "windows" and first is not None and w < first]
        parts.append(f"{len(extra)} extra")
        if early:
            parts[-1] += f" ({len(early)} before the data: {sum(got[w][0] for w in early)} late events kept)"
    if differ:
        fewer = sum(want[w][0] - got[w][0] for w in differ if got[w][0] < want[w][0])
        more = sum(got[w][0] - want[w][0] for w in differ if got[w][0] > want[w][0])
        order = sorted(want)
        at = sorted(order.index(w) + 1 for w in differ)
        where = f"window {at[0]}" if len(at) == 1 else f"windows {at[0]}..{at[-1]}"
        parts.append(f"{len(differ)} differ, {where} by start ({fewer} events fewer, {more} more)")
    if dups:
        parts.append(f"{dups} emitted twice")
    return f"NO: {', '.join(parts)} (of {len(want)} {unit})"
