#!/usr/bin/env bash
# Fails when the headers and sources of proto/ include one another in a
# cycle: each file is a node, each #include "proto/..." an edge, and a
# .c file stands with its own .h (what includes x.h depends on x.c too).
set -euo pipefail
cd "$(dirname "$0")/../.."
python3 - <<'PY'
import os, re, sys
files = sorted(f for f in os.listdir("proto") if f.endswith((".c", ".h")))
node = lambda f: f[:-2]  # x.c and x.h are one module
edges = {}
for f in files:
    with open(os.path.join("proto", f)) as fh:
        for line in fh:
            m = re.match(r'\s*#\s*include\s+"proto/([^"]+)\.h"', line)
            if m and m.group(1) != node(f):
                edges.setdefault(node(f), set()).add(m.group(1))
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
for c in cycles:
    print("include cycle among proto/: " + " ".join(c))
sys.exit(1 if cycles else 0)
PY
