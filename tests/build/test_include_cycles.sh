#!/usr/bin/env bash
# Fails when proto/ includes itself in a cycle, at two levels:
#  - modules: x.c, x.h and x_internal.h of one folder are one module, each
#    #include "proto/..." an edge (what includes x.h depends on x.c too);
#  - folders: proto/http, proto/http1, ... each one node.
# The cycles listed in `known` are older than this check and are being
# taken apart; any other cycle, or one of them grown, fails.
set -euo pipefail
cd "$(dirname "$0")/../.."
python3 - <<'PY'
import glob, os, re, sys
files = sorted(glob.glob("proto/*.h") + glob.glob("proto/*/*.[ch]"))
def module(path):
    name = path[len("proto/"):-2]
    return name[:-len("_internal")] if name.endswith("_internal") else name
def folder(mod):
    return mod.split("/")[0] if "/" in mod else "."
known_modules = [
    ["upstream/balance", "upstream/health", "upstream/resolve", "upstream/upstream"],
    ["upstream/proxy", "upstream/proxy_head"],
]
known_folders = []
mod_edges, dir_edges = {}, {}
for f in files:
    with open(f) as fh:
        for line in fh:
            m = re.match(r'\s*#\s*include\s+"(proto/[^"]+\.h)"', line)
            if not m:
                continue
            a, b = module(f), module(m.group(1))
            if a != b:
                mod_edges.setdefault(a, set()).add(b)
            if folder(a) != folder(b):
                dir_edges.setdefault(folder(a), set()).add(folder(b))
def cycles_of(edges, nodes):
    # Tarjan's strongly connected components.
    index, low, stack, on, out, n = {}, {}, [], set(), [], [0]
    def visit(v):
        index[v] = low[v] = n[0]; n[0] += 1
        stack.append(v); on.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w); low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop(); on.discard(w); comp.append(w)
                if w == v: break
            if len(comp) > 1:
                out.append(sorted(comp))
    sys.setrecursionlimit(10000)
    for v in sorted(nodes):
        if v not in index:
            visit(v)
    return out
mods = {module(f) for f in files}
bad = [c for c in cycles_of(mod_edges, mods) if c not in known_modules]
for c in bad:
    print("include cycle among proto/ modules: " + " ".join(c))
bad_dirs = [c for c in cycles_of(dir_edges, {folder(m) for m in mods}) if c not in known_folders]
for c in bad_dirs:
    print("include cycle among proto/ folders: " + " ".join(c))
sys.exit(1 if bad or bad_dirs else 0)
PY
