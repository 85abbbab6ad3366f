#!/usr/bin/env python3
"""Weir, Spark Structured Streaming and Flink on the same windowed query, from one run.

The query (plugins/orders-error-rate/pipeline.toml): order events from files, event-time
1-minute tumbling windows on order_ts, 10-minute watermark, count(*) and errors per window,
every window final at the end. The events come from `weir gen orders N --seed S`; the
project's reference oracle, tests/oracle/orders_oracle.py, gives the exact expected windows,
and every engine's output is checked against it, window by window.

    python3 host/benches/peers/compare.py [--events 5000000] [--seed 42] [--python]

With --python the user code is Python on both sides: Weir runs plugins/orders-error-rate/
python.toml (the parser and the aggregator written with the Python SDK, in the sandbox) and
Spark computes the error flag with a Python UDF (spark_query.py --python-udf); Flink is left
out.

Not part of CI. The first run creates a virtualenv in ~/.cache/weir-tools/peers-venv with
PySpark and PyFlink from PyPI (both need Java 17, `apt install openjdk-17-jre-headless`), and
re-runs itself inside it. Weir is the release build of this checkout (`cargo xtask build`);
it generates the events even when --skip leaves it out of the race.

Measured per engine, each in its own process tree, one after the other on the same files:
  query events/s  events / the engine's own time for the query (Weir's run summary; Spark
                  from start() to the end of awaitTermination(); Flink from executing the
                  SQL to the last collected row)
  whole events/s  events / wall time of the whole process (JVM start, planning included)
  peak RSS        the largest sum of RSS over the process and its children, sampled every
                  50 ms
"""
import argparse
import csv
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", "..", ".."))
VENV = os.path.expanduser("~/.cache/weir-tools/peers-venv")
PEERS = ["pyspark==4.3.0", "apache-flink==2.3.0", "psutil"]
ORACLE = os.path.join(ROOT, "tests", "oracle", "orders_oracle.py")
WINDOW_MS = 60_000


def in_venv():
    """Re-runs this script with the virtualenv's Python (created on first use)."""
    python = os.path.join(VENV, "bin", "python")
    if os.path.realpath(sys.prefix) == os.path.realpath(VENV):
        return
    if not os.path.exists(python):
        print(f"creating {VENV} with {', '.join(PEERS)} (once)", file=sys.stderr)
        subprocess.check_call([sys.executable, "-m", "venv", VENV])
    subprocess.check_call([python, "-m", "pip", "install", "-q", *PEERS])
    os.execv(python, [python, *sys.argv])


def measure(cmd, env=None):
    """Runs cmd; returns (wall seconds, peak RSS bytes of its process tree, stdout, stderr)."""
    import psutil

    out, err = tempfile.TemporaryFile(), tempfile.TemporaryFile()
    started = time.time()
    proc = subprocess.Popen(cmd, stdout=out, stderr=err, env=env)
    ps = psutil.Process(proc.pid)
    peak = 0
    while proc.poll() is None:
        rss = 0
        try:
            for p in [ps, *ps.children(recursive=True)]:
                try:
                    rss += p.memory_info().rss
                except psutil.Error:
                    pass
        except psutil.Error:
            pass
        peak = max(peak, rss)
        time.sleep(0.05)
    wall = time.time() - started
    out.seek(0)
    err.seek(0)
    stdout, stderr = out.read().decode(errors="replace"), err.read().decode(errors="replace")
    if proc.returncode != 0:
        sys.exit(f"{cmd[0]} failed ({proc.returncode}):\n{stderr[-4000:]}")
    return wall, peak, stdout, stderr


