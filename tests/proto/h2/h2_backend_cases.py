#!/usr/bin/python3
# h2_backend_cases.py: corral speaking HTTP/2 to backends that misbehave
# (python3-h2): GOAWAY mid-load, SETTINGS_MAX_CONCURRENT_STREAMS 1,
# RST_STREAM REFUSED_STREAM, a request window stalled at zero, a client
# that stops reading one stream, and a backend dying with 100 streams
# open.  Under load (h2load, HTTP/2 and HTTP/1.1 clients at once) each case
# counts what the backend processed against what the clients got: nothing
# that could go again is lost, nothing the backend may have processed is
# sent twice.
"""Usage: h2_backend_cases.py --daemon build/corral [--case SUBSTRING]... [-v]

Exit status: 0 every case passed, 1 a case failed or the daemon misbehaved
(crash, sanitizer report, unclean exit), 2 usage.
"""

import argparse
import os
import re
import select
import shlex
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time

import h2.config
import h2.connection
import h2.errors
import h2.events
import h2.exceptions
import h2.settings

BIG = 8 * 1024 * 1024


class Backend:
    """An HTTP/2 (h2c) server on an ephemeral port; `mode` says how it
    misbehaves.  Counters are read by the cases."""

    def __init__(self, mode):
        self.mode = mode
        self.lock = threading.Lock()
        self.processed = {}  # x-id or stream key -> times
        self.received = 0
        self.responded = 0
        self.connections = 0
        self.violations = []
        self.sent = {}  # path -> body bytes sent
        self.trailers = {}  # path -> the request trailers received
        self.resets = {}  # path -> the RST_STREAM error code received
        self.uploaded = {}  # path -> request body bytes received
        self.socks = []
        self.stop = False
        self.listener = socket.socket()
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(128)
        self.port = self.listener.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while not self.stop:
            try:
                s, _ = self.listener.accept()
            except OSError:
                return
            with self.lock:
                self.connections += 1
                self.socks.append(s)
            threading.Thread(target=self._serve, args=(s,), daemon=True).start()

    def kill_all(self):
        """Dies: every connection reset, nothing answered."""
        with self.lock:
            socks, self.socks = self.socks, []
        for s in socks:
            try:
                s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                s.close()
            except OSError:
                pass

    def close(self):
        self.stop = True
        self.listener.close()
        self.kill_all()

    def _serve(self, s):
        config = h2.config.H2Configuration(client_side=False, header_encoding="utf-8")
        conn = h2.connection.H2Connection(config=config)
        settings = {h2.settings.SettingCodes.MAX_CONCURRENT_STREAMS: 1 if self.mode == "max1" else 100}
        conn.local_settings = h2.settings.Settings(client=False, initial_values=settings)
        conn.initiate_connection()
        pending = []  # (due, stream_id, path)
        bodies = {}  # stream_id -> [path, bytes left]
        requests = 0
        goaway_sent = None
        stalled = set()  # streams whose window is never opened again
        paths = {}  # stream -> path, for its trailers
        waiting = {}  # stream -> key: answered once its request ends (/trailers)
        s.setblocking(False)
        try:
            s.sendall(conn.data_to_send())
            while not self.stop:
                timeout = 0.005 if pending or bodies else 0.05
                r, _, _ = select.select([s], [], [], timeout)
                if r:
                    data = s.recv(65536)
                    if not data:
                        return
                    try:
                        events = conn.receive_data(data)
                    except h2.exceptions.TooManyStreamsError:
                        self.violations.append("over SETTINGS_MAX_CONCURRENT_STREAMS")
                        return
                    except h2.exceptions.ProtocolError as e:
                        self.violations.append("protocol error: %r" % e)
                        if self.mode != "goaway":  # its late streams after a GOAWAY are expected
                            print("backend: protocol error: %r" % e, file=sys.stderr)
                        return
                    for ev in events:
                        if isinstance(ev, h2.events.RequestReceived):
                            headers = dict(ev.headers)
                            if goaway_sent is not None and ev.stream_id > goaway_sent:
                                continue  # above the GOAWAY: never processed
                            with self.lock:
                                self.received += 1
                            requests += 1
                            path = headers.get(":path", "")
                            if self.mode == "refuse" and requests % 3 == 0:
                                conn.reset_stream(ev.stream_id, h2.errors.ErrorCodes.REFUSED_STREAM)
                                with self.lock:
                                    self.received -= 1
                                continue
                            if self.mode == "die":
                                with self.lock:
                                    dying = self.received >= 100
                                if dying:
                                    threading.Thread(target=self.kill_all, daemon=True).start()
                                continue
                            key = headers.get("x-id") or "%d:%d" % (id(s), ev.stream_id)
                            if path.startswith("/stall/upload"):
                                stalled.add(ev.stream_id)
                            paths[ev.stream_id] = path
                            delay = 0.02 if self.mode == "max1" else 0
                            if ("/trailers" in path or "/whole" in path) and not ev.stream_ended:
                                waiting[ev.stream_id] = key
                                continue
                            pending.append((time.monotonic() + delay, ev.stream_id, path, key))
                            if self.mode == "goaway" and requests == 20 and goaway_sent is None:
                                # GOAWAY mid-load: what came so far is answered, later streams
                                # are left for corral to send elsewhere.
                                goaway_sent = ev.stream_id
                        elif isinstance(ev, h2.events.DataReceived):
                            with self.lock:
                                at = paths.get(ev.stream_id)
                                self.uploaded[at] = self.uploaded.get(at, 0) + len(ev.data)
                            if ev.stream_id in stalled:
                                with self.lock:
                                    self.sent["upload"] = self.sent.get("upload", 0) + len(ev.data)
                            else:
                                conn.acknowledge_received_data(ev.flow_controlled_length, ev.stream_id)
                        elif isinstance(ev, h2.events.TrailersReceived):
                            with self.lock:
                                self.trailers[paths.get(ev.stream_id)] = dict(ev.headers)
                        elif isinstance(ev, h2.events.StreamEnded) and ev.stream_id in waiting:
                            pending.append((time.monotonic(), ev.stream_id, paths[ev.stream_id],
                                            waiting.pop(ev.stream_id)))
                        elif isinstance(ev, h2.events.StreamReset):
                            bodies.pop(ev.stream_id, None)
                            with self.lock:
                                self.resets[paths.get(ev.stream_id)] = ev.error_code
                now = time.monotonic()
                due = [p for p in pending if p[0] <= now]
                pending = [p for p in pending if p[0] > now]
                for _, sid, path, key in due:
                    if path.startswith("/stall/upload"):
                        continue  # its window stays shut: it never completes
                    with self.lock:
                        self.processed[key] = self.processed.get(key, 0) + 1
                        self.responded += 1
                    try:
                        if self.mode == "bad502":
                            conn.send_headers(sid, [(":status", "502"), ("content-length", "0")],
                                              end_stream=True)
                        elif path == "/normal/bighead":
                            conn.send_headers(sid, [(":status", "200"), ("x-big", "b" * 20000)],
                                              end_stream=True)
                        elif path == "/normal/bigtrailer":
                            conn.send_headers(sid, [(":status", "200")])
                            conn.send_data(sid, b"x")
                            conn.send_headers(sid, [("x-big", "t" * 20000)], end_stream=True)
                        elif path == "/health503":
                            conn.send_headers(sid, [(":status", "503"), ("content-length", "0")],
                                              end_stream=True)
                        elif "/trailers" in path:
                            conn.send_headers(sid, [(":status", "200")])
                            conn.send_data(sid, b"body\n")
                            conn.send_headers(sid, [("x-resp-trailer", "yes")], end_stream=True)
                        elif path.startswith("/big"):
                            conn.send_headers(sid, [(":status", "200"), ("content-length", str(BIG))])
                            bodies[sid] = [path, BIG]
                        else:
                            body = b"ok\n"
                            conn.send_headers(sid, [(":status", "200"), ("content-length", str(len(body)))])
                            conn.send_data(sid, body, end_stream=True)
                    except h2.exceptions.StreamClosedError:
                        pass
                for sid in list(bodies):
                    path, left = bodies[sid]
                    try:
                        window = min(conn.local_flow_control_window(sid), conn.max_outbound_frame_size)
                    except h2.exceptions.StreamClosedError:
                        del bodies[sid]
                        continue
                    while left > 0 and window > 0:
                        n = min(left, window)
                        conn.send_data(sid, b"x" * n, end_stream=(n == left))
                        left -= n
                        with self.lock:
                            self.sent[path] = self.sent.get(path, 0) + n
                        window = min(conn.local_flow_control_window(sid), conn.max_outbound_frame_size) \
                            if left > 0 else 0
                    if left == 0:
                        del bodies[sid]
                    else:
                        bodies[sid][1] = left
                if goaway_sent is not None and not pending and conn.state_machine.state != "CLOSED":
                    if not getattr(conn, "_goaway_done", False):
                        conn.close_connection(last_stream_id=goaway_sent)
                        conn._goaway_done = True
                out = conn.data_to_send()
                if out:
                    s.setblocking(True)
                    s.sendall(out)
                    s.setblocking(False)
        except (OSError, h2.exceptions.ProtocolError):
            return
        except Exception as e:  # a bug of this harness: fail the case that meets it
            self.violations.append("backend: %r" % e)
            import traceback
            traceback.print_exc()
            return
        finally:
            try:
                s.close()
            except OSError:
                pass


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


