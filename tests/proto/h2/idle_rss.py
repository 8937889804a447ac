#!/usr/bin/python3
# idle_rss.py: memory per idle HTTP/2 connection, corral against nginx: each
# server, with one worker answering `return 200`, gets N prior-knowledge
# connections that each made one request and then stay open; its RSS grows
# by N times the cost of one.  A measurement for docs/http2.md, not a test.
# With --tls, over TLS (ALPN h2, a P-256 certificate made for the run).
# With --pid it is the client of tests/bench/h2-idle-peers.sh instead: it
# measures a server that harness started (over TLS with --tls).
"""Usage: tests/proto/h2/idle_rss.py [-n CONNECTIONS] [--indexed] [--tls] [--corral build/corral] [--nginx nginx]
       tests/proto/h2/idle_rss.py --pid PID --port PORT [-n CONNECTIONS] [--warm W] [--tls]
                                  [--indexed] [--hold] [--timeout SECONDS]"""

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


def tree_pids(root):
    """ROOT and every process below it, from the children lists of each of
    their threads (a child is listed under the thread that forked it)."""
    pids, i = [root], 0
    while i < len(pids):
        try:
            for task in os.listdir("/proc/%d/task" % pids[i]):
                with open("/proc/%d/task/%s/children" % (pids[i], task)) as f:
                    pids += [int(c) for c in f.read().split()]
        except OSError:
            pass
        i += 1
    return pids


def tree_kb(root):
    """(VmRSS, Pss) of ROOT's process tree, summed, in kB; processes that
    end while they are read count nothing."""
    rss = pss = 0
    for pid in tree_pids(root):
        try:
            rss += rss_kb(pid)
            with open("/proc/%d/smaps_rollup" % pid) as f:
                pss += sum(int(line.split()[1]) for line in f if line.startswith("Pss:"))
        except OSError:
            pass
    return rss, pss


def listening(port, timeout=10):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), 0.5).close()
            return True
        except OSError:
            time.sleep(0.05)
    return False


