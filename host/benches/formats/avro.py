#!/usr/bin/env python3
"""Avro against JSON on the orders pipeline: what decoding Avro in the sandbox costs.

Starts the schema registry the tests use (Apicurio Registry, from `WEIR_SCHEMA_REGISTRY`, on
Java 21+), generates orders (`weir gen orders`) and writes them twice: as JSON lines, and as
Avro in the Confluent wire format (schema `tests/formats/order.avsc`, registered under
`orders-value`, encoded with fastavro). With `--source kafka` (the default) both go into topics
of one Apache Kafka node the script starts (`host/benches/peers/kafkabench`, from `WEIR_KAFKA`),
produced by confluent-kafka, and every pipeline reads its topic from the start to the end
(`available-now`); with `--source replay` they are recorded events, the Avro ones base64 in a
JSON envelope. Then it runs, interleaved, round after round:

  avro        avro_parser.wasm (the standard library's) + 1-minute windows + error_rate.wasm
  json-std    json_parser.wasm (the standard library's) + the same windows and aggregator
  json-orders orders_json.wasm (the hand-written orders parser) + the same

Reported per pipeline (medians over the rounds):
  - the parser's own rate: records in / seconds inside its calls (the summary's "parse" line),
    which is records per second per core, decoding and building the JSON row included;
  - the process's CPU-seconds (user + system) for the whole run, and events per CPU-second;
  - the schema fetches the run made (its "fetched schema id" log lines): one per id per process.

Run from the repository root after `cargo xtask build`, with the tests' Python (it has fastavro
and confluent-kafka):
  . ~/.weirenv; $WEIR_PYTHON host/benches/formats/avro.py --events 2000000 --rounds 3

Only the standard library, fastavro and confluent-kafka. Reading recorded Avro (`--source
replay`) costs a JSON envelope and a base64 decode per record that a Kafka source does not pay;
that comparison includes them.
"""

import argparse
import base64
import io
import json
import os
import re
import resource
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import fastavro

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "host" / "benches" / "peers"))
PARSE = re.compile(r"parse: (\d+) calls, (\d+) in, (\d+) out, (\d+) errors, ([\d.]+)s in the plugin")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def java():
    for candidate in [os.environ.get("WEIR_REGISTRY_JAVA"), "/usr/lib/jvm/temurin-25-jdk-amd64/bin/java"]:
        if candidate and Path(candidate).exists():
            return candidate
    sys.exit("no Java 21+ for the registry: set WEIR_REGISTRY_JAVA")


def start_registry(work):
    home = Path(os.environ.get("WEIR_SCHEMA_REGISTRY", ""))
    if not (home / "quarkus-run.jar").exists():
        sys.exit("WEIR_SCHEMA_REGISTRY does not name the registry `cargo xtask setup` fetched")
    port = free_port()
    log = open(work / "registry.log", "wb")
    proc = subprocess.Popen(
        [java(), "-Xms64m", "-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
         "-Dquarkus.http.host=127.0.0.1", f"-Dquarkus.http.port={port}",
         "-Dquarkus.management.host=127.0.0.1", f"-Dquarkus.management.port={free_port()}",
         "-Dquarkus.http.access-log.enabled=false", "-jar", str(home / "quarkus-run.jar")],
        cwd=work, stdout=log, stderr=log)
    url = f"http://127.0.0.1:{port}/apis/ccompat/v7"
    deadline = time.monotonic() + 90
    while True:
        try:
            with urllib.request.urlopen(url + "/subjects", timeout=2) as r:
                if r.status == 200:
                    return proc, url
        except OSError:
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            sys.exit(f"the registry did not start; see {work / 'registry.log'}")
        time.sleep(0.2)


def register(url, subject, schema_text):
    body = json.dumps({"schema": schema_text}).encode()
    req = urllib.request.Request(f"{url}/subjects/{subject}/versions", data=body, method="POST",
                                 headers={"Content-Type": "application/vnd.schemaregistry.v1+json"})
    with urllib.request.urlopen(req) as r:
        return json.load(r)["id"]


