#!/usr/bin/env python3
"""Weir's latency and throughput on one Apache Kafka node, each beside bare Kafka clients.

A benchmark, not a test (not in CI). Notes: KAFKA.md beside this file.

    python3 host/benches/peers/kafka_latency.py [--rates 10000,50000] [--seconds 10] [--rounds 3]
    python3 host/benches/peers/kafka_latency.py --throughput [--events 5000000] [--rounds 3]

Starts one Apache Kafka node (KRaft, loopback, 1 GiB heap, a temp data directory; the jars in
$WEIR_KAFKA, else ~/.cache/weir-tools/kafka-4.4.0/libs from `cargo xtask setup`) and runs weir's
own benchmarks against it (`weir bench ... --brokers`, each run on topics of its own, from the
repository root).

Latency (the default): for every rate of --rates, each round runs three commands back to back,
their order turned by one each round, so that whatever else the machine does falls on all three:
  pipeline  weir bench --latency --brokers B --rate R --seconds S (the default pipeline,
            plugins/orders-alerts/pipeline.toml, or --pipeline): produce -> alert readable
  relay     the same with --baseline relay: a bare consumer and producer with the pipeline's
            Kafka settings pass the same orders on, no engine
  broker    the same with --baseline broker: the reader reads the input topic itself
Each run prints p50, p99 and max over its samples. The table per rate gives the medians over
the rounds, and the pipeline's p99 less the relay's (the median of the per-round differences):
what the engine adds to moving the same records through the same Kafka clients.

Throughput (--throughput): `weir bench --kafka --brokers B --events N` (the default pipeline),
--rounds times: the pipeline's events/s over the topic, then a bare consumer's records/s over
the same records (the pipeline's consumer settings, no engine), and their ratio per round.

Beside each run: its CPU time, the broker's, and the other load (the machine's busy time less
weir's, the broker's and this script's, in cores); well above 0 means something else ran and
the numbers are not clean. --out writes every run's numbers as JSON lines, as they come.
"""
import argparse
import glob
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile

from kafkabench import KAFKA_LIBS, ROOT, find_weir, log
from kafkabench.broker import Broker
from kafkabench.procs import Run, clean_up

KINDS = [("pipeline", []), ("relay", ["--baseline", "relay"]), ("broker", ["--baseline", "broker"])]
# host/cli/src/lib.rs, latency_command: "latency (WHAT; P partitions), N samples at R orders/s:
# p50 X ms, p99 Y ms, max Z ms"; WHAT differs between the pipeline and the baselines.
LATENCY = re.compile(r"(?:(\d+) partitions\), )?(\d+) samples at (\d+) orders/s: "
                     r"p50 ([\d.]+) ms, p99 ([\d.]+) ms, max ([\d.]+) ms")
# host/cli/src/bench/mod.rs, print_throughput and print_bare_read.
PIPELINE = re.compile(r"(\d+) events in ([\d.]+)s = (\d+) events/s, (\d+) events per CPU-second "
                      r"\(([\d.]+) cores busy\)")
BARE = re.compile(r"bare consumer .*?: (\d+) records in ([\d.]+)s = (\d+) records/s, (\d+) per CPU-second")


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rates", default="10000,50000", help="comma-separated orders per second (latency; default 10000,50000)")
    ap.add_argument("--seconds", type=int, default=10, help="how long each latency run produces (default 10)")
    ap.add_argument("--rounds", type=int, default=3, help="runs of each command, interleaved (default 3)")
    ap.add_argument("--pipeline", help="the pipeline file for the latency runs (default: weir's, "
                                       "plugins/orders-alerts/pipeline.toml)")
    ap.add_argument("--throughput", action="store_true",
                    help="measure throughput (weir bench --kafka) against a bare consumer instead")
    ap.add_argument("--events", type=int, default=5_000_000, help="events per throughput run (default 5000000)")
    ap.add_argument("--weir", help="the weir binary (default: release/weir in $CARGO_TARGET_DIR, else in target/, "
                                   "else in ~/.cache/weir-target)")
    ap.add_argument("--out", help="write every run's numbers to this file, as JSON lines")
    ap.add_argument("--timeout", type=int, default=1800, help="seconds per run before it is stopped (default 1800)")
    ap.add_argument("--keep", action="store_true", help="keep the work directory (runs' output, broker's logs)")
    args = ap.parse_args()
    if args.pipeline:
        args.pipeline = os.path.abspath(args.pipeline)  # the runs start in the repository root
    return args


def kafka_version(libs):
    jars = glob.glob(os.path.join(libs, "kafka-clients-*.jar"))
    return os.path.basename(jars[0])[len("kafka-clients-"):-len(".jar")] if jars else "?"


