#!/usr/bin/env python3
"""Draws the latency of corral-wakebench's uneven and stalled scenarios as an
SVG: one row per scenario, one chart per worker count, one bar per mode and
mechanism, its height the p99 on a log scale and a whisker up to the p99.9.

usage: build/corral-wakebench -w 2,8,16 -s stalled -R 3 --json > stalled.json
       build/corral-wakebench -w 2,8,16 -s uneven -r 1000 -R 3 --json > uneven.json
       scripts/plot-wakebench-p99.py docs/wakeup-p99.svg stalled.json uneven.json

Uses only the Python standard library.
"""
import json
import math
import sys

SCENARIOS = [("stalled", "stalled worker (blocked 200 ms every second)"),
             ("uneven", "uneven work (1 connection in 50 holds its worker 20 ms)")]
COLORS = {"roundrobin": "#2b7bba", "balanced": "#17a2a2", "affinity": "#3aa655",
          "exclusive": "#e08a1e", "reuseport": "#8e5ac8", "herd": "#c8453b"}
SHORT = {"roundrobin": "rr", "balanced": "bal", "affinity": "aff", "exclusive": "excl",
         "reuseport": "reusep", "herd": "herd", "ebpf": "ebpf", "rotate": "rotate",
         "cbpf-cpu": "cbpf", "epollexclusive": "", "hash": "", "shared": ""}
W, H, LEFT, TOP, BOTTOM = 330, 250, 44, 30, 58
LOW, HIGH = 0.01, 1000.0  # ms, the log axis


def y_of(ms, y0):
    ms = min(max(ms, LOW), HIGH)
    frac = (math.log10(ms) - math.log10(LOW)) / (math.log10(HIGH) - math.log10(LOW))
    return y0 + H - BOTTOM - frac * (H - BOTTOM - TOP)


def label(run):
    mech = SHORT.get(run["mechanism"], run["mechanism"])
    mode = SHORT.get(run["mode"], run["mode"])
    return f"{mode} {mech}".strip()


def chart(x0, y0, title, runs):
    out = [f'<text x="{x0 + W / 2}" y="{y0 + 16}" text-anchor="middle" font-size="12">{title}</text>']
    base = y_of(LOW, y0)
    for decade in range(int(math.log10(LOW)), int(math.log10(HIGH)) + 1):
        ms = 10.0 ** decade
        y = y_of(ms, y0)
        out.append(f'<line x1="{x0 + LEFT}" y1="{y:.1f}" x2="{x0 + W - 8}" y2="{y:.1f}" '
                   f'stroke="#ddd"/>')
        out.append(f'<text x="{x0 + LEFT - 4}" y="{y + 3:.1f}" text-anchor="end" '
                   f'font-size="9">{ms:g}</text>')
    out.append(f'<text x="{x0 + 10}" y="{(y0 + TOP + base) / 2:.1f}" font-size="9" '
               f'transform="rotate(-90 {x0 + 10} {(y0 + TOP + base) / 2:.1f})" '
               f'text-anchor="middle">ms (log)</text>')
    bar_w = (W - LEFT - 8) / max(len(runs), 1)
    for i, r in enumerate(runs):
        x = x0 + LEFT + i * bar_w + 3
        mid = x + (bar_w - 6) / 2
        top = y_of(r["p99_ms"], y0)
        fill = COLORS.get(r["mode"], "#777")
        ebpf = r["mechanism"] == "ebpf"
        out.append(f'<rect x="{x:.1f}" y="{top:.1f}" width="{bar_w - 6:.1f}" '
                   f'height="{base - top:.1f}" fill="{fill}" fill-opacity="{1.0 if ebpf else 0.45}"/>')
        whisker = y_of(r["p999_ms"], y0)
        out.append(f'<line x1="{mid:.1f}" y1="{top:.1f}" x2="{mid:.1f}" y2="{whisker:.1f}" '
                   f'stroke="#333"/>')
        out.append(f'<line x1="{mid - 4:.1f}" y1="{whisker:.1f}" x2="{mid + 4:.1f}" '
                   f'y2="{whisker:.1f}" stroke="#333"/>')
        value = f'{r["p99_ms"]:.2g}' if r["p99_ms"] < 10 else f'{r["p99_ms"]:.0f}'
        out.append(f'<text x="{mid:.1f}" y="{top - 3:.1f}" text-anchor="middle" '
                   f'font-size="8" stroke="white" stroke-width="2.5" paint-order="stroke">{value}</text>')
        ly = base + 8
        out.append(f'<text x="{mid:.1f}" y="{ly:.1f}" font-size="8" text-anchor="end" '
                   f'transform="rotate(-50 {mid:.1f} {ly:.1f})">{label(r)}</text>')
    out.append(f'<line x1="{x0 + LEFT}" y1="{base:.1f}" x2="{x0 + W - 8}" y2="{base:.1f}" '
               f'stroke="#444"/>')
    return out


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    runs = []
    for path in sys.argv[2:]:
        with open(path) as f:
            runs += json.load(f)
    rows = [(s, t) for s, t in SCENARIOS if any(r["scenario"] == s for r in runs)]
    worker_counts = sorted({r["workers"] for r in runs if r["scenario"] in dict(rows)})
    width = W * len(worker_counts)
    height = (H + 24) * len(rows) + 30
    svg = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'font-family="sans-serif"><rect width="100%" height="100%" fill="white"/>',
           f'<text x="6" y="{height - 8}" font-size="10">bar: p99 from connect() to the '
           f'first read; whisker: p99.9; pale: the mechanism without eBPF</text>']
    for row, (scenario, title) in enumerate(rows):
        y0 = 20 + row * (H + 24)
        svg.append(f'<text x="6" y="{y0 + 2}" font-size="13" font-weight="bold">{title}</text>')
        for col, workers in enumerate(worker_counts):
            subset = [r for r in runs if r["scenario"] == scenario and r["workers"] == workers]
            svg += chart(col * W, y0 + 6, f"{workers} workers", subset)
    svg.append("</svg>")
    with open(sys.argv[1], "w") as f:
        f.write("\n".join(svg) + "\n")


if __name__ == "__main__":
    main()
