#!/usr/bin/env python3
"""Load on `weir serve`: N pipelines deployed and started on one service, API latency while they
run, and memory per idle pipeline.

    cargo xtask build
    python3 host/benches/serve/load.py [--pipelines 50] [--requests 2000]

Each pipeline is the orders error-rate pipeline over its own small replay file (5,000 orders),
a batch of 100 every 100 ms, so that all of them are running while the requests are timed. The script
prints the service's RSS before any pipeline exists, with all N running, and with all N
finished (idle: their sandboxes dropped), then p50/p99/max of GET /v1/pipelines/NAME and of
GET /v1/pipelines while the N run. Uses only the standard library.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
TARGET = os.environ.get("CARGO_TARGET_DIR", os.path.join(ROOT, "target"))
WEIR = os.path.join(TARGET, "release", "weir")
DIST = os.path.join(ROOT, "plugins", "dist")

PIPELINE = """name = "{name}"
[source]
type = "replay"
path = "{name}.jsonl"
max_offsets_per_trigger = 100
[trigger]
mode = "processing-time"
interval = "100ms"
[parse]
plugin = "orders-json"
parallelism = 1
limits = {{ max_memory_mb = 64 }}
[watermark]
delay = "10 minutes"
flush_at_end = true
[window]
type = "tumbling"
size = "1 minute"
[aggregate]
plugin = "error-rate"
limits = {{ max_memory_mb = 64 }}
[sink]
plugin = "file-sink"
config = {{ dir = "/out" }}
grants.dirs = [{{ host = "out/{name}", guest = "/out", writable = true }}]
limits = {{ max_memory_mb = 64 }}
"""


def call(base, method, path, token, body=None):
    req = urllib.request.Request(base + path, data=body, method=method)
    req.add_header("Authorization", "Bearer " + token)
    try:
        with urllib.request.urlopen(req) as r:
            data = r.read()
            return json.loads(data) if data else None
    except urllib.error.HTTPError as e:
        sys.exit(f"{method} {path}: {e.code} {e.read().decode()}")


def rss_mb(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(len(xs) * p))]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--pipelines", type=int, default=50)
    ap.add_argument("--requests", type=int, default=2000)
    args = ap.parse_args()
    work = tempfile.mkdtemp(prefix="weir-serve-load-")
    admin = "admin-token-for-the-load-bench-0123456789"
    with open(os.path.join(work, "admin"), "w") as f:
        f.write(admin + "\n")
    server = subprocess.Popen(
        [WEIR, "serve", "--data", os.path.join(work, "data"), "--listen", "127.0.0.1:0",
         "--admin-token-file", os.path.join(work, "admin")],
        stderr=subprocess.PIPE, text=True, env={**os.environ, "WEIR_LOG": "warn"})
    for line in server.stderr:
        if line.startswith("weir serve: listening on "):
            base = line.split()[-1]
            break
    else:
        sys.exit("weir serve exited")
    try:
        call(base, "POST", "/v1/tenants", admin,
             json.dumps({"name": "load", "quotas": {"max_pipelines": args.pipelines,
                                                   "max_plugin_memory_mb": 256 * args.pipelines}}).encode())
        token = call(base, "POST", "/v1/tenants/load/tokens", admin)["token"]
        for name, file in [("orders-json", "orders_json"), ("error-rate", "error_rate"), ("file-sink", "jsonl_file_sink")]:
            with open(os.path.join(DIST, file + ".wasm"), "rb") as f:
                call(base, "PUT", f"/v1/plugins/{name}", token, f.read())
        rss_empty = rss_mb(server.pid)
        for i in range(args.pipelines):
            name = f"p{i:03d}"
            orders = subprocess.run([WEIR, "gen", "orders", "5000", "--seed", str(i)], capture_output=True, check=True).stdout
            call(base, "PUT", f"/v1/files/{name}.jsonl", token, orders)
        started = time.time()
        for i in range(args.pipelines):
            name = f"p{i:03d}"
            call(base, "PUT", f"/v1/pipelines/{name}", token, PIPELINE.format(name=name).encode())
        deploy_s = time.time() - started
        rss_running = rss_mb(server.pid)
        one, every = [], []
        for i in range(args.requests):
            t = time.perf_counter()
            call(base, "GET", f"/v1/pipelines/p{i % args.pipelines:03d}", token)
            one.append((time.perf_counter() - t) * 1e3)
            if i % 20 == 0:
                t = time.perf_counter()
                call(base, "GET", "/v1/pipelines", token)
                every.append((time.perf_counter() - t) * 1e3)
        states = [p["state"] for p in call(base, "GET", "/v1/pipelines", token)["pipelines"]]
        running_while_timed = sum(s != "finished" for s in states)
        while any(s != "finished" for s in states):
            time.sleep(0.2)
            states = [p["state"] for p in call(base, "GET", "/v1/pipelines", token)["pipelines"]]
        rss_idle = rss_mb(server.pid)
        print(f"{args.pipelines} pipelines deployed and started in {deploy_s:.1f} s "
              f"({running_while_timed} still running when the timing ended)")
        print(f"GET /v1/pipelines/NAME ({len(one)}): p50 {statistics.median(one):.2f} ms, "
              f"p99 {pct(one, 0.99):.2f} ms, max {max(one):.2f} ms")
        print(f"GET /v1/pipelines ({len(every)}): p50 {statistics.median(every):.2f} ms, "
              f"p99 {pct(every, 0.99):.2f} ms, max {max(every):.2f} ms")
        print(f"RSS: {rss_empty:.0f} MB with no pipeline, {rss_running:.0f} MB with {args.pipelines} running, "
              f"{rss_idle:.0f} MB with them finished: "
              f"{(rss_idle - rss_empty) / args.pipelines:.2f} MB per idle pipeline")
    finally:
        server.terminate()
        server.wait()


if __name__ == "__main__":
    main()