class Session:
    """The broker, the weir binary, the work directory and the --out file every run shares."""

    def __init__(self, args, weir, broker, work):
        self.args, self.weir, self.broker, self.work = args, weir, broker, work
        self.out = open(args.out, "w") if args.out else None

    def run(self, name, cmd):
        """One weir command to its end; returns its numbers, with `error` set when it failed."""
        if self.broker.proc.poll() is not None:
            sys.exit(f"the Kafka broker is gone (exit {self.broker.proc.returncode}; its log: "
                     f"{self.broker.dir}/logs/server.log); no run after it would mean anything")
        log(f"{name}: {' '.join(cmd[1:])}")
        r = Run(name, [cmd], self.work, cwd=ROOT).wait(timeout=self.args.timeout)
        text = r.stdout() + "\n" + r.stderr()
        row = dict(name=name, wall_s=round(r.ended - r.started, 3), cpu_s=round(r.cpu, 3),
                   broker_cpu_s=round(r.broker_cpu, 3), other_cores=round(r.other_cores, 3),
                   peak_rss_mb=round(r.peak / 2**20, 1), exit=r.codes.get(r.procs[0].pid), error=None)
        if row["exit"]:
            row["error"] = f"exit {row['exit']}: {r.stderr()[-300:].strip()}"
        return row, text

    def record(self, row):
        if row["error"]:
            log(f"  FAILED: {row['error']}")
        else:
            log("  " + ", ".join(f"{k}={v}" for k, v in row.items() if k not in ("name", "error")))
        if self.out:
            self.out.write(json.dumps(row) + "\n")
            self.out.flush()


def latency_run(s, rate, rnd, kind, extra):
    cmd = [s.weir, "bench", "--latency", *([s.args.pipeline] if s.args.pipeline else []),
           "--brokers", s.broker.brokers, "--rate", str(rate), "--seconds", str(s.args.seconds), *extra]
    row, text = s.run(f"{kind}-{rate}-r{rnd}", cmd)
    row.update(mode="latency", run=kind, rate=rate, seconds=s.args.seconds, round=rnd)
    found = LATENCY.findall(text)
    if found:
        partitions, samples, _, p50, p99, mx = found[-1]
        row.update(partitions=int(partitions) if partitions else None, samples=int(samples),
                   p50_ms=float(p50), p99_ms=float(p99), max_ms=float(mx))
    elif not row["error"]:
        row["error"] = f"no latency line in the output: {text[-300:].strip()}"
    s.record(row)
    return row


def throughput_run(s, rnd):
    cmd = [s.weir, "bench", "--kafka", "--brokers", s.broker.brokers, "--events", str(s.args.events)]
    row, text = s.run(f"throughput-r{rnd}", cmd)
    row.update(mode="throughput", events=s.args.events, round=rnd)
    p, b = PIPELINE.findall(text), BARE.findall(text)
    if p:
        n, secs, rate, per_cpu, cores = p[-1]
        row.update(pipeline_events=int(n), pipeline_s=float(secs), pipeline_events_per_s=int(rate),
                   pipeline_events_per_cpu_s=int(per_cpu), pipeline_cores=float(cores))
    if b:
        n, secs, rate, per_cpu = b[-1]
        row.update(bare_records=int(n), bare_s=float(secs), bare_records_per_s=int(rate),
                   bare_records_per_cpu_s=int(per_cpu))
    if p and b:
        row["ratio"] = round(int(p[-1][2]) / max(int(b[-1][2]), 1), 4)
    elif not row["error"]:
        row["error"] = f"no {'bare consumer' if p else 'pipeline'} line in the output: {text[-300:].strip()}"
    s.record(row)
    return row


def median(rows, key):
    vals = [r[key] for r in rows if r.get(key) is not None]
    return statistics.median(vals) if vals else None


def fmt(v, spec):
    return "—" if v is None else format(v, spec)


