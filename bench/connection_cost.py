#!/usr/bin/env python3
"""What a request costs the server on a new connection each against one kept-alive connection.

Starts a `rota server` (SQLite in a temporary directory, a free loopback port), with TLS (a
throwaway self-signed certificate made with openssl) or without, sends N GETs of /v1/nodes on
a new connection each and then on one kept-alive connection, twice alternating, and prints the
server's CPU time (utime + stime from /proc) and the wall time per request. `rota agent` sends
its reports on a kept-alive connection; this is what that saves the server per report (at 10 s
heartbeats, 12,500 nodes send 1,250 a second).

  bench/connection_cost.py [--rota build/src/cli/rota] [--requests 2000] [--tls]
"""
import argparse
import http.client
import os
import re
import shutil
import ssl
import subprocess
import tempfile
import time


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rota", default="build/src/cli/rota")
    ap.add_argument("--requests", type=int, default=2000)
    ap.add_argument("--tls", action="store_true")
    args = ap.parse_args()
    d = tempfile.mkdtemp(prefix="rota-conn-")
    server = [args.rota, "server", "--data-dir", d + "/data", "--listen", "127.0.0.1:0", "--rate-limit", "0"]
    if args.tls:
        subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                        "-keyout", d + "/key.pem", "-out", d + "/cert.pem", "-days", "1", "-nodes",
                        "-subj", "/CN=127.0.0.1"], check=True, capture_output=True)
        server += ["--tls-cert", d + "/cert.pem", "--tls-key", d + "/key.pem"]
    with open(d + "/log", "w") as log:
        p = subprocess.Popen(server, stdout=log, stderr=log)
    try:
        port = None
        for _ in range(200):
            time.sleep(0.05)
            with open(d + "/log") as f:
                m = re.search(r"https?://127\.0\.0\.1:(\d+)", f.read())
            if m and os.path.exists(d + "/data/admin.token"):
                port = int(m.group(1))
                break
        if port is None:
            raise SystemExit("connection_cost: the server did not start; see " + d + "/log")
        with open(d + "/data/admin.token") as f:
            token = f.read().strip()
        ctx = ssl.create_default_context()
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE

        def connect():
            if args.tls:
                return http.client.HTTPSConnection("127.0.0.1", port, context=ctx)
            return http.client.HTTPConnection("127.0.0.1", port)

        def cpu_s():
            fields = open(f"/proc/{p.pid}/stat").read().rsplit(")", 1)[1].split()
            return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

        n = args.requests
        runs = {"new connection each": [], "kept alive": []}
        for mode in ("new connection each", "kept alive") * 2:
            fresh = mode == "new connection each"
            c0, t0 = cpu_s(), time.monotonic()
            c = connect()
            for _ in range(n):
                if fresh:
                    c = connect()
                c.request("GET", "/v1/nodes", headers={"Authorization": "Bearer " + token})
                r = c.getresponse()
                r.read()
                if r.status != 200:
                    raise SystemExit(f"connection_cost: GET /v1/nodes answered {r.status}")
                if fresh:
                    c.close()
            c.close()
            runs[mode].append(((cpu_s() - c0) / n * 1e6, (time.monotonic() - t0) / n * 1e6))
        print(f"{n} requests, {'TLS' if args.tls else 'plain TCP'}, per request:")
        for mode, v in runs.items():
            print(f"  {mode:20} server CPU " + ", ".join(f"{c:.0f} us" for c, _ in v) +
                  "; wall " + ", ".join(f"{w:.0f} us" for _, w in v))
        fresh_cpu = sum(c for c, _ in runs["new connection each"])
        kept_cpu = sum(c for c, _ in runs["kept alive"])
        print(f"  server CPU, new connection each / kept alive: {fresh_cpu / max(kept_cpu, 1e-9):.1f}x")
    finally:
        p.terminate()
        p.wait()
        shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    main()
