#!/usr/bin/python3
# grpc_cases.py: gRPC through corral's grpc_pass, with a real gRPC client and
# server (python3-grpcio, generic handlers: no protoc): unary, server and
# client streaming, bidirectional calls, deadlines, cancellation, 4 MiB
# messages, status codes and trailers, and corral's own failures seen as
# grpc-status, on a plain and a TLS listener, to a plain and a TLS backend.
"""Usage: grpc_cases.py --daemon build/corral [--case SUBSTRING]... [-v]

Exit status: 0 every case passed, 1 a case failed or the daemon misbehaved
(crash, sanitizer report, unclean exit), 2 usage.
"""

import argparse
import hashlib
import os
import shlex
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from concurrent import futures

import grpc

BIG = 4 * 1024 * 1024  # a 4 MiB message, each way
OPTIONS = [("grpc.max_send_message_length", 8 << 20), ("grpc.max_receive_message_length", 8 << 20)]


class Backend(grpc.GenericRpcHandler):
    """The methods, by their last path segment, whatever the service."""

    def __init__(self):
        self.cancelled = threading.Event()  # a call saw its client go
        self.serving = True  # what grpc.health.v1.Health/Check answers
        self.calls = 0
        self.lock = threading.Lock()

    def _note(self, ctx):
        with self.lock:
            self.calls += 1

    def unary(self, req, ctx):
        self._note(ctx)
        ctx.set_trailing_metadata((("x-trailer", "yes"),))
        return req[::-1]

    def server_stream(self, req, ctx):
        self._note(ctx)
        n = int(req)
        try:
            for i in range(n if n > 0 else 1 << 30):
                if not ctx.is_active():
                    self.cancelled.set()
                    return
                yield b"m%d" % i
                if n <= 0:
                    time.sleep(0.01)
        except GeneratorExit:  # the server saw the call end while it sent
            self.cancelled.set()
            raise

    def client_stream(self, it, ctx):
        self._note(ctx)
        total = count = 0
        for m in it:
            total += len(m)
            count += 1
        ctx.set_trailing_metadata((("x-count", str(count)),))
        return b"%d" % total

    def bidi(self, it, ctx):
        self._note(ctx)
        for m in it:
            yield b"echo:" + m

    def big(self, req, ctx):
        self._note(ctx)
        return hashlib.sha256(req).hexdigest().encode() + b":" + bytes(range(256)) * (BIG // 256)

    def sleep(self, req, ctx):
        self._note(ctx)
        end = time.monotonic() + int(req) / 1000
        while time.monotonic() < end:
            if not ctx.is_active():
                self.cancelled.set()
                return b""
            time.sleep(0.01)
        return b"slept"

    def status(self, req, ctx):
        self._note(ctx)
        ctx.set_trailing_metadata((("x-why", "asked"),))
        ctx.abort(grpc.StatusCode(tuple(c for c in grpc.StatusCode if c.value[0] == int(req))[0]),
                  "status %s as asked" % req.decode())

    def health_check(self, req, ctx):
        # HealthCheckResponse { status: SERVING (1) | NOT_SERVING (2) }
        return b"\x08\x01" if self.serving else b"\x08\x02"

    def service(self, details):
        if details.method == "/grpc.health.v1.Health/Check":
            return grpc.unary_unary_rpc_method_handler(self.health_check)
        name = details.method.rsplit("/", 1)[-1]
        rpc = {
            "Unary": grpc.unary_unary_rpc_method_handler(self.unary),
            "ServerStream": grpc.unary_stream_rpc_method_handler(self.server_stream),
            "ClientStream": grpc.stream_unary_rpc_method_handler(self.client_stream),
            "Bidi": grpc.stream_stream_rpc_method_handler(self.bidi),
            "Big": grpc.unary_unary_rpc_method_handler(self.big),
            "Sleep": grpc.unary_unary_rpc_method_handler(self.sleep),
            "Status": grpc.unary_unary_rpc_method_handler(self.status),
        }
        return rpc.get(name)


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def make_cert(d):
    cert, key = os.path.join(d, "cert.pem"), os.path.join(d, "key.pem")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                    "-nodes", "-keyout", key, "-out", cert, "-days", "2", "-subj", "/CN=localhost",
                    "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1"],
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return cert, key