def latency_report(rate, rows, rounds, seconds):
    print(f"\n{rate:,} orders/s, {seconds} s per run, {rounds} round{'s' * (rounds != 1)}, medians:\n")
    print("| run | p50 ms | p99 ms | max ms | samples | runs ok | other load (max) |")
    print("|---|---|---|---|---|---|---|")
    for kind, _ in KINDS:
        mine = [r for r in rows if r["run"] == kind]
        ok = [r for r in mine if not r["error"]]
        print(f"| {kind} | {fmt(median(ok, 'p50_ms'), '.2f')} | {fmt(median(ok, 'p99_ms'), '.2f')} "
              f"| {fmt(median(ok, 'max_ms'), '.2f')} | {fmt(median(ok, 'samples'), ',.0f')} | {len(ok)}/{len(mine)} "
              f"| {fmt(max((r['other_cores'] for r in mine), default=None), '.2f')} cores |")
    diffs = []
    for rnd in sorted({r["round"] for r in rows}):
        by = {r["run"]: r for r in rows if r["round"] == rnd and not r["error"]}
        if "pipeline" in by and "relay" in by:
            diffs.append(by["pipeline"]["p99_ms"] - by["relay"]["p99_ms"])
    print(f"\npipeline p99 - relay p99: {fmt(statistics.median(diffs) if diffs else None, '.2f')} ms "
          f"(median of {len(diffs)} per-round difference{'s' * (len(diffs) != 1)}: "
          f"{', '.join(f'{d:.2f}' for d in diffs) or 'none'})")


def throughput_report(rows, events):
    print(f"\n{events:,} events, `weir bench --kafka` (the default pipeline) and a bare consumer of the same "
          f"records:\n")
    print("| round | pipeline events/s | bare consumer records/s | pipeline / bare | pipeline events per CPU-s "
          "| other load |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['round']} | {fmt(r.get('pipeline_events_per_s'), ',.0f')} "
              f"| {fmt(r.get('bare_records_per_s'), ',.0f')} | {fmt(r.get('ratio'), '.2f')} "
              f"| {fmt(r.get('pipeline_events_per_cpu_s'), ',.0f')} | {r['other_cores']:.2f} cores |")
    print(f"| median | {fmt(median(rows, 'pipeline_events_per_s'), ',.0f')} "
          f"| {fmt(median(rows, 'bare_records_per_s'), ',.0f')} | {fmt(median(rows, 'ratio'), '.2f')} "
          f"| {fmt(median(rows, 'pipeline_events_per_cpu_s'), ',.0f')} | |")
    for r in rows:
        if r["error"]:
            print(f"- round {r['round']} failed: {r['error']}")


def check_weir(weir):
    """Exits unless `weir` is there and its `bench` takes --brokers."""
    if not os.path.exists(weir):
        sys.exit(f"{weir} not found: `cargo xtask build` (or --weir PATH)")
    p = subprocess.run([weir, "bench", "--help"], capture_output=True, text=True)
    if "--brokers" not in p.stdout:
        sys.exit(f"{weir} bench has no --brokers: rebuild it from this checkout (`cargo xtask build`)")


def warm_up(s, args, rates):
    """One run of each command at the lowest rate, not counted: on a new broker the first
    clients wait for the broker to make its internal topics (`__consumer_offsets`) and for its
    JIT to warm, which took the first measured run seconds, not milliseconds."""
    if args.throughput:
        return
    saved = s.out
    s.out = None
    for kind, extra in KINDS:
        latency_run(s, min(rates), 0, kind, extra)
    s.out = saved


def measure(s, args, rates):
    """Every run, rounds outermost so that drift over time falls on every rate and command."""
    warm_up(s, args, rates)
    rows = []
    for rnd in range(1, args.rounds + 1):
        if args.throughput:
            rows.append(throughput_run(s, rnd))
            continue
        for rate in rates:
            turn = (rnd - 1) % len(KINDS)
            for kind, extra in KINDS[turn:] + KINDS[:turn]:
                rows.append(latency_run(s, rate, rnd, kind, extra))
    return rows


def main():
    args = parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit("stopped by SIGTERM"))
    rates = [int(r) for r in args.rates.split(",") if r.strip()]
    weir = find_weir(args.weir)
    check_weir(weir)
    libs = os.environ.get("WEIR_KAFKA") or KAFKA_LIBS
    if not os.path.isdir(libs):
        sys.exit(f"{libs} not found: `cargo xtask setup` fetches the Apache Kafka broker (or set WEIR_KAFKA)")

    work = tempfile.mkdtemp(prefix="weir-kafka-latency-")
    broker = None
    try:
        broker = Broker(libs, os.path.join(work, "broker"))
        Run.broker_pid = broker.proc.pid
        s = Session(args, weir, broker, work)
        rows = measure(s, args, rates)
        print(f"\nweir: {weir}; one Apache Kafka {kafka_version(libs)} node (1 GiB heap) on the same machine; "
              f"{os.cpu_count()} cores")
        if args.throughput:
            throughput_report(rows, args.events)
        else:
            for rate in rates:
                latency_report(rate, [r for r in rows if r["rate"] == rate], args.rounds, args.seconds)
            for r in rows:
                if r["error"]:
                    print(f"- {r['name']} failed: {r['error']}")
    finally:
        clean_up(broker, work, args.keep)


if __name__ == "__main__":
    main()
