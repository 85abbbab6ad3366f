"""The engines kafka_compare.py races, each run on the topic from the beginning and checked.

Each `run_*` starts one configuration as a fresh reader of the topic (its own consumer group,
application id, state and checkpoint directories, all under the work directory), waits for it
through procs.Run, and returns (the Run, the time its last data window was written or None, the
agreement with the oracle or the session reference). The time of the last window is the
engine's own (Kafka Streams and Flink print it; Weir's is the newest sink file holding a data
window), so the events/s figure does not include the time a run takes to notice it is done.
The Java peers are one Maven project (kafka/ beside this package), built once per change of its
files into ~/.cache/weir-tools/peers-kafka.
"""
import csv
import glob
import hashlib
import json
import os
import shutil
import subprocess
import tempfile

from . import PEERS, ROOT, TOOLS, log
from .procs import Run
from .workload import TOPIC, agreement, read_oracle

PROJECT = os.path.join(PEERS, "kafka")
BUILD = os.path.join(TOOLS, "peers-kafka")
DIST = os.path.join(ROOT, "plugins", "dist")


def build_java():
    """`mvn -q -B package` once per change of the Maven project's files."""
    h = hashlib.sha256()
    for path in sorted(glob.glob(os.path.join(PROJECT, "**", "*"), recursive=True)):
        if os.path.isfile(path):
            h.update(os.path.relpath(path, PROJECT).encode())
            h.update(open(path, "rb").read())
    stamp = os.path.join(BUILD, "stamp")
    if os.path.exists(stamp) and open(stamp).read() == h.hexdigest():
        return
    log(f"building the Java peers (mvn package) into {BUILD}")
    for lib in glob.glob(os.path.join(BUILD, "*", "lib")):
        shutil.rmtree(lib)
    subprocess.check_call(["mvn", "-q", "-B", "package", f"-Dweir.peers.build={BUILD}"], cwd=PROJECT)
    with open(stamp, "w") as f:
        f.write(h.hexdigest())


def classpath(module):
    return f"{BUILD}/{module}/classes:{BUILD}/{module}/lib/*"


class Ctx:
    """What every run of one kafka_compare.py session shares, set by its main: the work
    directory, the weir binary, the brokers, the topic's partitions and closer time, the cut
    (windows at or after it are dropped), the oracle's windows (`want`) and sessions, the
    timeout, and the options of the JVMs and of Kafka Streams."""


def json_line(text):
    for line in reversed(text.strip().splitlines()):
        if line.startswith("{"):
            return json.loads(line)
    raise ValueError("no JSON line in the output")


def run_kstreams(c, query, threads, tag):
    name = f"ks-{query}-t{threads}-{tag}"
    out = os.path.join(c.work, f"{name}.csv")
    state = tempfile.mkdtemp(prefix="ks-state-", dir=c.work)
    app_id = f"{name}-{os.getpid()}"  # a new application: its own group, internal topics, offsets
    java = ["java", *c.java_opts, f"-Dweir.peers.timeout.ms={c.timeout * 1000}", "-cp", classpath("streams")]
    r = Run(name, [java + ["weir.peers.StreamsApp", query, c.brokers, TOPIC, out, str(c.partitions),
                                          str(c.closer_ts), str(threads), app_id, state, c.ks_guarantee,
                                          str(c.ks_commit_ms)]], c.work).wait(timeout=c.timeout + 60)
    shutil.rmtree(state, ignore_errors=True)
    if any(r.codes.values()):
        return r, None, f"FAILED (exit {list(r.codes.values())}): {r.stderr()[-300:]}"
    stats = json_line(r.stdout())
    last = stats["last_output_ms"] / 1000
    with open(out) as f:
        rows = list(csv.DictReader(f))
    if query == "windows":
        got, dups = {}, 0
        for row in rows:
            w = int(row["window_start_ms"])
            if w >= c.cut:
                continue
            dups += w in got
            got[w] = (int(row["count"]), int(row["errors"]))
        return r, last, agreement(got, c.want, dups)
    got, dups = {}, 0
    for row in rows:
        k = (int(row["user_id"]), int(row["start_ms"]))
        if k[1] >= c.cut:
            continue
        dups += k in got
        got[k] = (int(row["count"]), int(row["errors"]))
    return r, last, agreement(got, c.sessions, dups, "sessions")