def orders_lines(work, weir, events):
    orders = work / "orders.jsonl"
    subprocess.run([weir, "gen", "orders", str(events), "--seed", "42", "--out", str(orders)], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return orders


def avro_values(orders, url):
    """Each order as Avro in the Confluent wire format, in the orders' order."""
    text = (ROOT / "tests" / "formats" / "order.avsc").read_text()
    schema = fastavro.parse_schema(json.loads(text))
    header = b"\0" + register(url, "orders-value", text).to_bytes(4, "big")
    with open(orders) as src:
        for line in src:
            buf = io.BytesIO()
            fastavro.schemaless_writer(buf, schema, json.loads(line))
            yield header + buf.getvalue()


def replay_inputs(work, orders, url):
    """The recorded events' sources: the JSON lines as they are, the Avro ones in envelopes."""
    avro = work / "orders.avro.jsonl"
    with open(avro, "w") as out:
        for i, value in enumerate(avro_values(orders, url)):
            out.write(json.dumps({"value_base64": base64.b64encode(value).decode(), "partition": 0,
                                  "offset": i}) + "\n")
    return f'type = "replay"\npath = "{orders}"', f'type = "replay"\npath = "{avro}"'


def kafka_inputs(brokers, orders, url, partitions):
    """Topics `orders-json` and `orders-avro`, the same orders in each, round robin over their
    partitions; the two sources that read them from the start."""
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic
    admin = AdminClient({"bootstrap.servers": brokers})
    for f in admin.create_topics([NewTopic(t, partitions, 1) for t in ("orders-json", "orders-avro")]).values():
        f.result(60)
    producer = Producer({"bootstrap.servers": brokers, "linger.ms": 20, "batch.size": 1 << 20,
                         "queue.buffering.max.messages": 1_000_000})

    def send(topic, values):
        for i, v in enumerate(values):
            while True:
                try:
                    producer.produce(topic, v, partition=i % partitions)
                    break
                except BufferError:
                    producer.poll(0.1)
            producer.poll(0)
        if producer.flush(120) != 0:
            sys.exit(f"could not produce every order into {topic}")

    with open(orders, "rb") as src:
        send("orders-json", (line.rstrip(b"\n") for line in src))
    send("orders-avro", avro_values(orders, url))

    def source(topic):
        return (f'type = "kafka"\ntopics = ["{topic}"]\nstarting_offsets = "earliest"\n'
                f'kafka.bootstrap.servers = "{brokers}"')
    return source("orders-json"), source("orders-avro")


def pipeline(work, name, source, parser, config, url):
    dist = ROOT / "plugins" / "dist"
    registry = f'grants.registry = true\n[registry]\nurl = "{url}"\n' if "avro" in parser else ""
    text = f"""
name = "{name}"
[source]
{source}
[trigger]
mode = "available-now"
[parse]
plugin = "{dist / parser}"
config = {{ {config} }}
{registry}
[watermark]
delay = "10 minutes"
[window]
type = "tumbling"
size = "1 minute"
[aggregate]
plugin = "{dist / 'error_rate.wasm'}"
"""
    p = work / f"{name}.toml"
    p.write_text(text)
    return p


def run(weir, p, checkpoint):
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.monotonic()
    out = subprocess.run([weir, "run", str(p), "--checkpoint", str(checkpoint)], capture_output=True, text=True,
                         env={**os.environ, "WEIR_LOG": "warn,weir_schema=info"})
    wall = time.monotonic() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if out.returncode != 0:
        sys.exit(f"{p.name}: weir run failed:\n{out.stderr}")
    m = PARSE.search(out.stderr)
    if not m:
        sys.exit(f"{p.name}: no parse line in the summary:\n{out.stderr}")
    records, seconds = int(m.group(2)), float(m.group(5))
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {"parser_rate": records / seconds, "cpu": cpu, "wall": wall, "records": records,
            "fetches": out.stderr.count("fetched schema id")}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--events", type=int, default=2_000_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--source", choices=["kafka", "replay"], default="kafka")
    ap.add_argument("--partitions", type=int, default=2, help="of each topic, with --source kafka")
    target = Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target"))
    ap.add_argument("--weir", default=str(target / "release" / "weir"))
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="weir-avro-bench-") as tmp:
        work = Path(tmp)
        proc, url = start_registry(work)
        broker = None
        try:
            orders = orders_lines(work, args.weir, args.events)
            if args.source == "kafka":
                from kafkabench import KAFKA_LIBS
                from kafkabench.broker import Broker
                broker = Broker(os.environ.get("WEIR_KAFKA") or KAFKA_LIBS, str(work / "broker"))
                json_src, avro_src = kafka_inputs(broker.brokers, orders, url, args.partitions)
            else:
                json_src, avro_src = replay_inputs(work, orders, url)
            runs = {
                "avro": pipeline(work, "avro", avro_src, "avro_parser.wasm", 'time_field = "order_ts"', url),
                "json-std": pipeline(work, "json-std", json_src, "json_parser.wasm", 'time_field = "order_ts"', url),
                "json-orders": pipeline(work, "json-orders", json_src, "orders_json.wasm", "", url),
            }
            results = {k: [] for k in runs}
            for r in range(args.rounds):
                for name, p in runs.items():
                    results[name].append(run(args.weir, p, work / f"cp-{name}-{r}"))
        finally:
            if broker:
                broker.stop()
            proc.terminate()
            proc.wait()
    med = {k: {m: statistics.median(x[m] for x in v) for m in v[0]} for k, v in results.items()}
    print(f"{args.events} orders from {args.source}, {args.rounds} rounds interleaved, medians:")
    print(f"{'pipeline':<12} {'parser rec/s/core':>18} {'CPU-s':>8} {'events/CPU-s':>13} {'wall s':>7} {'fetches':>8}")
    for k, m in med.items():
        print(f"{k:<12} {m['parser_rate']:>18,.0f} {m['cpu']:>8.2f} {m['records'] / m['cpu']:>13,.0f} "
              f"{m['wall']:>7.2f} {m['fetches']:>8.0f}")
    for base in ["json-orders", "json-std"]:
        ratios = [a["cpu"] / b["cpu"] for a, b in zip(results["avro"], results[base])]
        print(f"avro / {base} CPU-seconds per round: {', '.join(f'{x:.2f}' for x in ratios)} "
              f"(median {statistics.median(ratios):.2f})")
    print(json.dumps({"events": args.events, "rounds": results}))


if __name__ == "__main__":
    main()
