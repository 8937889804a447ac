#!/usr/bin/env python3
"""accept-uneven.sh's client: one request per connection, opened on a fixed
schedule (open loop), every HEAVY_EVERY-th one on the heavy path; prints the
cheap requests' p50/p99/p99.9 from connect() to the answer's first bytes.

usage: accept-uneven-client.py PORT [--rate N] [--seconds S] [--heavy-every K]
                               [--heavy-path PATH] [--timeout S]

wrk cannot do this: its delay() paces a connection after connecting it, so
the server accepts each connection one delay before its request arrives,
and without delay() it saturates the machine.  Python standard library only.
"""
import argparse
import errno
import resource
import select
import socket
import sys
import time


def percentile(sorted_ms, p):
    if not sorted_ms:
        return float("nan")
    return sorted_ms[min(len(sorted_ms) - 1, int(len(sorted_ms) * p / 100.0))]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("port", type=int)
    ap.add_argument("--rate", type=float, default=1000.0)
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--heavy-every", type=int, default=50)
    ap.add_argument("--heavy-path", default="/" + "a" * 88 + "b")
    ap.add_argument("--timeout", type=float, default=5.0)
    args = ap.parse_args()

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    # Never more open connections than the descriptors allow; one that
    # cannot start on schedule counts as an error.
    max_open = max(16, min(hard, 65536) - 64)

    def request(path):
        return (f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n").encode()

    cheap_req, heavy_req = request("/"), request(args.heavy_path)
    ep = select.epoll()
    conns = {}  # fd -> [socket, start, heavy, answered]
    lat = {False: [], True: []}
    errors = non200 = 0
    total = int(args.rate * args.seconds)
    t0 = time.monotonic()
    deadline = t0 + args.seconds + args.timeout
    started = 0

    def finish(fd):
        ep.unregister(fd)
        conns.pop(fd)[0].close()

    while (started < total or conns) and time.monotonic() < deadline:
        now = time.monotonic()
        while started < total and t0 + started / args.rate <= now:
            heavy = args.heavy_every > 0 and started % args.heavy_every == args.heavy_every - 1
            started += 1
            if len(conns) >= max_open:
                errors += 1
                continue
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.setblocking(False)
            start = time.monotonic()
            rc = s.connect_ex(("127.0.0.1", args.port))
            if rc not in (0, errno.EINPROGRESS):
                s.close()
                errors += 1
                continue
            conns[s.fileno()] = [s, start, heavy, False]
            ep.register(s.fileno(), select.EPOLLOUT)
        wait = t0 + started / args.rate - time.monotonic() if started < total else 0.05
        for fd, ev in ep.poll(max(0.0, min(wait, 0.05))):
            c = conns.get(fd)
            if c is None:
                continue
            s, start, heavy, answered = c
            if ev & select.EPOLLOUT:
                try:
                    s.send(heavy_req if heavy else cheap_req)
                except OSError:
                    errors += 1
                    finish(fd)
                    continue
                ep.modify(fd, select.EPOLLIN)
                continue
            try:
                data = s.recv(65536)
            except OSError:
                data = None
            if not answered and data:
                lat[heavy].append((time.monotonic() - start) * 1000.0)
                c[3] = True
                if not data.startswith(b"HTTP/1.1 200"):
                    non200 += 1
            if not data:
                if not answered:
                    errors += 1
                finish(fd)
    errors += len(conns)  # unanswered at the deadline
    for fd in list(conns):
        finish(fd)
    cheap, heavy = sorted(lat[False]), sorted(lat[True])
    print(f"cheap n={len(cheap)} p50={percentile(cheap, 50):.3f} p99={percentile(cheap, 99):.3f} "
          f"p99.9={percentile(cheap, 99.9):.3f} heavy n={len(heavy)} p50={percentile(heavy, 50):.3f} "
          f"errors={errors} non200={non200} seconds={time.monotonic() - t0:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
