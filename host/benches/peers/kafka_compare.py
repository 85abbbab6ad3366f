#!/usr/bin/env python3
"""Weir, Kafka Streams 4.4 and Flink on the same Apache Kafka topic and the same query.

A benchmark, not a test (not in CI). Notes and the latest numbers: KAFKA.md beside this file.

    python3 host/benches/peers/kafka_compare.py --events 1000000 --partitions 6 [--skip flink,...]

1. Builds the Maven project in kafka/ (once; output under ~/.cache/weir-tools/peers-kafka).
2. Starts one Apache Kafka 4.4 node (KRaft, broker and controller in one process, as
   tests/common/apache_kafka.rs does) on loopback ports, with its data in a temp directory and a
   1 GiB heap: the jars `cargo xtask setup` put in ~/.cache/weir-tools/kafka-4.4.0/libs.
3. Generates the events (`weir gen orders N --seed S`), computes the oracle's windows
   (tests/oracle/orders_oracle.py), and produces the events once into topic `orders` (P
   partitions; key user_id, record timestamp order_ts), then one closer order per partition a day
   after the data: its event time closes every window of the data in the engines that close
   windows on event time only. Windows at or after the closer's are dropped from every output.
4. Runs each engine configuration on the topic from the beginning, one at a time (rounds
   interleaved), and checks every output window by window against the oracle:
     weir           one process, `[trigger] mode = "available-now"`: ends by itself
     weir-group1    `weir run --group`, one process (two stages through Kafka); SIGTERM once
                    every window is in the output
     weir-group2    the same group, two processes
     kstreams-tN    Kafka Streams, N stream threads (--ks-threads), ends once it has seen the
                    closers and written the windows
     flink          Flink SQL through the Table API, local mini cluster in one JVM, parallelism
                    1, Kafka source bounded at the latest offsets: ends by itself
   and the per-user sessions (gap 1 minute, 10-minute grace), unless --no-sessions:
     kstreams-sessions-tN, weir-sessions (one process)
   checked against this script's own session reference (the project's oracle has no sessions).

Measured per run, for the engine's own processes only (the broker is excluded):
  events/s          events / wall time from the engine's start (process spawn, JVM start
                    included) to the last window written
  events/CPU-s      events / (user + system CPU time of the engine's processes, whole life,
                    from wait4's rusage)
  peak RSS          the largest sum of RSS over the engine's processes (and children), sampled
                    every 100 ms
  matches           the engine's windows against the oracle's, window by window (count and
                    errors), exactly
and beside them, not counted in the engine's numbers: the broker's CPU time during the run, and
the other load (the machine's busy time less the engine's, the broker's and this script's, over
the run's wall time, in cores): anything else running (a build, another benchmark) shows there,
and numbers taken with it well above 0 are not worth keeping.
"""
# The broker, the workload and oracle, the process measurements and the engines are in the
# kafkabench package beside this file (kafka_latency.py uses the same broker); this script is the
# command line, the order of the steps and the report.
import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time

from kafkabench import KAFKA_LIBS, find_weir, log
from kafkabench.broker import Broker
from kafkabench.peers import DIST, Ctx, build_java, classpath, json_line, run_flink, run_kstreams, run_weir
from kafkabench.procs import Run, clean_up
from kafkabench.workload import (ORACLE, TOPIC, WINDOW_MS, gen_orders_py, read_oracle,
                                 session_reference)


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--events", type=int, default=1_000_000)
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--partitions", type=int, default=6)
    ap.add_argument("--rounds", type=int, default=1, help="runs of each configuration, interleaved")
    ap.add_argument("--skip", default="", help="comma-separated: weir, kstreams, flink, sessions, or a configuration "
                                               "(weir-group2, kstreams-t2, ...)")
    ap.add_argument("--ks-threads", default="1", help="comma-separated num.stream.threads values (default 1)")
    ap.add_argument("--ks-guarantee", default="at_least_once", help="Kafka Streams' processing.guarantee")
    ap.add_argument("--ks-commit-ms", type=int, default=1000,
                    help="Kafka Streams' commit.interval.ms (its default, 30000, holds the last windows in the "
                         "cache for up to 30 s)")
    ap.add_argument("--java-opts", default="", help="extra JVM options for Kafka Streams and Flink, e.g. -Xmx2g")
    ap.add_argument("--weir", help="the weir binary (default: release/weir in $CARGO_TARGET_DIR, else in target/, "
                                   "else in ~/.cache/weir-target)")
    ap.add_argument("--timeout", type=int, default=1800, help="seconds per run")
    ap.add_argument("--keep", action="store_true", help="keep the work directory (logs, outputs)")
    return ap.parse_args()


