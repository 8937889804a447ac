#!/usr/bin/python3
# h2_client_seeds.py: writes the seed corpus of fuzz_h2_client
# (tests/fuzz/corpus/h2_client) with the raw-frame suite's frame and HPACK
# builders (tests/proto/h2/h2frames.py): each seed is what a server sends
# back on a connection whose client opened a GET on stream 1, a HEAD on 3
# and a POST with a body on 5: responses valid and malformed, resets,
# GOAWAY, SETTINGS, windows and floods.
# The corpus's found-* seeds are not written here: they are inputs a
# long random run reached new code with, kept as it found them.
"""Usage: tests/fuzz/h2_client_seeds.py [DIRECTORY]"""

import struct

from h2_seeds import MAX, f, fill, write


def conn(*frames, settings=(), ack=True):
    out = f.settings_frame(settings)
    if ack:
        out += f.settings_frame(ack=True)
    return out + b"".join(frames)


def head(*fields):
    return f.block([(f.b(n), f.b(v)) for n, v in fields])


def seeds():
    ok = head((":status", "200"), ("content-length", "5"), ("server", "backend"))
    yield "three-responses", conn(
        f.headers_frame(1, ok, end_stream=False), f.data_frame(1, b"hello", end_stream=True),
        f.headers_frame(3, head((":status", "200"), ("content-length", "100")), end_stream=True),
        f.headers_frame(5, head((":status", "201")), end_stream=False),
        f.data_frame(5, b"made"),
        f.headers_frame(5, head(("grpc-status", "0")), end_stream=True))
    yield "indexed", conn(
        f.headers_frame(1, b"".join(f.literal_indexed(f.b(n), f.b(v))
                                    for n, v in ((":status", "200"), ("x-a", "1")))),
        f.headers_frame(5, b"\xbe\xbf"))
    yield "interim", conn(
        f.headers_frame(1, head((":status", "100")), end_stream=False),
        f.headers_frame(1, head((":status", "103"), ("link", "</a>")), end_stream=False),
        f.headers_frame(1, head((":status", "204")), end_stream=True))
    bad = {
        "path": ((":status", "200"), (":path", "/")),
        "status-twice": ((":status", "200"), (":status", "200")),
        "no-status": (("x", "1"),),
        "status-short": ((":status", "20"),),
        "status-101": ((":status", "101"),),
        "connection": ((":status", "200"), ("connection", "close")),
        "upper-name": ((":status", "200"), ("X-A", "1")),
        "cl-twice": ((":status", "200"), ("content-length", "1"), ("content-length", "1")),
        "cl-204": ((":status", "204"), ("content-length", "5")),
        "cl-interim": ((":status", "100"), ("content-length", "0")),
    }
    for name, fields in bad.items():
        yield "malformed-" + name, conn(f.headers_frame(1, head(*fields), end_stream=True))
    yield "cl-more", conn(f.headers_frame(1, head((":status", "200"), ("content-length", "3")),
                                          end_stream=False), f.data_frame(1, b"four", end_stream=True))
    yield "cl-less", conn(f.headers_frame(1, head((":status", "200"), ("content-length", "3")),
                                          end_stream=False), f.data_frame(1, b"tw", end_stream=True))
    yield "data-after-malformed-end", conn(
        f.headers_frame(1, head((":status", "200"), ("content-length", "3")), end_stream=True),
        f.data_frame(1, b"abc", end_stream=True),
        f.headers_frame(3, head((":status", "200")), end_stream=True))
    yield "head-body", conn(f.headers_frame(3, head((":status", "200"), ("content-length", "3")),
                                            end_stream=False), f.data_frame(3, b"abc", end_stream=True))
    yield "data-first", conn(f.data_frame(1, b"x", end_stream=True))
    yield "trailers-open", conn(f.headers_frame(1, head((":status", "200")), end_stream=False),
                                f.headers_frame(1, head(("x", "1")), end_stream=False))
    yield "rst", conn(f.rst_frame(1, f.REFUSED_STREAM), f.rst_frame(3, f.CANCEL),
                      f.headers_frame(5, head((":status", "200"))))
    yield "goaway-1", conn(f.headers_frame(1, head((":status", "200"))),
                           f.frame(f.GOAWAY, 0, 0, struct.pack(">II", 1, 0) + b"bye"))
    yield "goaway-even", conn(f.frame(f.GOAWAY, 0, 0, struct.pack(">II", 2, 0)))
    yield "push-promise", conn(f.frame(f.PUSH_PROMISE, f.END_HEADERS, 1,
                                       struct.pack(">I", 2) + head((":method", "GET"))))
    yield "even-stream", conn(f.headers_frame(2, head((":status", "200"))))
    yield "idle-stream", conn(f.headers_frame(7, head((":status", "200"))))
    yield "settings", conn(f.headers_frame(1, head((":status", "200"))),
                           settings=[(f.SETTINGS_INITIAL_WINDOW_SIZE, 1),
                                     (f.SETTINGS_MAX_CONCURRENT_STREAMS, 1)])
    yield "enable-push", conn(settings=[(0x2, 1)])
    yield "window-overflow", conn(f.window_update_frame(5, 0x7fffffff),
                                  f.window_update_frame(0, 0x7fffffff))
    yield "data-past-window", conn(f.headers_frame(1, head((":status", "200")), end_stream=False),
                                   *[f.frame(f.DATA, 0, 1, b"x" * 16384)] * 5)[:MAX]
    yield "ping-flood", fill(conn, lambda i: f.frame(f.PING, 0, 0, struct.pack(">Q", i)))
    yield "settings-flood", fill(conn, lambda i: f.settings_frame())
    yield "empty-data-flood", fill(conn, lambda i: f.data_frame(1, b""),
                                   f.headers_frame(1, head((":status", "200")), end_stream=False))
    cont = f.frame(f.CONTINUATION, 0, 1, f.literal(b"x-a", b"1"))
    yield "continuation-flood", conn(
        f.headers_frame(1, head((":status", "200")), end_headers=False), *[cont] * 12)


if __name__ == "__main__":
    write(seeds, "h2_client")
