"""One Apache Kafka node (KRaft: broker and controller in one process) for a benchmark run.

It is started from the broker's own jars (`cargo xtask setup` puts them in
~/.cache/weir-tools/kafka-4.4.0/libs), configured as tests/common/apache_kafka.rs configures the
tests' broker: loopback only, free ports, its data in a directory the caller owns, replication
factor 1. Two settings differ, both for the benchmarks' data: every record timestamp is
accepted and nothing is deleted by age, because the generated events are dated from 2026-11-01
on whatever today is. The constructor returns only once the broker has logged that it started,
so the caller can produce to `brokers` straight away; `stop` ends it (SIGTERM, then SIGKILL after
30 s) and is safe to call twice.
"""
import os
import signal
import socket
import subprocess
import time

from . import log

CLUSTER_ID = "V2VpclRlc3RDbHVzdGVyMA"
LOG4J = ("rootLogger.level = INFO\nrootLogger.appenderRef.file.ref = file\nappender.file.type = File\n"
         "appender.file.name = file\nappender.file.fileName = ${sys:kafka.logs.dir}/server.log\n"
         "appender.file.layout.type = PatternLayout\nappender.file.layout.pattern = [%d] %p %m (%c)%n\n")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# The JVM options Kafka's own start scripts give the broker (`KAFKA_JVM_PERFORMANCE_OPTS` in
# bin/kafka-run-class.sh): G1 with 20 ms pause goals. Without them the JVM's default pause goal
# is 200 ms, and the broker's pauses would be the measured latency's tail.
KAFKA_JVM_OPTS = ["-server", "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20", "-XX:InitiatingHeapOccupancyPercent=35",
                  "-XX:+ExplicitGCInvokesConcurrent", "-XX:MaxInlineLevel=15", "-Djava.awt.headless=true"]

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
        self.proc = subprocess.Popen(java + [f"-Xms{heap}", f"-Xmx{heap}", *KAFKA_JVM_OPTS, "kafka.Kafka", self.props],
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