def run_flink(c, parallelism, tag):
    out = os.path.join(c.work, f"flink-{tag}.csv")
    java = ["java", *c.java_opts,
            # Flink 2 on Java 17 needs its modules opened, as its own launch scripts do.
            *[f"--add-opens=java.base/{p}=ALL-UNNAMED" for p in
              ["java.lang", "java.util", "java.util.concurrent", "java.lang.reflect", "java.io", "java.nio",
               "java.net", "java.text", "java.time", "sun.nio.ch", "java.util.concurrent.atomic",
               "java.lang.invoke", "java.math", "java.security", "java.util.concurrent.locks"]],
            "-cp", classpath("flink")]
    r = Run(f"flink-{tag}", [java + ["weir.peers.FlinkJob", c.brokers, TOPIC, out, str(c.cut), str(parallelism),
                                     f"flink-{tag}-{os.getpid()}"]], c.work).wait(timeout=c.timeout)
    if any(r.codes.values()):
        return r, None, f"FAILED (exit {list(r.codes.values())}): {r.stderr()[-300:]}"
    stats = json_line(r.stdout())
    return r, stats["last_output_ms"] / 1000, agreement(read_oracle(out), c.want)


WEIR_TOML = """# Written by host/benches/peers/kafka_compare.py.
name = "{name}"

[source]
type = "kafka"
topics = ["{topic}"]
starting_offsets = "earliest"
kafka.bootstrap.servers = "{brokers}"
{trigger}
[parse]
plugin = "{dist}/orders_json.wasm"
{parse_config}
[watermark]
delay = "10 minutes"

[window]
{window}

[aggregate]
plugin = "{dist}/error_rate.wasm"
config = {{ error_status = "ERROR" }}

[output]
mode = "append"

[sink]
plugin = "{dist}/jsonl_file_sink.wasm"
config = {{ dir = "/out" }}
grants.dirs = [{{ host = "{out}", guest = "/out", writable = true }}]

[checkpoint]
location = "{checkpoint}"
"""


def weir_toml(c, path, name, out, checkpoint, group=False, sessions=False):
    with open(path, "w") as f:
        f.write(WEIR_TOML.format(
            name=name, topic=TOPIC, brokers=c.brokers, dist=DIST, out=out, checkpoint=checkpoint,
            trigger="" if group else '\n[trigger]\nmode = "available-now"\n',
            parse_config="config = { key_by_user = true }\n" if sessions else "",
            window='type = "session"\ngap = "1 minute"' if sessions else 'type = "tumbling"\nsize = "1 minute"'))


class WeirOutput:
    """The rows of the jsonl_file_sink's batch files in `dir`, read as they appear."""

    def __init__(self, dir, sessions, cut):
        self.dir, self.sessions, self.cut = dir, sessions, cut
        self.seen = set()
        self.got = {}
        self.dups = 0
        self.last = None  # mtime of the newest file with a row of the data

    def poll(self):
        for path in sorted(glob.glob(os.path.join(self.dir, "batch-*.jsonl"))):
            if path in self.seen:
                continue
            self.seen.add(path)
            mtime = os.stat(path).st_mtime
            with open(path) as f:
                for line in f:
                    r = json.loads(line)
                    if self.sessions:
                        key = (int(r["key"]), r["window_start"])
                    else:
                        key = r["window_start"]
                    if r["window_start"] >= self.cut:
                        continue
                    self.dups += key in self.got
                    self.got[key] = (r["count"], r["errors"])
                    self.last = mtime if self.last is None else max(self.last, mtime)
        return self


def run_weir(c, config, tag):
    """config: "weir" (one process), "weir-group1", "weir-group2", "weir-sessions"."""
    d = tempfile.mkdtemp(prefix=f"{config}-", dir=c.work)
    out = os.path.join(d, "out")
    os.makedirs(out)
    sessions = config == "weir-sessions"
    group = config.startswith("weir-group")
    procs = 2 if config == "weir-group2" else 1
    name = f"kc-{config}-{tag}".replace("_", "-")
    cmds = []
    for i in range(procs):
        toml = os.path.join(d, f"pipeline-{i}.toml")
        weir_toml(c, toml, name, out, os.path.join(d, f"checkpoint-{i}"), group=group, sessions=sessions)
        cmd = [c.weir, "run", toml]
        if group:
            cmd += ["--group", f"{name}-{os.getpid()}"]
        cmds.append(cmd)
    wo = WeirOutput(out, sessions, c.cut)
    want = c.sessions if sessions else c.want

    def done():
        return set(wo.poll().got) >= set(want)

    r = Run(config + "-" + tag, cmds, c.work).wait(done=done if group else None, timeout=c.timeout)
    wo.poll()
    bad = {pid: code for pid, code in r.codes.items() if code not in (0, 130 if group else 0)}
    if bad and not wo.got:
        return r, None, f"FAILED (exit {list(bad.values())}): {r.stderr()[-300:]}"
    ok = agreement(wo.got, want, wo.dups, "sessions" if sessions else "windows")
    if bad:
        ok += f"; exit {list(bad.values())}"
    return r, wo.last, ok
