#!/usr/bin/python3
# h2_frame_seeds.py: writes the seed corpus of fuzz_h2_frame
# (tests/fuzz/corpus/h2_frame) from the raw-frame suite's own frame and
# HPACK builders and requests (tests/proto/h2/h2frames.py): each seed is
# what a client of that suite sends on one connection, its attacks cut to
# fit the 4 KiB inputs scripts/test fuzzes with.
# The corpus's found-* seeds are not written here: they are inputs a
# long random run reached new code with, kept as it found them.
"""Usage: tests/fuzz/h2_frame_seeds.py [DIRECTORY]"""

import struct

from h2_seeds import f, fill, write


def conn(*frames, ack=True):
    out = f.PREFACE + f.settings_frame()
    if ack:
        out += f.settings_frame(ack=True)
    return out + b"".join(frames)


def seeds():
    get = f.block(f.base("/"))
    post = f.block(f.base("/", "POST"))
    yield "get", conn(f.headers_frame(1, get))
    yield "get-no-ack", conn(f.headers_frame(1, get), ack=False)
    yield "post-body-trailers", conn(
        f.headers_frame(1, post, end_stream=False), f.data_frame(1, b"hello"),
        f.headers_frame(1, f.block([(b"x-checksum", b"1")]), end_stream=True))
    yield "indexed-fields", conn(
        f.headers_frame(1, b"".join(f.literal_indexed(n, v) for n, v in f.base("/a"))),
        f.headers_frame(3, b"\xbe\xbf\xc0\xc1"))
    for name, fields, body, _ in f.malformed_table():
        frames = [f.headers_frame(1, f.block(fields), end_stream=body is None)]
        if body is not None:
            frames.append(f.data_frame(1, body, end_stream=True))
        yield "malformed-" + name, conn(*frames)
    yield "rapid-reset", fill(conn, lambda i: f.headers_frame(2 * i + 1, get) + f.rst_frame(2 * i + 1, f.CANCEL))
    cont = f.frame(f.CONTINUATION, 0, 1, f.literal(b"x-a", b"1"))
    yield "continuation-flood", conn(f.headers_frame(1, get, end_headers=False), *[cont] * 12)
    yield "continuation-end", conn(f.headers_frame(1, get, end_headers=False), *[cont] * 7,
                                   f.frame(f.CONTINUATION, f.END_HEADERS, 1, b""))
    yield "settings-flood", fill(conn, lambda i: f.settings_frame())
    yield "ping-flood", fill(conn, lambda i: f.frame(f.PING, 0, 0, struct.pack(">Q", i)))
    yield "empty-data-flood", fill(conn, lambda i: f.data_frame(1, b""), f.headers_frame(1, post, end_stream=False))
    yield "padded-empty-data-flood", fill(conn, lambda i: f.frame(f.DATA, 0x8, 1, b"\x02\0\0"),
                                          f.headers_frame(1, post, end_stream=False))
    yield "empty-headers-flood", conn(f.headers_frame(1, get, end_headers=False),
                                      *[f.frame(f.CONTINUATION, 0, 1, b"")] * 20)
    yield "window-update-flood", fill(conn, lambda i: f.window_update_frame(0, 1))
    yield "window-overflow", conn(f.window_update_frame(0, 0x7fffffff))
    yield "zero-window-stream", conn(f.settings_frame([(f.SETTINGS_INITIAL_WINDOW_SIZE, 0)]),
                                     f.headers_frame(1, get))
    yield "window-update-zero-stream", conn(f.headers_frame(1, post, end_stream=False),
                                            f.window_update_frame(1, 0), f.headers_frame(3, get))
    yield "too-many-streams", fill(conn, lambda i: f.headers_frame(2 * i + 1, post, end_stream=False))
    yield "data-past-window", conn(f.headers_frame(1, post, end_stream=False),
                                   *[f.data_frame(1, b"x" * 1000)] * 3)
    yield "priority-and-padding", conn(
        f.frame(f.HEADERS, 0x2d, 1, b"\x03\x00\x00\x00\x00\x10" + get + b"\0\0\0"),
        f.frame(f.PRIORITY, 0, 3, b"\0\0\0\x01\x10"))
    yield "goaway", conn(f.headers_frame(1, get), f.frame(f.GOAWAY, 0, 0, b"\0\0\0\0\0\0\0\0bye"))
    yield "bad-preface", b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"
    yield "headers-closed-stream", conn(f.headers_frame(3, get), f.headers_frame(1, get))
    yield "unknown-frame", conn(f.frame(0x42, 0xff, 1, b"ignored"), f.headers_frame(1, get))


if __name__ == "__main__":
    write(seeds, "h2_frame")
