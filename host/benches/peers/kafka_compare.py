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
import argparse
import bisect
import csv
import glob
import hashlib
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", "..", ".."))
PROJECT = os.path.join(HERE, "kafka")
TOOLS = os.path.expanduser("~/.cache/weir-tools")
BUILD = os.path.join(TOOLS, "peers-kafka")
ORACLE = os.path.join(ROOT, "tests", "oracle", "orders_oracle.py")
DIST = os.path.join(ROOT, "plugins", "dist")
WINDOW_MS = 60_000
DELAY_MS = 600_000
GAP_MS = 60_000
TOPIC = "orders"
CLUSTER_ID = "V2VpclRlc3RDbHVzdGVyMA"
LOG4J = ("rootLogger.level = INFO\nrootLogger.appenderRef.file.ref = file\nappender.file.type = File\n"
         "appender.file.name = file\nappender.file.fileName = ${sys:kafka.logs.dir}/server.log\n"
         "appender.file.layout.type = PatternLayout\nappender.file.layout.pattern = [%d] %p %m (%c)%n\n")
SAMPLE_S = 0.1


def log(msg):
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------------------------
# The Java side


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


# ---------------------------------------------------------------------------------------------
# The broker


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Broker:
    """One Apache Kafka node (broker and controller) on loopback, its data under `dir`."""

    def __init__(self, libs, dir, heap="1g"):
        self.dir = dir
        self.port, controller = free_port(), free_port()
        os.makedirs(os.path.join(dir, "logs"))
        never = 2**63 - 1
        config = (
            f"process.roles=broker,controller\nnode.id=1\ncontroller.quorum.voters=1@127.0.0.1:{controller}\n"
            f"listeners=PLAINTEXT://127.0.0.1:{self.port},CONTROLLER://127.0.0.1:{controller}\n"
            f"advertised.listeners=PLAINTEXT://127.0.0.1:{self.port}\ncontroller.listener.names=CONTROLLER\n"
            f"listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT\n"
            f"log.dirs={os.path.join(dir, 'data')}\n"
            "offsets.topic.replication.factor=1\ntransaction.state.log.replication.factor=1\n"
            "transaction.state.log.min.isr=1\nshare.coordinator.state.topic.replication.factor=1\n"
            "share.coordinator.state.topic.min.isr=1\ndefault.replication.factor=1\nmin.insync.replicas=1\n"
            "group.initial.rebalance.delay.ms=0\nauto.create.topics.enable=false\n"
            # The events' times are from 2026-11-01 on and the closers a day later, whatever
            # today is: take every record whatever its timestamp, and delete nothing by age, in
            # any topic (Kafka Streams' window changelogs set a retention.ms of their own).
            f"log.message.timestamp.before.max.ms={never}\nlog.message.timestamp.after.max.ms={never}\n"
            f"log.retention.ms=-1\nlog.retention.check.interval.ms={never}\n"
        )
        self.props = os.path.join(dir, "server.properties")
        with open(self.props, "w") as f:
            f.write(config)
        with open(os.path.join(dir, "log4j2.properties"), "w") as f:
            f.write(LOG4J)
        java = ["java", "-cp", f"{libs}/*", f"-Dkafka.logs.dir={dir}/logs",
                f"-Dlog4j2.configurationFile={dir}/log4j2.properties"]
        subprocess.run(java + ["kafka.tools.StorageTool", "format", "-t", CLUSTER_ID, "-c", self.props],
                       check=True, stdout=subprocess.DEVNULL, stdin=subprocess.DEVNULL)
        out = open(os.path.join(dir, "logs", "stdout.log"), "w")
        self.proc = subprocess.Popen(java + [f"-Xms{heap}", f"-Xmx{heap}", "kafka.Kafka", self.props],
                                     stdout=out, stderr=out, stdin=subprocess.DEVNULL)
        started = time.time()
        server_log = os.path.join(dir, "logs", "server.log")
        while True:
            if self.proc.poll() is not None:
                raise SystemExit(f"the Kafka broker exited ({self.proc.returncode}); see {dir}/logs")
            if os.path.exists(server_log) and "Kafka Server started" in open(server_log, errors="replace").read():
                break
            if time.time() - started > 90:
                raise SystemExit(f"the Kafka broker did not start in 90 s; see {server_log}")
            time.sleep(0.2)
        self.brokers = f"127.0.0.1:{self.port}"
        log(f"apache kafka up on {self.brokers} after {time.time() - started:.1f} s")

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