class Daemon:
    def __init__(self, cmd, d, conf):
        self.conf = os.path.join(d, "corral.conf")
        self.out = os.path.join(d, "corral.out")
        with open(self.conf, "w") as f:
            f.write(conf)
        self.proc = subprocess.Popen(shlex.split(cmd) + ["-c", self.conf], stdout=open(self.out, "w"),
                                     stderr=subprocess.STDOUT)

    def wait_port(self, port):
        deadline = time.monotonic() + 10
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError("daemon exited: " + self.output())
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                return
            except OSError:
                if time.monotonic() > deadline:
                    raise RuntimeError("port %d not listening: %s" % (port, self.output()))
                time.sleep(0.02)

    def output(self):
        with open(self.out) as f:
            return f.read()

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait()


class Failure(Exception):
    pass


def check(cond, what):
    if not cond:
        raise Failure(what)


def h2load(port, path, n, c, m, h1=False, data=None):
    """Runs h2load; returns (succeeded, 2xx, 5xx, output)."""
    cmd = ["h2load", "-n", str(n), "-c", str(c), "-m", str(m), "-T", "10", "-N", "10"]
    if h1:
        cmd.append("--h1")
    if data:
        cmd += ["-d", data]
    cmd.append("http://127.0.0.1:%d%s" % (port, path))
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=60).stdout
    m1 = re.search(r"requests: \d+ total, \d+ started, \d+ done, (\d+) succeeded", out)
    m2 = re.search(r"status codes: (\d+) 2xx, \d+ 3xx, \d+ 4xx, (\d+) 5xx", out)
    if not m1 or not m2:
        raise Failure("h2load: " + out[-800:])
    return int(m1.group(1)), int(m2.group(1)), int(m2.group(2)), out