def split(single, parts, count):
    """Cuts the events file into `count` part files of consecutive lines, for Spark's file source
    (one per micro-batch): in name order, and in modification-time order (which Spark reads them
    by), they are the single file, byte for byte."""
    with open(single, "rb") as f:
        total = sum(1 for _ in f)
    os.makedirs(parts)
    oldest = time.time() - count - 60
    with open(single, "rb") as f:
        for i in range(count):
            path = os.path.join(parts, f"part-{i:05d}.jsonl")
            with open(path, "wb") as out:
                for _ in range(total * (i + 1) // count - total * i // count):
                    out.write(f.readline())
            os.utime(path, (oldest + i, oldest + i))


def read_csv(path):
    with open(path) as f:
        return {int(r["window_start_ms"]): (int(r["count"]), int(r["errors"])) for r in csv.DictReader(f)}


def agreement(got, want):
    if got == want:
        return f"yes ({len(want)} windows)"
    missing = len(set(want) - set(got))
    extra = len(set(got) - set(want))
    differ = sum(1 for w in set(got) & set(want) if got[w] != want[w])
    return f"NO: {missing} missing, {extra} extra, {differ} differ"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--events", type=int, default=5_000_000)
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--parts", type=int, default=20, help="part files for Spark's micro-batches")
    ap.add_argument("--weir", help="the weir binary (default: the build's release/weir)")
    ap.add_argument("--skip", default="", help="comma-separated engines to leave out")
    ap.add_argument("--python", action="store_true", help="Python user code: Weir's Python plugins against a PySpark UDF")
    args = ap.parse_args()
    in_venv()

    target = os.environ.get("CARGO_TARGET_DIR", os.path.join(ROOT, "target"))
    weir = args.weir or os.path.join(target, "release", "weir")
    if not os.path.exists(weir):
        sys.exit(f"{weir} not found: build it with `cargo xtask build`, or pass --weir")
    work = tempfile.mkdtemp(prefix="weir-peers-")
    try:
        single = os.path.join(work, "orders.jsonl")
        subprocess.check_call([weir, "gen", "orders", str(args.events), "--seed", str(args.seed), "--out", single],
                              stdout=subprocess.DEVNULL)
        parts = os.path.join(work, "parts")
        split(single, parts, args.parts)
        oracle = os.path.join(work, "oracle.csv")
        subprocess.check_call([sys.executable, ORACLE, single, "-o", oracle], stderr=subprocess.DEVNULL)
        want = read_csv(oracle)

        # Spark's sentinel part: one event a day after the data, last by name and mtime.
        max_ts = max(want) + WINDOW_MS
        sentinel = max_ts + 86_400_000
        time.sleep(0.01)
        with open(os.path.join(parts, "part-99999-sentinel.jsonl"), "w") as f:
            f.write(json.dumps({"order_id": 0, "user_id": 0, "status": "OK", "amount": 0.0,
                                "order_ts": sentinel}) + "\n")
        cut = sentinel - sentinel % WINDOW_MS

        results = []
        skip = set(filter(None, args.skip.split(",")))
        if args.python:
            skip.add("flink")
        if "weir" not in skip:
            rows = os.path.join(work, "weir.jsonl")
            pipeline = os.path.join(ROOT, "plugins", "orders-error-rate", "python.toml" if args.python else "pipeline.toml")
            wall, rss, _, err = measure([weir, "test", pipeline, "--events", single, "--out", rows])
            m = re.search(r"input rows in ([0-9.]+)s", err)
            query = float(m.group(1)) if m else wall
            got = {}
            with open(rows) as f:
                for line in f:
                    r = json.loads(line)
                    got[r["window_start"]] = (r["count"], r["errors"])
            results.append(("Weir", query, wall, rss, agreement(got, want)))
        for name, script, src, extra in [
            ("Spark", "spark_query.py", parts, [str(cut)] + (["--python-udf"] if args.python else [])),
            ("Flink", "flink_query.py", single, []),
        ]:
            if name.lower() in skip:
                continue
            out = os.path.join(work, name.lower() + ".csv")
            wall, rss, stdout, _ = measure([sys.executable, os.path.join(HERE, script), src, out, *extra])
            query = json.loads(stdout.strip().splitlines()[-1])["query_s"]
            results.append((name, query, wall, rss, agreement(read_csv(out), want)))

        n = args.events
        print(f"\n{n:,} events (weir gen orders {n} --seed {args.seed}), {os.cpu_count()} cores; "
              f"oracle: {len(want)} windows\n")
        print("| engine | events/s (query) | events/s (whole process) | wall time | peak RSS | matches the oracle |")
        print("|---|---|---|---|---|---|")
        for name, query, wall, rss, ok in results:
            print(f"| {name} | {n / query:,.0f} | {n / wall:,.0f} | {wall:.1f} s | {rss / 2**20:,.0f} MB | {ok} |")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
