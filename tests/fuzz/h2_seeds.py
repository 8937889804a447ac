# h2_seeds.py: what the seed writers of the HTTP/2 fuzz targets
# (h2_frame_seeds.py, h2_client_seeds.py) share: the raw-frame suite's
# frame and HPACK builders (tests/proto/h2/h2frames.py, as `f`), the size
# of the inputs scripts/test fuzzes with, and the writing of a corpus.

import os
import sys
import types

# h2frames.py talks to a daemon with the h2 and hpack modules; building
# frames needs neither, so that this runs where they are not installed.
for name in ("h2", "h2.config", "h2.connection", "h2.events", "hpack"):
    sys.modules.setdefault(name, types.ModuleType(name))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "proto", "h2"))
import h2frames as f  # noqa: E402,F401

MAX = 4096


def fill(conn, make, first=b""):
    """conn(first), then as many of make(i) as fit in MAX."""
    out, i = conn(first), 0
    while len(out) + len(make(i)) <= MAX:
        out += make(i)
        i += 1
    return out


def write(seeds, corpus):
    """Writes each (name, data) of seeds() into the directory the command
    line names, or else into tests/fuzz/corpus/`corpus`."""
    directory = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "corpus", corpus)
    os.makedirs(directory, exist_ok=True)
    for name, data in seeds():
        assert len(data) <= MAX, name
        with open(os.path.join(directory, name), "wb") as out:
            out.write(data)