def run_parallel(*fns):
    results = [None] * len(fns)

    def run(i, f):
        try:
            results[i] = f()
        except Exception as e:  # reported by the caller
            results[i] = e
    threads = [threading.Thread(target=run, args=(i, f)) for i, f in enumerate(fns)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for r in results:
        if isinstance(r, Exception):
            raise r
    return results


def no_duplicates(b):
    twice = [k for k, v in b.processed.items() if v > 1]
    check(not twice, "processed twice: %r" % twice[:5])


def case_multiplexing(port, b):
    """HTTP/2 and HTTP/1.1 clients at once share few backend connections."""
    (s2, ok2, _, _), (s1, ok1, _, _) = run_parallel(
        lambda: h2load(port, "/normal/", 400, 8, 10),
        lambda: h2load(port, "/normal/", 200, 8, 1, h1=True))
    check(ok2 == 400 and ok1 == 200, "2xx: %d of 400 (HTTP/2), %d of 200 (HTTP/1.1)" % (ok2, ok1))
    check(b.responded == 600, "backend answered %d" % b.responded)
    # Two workers, streams well within 100 each: one connection per worker.
    check(b.connections <= 2, "%d backend connections for 16 clients" % b.connections)
    check(not b.violations, b.violations)


def case_goaway(port, b):
    """GOAWAY after 20 streams on each connection, under load: streams above
    its last stream ID go on a new connection, none lost, none twice."""
    s, ok, bad, out = h2load(port, "/goaway/", 300, 4, 16)
    check(ok == 300, "2xx: %d of 300, 5xx %d" % (ok, bad))
    check(b.responded == 300, "backend processed %d for 300 answers" % b.responded)
    check(b.connections >= 300 // 20, "only %d connections" % b.connections)
    no_duplicates(b)


def case_max_concurrent_1(port, b):
    """SETTINGS_MAX_CONCURRENT_STREAMS 1: never more than one stream open on
    a connection (h2 refuses the connection otherwise), all answered."""
    s, ok, bad, out = h2load(port, "/max1/", 60, 3, 10)
    check(ok == 60, "2xx: %d of 60, 5xx %d" % (ok, bad))
    check(not b.violations, b.violations)
    check(b.responded == 60, "backend answered %d" % b.responded)


def case_refused(port, b):
    """RST_STREAM REFUSED_STREAM on every third stream: each goes again,
    none lost; what was answered was processed once."""
    s, ok, bad, out = h2load(port, "/refuse/", 300, 4, 16)
    check(ok == 300, "2xx: %d of 300, 5xx %d" % (ok, bad))
    check(b.responded == 300, "backend processed %d for 300 answers" % b.responded)
    no_duplicates(b)


def case_dying(port, b, datafile):
    """The backend dies with 100 POST streams open: each may have been
    processed, so none goes again: 100 answers of 502, 100 received."""
    s, ok, bad, out = h2load(port, "/die/", 100, 2, 50, data=datafile)
    check(bad == 100, "5xx: %d of 100: %s" % (bad, out[-400:]))
    time.sleep(0)  # the counts are final: every stream was answered
    check(b.received == 100, "backend received %d (a retry of a processed stream?)" % b.received)


def case_window_stalled(port, b):
    """The backend never opens its window for one upload (it stays at zero
    after the first 64 KiB): that stream waits, the others go on, and it
    fails after proxy_send_timeout (504)."""
    s = socket.create_connection(("127.0.0.1", port))
    s.sendall(b"POST /stall/upload HTTP/1.1\r\nHost: x\r\nContent-Length: 1000000\r\n\r\n" + b"u" * 200000)
    deadline = time.monotonic() + 5
    while b.received < 1 and time.monotonic() < deadline:
        time.sleep(0.01)
    check(b.received == 1, "the upload never reached the backend")
    _, ok, bad, _ = h2load(port, "/stall/get", 50, 2, 5)
    check(ok == 50, "2xx: %d of 50 beside a stalled upload" % ok)
    check(b.sent.get("upload", 0) <= 65535, "the backend got %d bytes past its window" % b.sent.get("upload", 0))
    check(not b.violations, b.violations)
    s.settimeout(5)
    answer = s.recv(4096)
    check(answer.startswith(b"HTTP/1.1 504"), "the stalled upload got %r" % answer[:40])
    s.close()


def case_client_stops_reading(port, b):
    """A client that stops reading one stream stalls that stream's backend
    window only: the other stream of the same connection completes, and
    the backend could send the stalled one little."""
    cfg = h2.config.H2Configuration(client_side=True, header_encoding="utf-8")
    conn = h2.connection.H2Connection(config=cfg)
    conn.initiate_connection()
    s = socket.create_connection(("127.0.0.1", port))
    s.sendall(conn.data_to_send())
    hdr = lambda p: [(":method", "GET"), (":scheme", "http"), (":authority", "x"), (":path", p)]
    conn.send_headers(1, hdr("/big/stalled"), end_stream=True)
    conn.send_headers(3, hdr("/big/read"), end_stream=True)
    s.sendall(conn.data_to_send())
    got = {1: 0, 3: 0}
    done = False
    deadline = time.monotonic() + 20
    while not done and time.monotonic() < deadline:
        data = s.recv(65536)
        if not data:
            break
        for ev in conn.receive_data(data):
            if isinstance(ev, h2.events.DataReceived):
                got[ev.stream_id] += len(ev.data)
                if ev.stream_id == 3:
                    conn.acknowledge_received_data(ev.flow_controlled_length, 3)
                else:
                    # the connection's window, never stream 1's own
                    conn.increment_flow_control_window(ev.flow_controlled_length)
            elif isinstance(ev, h2.events.StreamEnded) and ev.stream_id == 3:
                done = True
        s.sendall(conn.data_to_send())
    s.close()
    check(got[3] == BIG, "the read stream got %d of %d" % (got[3], BIG))
    stalled = b.sent.get("/big/stalled", 0)
    # corral's stream window (256 KiB), its client-side queue (64 KiB) and
    # the client's window (64 KiB), with room for frame boundaries
    check(stalled < 1024 * 1024, "the backend sent %d bytes of the stalled stream" % stalled)


def case_trailers_both_ways(port, b):
    """A chunked HTTP/1.1 request's trailers and an HTTP/2 request's reach
    the backend (those RFC 9110 keeps out of trailers dropped); the
    backend's response trailers reach both clients."""
    s = socket.create_connection(("127.0.0.1", port))
    s.sendall(b"POST /normal/trailers/h1 HTTP/1.1\r\nHost: x\r\nTE: trailers\r\n"
              b"Transfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n"
              b"X-Checksum: abc\r\nContent-Length: 5\r\nX-Two: 2\r\n\r\n")
    s.settimeout(5)
    got = b""
    while not got.endswith(b"\r\n\r\n") or b"x-resp-trailer" not in got:
        data = s.recv(65536)
        if not data:
            break
        got += data
    s.close()
    check(got.startswith(b"HTTP/1.1 200"), "HTTP/1.1 answer %r" % got[:60])
    check(b"\r\n0\r\nx-resp-trailer: yes\r\n\r\n" in got.lower(), "HTTP/1.1 response trailers: %r" % got[-80:])
    t = b.trailers.get("/normal/trailers/h1")
    check(t == {"x-checksum": "abc", "x-two": "2"}, "HTTP/1.1 request trailers at the backend: %r" % t)

    cfg = h2.config.H2Configuration(client_side=True, header_encoding="utf-8")
    conn = h2.connection.H2Connection(config=cfg)
    conn.initiate_connection()
    s = socket.create_connection(("127.0.0.1", port))
    conn.send_headers(1, [(":method", "POST"), (":scheme", "http"), (":authority", "x"),
                          (":path", "/normal/trailers/h2"), ("te", "trailers")])
    conn.send_data(1, b"hello")
    conn.send_headers(1, [("x-checksum", "def")], end_stream=True)
    s.sendall(conn.data_to_send())
    s.settimeout(5)
    resp_trailers = None
    while resp_trailers is None:
        data = s.recv(65536)
        if not data:
            break
        for ev in conn.receive_data(data):
            if isinstance(ev, h2.events.TrailersReceived):
                resp_trailers = dict(ev.headers)
        s.sendall(conn.data_to_send())
    s.close()
    check(resp_trailers == {"x-resp-trailer": "yes"}, "HTTP/2 response trailers: %r" % resp_trailers)
    t = b.trailers.get("/normal/trailers/h2")
    check(t == {"x-checksum": "def"}, "HTTP/2 request trailers at the backend: %r" % t)


def case_http2_health_check(port, b, d):
    """health_check type=http2 over h2c: a 503 takes the server down."""
    deadline = time.monotonic() + 5
    text = "is down: 1 failed checks (status 503)"
    while time.monotonic() < deadline:
        with open(os.path.join(d, "error.log")) as f:
            if text in f.read():
                break
        time.sleep(0.02)
    else:
        raise Failure("never marked down over HTTP/2")
    _, ok, bad, _ = h2load(port, "/checked/", 5, 1, 1)
    check(bad == 5, "a server down still answered: %d 5xx of 5" % bad)


def case_early_response(port, b):
    """The backend answers before the request body is complete (RFC 9113
    8.1): the client gets the answer, and corral resets the stream
    (CANCEL) rather than leave it open on its side."""
    s = socket.create_connection(("127.0.0.1", port))
    s.sendall(b"POST /normal/early HTTP/1.1\r\nHost: x\r\nContent-Length: 1000000\r\n\r\n" + b"e" * 1000)
    s.settimeout(5)
    got = s.recv(4096)
    check(got.startswith(b"HTTP/1.1 200"), "early answer %r" % got[:40])
    deadline = time.monotonic() + 5
    while "/normal/early" not in b.resets and time.monotonic() < deadline:
        time.sleep(0.01)
    s.close()
    check(b.resets.get("/normal/early") == h2.errors.ErrorCodes.CANCEL,
          "the backend's stream was reset with %r" % b.resets.get("/normal/early"))


def case_upstream_variables(port, b, d):
    """$upstream_status, $upstream_connect_time and $upstream_header_time
    are logged for HTTP/2 backends as for HTTP/1.1 ones."""
    _, ok, _, _ = h2load(port, "/normal/logged", 20, 2, 5)
    check(ok == 20, "%d of 20" % ok)
    path = os.path.join(d, "access.log")
    deadline = time.monotonic() + 5
    lines = []
    while len(lines) < 20 and time.monotonic() < deadline:
        if os.path.exists(path):
            with open(path) as f:
                lines = f.read().split("\n")[:-1]
        time.sleep(0.02)
    check(len(lines) == 20, "%d lines logged" % len(lines))
    for line in lines:
        check(re.fullmatch(r"/normal/logged 200 200 \d+\.\d{3} \d+\.\d{3}", line), "logged %r" % line)


def case_hostile_heads(port, b):
    """A response head, or a trailer section, over proxy_buffer_size (8k):
    the first is a 502, the second cuts the response off; the connection
    serves the next request."""
    _, ok, bad, _ = h2load(port, "/normal/bighead", 3, 1, 1)
    check(bad == 3, "a 20 kB head: %d 5xx of 3" % bad)
    s, ok, bad, out = h2load(port, "/normal/bigtrailer", 2, 1, 1)
    check(s == 0, "a 20 kB trailer section: %d succeeded" % s)
    _, ok, _, _ = h2load(port, "/normal/after", 5, 1, 1)
    check(ok == 5, "after them: %d of 5" % ok)


def case_buffered_body_goes_again(port, good, bad, datafile):
    """proxy_request_buffering: a POST whose 300 KB body is read whole
    goes to the next server after the first one's 502, body and all (it
    could not go again streaming: its body is beyond what a stream keeps
    for a replay)."""
    size = os.path.getsize(datafile)
    ok, ok2xx, bad5xx, out = h2load(port, "/buffered/whole", 4, 1, 1, data=datafile)
    check(ok == 4 and ok2xx == 4, "4 buffered uploads: %d ok, %d 2xx, %d 5xx" % (ok, ok2xx, bad5xx))
    with bad.lock:
        asked_bad = bad.received
    check(asked_bad >= 1, "the failing server was never asked")
    with good.lock:
        got = good.uploaded.get("/buffered/whole", 0)
    check(got == 4 * size, "the next server got %d body bytes of %d" % (got, 4 * size))
    # grpc_pass: its own switch buffers; proxy_request_buffering leaves it streaming
    ok, ok2xx, bad5xx, out = h2load(port, "/gbuffered/whole", 4, 1, 1, data=datafile)
    check(ok2xx == 4, "grpc_request_buffering: %d of 4 uploads got 2xx" % ok2xx)
    with good.lock:
        got = good.uploaded.get("/gbuffered/whole", 0)
    check(got == 4 * size, "grpc_pass: the next server got %d body bytes of %d" % (got, 4 * size))
    ok, ok2xx, bad5xx, out = h2load(port, "/gstreamed/whole", 4, 1, 1, data=datafile)
    check(bad5xx > 0, "grpc_pass streams with proxy_request_buffering on: %d 5xx" % bad5xx)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--daemon", required=True)
    ap.add_argument("--case", action="append", default=[])
    ap.add_argument("-v", action="store_true")
    args = ap.parse_args()
    d = tempfile.mkdtemp(prefix="corral-h2up-")
    datafile = os.path.join(d, "body")
    with open(datafile, "wb") as f:
        f.write(b"p" * 1000)
    bigfile = os.path.join(d, "bigbody")
    with open(bigfile, "wb") as f:
        f.write(b"q" * 300000)
    bufdir = os.path.join(d, "bodies")
    os.mkdir(bufdir)
    modes = ["normal", "goaway", "max1", "refuse", "die", "stall"]
    backends = {m: Backend(m) for m in modes}
    checked = Backend("normal")  # its own: the probes are not counted with the cases' requests
    good, bad = Backend("normal"), Backend("bad502")  # for buffered bodies, their own
    port = free_port()
    locations = "".join(
        "    location /%s/ { proxy_pass http://127.0.0.1:%d; proxy_http_version 2; }\n" % (m, b.port)
        for m, b in backends.items())
    locations = locations.replace("location /stall/ { proxy_pass http://127.0.0.1:%d; proxy_http_version 2; }" % backends["stall"].port,
                                  "location /stall/ { proxy_pass http://127.0.0.1:%d; proxy_http_version 2; proxy_send_timeout 1s; }" % backends["stall"].port)
    locations += "    location /big/ { proxy_pass http://127.0.0.1:%d; proxy_http_version 2; }\n" % \
        backends["normal"].port
    conf = f"""
workers 2;
error_log {d}/error.log;
log_format up '$request_uri $status $upstream_status $upstream_connect_time $upstream_header_time';
upstream buffered {{
    server 127.0.0.1:{bad.port} max_fails=0;
    server 127.0.0.1:{good.port};
}}
upstream checked {{
    server 127.0.0.1:{checked.port};
    health_check type=http2 uri=/health503 interval=100ms fall=1;
}}
server {{
    location /checked/ {{ proxy_pass http://checked; proxy_http_version 2; }}
    location /buffered/ {{ proxy_pass http://buffered; proxy_http_version 2;
        proxy_request_buffering on; client_body_buffer_size 1k; client_body_temp_path {bufdir};
        proxy_next_upstream error http_502 non_idempotent; }}
    location /gbuffered/ {{ grpc_pass grpc://buffered; grpc_request_buffering on;
        client_body_buffer_size 1k; client_body_temp_path {bufdir};
        grpc_next_upstream error http_502 non_idempotent; }}
    location /gstreamed/ {{ grpc_pass grpc://buffered; proxy_request_buffering on;
        grpc_next_upstream error http_502 non_idempotent; }}
    listen 127.0.0.1:{port} http2;
    location /normal/logged {{ proxy_pass http://127.0.0.1:{backends["normal"].port}; proxy_http_version 2;
        access_log {d}/access.log up; }}
{locations}}}
"""
    daemon = Daemon(args.daemon, d, conf)
    cases = [
        ("multiplexing", lambda: case_multiplexing(port, backends["normal"])),
        ("goaway-mid-load", lambda: case_goaway(port, backends["goaway"])),
        ("max-concurrent-streams-1", lambda: case_max_concurrent_1(port, backends["max1"])),
        ("refused-stream", lambda: case_refused(port, backends["refuse"])),
        ("backend-dies-with-100-streams", lambda: case_dying(port, backends["die"], datafile)),
        ("window-stalled-at-zero", lambda: case_window_stalled(port, backends["stall"])),
        ("upstream-variables", lambda: case_upstream_variables(port, backends["normal"], d)),
        ("hostile-heads", lambda: case_hostile_heads(port, backends["normal"])),
        ("early-response", lambda: case_early_response(port, backends["normal"])),
        ("http2-health-check", lambda: case_http2_health_check(port, backends["normal"], d)),
        ("trailers-both-ways", lambda: case_trailers_both_ways(port, backends["normal"])),
        ("client-stops-reading-one-stream", lambda: case_client_stops_reading(port, backends["normal"])),
        ("buffered-body-goes-again", lambda: case_buffered_body_goes_again(port, good, bad, bigfile)),
    ]
    failed = 0
    try:
        daemon.wait_port(port)
        for name, f in cases:
            if args.case and not any(c in name for c in args.case):
                continue
            start = time.monotonic()
            try:
                f()
                if args.v:
                    print("ok   %-36s %.2fs" % (name, time.monotonic() - start), flush=True)
            except Failure as e:
                failed += 1
                print("FAIL %-36s %s" % (name, e), flush=True)
    except RuntimeError as e:
        failed += 1
        print("FAIL daemon: %s" % e)
    rc = daemon.stop()
    out = daemon.output()
    if rc != 0 or "ERROR: AddressSanitizer" in out or "runtime error" in out or "LeakSanitizer" in out or "ThreadSanitizer" in out:
        failed += 1
        print("FAIL daemon exit %s:\n%s" % (rc, out[-4000:]))
    for b in list(backends.values()) + [checked, good, bad]:
        b.close()
    if failed == 0:
        subprocess.run(["rm", "-rf", d])
    else:
        print("kept %s" % d)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
