#!/usr/bin/env python3
"""s3_faults: a fault-injecting HTTP proxy between the checkpoint store and an
S3-protocol server (test-only).

    s3_faults.py --listen PORT --upstream PORT --mode-file FILE [--log FILE]

Every request is forwarded to 127.0.0.1:UPSTREAM unchanged (Host header and
all, so SigV4 signatures stay valid), unless the mode file says otherwise.
The mode file is re-read for every request (and every 0.1 s for "down"):

    ok          forward everything
    500         answer HTTP 500 InternalError without forwarding
    500:N       answer 500 to the next N requests, then forward (the proxy's
                own 0.1 s poll spends one too: at most N requests within
                N/10 s; the tests that use it are tuned to that)
    503         answer HTTP 503 SlowDown (S3's throttling answer: "Please
                reduce your request rate.") without forwarding
    503:N       answer 503 SlowDown to exactly the next N requests, then
                forward
    slowdown:S  answer 503 SlowDown for S seconds (from the first request
                seen in this mode), then forward
    slow:MS     forward, each answer delayed by MS milliseconds
    hang        read the request, then answer nothing until the mode changes
                (the client's stall timeout must fire)
    hang:N      the same for the next N requests only (one rank of a gang
                hangs, its peers' reads go through), until the mode changes
    down        stop listening (connection refused) and drop open connections

Prints "ready" on stdout once it listens. Counts requests per method in the
log file, one line per request: "<mode> <method> <path>".
"""
import argparse
import http.client
import os
import socket
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

ARGS = None
LOCK = threading.Lock()
BUDGET = {"n": None, "src": None, "until": None}


def raw_mode():
    try:
        with open(ARGS.mode_file) as f:
            return f.read().strip() or "ok"
    except OSError:
        return "ok"


def mode():
    m = raw_mode()
    if m.startswith("hang:"):
        with LOCK:
            if BUDGET["src"] != m:
                BUDGET["src"], BUDGET["n"] = m, int(m[5:])
            if BUDGET["n"] > 0:
                BUDGET["n"] -= 1
                return m
            return "ok"
    if m.startswith("500:") or m.startswith("503:"):
        with LOCK:
            if BUDGET["src"] != m:
                BUDGET["src"], BUDGET["n"] = m, int(m[4:])
            if BUDGET["n"] > 0:
                BUDGET["n"] -= 1
                return m[:3]
            return "ok"
    if m.startswith("slowdown:"):
        with LOCK:
            if BUDGET["src"] != m:
                BUDGET["src"], BUDGET["until"] = m, time.monotonic() + float(m[9:])
            return "503" if time.monotonic() < BUDGET["until"] else "ok"
    if m.startswith("slow:"):
        return m
    with LOCK:
        BUDGET["src"] = None  # a timed or counted mode set again starts again
    return m


ERRORS = {
    "500": (500, b"InternalError", b"injected by s3_faults"),
    "503": (503, b"SlowDown", b"Please reduce your request rate."),
}


def log(line):
    if ARGS.log:
        with LOCK, open(ARGS.log, "a") as f:
            f.write(line + "\n")


class Proxy(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *a):
        pass

    def handle_any(self):
        n = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(n) if n else b""
        m = mode()
        log(f"{m} {self.command} {self.path}")
        if m == "down":
            self.close_connection = True
            self.connection.shutdown(socket.SHUT_RDWR)
            return
        if m == "hang":
            while mode() == "hang":
                time.sleep(0.1)
            self.close_connection = True
            return
        if m.startswith("hang:"):
            while raw_mode() == m:
                time.sleep(0.1)
            self.close_connection = True
            return
        if m in ERRORS:
            status, code, text = ERRORS[m]
            msg = (b"<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>" + code +
                   b"</Code><Message>" + text + b"</Message><RequestId>s3faults</RequestId>"
                   b"</Error>")
            self.send_response(status)
            self.send_header("Content-Type", "application/xml")
            self.send_header("Content-Length", str(len(msg)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(msg)
            return
        if m.startswith("slow:"):
            time.sleep(float(m[5:]) / 1000.0)
        up = http.client.HTTPConnection("127.0.0.1", ARGS.upstream, timeout=60)
        hdrs = {k: v for k, v in self.headers.items()}
        up.request(self.command, self.path, body=body, headers=hdrs)
        r = up.getresponse()
        data = r.read()
        self.send_response(r.status, r.reason)
        for k, v in r.getheaders():
            if k.lower() in ("transfer-encoding", "connection", "content-length"):
                continue
            self.send_header(k, v)
        if self.command == "HEAD":
            cl = r.getheader("Content-Length")
            self.send_header("Content-Length", cl if cl is not None else "0")
        else:
            self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)
        up.close()

    do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = handle_any


class Server(ThreadingHTTPServer):
    allow_reuse_address = True
    daemon_threads = True


def main():
    global ARGS
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--listen", type=int, required=True)
    p.add_argument("--upstream", type=int, required=True)
    p.add_argument("--mode-file", required=True)
    p.add_argument("--log")
    ARGS = p.parse_args()
    srv, th = None, None
    first = True
    while True:
        m = raw_mode()  # not mode(): that spends the counted modes
        if m.startswith("500:"):
            mode()  # as it always did: see 500:N above
        down = m == "down"
        if srv is None and not down:
            for _ in range(100):
                try:
                    srv = Server(("127.0.0.1", ARGS.listen), Proxy)
                    break
                except OSError:
                    time.sleep(0.05)
            if srv is None:
                print("s3_faults: cannot listen on", ARGS.listen, file=sys.stderr)
                return 1
            th = threading.Thread(target=srv.serve_forever, daemon=True)
            th.start()
            if first:
                print("ready", flush=True)
                first = False
        elif srv is not None and down:
            srv.shutdown()
            srv.server_close()
            srv = None
        time.sleep(0.1)


if __name__ == "__main__":
    sys.exit(main())
