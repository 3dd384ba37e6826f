#!/usr/bin/env python3
"""HTTP load against the supervisor's port (sup_http_load.sh, bench_http_load.sh).

    http_load.py HOST:PORT --idle N --slow S [--view-every K] --stop FILE --out JSON

Until FILE exists, at once:
  - N connections held open; each asks /status every few seconds and reads
    the answer (active), else idles; one the server closes is opened again
    a second later (a flood that keeps coming);
  - S slowloris sockets: a request line, then one header line every
    --slow-every seconds, never the blank line; each is opened once and the
    time the server closed it recorded;
  - a poller: GET /status on a new connection every --poll-s seconds (5 s
    timeout), every K-th a GET /view.json?points=20000 beside it; each
    latency, and each failure (no connection, no answer, not 200).
Then it closes everything and writes a JSON summary to --out. Python's
standard library only; one thread for the held sockets (selectors), one for
the poller.
"""
import argparse
import json
import os
import resource
import selectors
import socket
import sys
import threading
import time


def raise_nofile():
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def get(host, port, path, timeout=5.0):
    """(status code or None, seconds, error text)"""
    t0 = time.monotonic()
    try:
        with socket.create_connection((host, port), timeout=timeout) as c:
            c.settimeout(timeout)
            c.sendall(f"GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\nConnection: close\r\n\r\n".encode())
            buf = b""
            while True:
                d = c.recv(65536)
                if not d:
                    break
                buf += d
        line = buf.split(b"\r\n", 1)[0].split()
        code = int(line[1]) if len(line) > 1 else None
        return code, time.monotonic() - t0, "" if code == 200 else f"answer {buf[:80]!r}"
    except OSError as e:
        return None, time.monotonic() - t0, str(e)


class Held:
    """the idle/active connections and the slowloris sockets, on one thread"""

    def __init__(self, a):
        self.a = a
        self.sel = selectors.DefaultSelector()
        self.slow_open = {}  # sock -> opened at
        self.slow_closed = []  # seconds each lived
        self.idle_closed = 0
        self.idle_opened = 0
        self.connect_errors = 0
        self.idle = {}  # sock -> next ask time (None: idle only)
        self.reopen = []  # times to open another idle connection

    def connect(self):
        try:
            s = socket.create_connection((self.a.host, self.a.port), timeout=5)
        except OSError:
            self.connect_errors += 1
            return None
        s.setblocking(False)
        return s

    def open_idle(self, i):
        s = self.connect()
        if s is None:
            self.reopen.append(time.monotonic() + 1)
            return
        self.idle_opened += 1
        active = i % 4 == 0  # a quarter ask now and then
        self.idle[s] = time.monotonic() + 1 + (i % 3) if active else None
        self.sel.register(s, selectors.EVENT_READ, "idle")

    def open_slow(self):
        s = self.connect()
        if s is None:
            return
        try:
            s.send(f"GET /status HTTP/1.1\r\nHost: {self.a.host}:{self.a.port}\r\n".encode())
        except OSError:
            pass
        self.slow_open[s] = time.monotonic()
        self.sel.register(s, selectors.EVENT_READ, "slow")

    def closed(self, s, kind):
        self.sel.unregister(s)
        s.close()
        if kind == "slow":
            self.slow_closed.append(time.monotonic() - self.slow_open.pop(s))
        else:
            self.idle.pop(s, None)
            self.idle_closed += 1
            self.reopen.append(time.monotonic() + 1)

    def run(self, stop):
        for i in range(self.a.idle):
            self.open_idle(i)
        for _ in range(self.a.slow):
            self.open_slow()
        next_drip = time.monotonic() + self.a.slow_every
        n = 0
        while not stop.is_set():
            for key, _ in self.sel.select(0.2):
                try:
                    d = key.fileobj.recv(65536)
                except OSError:
                    d = b""
                if not d:
                    self.closed(key.fileobj, key.data)
            now = time.monotonic()
            for s, t in list(self.idle.items()):
                if t is not None and now >= t:
                    try:
                        s.send(f"GET /status HTTP/1.1\r\nHost: {self.a.host}:{self.a.port}\r\n\r\n".encode())
                    except OSError:
                        pass
                    self.idle[s] = now + 3
            due = [t for t in self.reopen if t <= now]
            self.reopen = [t for t in self.reopen if t > now]
            for _ in due:
                n += 1
                self.open_idle(n)
            if now >= next_drip:
                next_drip = now + self.a.slow_every
                for s in list(self.slow_open):
                    try:
                        s.send(b"X-Slow: 1\r\n")
                    except OSError:
                        pass
        for key in list(self.sel.get_map().values()):
            key.fileobj.close()


def poll(a, stop, out):
    k = 0
    views = []
    while not stop.is_set():
        k += 1
        if a.view_every and k % a.view_every == 0:
            t = threading.Thread(target=lambda: views.append(get(a.host, a.port, "/view.json?points=20000", 10)))
            t.start()
        code, dt, err = get(a.host, a.port, "/status")
        out["status_asked"] += 1
        if code == 200:
            out["status_ms"].append(round(dt * 1000, 2))
        else:
            out["status_failed"] += 1
            if len(out["failures"]) < 10:
                out["failures"].append(err)
        time.sleep(a.poll_s)
    out["views_asked"] = len(views)
    out["views_ok"] = sum(1 for v in views if v[0] == 200)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("addr")
    p.add_argument("--idle", type=int, default=200)
    p.add_argument("--slow", type=int, default=50)
    p.add_argument("--slow-every", type=float, default=4)
    p.add_argument("--poll-s", type=float, default=0.2)
    p.add_argument("--view-every", type=int, default=10)
    p.add_argument("--stop", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--ready", help="a file written once every socket is open")
    a = p.parse_args()
    a.host, port = a.addr.rsplit(":", 1)
    a.host = a.host.strip("[]")
    a.port = int(port)
    raise_nofile()
    stop = threading.Event()
    held = Held(a)
    out = {"status_asked": 0, "status_failed": 0, "status_ms": [], "failures": []}
    th = threading.Thread(target=held.run, args=(stop,))
    th.start()
    time.sleep(0.5)
    if a.ready:
        open(a.ready, "w").close()
    tp = threading.Thread(target=poll, args=(a, stop, out))
    tp.start()
    while not os.path.exists(a.stop):
        time.sleep(0.2)
    stop.set()
    th.join()
    tp.join()
    out.update(
        slow=a.slow,
        slow_closed_by_server=len(held.slow_closed),
        slow_lived_s=sorted(round(x, 1) for x in held.slow_closed),
        idle_opened=held.idle_opened,
        idle_closed_by_server=held.idle_closed,
        connect_errors=held.connect_errors,
    )
    json.dump(out, open(a.out, "w"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