def choose_weir(given, skip):
    """The weir binary, whether it is there, and the notes for the report: without the binary or
    the plugins, Weir's configurations join `skip`."""
    weir = find_weir(given)
    have_weir = os.path.exists(weir)
    missing_plugins = [p for p in ("orders_json.wasm", "error_rate.wasm", "jsonl_file_sink.wasm")
                       if not os.path.exists(os.path.join(DIST, p))]
    notes = []
    if "weir" not in skip and (not have_weir or missing_plugins):
        why = f"{weir} not found" if not have_weir else f"plugins/dist lacks {', '.join(missing_plugins)}"
        notes.append(f"Weir left out: {why} (`cargo xtask build`)")
        skip.add("weir")
    return weir, have_weir, notes


def context(args, weir):
    c = Ctx()
    c.work = tempfile.mkdtemp(prefix="weir-kafka-peers-")
    c.partitions, c.timeout, c.weir = args.partitions, args.timeout, weir
    c.ks_guarantee, c.ks_commit_ms = args.ks_guarantee, args.ks_commit_ms
    c.java_opts = args.java_opts.split()
    return c


def generate(args, weir, have_weir, events):
    """The events into the file `events`; returns how they were made, for the report."""
    t = time.time()
    if have_weir:
        subprocess.check_call([weir, "gen", "orders", str(args.events), "--seed", str(args.seed), "--out", events],
                              stdout=subprocess.DEVNULL)
        gen = f"weir gen orders {args.events} --seed {args.seed}"
    else:
        gen_orders_py(args.events, args.seed, events)
        gen = f"the script's port of `weir gen orders {args.events} --seed {args.seed}` (no weir binary)"
    log(f"{args.events} events generated in {time.time() - t:.1f} s ({gen})")
    return gen


def load_oracle(c, events, sessions_on):
    """The oracle's windows, the closer's time and the cut, and the session reference."""
    oracle = os.path.join(c.work, "oracle.csv")
    subprocess.check_call([sys.executable, ORACLE, events, "-o", oracle], stderr=subprocess.DEVNULL)
    c.want = read_oracle(oracle)
    # The closer: a day after the data's last window; its window and later ones are dropped.
    c.closer_ts = max(c.want) + WINDOW_MS + 86_400_000
    c.cut = c.closer_ts - c.closer_ts % WINDOW_MS
    if sessions_on:
        c.sessions, late = session_reference(events)
        log(f"oracle: {len(c.want)} windows; session reference: {len(c.sessions)} sessions ({late} late events)")


def produce(c, broker, events, partitions):
    """The events, then the closers, into the topic; returns the events per partition."""
    c.brokers = broker.brokers
    Run.broker_pid = broker.proc.pid
    t = time.time()
    p = subprocess.run(["java", "-cp", classpath("streams"), "weir.peers.Produce", c.brokers, TOPIC, events,
                        str(partitions), str(c.closer_ts)], capture_output=True, text=True)
    if p.returncode:
        sys.exit(f"producing failed:\n{p.stderr[-3000:]}")
    produced = json_line(p.stdout)
    sizes = produced["per_partition"]
    log(f"produced {produced['records']} events + {partitions} closers into {TOPIC} "
        f"({partitions} partitions: {sizes} events) in {time.time() - t:.1f} s")
    return sizes


def configurations(c, args, skip, sessions_on):
    """(name, run(tag)) for every configuration not skipped, in the order they run each round."""
    configs = []
    if "weir" not in skip:
        configs += [("weir", lambda tag: run_weir(c, "weir", tag)),
                    ("weir-group1", lambda tag: run_weir(c, "weir-group1", tag)),
                    ("weir-group2", lambda tag: run_weir(c, "weir-group2", tag))]
    if "kstreams" not in skip:
        for n in args.ks_threads.split(","):
            configs.append((f"kstreams-t{n}", lambda tag, n=n: run_kstreams(c, "windows", int(n), tag)))
    if "flink" not in skip:
        configs.append(("flink", lambda tag: run_flink(c, 1, tag)))
    if sessions_on:
        if "kstreams" not in skip:
            for n in args.ks_threads.split(","):
                configs.append((f"kstreams-sessions-t{n}",
                                lambda tag, n=n: run_kstreams(c, "sessions", int(n), tag)))
        if "weir" not in skip:
            configs.append(("weir-sessions", lambda tag: run_weir(c, "weir-sessions", tag)))
    return [(n, f) for n, f in configs if n not in skip]