def tls_context():
    """A client context offering only h2 by ALPN, trusting any certificate:
    the servers measured run with one made for the run."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    ctx.set_alpn_protocols(["h2"])
    return ctx


def idle_connections(port, n, indexed=False, tls=None, hold=False, deadline=None):
    """N connections, each after one GET / answered (its stream ended).
    `indexed`: its fields enter the server's HPACK table, as curl's and
    browsers' do.  `tls`: an SSLContext, to connect over TLS with ALPN h2.
    `hold`: the client announces a stream window of 0, so each response's
    body cannot be sent: its stream stays open once the response head has
    arrived.  `deadline`: a time.monotonic() past which it gives up."""
    fields = H.request_fields(authority="localhost", scheme="https" if tls else "http",
                              extra=[("user-agent", "curl/7.88.1"), ("accept", "*/*")])
    block = b"".join(H.literal_indexed(n, v) for n, v in fields) if indexed else H.block(fields)
    settings = [(H.SETTINGS_INITIAL_WINDOW_SIZE, 0)] if hold else []
    request = H.PREFACE + H.settings_frame(settings) + H.headers_frame(1, block)
    conns = []
    for i in range(n):
        if deadline is not None and time.monotonic() > deadline:
            raise SystemExit("%d of %d connections made in the time given" % (i, n))
        s = socket.create_connection(("127.0.0.1", port), 10)
        if tls is not None:
            s = tls.wrap_socket(s, server_hostname="localhost")
            if s.selected_alpn_protocol() != "h2":
                raise SystemExit("connection %d: ALPN gave %r, not h2" % (i, s.selected_alpn_protocol()))
        s.sendall(request)
        buf, done = b"", False
        while not done:
            chunk = s.recv(65536)
            if not chunk:
                raise SystemExit("connection %d closed" % i)
            buf += chunk
            while len(buf) >= 9 and len(buf) >= 9 + int.from_bytes(buf[:3], "big"):
                length = int.from_bytes(buf[:3], "big")
                ftype, flags, sid = buf[3], buf[4], int.from_bytes(buf[5:9], "big")
                if ftype == H.SETTINGS and not flags & H.ACK:
                    s.sendall(H.settings_frame(ack=True))
                if (sid == 1 and ftype == H.RST_STREAM) or ftype == H.GOAWAY:
                    raise SystemExit("connection %d: %s from the server" %
                                     (i, "RST_STREAM" if ftype == H.RST_STREAM else "GOAWAY"))
                if hold:
                    done = done or (ftype == H.HEADERS and sid == 1)
                else:
                    done = done or (ftype in (H.DATA, H.HEADERS) and sid == 1 and flags & H.END_STREAM)
                buf = buf[9 + length:]
        conns.append(s)
    return conns


def settled_kb(root, timeout=5):
    """The tree's (VmRSS, Pss) once VmRSS stops moving: read every 0.25 s
    until two readings agree, `timeout` seconds at most."""
    last = tree_kb(root)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        time.sleep(0.25)
        now = tree_kb(root)
        if now[0] == last[0]:
            return now
        last = now
    return last


def measure_tree(root, port, n, warm, indexed=False, tls=None, hold=False, timeout=120):
    """Memory per connection of the server whose process tree is ROOT's:
    WARM connections to warm it up (they stay open), then the tree's
    memory, N connections, the tree's memory again.  Returns
    ((rss before, pss before), (rss after, pss after), connection 0's TLS
    version and cipher or "h2c")."""
    deadline = time.monotonic() + timeout
    held = idle_connections(port, warm, indexed, tls, hold, deadline)
    before = settled_kb(root)
    conns = idle_connections(port, n, indexed, tls, hold, deadline)
    after = settled_kb(root)
    how = "h2c"
    if tls is not None:
        how = "%s %s" % (conns[0].version(), conns[0].cipher()[0])
    for c in held + conns:
        c.close()
    return before, after, how


def measure(name, argv, port, n, indexed, tls):
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        if not listening(port):
            raise SystemExit("%s did not listen" % name)
        (before, _), (after, _), _ = measure_tree(proc.pid, port, n, 20, indexed, tls)
        per = (after - before) * 1024.0 / n
        print("%-7s %d idle HTTP/2 connections%s%s: RSS %d -> %d kB, %.0f bytes each" %
              (name, n, " over TLS" if tls is not None else "",
               " (request fields indexed)" if indexed else "", before, after, per))
        return per
    finally:
        proc.terminate()
        proc.wait(10)


def client(args):
    """--pid: measures the server already running (tests/bench/h2-idle-peers.sh
    starts it) and prints one line: the tree's kB before and after, VmRSS
    then Pss, and the TLS version and cipher."""
    tls = tls_context() if args.tls else None
    (rb, pb), (ra, pa), how = measure_tree(args.pid, args.port, args.n, args.warm, args.indexed,
                                           tls, args.hold, args.timeout)
    print("rss %d %d pss %d %d %s" % (rb, ra, pb, pa, how.replace(" ", "/")))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("-n", type=int, default=2000)
    p.add_argument("--corral", default="build/corral")
    p.add_argument("--nginx", default="nginx")
    p.add_argument("--indexed", action="store_true", help="the requests' fields enter the HPACK table")
    p.add_argument("--pid", type=int, help="measure this running server's process tree instead")
    p.add_argument("--port", type=int, help="with --pid: the port it listens on")
    p.add_argument("--tls", action="store_true", help="TLS with ALPN h2, not h2c")
    p.add_argument("--hold", action="store_true",
                   help="with --pid: each connection's stream stays open, its response body held back")
    p.add_argument("--warm", type=int, default=20, help="with --pid: warm-up connections")
    p.add_argument("--timeout", type=float, default=120, help="with --pid: seconds to give up after")
    args = p.parse_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 4 * args.n + 1000), hard))
    if args.pid is not None:
        if args.port is None:
            p.error("--pid needs --port")
        client(args)
        return
    tmp = tempfile.mkdtemp(prefix="corral-idle-rss-")
    try:
        cport, nport = H.free_port(), H.free_port()
        tls, corral_tls, nginx_tls = None, ("", ""), ("", "")
        if args.tls:
            subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                            "ec_paramgen_curve:P-256", "-nodes", "-keyout", tmp + "/key.pem",
                            "-out", tmp + "/cert.pem", "-days", "2", "-subj", "/CN=localhost"],
                           check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            tls = tls_context()
            corral_tls = (" tls", "    tls_certificate %s/cert.pem;\n    tls_certificate_key %s/key.pem;\n"
                          % (tmp, tmp))
            nginx_tls = (" ssl", "        ssl_certificate %s/cert.pem;\n        ssl_certificate_key %s/key.pem;\n"
                         % (tmp, tmp))
        with open(os.path.join(tmp, "corral.conf"), "w") as f:
            f.write("workers 1;\nmax_connections %d;\nserver {\n    listen 127.0.0.1:%d%s http2;\n%s"
                    "    http2_idle_timeout 300s;\n    location / { return 200 \"hello\\n\"; }\n}\n"
                    % (args.n + 100, cport, corral_tls[0], corral_tls[1]))
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
                       nginx_tls[0], nginx_tls[1]))
        measure("corral", [args.corral, "-c", os.path.join(tmp, "corral.conf")], cport, args.n,
                args.indexed, tls)
        measure("nginx", [args.nginx, "-p", tmp + "/", "-c", os.path.join(tmp, "nginx.conf"),
                          "-e", os.path.join(tmp, "error.log")], nport, args.n, args.indexed, tls)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
