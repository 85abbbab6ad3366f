#!/usr/bin/env python3
"""An S3-compatible store for the lakehouse tests: moto's server on loopback, with the bucket
`warehouse`, behind a TCP proxy that the test can take down and bring back (the store going
away mid-run, its data kept).

Prints `ready PORT` (the proxy's port, what clients use) once both listen, then reads commands
on stdin, one per line, answering each once done:
  down   the proxy closes its listener and every open connection: the store is unreachable
  up     the proxy listens again on the same port
It exits at the end of stdin. Keys `testing`/`testing`, region us-east-1, path-style URLs.

Only what tests/requirements.txt pins (moto[server], which brings boto3).
"""
import logging
import socket
import sys
import threading

import boto3
from moto.server import ThreadedMotoServer


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Proxy:
    def __init__(self, target):
        self.target, self.port, self.conns, self.lock = target, free_port(), set(), threading.Lock()
        self.listener = None

    def up(self):
        self.listener = socket.create_server(("127.0.0.1", self.port), reuse_port=False)
        threading.Thread(target=self.accept, args=(self.listener,), daemon=True).start()

    def down(self):
        self.listener.close()
        with self.lock:
            for c in list(self.conns):
                try:
                    c.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                c.close()
            self.conns.clear()

    def accept(self, listener):
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return
            server = socket.create_connection(("127.0.0.1", self.target))
            with self.lock:
                self.conns.update([client, server])
            for a, b in [(client, server), (server, client)]:
                threading.Thread(target=self.pipe, args=(a, b), daemon=True).start()

    def pipe(self, a, b):
        try:
            while data := a.recv(65536):
                b.sendall(data)
        except OSError:
            pass
        finally:
            for s in (a, b):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass


def main():
    # moto's server logs every request to stderr; the test's output is for its own failures.
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    moto_port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=moto_port, verbose=False)
    server.start()
    boto3.client("s3", endpoint_url=f"http://127.0.0.1:{moto_port}", region_name="us-east-1",
                 aws_access_key_id="testing", aws_secret_access_key="testing").create_bucket(Bucket="warehouse")
    proxy = Proxy(moto_port)
    proxy.up()
    print(f"ready {proxy.port}", flush=True)
    for line in sys.stdin:
        cmd = line.strip()
        if cmd == "down":
            proxy.down()
        elif cmd == "up":
            proxy.up()
        print(cmd, flush=True)
    server.stop()


if __name__ == "__main__":
    main()
