#!/usr/bin/env python3
"""Parquet files and Iceberg tables against JSON-lines files: what they cost the orders pipeline.

Generates orders (`weir gen orders`) and runs, interleaved, round after round, the orders
through the standard JSON parser (`json_parser.wasm`) into:

  jsonl          the JSON-lines file sink component (plugins/jsonl-file-sink)
  parquet        the Parquet sink, one file per batch (snappy, the default)
  parquet-hour   the Parquet sink, partitioned by hour(order_ts)
  iceberg        the Iceberg sink, a local warehouse and SQLite catalog, one snapshot per batch
  iceberg-day    the Iceberg sink, the table partitioned by day(order_ts)

and reports per sink (medians over the rounds): the process's CPU-seconds (user + system), rows
per CPU-second, rows per second on the wall clock, and the bytes written.

Run from the repository root after `cargo xtask build`:
  python3 host/benches/sinks/parquet.py --events 2000000 --rounds 3

Only the standard library.
"""

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def pipeline(work, name, events, sink):
    dist = ROOT / "plugins" / "dist"
    p = work / f"{name}.toml"
    p.write_text(f"""
name = "{name}"
[source]
type = "replay"
path = "{events}"
[trigger]
mode = "available-now"
[parse]
plugin = "{dist / 'json_parser.wasm'}"
config = {{ time_field = "order_ts" }}
[sink]
{sink}
""")
    return p


def size(path):
    return sum(f.stat().st_size for f in Path(path).rglob("*") if f.is_file())


def run(weir, p, work, out):
    shutil.rmtree(out, ignore_errors=True)
    shutil.rmtree(work / "cp", ignore_errors=True)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.monotonic()
    done = subprocess.run([weir, "run", str(p), "--checkpoint", str(work / "cp")], capture_output=True, text=True)
    wall = time.monotonic() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        sys.exit(f"{p.name}: weir run failed:\n{done.stderr}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {"cpu": cpu, "wall": wall, "bytes": size(out)}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--events", type=int, default=2_000_000)
    ap.add_argument("--rounds", type=int, default=3)
    target = Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target"))
    ap.add_argument("--weir", default=str(target / "release" / "weir"))
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="weir-parquet-bench-") as tmp:
        work = Path(tmp)
        events = work / "orders.jsonl"
        subprocess.run([args.weir, "gen", "orders", str(args.events), "--seed", "42", "--out", str(events)],
                       check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        schema = ROOT / "tests" / "formats" / "order.avsc"
        out = work / "out"
        sinks = {
            "jsonl": (f'plugin = "{ROOT / "plugins" / "dist" / "jsonl_file_sink.wasm"}"\n'
                      f'config = {{ dir = "/out" }}\n'
                      f'grants.dirs = [{{ host = "{out}", guest = "/out", writable = true }}]'),
            "parquet": f'type = "parquet"\npath = "{out}"\nschema = "{schema}"',
            "parquet-hour": f'type = "parquet"\npath = "{out}"\nschema = "{schema}"\npartition_by = "hour(order_ts)"',
            "iceberg": (f'type = "iceberg"\ncatalog_uri = "sqlite:{out}/catalog.db"\nwarehouse = "{out}/wh"\n'
                        f'table = "shop.orders"\nschema = "{schema}"'),
            "iceberg-day": (f'type = "iceberg"\ncatalog_uri = "sqlite:{out}/catalog.db"\nwarehouse = "{out}/wh"\n'
                            f'table = "shop.orders"\nschema = "{schema}"\npartition_by = "day(order_ts)"'),
        }
        runs = {k: pipeline(work, k, events, v) for k, v in sinks.items()}
        results = {k: [] for k in runs}
        for _ in range(args.rounds):
            for name, p in runs.items():
                results[name].append(run(args.weir, p, work, out))
    print(f"{args.events} orders, {args.rounds} rounds interleaved, medians:")
    print(f"{'sink':<13} {'CPU-s':>7} {'rows/CPU-s':>12} {'rows/s':>11} {'MB':>7}")
    for k, rs in results.items():
        cpu, wall = statistics.median(r["cpu"] for r in rs), statistics.median(r["wall"] for r in rs)
        mb = statistics.median(r["bytes"] for r in rs) / 1e6
        print(f"{k:<13} {cpu:>7.2f} {args.events / cpu:>12,.0f} {args.events / wall:>11,.0f} {mb:>7.1f}")
    for k in ["parquet", "parquet-hour", "iceberg", "iceberg-day"]:
        ratios = [j["wall"] / p["wall"] for j, p in zip(results["jsonl"], results[k])]
        print(f"{k} rows/s as a share of jsonl's, per round: {', '.join(f'{x:.2f}' for x in ratios)}")


if __name__ == "__main__":
    main()