def run_rounds(c, args, broker, configs):
    """Every configuration once per round, rounds interleaved; returns name -> rows."""
    results = {}
    for rnd in range(args.rounds):
        for name, fn in configs:
            if broker.proc.poll() is not None:
                sys.exit(f"the Kafka broker is gone (exit {broker.proc.returncode}; its log: "
                         f"{broker.dir}/logs/server.log); no run after it would mean anything")
            log(f"round {rnd + 1}: {name}")
            r, last, ok = fn(f"r{rnd + 1}")
            rate = args.events / (last - r.started) if last else None
            row = dict(rate=rate, cpu=r.cpu, per_cpu=args.events / r.cpu if r.cpu else None, rss=r.peak,
                       to_last=(last - r.started) if last else None, whole=r.ended - r.started, ok=ok,
                       broker=r.broker_cpu, other=r.other_cores)
            results.setdefault(name, []).append(row)
            log(f"  {name}: " + ", ".join(f"{k}={v:,.2f}" if isinstance(v, float) else f"{k}={v}"
                                          for k, v in row.items()))
            if args.keep:
                log(f"  logs (*.err, *.out) in {c.work}")
    return results


def med(rows, key):
    vals = [r[key] for r in rows if r[key] is not None]
    return statistics.median(vals) if vals else None


def fmt(v, spec):
    return "—" if v is None else format(v, spec)


def report(c, args, gen, sessions_on, sizes, notes, configs, results):
    """The table on stdout: medians over the rounds, every round's agreement."""
    n = args.events
    print(f"\n{n:,} events ({gen}) in `{TOPIC}`, {args.partitions} partitions, one Apache Kafka 4.4.0 "
          f"node (1 GiB heap) on the same machine; {os.cpu_count()} cores; oracle: {len(c.want)} windows"
          + (f"; session reference: {len(c.sessions)} sessions" if sessions_on else "")
          + (f"; {args.rounds} rounds, medians" if args.rounds > 1 else "")
          + f"\n\nevents per partition (keyed by user_id): {min(sizes):,} to {max(sizes):,}\n")
    for note in notes:
        print(f"- {note}")
    print("| engine | events/s | events per CPU-s | CPU s | peak RSS | to last window | whole run "
          "| matches the oracle | broker CPU s | other load |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for name, _ in configs:
        rows = results.get(name, [])
        oks = sorted(set(r["ok"] for r in rows))
        print(f"| {name} | {fmt(med(rows, 'rate'), ',.0f')} | {fmt(med(rows, 'per_cpu'), ',.0f')} "
              f"| {fmt(med(rows, 'cpu'), '.1f')} | {fmt(max(r['rss'] for r in rows) / 2**20, ',.0f')} MB "
              f"| {fmt(med(rows, 'to_last'), '.1f')} s | {fmt(med(rows, 'whole'), '.1f')} s | {'; '.join(oks)} "
              f"| {fmt(med(rows, 'broker'), '.1f')} | {fmt(max(r['other'] for r in rows), '.2f')} cores |")


def main():
    args = parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit("stopped by SIGTERM"))
    skip = set(filter(None, args.skip.split(",")))
    weir, have_weir, notes = choose_weir(args.weir, skip)
    libs = KAFKA_LIBS
    if not os.path.isdir(libs):
        sys.exit(f"{libs} not found: `cargo xtask setup` fetches the Apache Kafka broker")

    build_java()
    c = context(args, weir)
    broker = None
    try:
        events = os.path.join(c.work, "orders.jsonl")
        gen = generate(args, weir, have_weir, events)
        sessions_on = "sessions" not in skip
        load_oracle(c, events, sessions_on)
        broker = Broker(libs, os.path.join(c.work, "broker"))
        sizes = produce(c, broker, events, args.partitions)
        configs = configurations(c, args, skip, sessions_on)
        results = run_rounds(c, args, broker, configs)
        report(c, args, gen, sessions_on, sizes, notes, configs, results)
    finally:
        clean_up(broker, c.work, args.keep)


if __name__ == "__main__":
    main()
