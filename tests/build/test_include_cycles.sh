#!/usr/bin/env bash
# Fails when the modules of proto/ include one another in a cycle: x.c,
# x.h and x_internal.h are one module, each #include "proto/..." an edge
# (what includes x.h depends on x.c too).  The cycles listed in `known`
# are older than this check and go when proto/ is split into folders; any
# other cycle, or one of them grown, fails.
set -euo pipefail
cd "$(dirname "$0")/../.."
python3 - <<'PY'
import os, re, sys
files = sorted(f for f in os.listdir("proto") if f.endswith((".c", ".h")))
def node(f):
    name = f[:-2] if f.endswith((".c", ".h")) else f
    return name[:-len("_internal")] if name.endswith("_internal") else name
known = [
    ["balance", "health", "resolve", "upstream"],
    ["proxy", "proxy_head"],
]
edges = {}
for f in files:
    with open(os.path.join("proto", f)) as fh:
        for line in fh:
            m = re.match(r'\s*#\s*include\s+"proto/([^"]+)\.h"', line)
            if m and node(m.group(1) + ".h") != node(f):
                edges.setdefault(node(f), set()).add(node(m.group(1) + ".h"))
# Tarjan's strongly connected components.
index, low, stack, on, cycles, n = {}, {}, [], set(), [], [0]
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
            cycles.append(sorted(comp))
sys.setrecursionlimit(10000)
for v in sorted({node(f) for f in files}):
    if v not in index:
        visit(v)
bad = [c for c in cycles if c not in known]
for c in bad:
    print("include cycle among proto/: " + " ".join(c))
sys.exit(1 if bad else 0)
PY
