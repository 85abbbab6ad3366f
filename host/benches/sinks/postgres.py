#!/usr/bin/env python3
"""PostgreSQL upserts: how fast the PostgreSQL sink keeps a table current.

Starts a PostgreSQL server of its own (Debian's, as `cargo xtask setup` installs it; under root
as the `postgres` user) on a free loopback port, generates orders (`weir gen orders`), and runs,
interleaved, round after round, the orders through the standard JSON parser (`json_parser.wasm`,
keyed by `user_id`) into:

  jsonl      the JSON-lines file sink component (plugins/jsonl-file-sink), for scale
  postgres   the PostgreSQL sink: each order upserted into last_order (user_id primary key), so
             most rows update a user's row that is there already

and reports per sink (medians over the rounds): rows per second on the wall clock, Weir's
CPU-seconds (the server's are its own), and for PostgreSQL the table's rows after the run.

Run from the repository root after `cargo xtask build`:
  python3 host/benches/sinks/postgres.py --events 2000000 --rounds 3

Only the standard library.
"""

import argparse
import os
import pwd
import resource
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
PASSWORD = "bench"


def pg_bin():
    out = subprocess.run(["pg_config", "--bindir"], capture_output=True, text=True)
    if out.returncode == 0 and (Path(out.stdout.strip()) / "initdb").exists():
        return Path(out.stdout.strip())
    found = sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"))
    if not found:
        sys.exit("PostgreSQL's server is missing: run `cargo xtask setup`")
    return found[-1].parent


class Server:
    def __init__(self, work):
        self.bin, self.dir = pg_bin(), work / "pg"
        self.dir.mkdir()
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        (self.dir / "pw").write_text(PASSWORD)
        self.root = os.geteuid() == 0
        if self.root:
            u = pwd.getpwnam("postgres")
            for p in [work, self.dir, self.dir / "pw"]:
                os.chown(p, u.pw_uid, u.pw_gid)
        self.server("initdb", "-D", str(self.dir / "data"), "-U", "weir", "--pwfile", str(self.dir / "pw"),
                    "--auth-host=scram-sha-256", "--auth-local=trust", "-E", "UTF8", "--no-locale")
        opts = f"-p {self.port} -c listen_addresses=127.0.0.1 -c unix_socket_directories=''"
        self.server("pg_ctl", "-D", str(self.dir / "data"), "-l", str(self.dir / "log"), "-o", opts, "-w", "start")
        self.conf = work / "pg.conf"
        self.conf.write_text(f"host=127.0.0.1 port={self.port} dbname=postgres user=weir\n")
        self.password = work / "pg.password"
        self.password.write_text(PASSWORD + "\n")

    def server(self, program, *args):
        cmd = [str(self.bin / program), *args]
        if self.root:
            cmd = ["runuser", "-u", "postgres", "--", *cmd]
        subprocess.run(cmd, check=True, capture_output=True, cwd=self.dir)

    def psql(self, sql):
        out = subprocess.run(["psql", "-h", "127.0.0.1", "-p", str(self.port), "-U", "weir", "-d", "postgres",
                              "-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-c", sql],
                             capture_output=True, text=True, env={**os.environ, "PGPASSWORD": PASSWORD})
        if out.returncode != 0:
            sys.exit(f"psql: {out.stderr}")
        return out.stdout.strip()

    def stop(self):
        self.server("pg_ctl", "-D", str(self.dir / "data"), "-m", "fast", "-w", "stop")


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
config = {{ time_field = "order_ts", key_fields = ["user_id"] }}
[sink]
{sink}
""")
    return p


def run(weir, p, work):
    shutil.rmtree(work / "cp", ignore_errors=True)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.monotonic()
    done = subprocess.run([weir, "run", str(p), "--checkpoint", str(work / "cp")], capture_output=True, text=True)
    wall = time.monotonic() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        sys.exit(f"{p.name}: weir run failed:\n{done.stderr}")
    return {"cpu": (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime), "wall": wall}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--events", type=int, default=2_000_000)
    ap.add_argument("--rounds", type=int, default=3)
    target = Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target"))
    ap.add_argument("--weir", default=str(target / "release" / "weir"))
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="weir-postgres-bench-") as tmp:
        work = Path(tmp)
        os.chmod(work, 0o755)
        pg = Server(work)
        try:
            events = work / "orders.jsonl"
            subprocess.run([args.weir, "gen", "orders", str(args.events), "--seed", "42", "--out", str(events)],
                           check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            out = work / "out"
            table = ("CREATE TABLE last_order (user_id bigint PRIMARY KEY, order_id bigint NOT NULL, "
                     "status text NOT NULL, amount numeric(12,2), order_ts timestamptz NOT NULL)")
            sinks = {
                "jsonl": (f'plugin = "{ROOT / "plugins" / "dist" / "jsonl_file_sink.wasm"}"\n'
                          f'config = {{ dir = "/out" }}\n'
                          f'grants.dirs = [{{ host = "{out}", guest = "/out", writable = true }}]'),
                "postgres": (f'type = "postgres"\nconnection = "{pg.conf}"\npassword_file = "{pg.password}"\n'
                             f'table = "last_order"'),
            }
            runs = {k: pipeline(work, k, events, v) for k, v in sinks.items()}
            results = {k: [] for k in runs}
            users = None
            for _ in range(args.rounds):
                for name, p in runs.items():
                    shutil.rmtree(out, ignore_errors=True)
                    if name == "postgres":
                        pg.psql(f"DROP TABLE IF EXISTS last_order; DROP TABLE IF EXISTS weir_deliveries; {table}")
                    results[name].append(run(args.weir, p, work))
                    if name == "postgres":
                        users = pg.psql("SELECT count(*) FROM last_order")
        finally:
            pg.stop()
    print(f"{args.events} orders ({users} users in the table), {args.rounds} rounds interleaved, medians:")
    print(f"{'sink':<10} {'rows/s':>11} {'weir CPU-s':>11}")
    for k, rs in results.items():
        cpu, wall = statistics.median(r["cpu"] for r in rs), statistics.median(r["wall"] for r in rs)
        print(f"{k:<10} {args.events / wall:>11,.0f} {cpu:>11.2f}")


if __name__ == "__main__":
    main()
