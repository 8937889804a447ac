#!/usr/bin/env python3
"""Draws CPU time per request against response size from run.sh outputs, as SVG.

usage: tests/bench/sizes.sh OUTDIR     (writes OUTDIR/BYTES.txt per size)
       scripts/plot-sizes.py docs/proxy-sizes.svg OUTDIR/*.txt

Each input is one run.sh output named after its body size in bytes; its
"cpu_us_per_req NAME US" lines give one point per proxy.  Both axes are
logarithmic.  Uses only the Python standard library.
"""
import math
import os
import sys

COLORS = {"nginx": "#2b7bba", "haproxy": "#8e5ac8", "h2o": "#e08a1e", "project": "#3aa655"}
LABELS = {"project": "corral"}
W, H, L, R, T, B = 560, 360, 64, 110, 30, 48


def points(paths):
    series = {}
    for path in paths:
        size = int(os.path.basename(path).split(".")[0])
        for line in open(path):
            parts = line.split()
            if len(parts) == 3 and parts[0] == "cpu_us_per_req":
                series.setdefault(parts[1], []).append((size, float(parts[2])))
    return {name: sorted(p) for name, p in series.items()}


def human(n):
    return f"{n // 1048576} MB" if n >= 1048576 else f"{n // 1024} KB"


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    series = points(sys.argv[2:])
    xs = [x for p in series.values() for x, _ in p]
    ys = [y for p in series.values() for _, y in p]
    x0, x1 = math.log2(min(xs)), math.log2(max(xs))
    y0, y1 = math.floor(math.log10(min(ys))), math.ceil(math.log10(max(ys)))

    def px(x):
        return L + (math.log2(x) - x0) / max(x1 - x0, 1) * (W - L - R)

    def py(y):
        return H - B - (math.log10(y) - y0) / max(y1 - y0, 1) * (H - T - B)

    svg = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" '
           f'font-family="sans-serif" font-size="11"><rect width="100%" height="100%" fill="white"/>',
           f'<text x="{W / 2}" y="18" text-anchor="middle" font-size="13">'
           f'CPU time per proxied request (µs, log scale) against response size</text>']
    for e in range(y0, y1 + 1):
        for m in (1, 2, 5):
            v = m * 10 ** e
            if 10 ** y0 <= v <= 10 ** y1:
                svg.append(f'<line x1="{L}" y1="{py(v):.1f}" x2="{W - R}" y2="{py(v):.1f}" '
                           f'stroke="#ddd"/><text x="{L - 6}" y="{py(v) + 4:.1f}" '
                           f'text-anchor="end">{v:g}</text>')
    for x in sorted(set(xs)):
        svg.append(f'<text x="{px(x):.1f}" y="{H - B + 16}" text-anchor="middle">{human(x)}</text>')
    svg.append(f'<text x="{(L + W - R) / 2}" y="{H - 10}" text-anchor="middle">response body</text>')
    for i, (name, pts) in enumerate(sorted(series.items())):
        color = COLORS.get(name, "#444")
        path = " ".join(f"{px(x):.1f},{py(y):.1f}" for x, y in pts)
        svg.append(f'<polyline points="{path}" fill="none" stroke="{color}" stroke-width="2"/>')
        for x, y in pts:
            svg.append(f'<circle cx="{px(x):.1f}" cy="{py(y):.1f}" r="3" fill="{color}"/>')
        svg.append(f'<rect x="{W - R + 14}" y="{T + 20 * i}" width="12" height="12" fill="{color}"/>'
                   f'<text x="{W - R + 32}" y="{T + 20 * i + 10}">{LABELS.get(name, name)}</text>')
    svg.append("</svg>")
    with open(sys.argv[1], "w") as f:
        f.write("\n".join(svg) + "\n")


if __name__ == "__main__":
    main()
