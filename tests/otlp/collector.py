#!/usr/bin/env python3
"""collector.py: a tiny OTLP/HTTP collector for tests, on 127.0.0.1 only. Records the body of
every POST to /v1/traces as one line of BODIES, answers 503 to the first FAIL_FIRST requests
(so the exporter has to retry) and 200 afterwards, and writes its port to PORT_FILE once it
listens. Serves until killed. Usage: collector.py PORT_FILE BODIES [FAIL_FIRST]"""
import http.server
import os
import sys

port_file, bodies = sys.argv[1], sys.argv[2]
fail_first = int(sys.argv[3]) if len(sys.argv) > 3 else 0
seen = {"n": 0}


class Handler(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        n = int(self.headers.get("Content-Length", "0"))
        body = self.rfile.read(n)
        seen["n"] += 1
        ok = self.path == "/v1/traces" and self.headers.get("Content-Type") == "application/json"
        if seen["n"] <= fail_first:
            code = 503
        else:
            code = 200 if ok else 400
        with open(bodies + ".log", "a") as f:
            f.write("%d %s %d\n" % (seen["n"], self.path, code))
        if code == 200:
            with open(bodies, "ab") as f:
                f.write(body.replace(b"\n", b" ") + b"\n")
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"{}")

    def log_message(self, *args):
        pass


srv = http.server.HTTPServer(("127.0.0.1", 0), Handler)
with open(port_file + ".tmp", "w") as f:
    f.write("%d\n" % srv.server_address[1])
os.rename(port_file + ".tmp", port_file)
srv.serve_forever()