# ---------------------------------------------------------------------------------------------
# The workload, the oracle and the session reference


def gen_orders_py(n, seed, path):
    """host/types/src/workload.rs's `orders`, line for line, for when no weir binary is there
    (kafka_compare.py says which one it used; --check-gen compares them)."""
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


# ---------------------------------------------------------------------------------------------
# Measuring a process tree


def proc_children(pid):
    kids = []
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            try:
                with open(f"/proc/{pid}/task/{tid}/children") as f:
                    kids += [int(x) for x in f.read().split()]
            except OSError:
                pass
    except OSError:
        pass
    return kids


def rss_bytes(pid):
    try:
        with open(f"/proc/{pid}/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, IndexError, ValueError):
        return 0


TICK = os.sysconf("SC_CLK_TCK")


def busy_seconds():
    """CPU time the whole machine has spent busy (all cores), from /proc/stat."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    return (sum(v[:8]) - v[3] - v[4]) / TICK  # less idle and iowait


def cpu_seconds(pid):
    """user + system CPU time of a live process."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / TICK
    except (OSError, IndexError, ValueError):
        return 0.0


def tree(pid):
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo += proc_children(p)
    return out


class Run:
    """Engine processes started together, sampled until they end or `done()` says so (then each
    gets SIGTERM). CPU time comes from wait4 (each process and its reaped children)."""

    live = []  # every Run started, for the clean-up at exit
    broker_pid = None

    def __init__(self, name, cmds, work, env=None, cwd=None):
        Run.live.append(self)
        self.name = name
        self.busy0, self.self0 = busy_seconds(), sum(os.times()[:2])
        self.broker0 = cpu_seconds(Run.broker_pid) if Run.broker_pid else 0.0
        self.logs = []
        self.procs = []
        self.started = time.time()
        for i, cmd in enumerate(cmds):
            out = open(os.path.join(work, f"{name}-{i}.out"), "w+")
            err = open(os.path.join(work, f"{name}-{i}.err"), "w+")
            self.logs.append((out, err))
            self.procs.append(subprocess.Popen(cmd, stdout=out, stderr=err, stdin=subprocess.DEVNULL,
                                               env=env, cwd=cwd))
        self.cpu = 0.0
        self.peak = 0
        self.codes = {}
        self.ended = None

    def wait(self, done=None, timeout=3600):
        live = {p.pid: p for p in self.procs}
        stopping = None
        while live:
            rss = sum(rss_bytes(q) for p in live for q in tree(p))
            self.peak = max(self.peak, rss)
            for pid in list(live):
                got, status, ru = os.wait4(pid, os.WNOHANG)
                if got:
                    self.cpu += ru.ru_utime + ru.ru_stime
                    code = os.waitstatus_to_exitcode(status)
                    live[pid].returncode = code
                    self.codes[pid] = code
                    del live[pid]
            if not live:
                break
            now = time.time()
            if stopping is None and ((done is not None and done()) or now - self.started > timeout):
                if now - self.started > timeout:
                    log(f"{self.name}: timed out after {timeout} s, stopping it")
                stopping = now
                for p in live.values():
                    p.send_signal(signal.SIGTERM)
            elif stopping is not None and now - stopping > 40:
                for p in live.values():
                    p.kill()
            time.sleep(SAMPLE_S)
        self.ended = time.time()
        # The broker's CPU time, and what the rest of the machine did meanwhile (other
        # sessions, builds): the second should be near 0 for numbers worth keeping.
        self.broker_cpu = (cpu_seconds(Run.broker_pid) - self.broker0) if Run.broker_pid else 0.0
        other = busy_seconds() - self.busy0 - self.cpu - self.broker_cpu - (sum(os.times()[:2]) - self.self0)
        self.other_cores = max(0.0, other) / (self.ended - self.started)
        return self

    def stdout(self, i=0):
        self.logs[i][0].seek(0)
        return self.logs[i][0].read()

    def stderr(self, i=0):
        self.logs[i][1].seek(0)
        return self.logs[i][1].read()

    def kill(self):
        for p in self.procs:
            if p.returncode is None:
                try:
                    p.kill()
                    os.waitpid(p.pid, 0)
                except OSError:
                    pass
                p.returncode = -9


# ---------------------------------------------------------------------------------------------
# The engines


class Ctx:
    pass


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


# ---------------------------------------------------------------------------------------------


def main():
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
    args = ap.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit("stopped by SIGTERM"))

    skip = set(filter(None, args.skip.split(",")))
    targets = [os.environ.get("CARGO_TARGET_DIR"), os.path.join(ROOT, "target"), os.path.expanduser("~/.cache/weir-target")]
    builds = [os.path.join(t, "release", "weir") for t in targets if t]
    weir = args.weir or next((b for b in builds if os.path.exists(b)), builds[0])
    have_weir = os.path.exists(weir)
    missing_plugins = [p for p in ("orders_json.wasm", "error_rate.wasm", "jsonl_file_sink.wasm")
                       if not os.path.exists(os.path.join(DIST, p))]
    notes = []
    if "weir" not in skip and (not have_weir or missing_plugins):
        why = f"{weir} not found" if not have_weir else f"plugins/dist lacks {', '.join(missing_plugins)}"
        notes.append(f"Weir left out: {why} (`cargo xtask build`)")
        skip.add("weir")
    libs = os.path.join(TOOLS, "kafka-4.4.0", "libs")
    if not os.path.isdir(libs):
        sys.exit(f"{libs} not found: `cargo xtask setup` fetches the Apache Kafka broker")

    build_java()
    c = Ctx()
    c.work = tempfile.mkdtemp(prefix="weir-kafka-peers-")
    c.partitions, c.timeout, c.weir = args.partitions, args.timeout, weir
    c.ks_guarantee, c.ks_commit_ms = args.ks_guarantee, args.ks_commit_ms
    c.java_opts = args.java_opts.split()
    broker = None
    results = {}
    try:
        events = os.path.join(c.work, "orders.jsonl")
        t = time.time()
        if have_weir:
            subprocess.check_call([weir, "gen", "orders", str(args.events), "--seed", str(args.seed), "--out", events],
                                  stdout=subprocess.DEVNULL)
            gen = f"weir gen orders {args.events} --seed {args.seed}"
        else:
            gen_orders_py(args.events, args.seed, events)
            gen = f"the script's port of `weir gen orders {args.events} --seed {args.seed}` (no weir binary)"
        log(f"{args.events} events generated in {time.time() - t:.1f} s ({gen})")
        oracle = os.path.join(c.work, "oracle.csv")
        subprocess.check_call([sys.executable, ORACLE, events, "-o", oracle], stderr=subprocess.DEVNULL)
        c.want = read_oracle(oracle)
        # The closer: a day after the data's last window; its window and later ones are dropped.
        c.closer_ts = max(c.want) + WINDOW_MS + 86_400_000
        c.cut = c.closer_ts - c.closer_ts % WINDOW_MS
        sessions_on = "sessions" not in skip
        if sessions_on:
            c.sessions, late = session_reference(events)
            log(f"oracle: {len(c.want)} windows; session reference: {len(c.sessions)} sessions ({late} late events)")

        broker = Broker(libs, os.path.join(c.work, "broker"))
        c.brokers = broker.brokers
        Run.broker_pid = broker.proc.pid
        t = time.time()
        p = subprocess.run(["java", "-cp", classpath("streams"), "weir.peers.Produce", c.brokers, TOPIC, events,
                            str(args.partitions), str(c.closer_ts)], capture_output=True, text=True)
        if p.returncode:
            sys.exit(f"producing failed:\n{p.stderr[-3000:]}")
        produced = json_line(p.stdout)
        sizes = produced["per_partition"]
        log(f"produced {produced['records']} events + {args.partitions} closers into {TOPIC} "
            f"({args.partitions} partitions: {sizes} events) in {time.time() - t:.1f} s")

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
        configs = [(n, f) for n, f in configs if n not in skip]

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

        def med(rows, key):
            vals = [r[key] for r in rows if r[key] is not None]
            return statistics.median(vals) if vals else None

        def fmt(v, spec):
            return "—" if v is None else format(v, spec)

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
    finally:
        for r in Run.live:
            r.kill()
        if broker:
            broker.stop()
        if args.keep:
            log(f"kept {c.work}")
        else:
            shutil.rmtree(c.work, ignore_errors=True)


if __name__ == "__main__":
    main()
