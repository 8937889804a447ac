#!/usr/bin/python3
# slow_reader.py: an HTTP/2 client that opens its flow-control windows
# slowly, for tests/proto/test_http2.c: it GETs one path with prior
# knowledge and gives back what it received at no more than RATE bytes/s.
"""Usage: slow_reader.py PORT PATH RATE TIMEOUT

Prints the response's status and the body bytes received, as
"status=200 bytes=N"; exits 1 if the response did not end within TIMEOUT
seconds or the stream was reset."""

import socket
import sys
import time

import h2.config
import h2.connection
import h2.events


def main():
    port, path, rate, timeout = int(sys.argv[1]), sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
    conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True, header_encoding=None))
    sock = socket.create_connection(("127.0.0.1", port), timeout)
    conn.initiate_connection()  # the default windows: 65535 bytes
    sid = conn.get_next_available_stream_id()
    conn.send_headers(sid, [(":method", "GET"), (":scheme", "http"), (":authority", "localhost"),
                            (":path", path)], end_stream=True)
    sock.sendall(conn.data_to_send())
    status, received, owed, given = None, 0, 0, 0
    start = time.monotonic()
    deadline = start + timeout
    sock.settimeout(0.05)
    for _ in range(10000000):
        now = time.monotonic()
        if now > deadline:
            print("status=%s bytes=%d (timed out)" % (status, received))
            return 1
        # The windows open at `rate`: what was received is given back once
        # the clock allows it.
        allowed = int((now - start) * rate) - given
        if owed > 0 and allowed > 0:
            n = min(owed, allowed)
            conn.acknowledge_received_data(n, sid)
            owed -= n
            given += n
            sock.sendall(conn.data_to_send())
        try:
            chunk = sock.recv(65536)
        except socket.timeout:
            continue
        if not chunk:
            print("status=%s bytes=%d (closed)" % (status, received))
            return 1
        for ev in conn.receive_data(chunk):
            if isinstance(ev, h2.events.ResponseReceived):
                status = int(dict(ev.headers)[b":status"])
            elif isinstance(ev, h2.events.DataReceived):
                received += len(ev.data)
                owed += ev.flow_controlled_length
            elif isinstance(ev, h2.events.StreamEnded):
                print("status=%s bytes=%d" % (status, received))
                return 0
            elif isinstance(ev, (h2.events.StreamReset, h2.events.ConnectionTerminated)):
                print("status=%s bytes=%d (%s)" % (status, received, ev.__class__.__name__))
                return 1
        sock.sendall(conn.data_to_send())
    return 1


if __name__ == "__main__":
    sys.exit(main())
