"""What the Kafka benchmarks beside this package share: where things are, and the log line.

kafka_compare.py (Weir against Kafka Streams and Flink) and kafka_latency.py (Weir's latency
and throughput against bare Kafka clients) both run on one Apache Kafka node that this package
starts from the jars `cargo xtask setup` fetches (broker.py). Nothing here is a test and nothing
in CI imports it. Every path is absolute, derived from this file's place in the checkout, so the
scripts run from any directory.
"""
import os
import sys
import time

PEERS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ROOT = os.path.abspath(os.path.join(PEERS, "..", "..", ".."))
TOOLS = os.path.expanduser("~/.cache/weir-tools")
KAFKA_LIBS = os.path.join(TOOLS, "kafka-4.4.0", "libs")


def log(msg):
    """A progress line on stderr, so that stdout holds only the report."""
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def find_weir(given=None):
    """The weir binary: `given` (--weir), else release/weir in $CARGO_TARGET_DIR, in target/, in
    ~/.cache/weir-target, the first that exists; if none does, the first of those paths (the
    caller checks that it exists and says what to build)."""
    targets = [os.environ.get("CARGO_TARGET_DIR"), os.path.join(ROOT, "target"),
               os.path.expanduser("~/.cache/weir-target")]
    builds = [os.path.join(t, "release", "weir") for t in targets if t]
    return given or next((b for b in builds if os.path.exists(b)), builds[0])
