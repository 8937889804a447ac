#!/usr/bin/python3
# idle_rss.py: memory per idle HTTP/2 connection, corral against nginx: each
# server, with one worker answering `return 200`, gets N prior-knowledge
# connections that each made one request and then stay open; its RSS grows
# by N times the cost of one.  With --tls, over TLS (ALPN h2, a P-256
# certificate made for the run).  A measurement for docs/http2.md, not a test.
"""Usage: tests/proto/h2/idle_rss.py [-n CONNECTIONS] [--indexed] [--tls] [--corral build/corral] [--nginx nginx]"""

import argparse
import os
import resource
import shutil
import socket
import ssl
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import h2frames as H  # noqa: E402  (the raw client and its HPACK helpers)


def rss_kb(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def listening(port, timeout=10):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), 0.5).close()
            return True
        except OSError:
            time.sleep(0.05)
    return False


def idle_connections(port, n, indexed=False, tls=None):
    """N connections, each after one GET / answered (its stream ended).
    `indexed`: its fields enter the server's HPACK table, as curl's and
    browsers' do.  `tls`: an ssl.SSLContext to connect with."""
    fields = H.base("/", extra=[("user-agent", "curl/7.88.1"), ("accept", "*/*")])
    block = b"".join(H.literal_indexed(n, v) for n, v in fields) if indexed else H.block(fields)
    request = H.PREFACE + H.settings_frame() + H.settings_frame(ack=True) + H.headers_frame(1, block)
    conns = []
    for i in range(n):
        s = socket.create_connection(("127.0.0.1", port), 10)
        if tls is not None:
            s = tls.wrap_socket(s, server_hostname="localhost")
            if s.selected_alpn_protocol() != "h2":
                raise SystemExit("connection %d: ALPN %s" % (i, s.selected_alpn_protocol()))
        s.sendall(request)
        buf, ended = b"", False
        while not ended:
            chunk = s.recv(65536)
            if not chunk:
                raise SystemExit("connection %d closed" % i)
            buf += chunk
            while len(buf) >= 9 and len(buf) >= 9 + int.from_bytes(buf[:3], "big"):
                length = int.from_bytes(buf[:3], "big")
                ftype, flags, sid = buf[3], buf[4], int.from_bytes(buf[5:9], "big")
                ended = ended or (ftype in (H.DATA, H.HEADERS) and sid == 1 and flags & H.END_STREAM)
                buf = buf[9 + length:]
        conns.append(s)
    return conns


def measure(name, argv, port, n, indexed, tls):
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        if not listening(port):
            raise SystemExit("%s did not listen" % name)
        for c in idle_connections(port, 20, indexed, tls):  # warm up: the first buffers
            c.close()
        time.sleep(0.5)
        before = rss_kb(proc.pid)
        conns = idle_connections(port, n, indexed, tls)
        time.sleep(1)
        after = rss_kb(proc.pid)
        per = (after - before) * 1024.0 / n
        print("%-7s %d idle HTTP/2 connections%s%s: RSS %d -> %d kB, %.0f bytes each" %
              (name, n, " over TLS" if tls is not None else "",
               " (request fields indexed)" if indexed else "", before, after, per))
        for c in conns:
            c.close()
        return per
    finally:
        proc.terminate()
        proc.wait(10)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("-n", type=int, default=2000)
    p.add_argument("--corral", default="build/corral")
    p.add_argument("--nginx", default="nginx")
    p.add_argument("--indexed", action="store_true", help="the requests' fields enter the HPACK table")
    p.add_argument("--tls", action="store_true", help="over TLS, ALPN h2")
    args = p.parse_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 4 * args.n + 1000), hard))
    tmp = tempfile.mkdtemp(prefix="corral-idle-rss-")
    try:
        cport, nport = H.free_port(), H.free_port()
        tls, corral_tls, nginx_tls = None, "", ""
        if args.tls:
            subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                            "ec_paramgen_curve:P-256", "-nodes", "-keyout", tmp + "/key.pem",
                            "-out", tmp + "/cert.pem", "-days", "2", "-subj", "/CN=localhost"],
                           check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            tls = ssl.create_default_context()
            tls.check_hostname = False
            tls.verify_mode = ssl.CERT_NONE
            tls.set_alpn_protocols(["h2"])
            corral_tls = (" tls", "    tls_certificate %s/cert.pem;\n    tls_certificate_key %s/key.pem;\n"
                          % (tmp, tmp))
            nginx_tls = (" ssl", "        ssl_certificate %s/cert.pem;\n        ssl_certificate_key %s/key.pem;\n"
                         % (tmp, tmp))
        with open(os.path.join(tmp, "corral.conf"), "w") as f:
            f.write("workers 1;\nmax_connections %d;\nserver {\n    listen 127.0.0.1:%d%s http2;\n%s"
                    "    http2_idle_timeout 300s;\n    location / { return 200 \"hello\\n\"; }\n}\n"
                    % (args.n + 100, cport, corral_tls[0] if tls else "", corral_tls[1] if tls else ""))
        with open(os.path.join(tmp, "nginx.conf"), "w") as f:
            f.write("daemon off;\nmaster_process off;\nworker_processes 1;\n"
                    "worker_rlimit_nofile %d;\npid %s/nginx.pid;\nerror_log %s/error.log;\n"
                    "events { worker_connections %d; }\nhttp {\n    access_log off;\n"
                    "    client_body_temp_path %s/b;\n    proxy_temp_path %s/p;\n"
                    "    fastcgi_temp_path %s/f;\n    uwsgi_temp_path %s/u;\n    scgi_temp_path %s/s;\n"
                    "    keepalive_timeout 300s;\n    http2_idle_timeout 300s;\n"
                    "    server {\n        listen 127.0.0.1:%d%s http2;\n%s"
                    "        location / { return 200 \"hello\\n\"; }\n    }\n}\n"
                    % (2 * args.n + 100, tmp, tmp, args.n + 100, tmp, tmp, tmp, tmp, tmp, nport,
                       nginx_tls[0] if tls else "", nginx_tls[1] if tls else ""))
        measure("corral", [args.corral, "-c", os.path.join(tmp, "corral.conf")], cport, args.n,
                args.indexed, tls)
        measure("nginx", [args.nginx, "-p", tmp + "/", "-c", os.path.join(tmp, "nginx.conf"),
                          "-e", os.path.join(tmp, "error.log")], nport, args.n, args.indexed, tls)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