class Daemon:
    def __init__(self, cmd, d, conf):
        self.conf = os.path.join(d, "corral.conf")
        self.out = os.path.join(d, "corral.out")
        with open(self.conf, "w") as f:
            f.write(conf)
        self.proc = subprocess.Popen(shlex.split(cmd) + ["-c", self.conf], stdout=open(self.out, "w"),
                                     stderr=subprocess.STDOUT)

    def wait_ports(self, ports):
        deadline = time.monotonic() + 10
        for p in ports:
            while True:
                if self.proc.poll() is not None:
                    raise RuntimeError("daemon exited: " + self.output())
                try:
                    socket.create_connection(("127.0.0.1", p), timeout=0.2).close()
                    break
                except OSError:
                    if time.monotonic() > deadline:
                        raise RuntimeError("port %d not listening: %s" % (p, self.output()))
                    time.sleep(0.02)

    def output(self):
        with open(self.out) as f:
            return f.read()

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        try:
            rc = self.proc.wait(15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            rc = self.proc.wait()
        return rc


def config(d, ports, backend, tls_backend, dead, cert, key):
    return f"""
workers 2;
error_log {d}/error.log;
limit_req_zone $binary_remote_addr zone=one:1m rate=1r/m;
# A failure marks a server down for fail_timeout: each error case has its own.
upstream slow {{ server 127.0.0.1:{backend} max_fails=0; }}
upstream limited {{ server 127.0.0.1:{backend} max_fails=0; }}
# A generous timeout: with fall=1 one slow check on a loaded machine would
# take the server down in the middle of the case.
upstream checked {{
    server 127.0.0.1:{backend};
    health_check type=grpc interval=100ms timeout=5s rise=1 fall=1;
}}
server {{
    listen 127.0.0.1:{ports[0]} http2;
    listen 127.0.0.1:{ports[1]} tls http2;
    tls_certificate {cert};
    tls_certificate_key {key};
    client_max_body_size 16m;
    grpc_set_header X-Via-Corral yes;
    location / {{ grpc_pass grpc://127.0.0.1:{backend}; }}
    location /tls.T/ {{
        grpc_pass grpcs://127.0.0.1:{tls_backend};
        grpc_ssl_trusted_certificate {cert};
        grpc_ssl_name localhost;
    }}
    location /dead.T/ {{ grpc_pass grpc://127.0.0.1:{dead}; }}
    location /slow.T/ {{ grpc_pass grpc://slow; grpc_read_timeout 300ms; }}
    location /deny.T/ {{ deny all; grpc_pass grpc://127.0.0.1:{backend}; }}
    location /limit.T/ {{ limit_req zone=one; grpc_pass grpc://limited; }}
    location /checked.T/ {{ grpc_pass grpc://checked; }}
}}
"""


class Failure(Exception):
    pass


def check(cond, what):
    if not cond:
        raise Failure(what)


def expect_code(fn, code, detail=None):
    try:
        fn()
    except grpc.RpcError as e:
        check(e.code() == code, "expected %s, got %s: %s" % (code, e.code(), e.details()))
        if detail is not None:
            check(detail in (e.details() or ""), "details %r lack %r" % (e.details(), detail))
        return e
    raise Failure("expected %s, the call succeeded" % code)


def cases(ch, backend, service="t.T"):
    m = lambda kind, name: getattr(ch, kind)("/%s/%s" % (service, name))

    def unary():
        r, call = m("unary_unary", "Unary").with_call(b"hello", timeout=5)
        check(r == b"olleh", "response %r" % r)
        check(("x-trailer", "yes") in [(x.key, x.value) for x in call.trailing_metadata()],
              "trailers %r" % (call.trailing_metadata(),))
        check(call.code() == grpc.StatusCode.OK, "code %s" % call.code())

    def server_streaming():
        got = list(m("unary_stream", "ServerStream")(b"50", timeout=5))
        check(got == [b"m%d" % i for i in range(50)], "got %d messages" % len(got))

    def client_streaming():
        r, call = m("stream_unary", "ClientStream").with_call(iter([b"x" * i for i in range(1, 21)]), timeout=5)
        check(r == b"210", "response %r" % r)
        check(("x-count", "20") in [(x.key, x.value) for x in call.trailing_metadata()], "trailers")

    def bidi():
        msgs = [b"a%d" % i for i in range(20)]
        got = list(m("stream_stream", "Bidi")(iter(msgs), timeout=5))
        check(got == [b"echo:" + x for x in msgs], "got %r" % got[:3])

    def big_messages():
        req = os.urandom(BIG)
        r = m("unary_unary", "Big")(req, timeout=20)
        digest, _, body = r.partition(b":")
        check(digest == hashlib.sha256(req).hexdigest().encode(), "request digest")
        check(len(body) == BIG and body[:256] == bytes(range(256)), "response of %d bytes" % len(body))

    def status_and_trailers():
        e = expect_code(lambda: m("unary_unary", "Status")(b"5", timeout=5), grpc.StatusCode.NOT_FOUND,
                        "status 5 as asked")
        check(("x-why", "asked") in [(x.key, x.value) for x in e.trailing_metadata()], "trailers")
        expect_code(lambda: m("unary_unary", "Status")(b"9", timeout=5),
                    grpc.StatusCode.FAILED_PRECONDITION)

    def deadline():
        backend.cancelled.clear()
        expect_code(lambda: m("unary_unary", "Sleep")(b"3000", timeout=0.3), grpc.StatusCode.DEADLINE_EXCEEDED)
        # The client's RST_STREAM reaches the backend as a cancel.
        check(backend.cancelled.wait(2.5), "the backend never saw the call end")

    def cancellation():
        backend.cancelled.clear()
        call = m("unary_stream", "ServerStream")(b"0", timeout=10)
        for _, msg in zip(range(3), call):
            pass
        call.cancel()
        check(backend.cancelled.wait(2.5), "the backend never saw the cancel")

    return [unary, server_streaming, client_streaming, bidi, big_messages, status_and_trailers, deadline,
            cancellation]


def corral_errors(ch):
    def no_upstream():
        expect_code(lambda: ch.unary_unary("/dead.T/Unary")(b"x", timeout=5), grpc.StatusCode.UNAVAILABLE)

    def read_timeout():
        expect_code(lambda: ch.unary_unary("/slow.T/Sleep")(b"2000", timeout=5),
                    grpc.StatusCode.DEADLINE_EXCEEDED, "Gateway Time")

    def deny():
        expect_code(lambda: ch.unary_unary("/deny.T/Unary")(b"x", timeout=5), grpc.StatusCode.PERMISSION_DENIED)

    def limit():
        # rate 1r/m: the first passes, the next is refused.
        first = ch.unary_unary("/limit.T/Unary")
        try:
            first(b"x", timeout=5)
        except grpc.RpcError as e:
            check(e.code() == grpc.StatusCode.RESOURCE_EXHAUSTED, "first: %s" % e.code())
        expect_code(lambda: first(b"x", timeout=5), grpc.StatusCode.RESOURCE_EXHAUSTED)

    return [no_upstream, read_timeout, deny, limit]


def log_size(d):
    return os.path.getsize(os.path.join(d, "error.log"))


def wait_log(d, text, since, timeout=5):
    """Whether `text` appears in the error log past its first `since`
    bytes (a line logged before the change waited for does not count)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with open(os.path.join(d, "error.log")) as f:
            f.seek(since)
            if text in f.read():
                return True
        time.sleep(0.02)
    return False


def health_checks(ch, backend, d):
    def grpc_health_check():
        """health_check type=grpc: NOT_SERVING takes the server down (calls
        get UNAVAILABLE from corral), SERVING brings it back."""
        check(ch.unary_unary("/checked.T/Unary")(b"ab", timeout=5) == b"ba", "first call")
        since = log_size(d)
        backend.serving = False
        check(wait_log(d, "is down: 1 failed checks (not serving (2))", since), "never marked down")
        expect_code(lambda: ch.unary_unary("/checked.T/Unary")(b"x", timeout=5), grpc.StatusCode.UNAVAILABLE)
        since = log_size(d)
        backend.serving = True
        check(wait_log(d, "is up: 1 passed checks", since), "never back up")
        check(ch.unary_unary("/checked.T/Unary")(b"ab", timeout=5) == b"ba", "call once back")

    return [grpc_health_check]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--daemon", required=True)
    ap.add_argument("--case", action="append", default=[])
    ap.add_argument("-v", action="store_true")
    args = ap.parse_args()
    d = tempfile.mkdtemp(prefix="corral-grpc-")
    cert, key = make_cert(d)
    backend = Backend()
    server = grpc.server(futures.ThreadPoolExecutor(16), options=OPTIONS)
    server.add_generic_rpc_handlers((backend,))
    plain = server.add_insecure_port("127.0.0.1:0")
    with open(cert, "rb") as f:
        cert_pem = f.read()
    with open(key, "rb") as f:
        key_pem = f.read()
    tls = server.add_secure_port("127.0.0.1:0", grpc.ssl_server_credentials([(key_pem, cert_pem)]))
    server.start()
    ports = [free_port(), free_port()]
    daemon = Daemon(args.daemon, d, config(d, ports, plain, tls, free_port(), cert, key))
    failed = 0
    try:
        daemon.wait_ports(ports)
        channels = [
            ("plain", grpc.insecure_channel("127.0.0.1:%d" % ports[0], options=OPTIONS)),
            ("tls", grpc.secure_channel("127.0.0.1:%d" % ports[1], grpc.ssl_channel_credentials(cert_pem),
                                        options=OPTIONS + [("grpc.ssl_target_name_override", "localhost")])),
        ]
        run = []
        for label, ch in channels:
            run += [("%s/%s" % (label, f.__name__), f) for f in cases(ch, backend)]
            run += [("%s/grpcs-backend/%s" % (label, f.__name__), f) for f in cases(ch, backend, "tls.T")[:4]]
        run += [("plain/corral-error/%s" % f.__name__, f) for f in corral_errors(channels[0][1])]
        run += [("plain/%s" % f.__name__, f) for f in health_checks(channels[0][1], backend, d)]
        for name, f in run:
            if args.case and not any(c in name for c in args.case):
                continue
            start = time.monotonic()
            try:
                f()
                if args.v:
                    print("ok   %-40s %.2fs" % (name, time.monotonic() - start), flush=True)
            except (Failure, grpc.RpcError) as e:
                failed += 1
                print("FAIL %-40s %s" % (name, e), flush=True)
        for _, ch in channels:
            ch.close()
    except RuntimeError as e:
        failed += 1
        print("FAIL daemon: %s" % e)
    rc = daemon.stop()
    out = daemon.output()
    if rc != 0 or "ERROR: AddressSanitizer" in out or "runtime error" in out or "LeakSanitizer" in out or "ThreadSanitizer" in out:
        failed += 1
        print("FAIL daemon exit %s:\n%s" % (rc, out[-4000:]))
    server.stop(0)
    if failed == 0:
        subprocess.run(["rm", "-rf", d])
    else:
        print("kept %s" % d)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
