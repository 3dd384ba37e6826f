#!/usr/bin/env python3
"""An Alertmanager webhook receiver for tests/integration/sup_alerts.sh.

Usage: alert_webhook.py PORT_FILE OUT_FILE

Listens on 127.0.0.1 on a free port and writes the port to PORT_FILE once it
listens. Each POST's body (Alertmanager's webhook JSON: status, alerts with
their labels and annotations) is appended to OUT_FILE as one line,
{"received": <wall clock, seconds>, "body": {...}}, flushed at once, and
answered 200. Standard library only.
"""
import http.server
import json
import os
import sys
import time


class Hook(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        n = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(n)
        now = time.time()
        try:
            body = json.loads(raw)
        except ValueError:
            body = {"unparsed": raw.decode("utf-8", "replace")}
        with open(self.server.out, "a") as f:
            f.write(json.dumps({"received": now, "body": body}) + "\n")
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, fmt, *args):
        pass


def main():
    port_file, out = sys.argv[1], sys.argv[2]
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Hook)
    srv.out = out
    tmp = port_file + ".tmp"
    with open(tmp, "w") as f:
        f.write("%d\n" % srv.server_address[1])
    os.rename(tmp, port_file)  # whole or absent: the test polls for it
    srv.serve_forever()


if __name__ == "__main__":
    main()
