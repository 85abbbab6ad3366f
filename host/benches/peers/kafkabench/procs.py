"""What an engine's run costs: wall time, CPU time and peak RSS of its own processes.

`Run` starts an engine's processes (one or more commands, each with its stdout and stderr in a
file of the work directory), samples the RSS of each process tree every SAMPLE_S seconds, and
takes each process's CPU time from wait4 when it ends, so the figure is the whole life of the
process and its reaped children, not a sample. The broker is not part of any run: its CPU time
over the run is kept apart (`broker_cpu`), and so is the rest of the machine's (`other_cores`),
which says whether something else was running; numbers taken with it well above 0 are not
worth keeping. Every Run is listed in `Run.live` so that the caller can kill whatever is left
at exit.
"""
import os
import shutil
import signal
import subprocess
import time

from . import log

SAMPLE_S = 0.1


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


def clean_up(broker, work, keep):
    """Ends a script's runs: every process still running, the broker, and the work directory
    unless `keep`."""
    for r in Run.live:
        r.kill()
    if broker:
        broker.stop()
    if keep:
        log(f"kept {work}")
    else:
        shutil.rmtree(work, ignore_errors=True)
