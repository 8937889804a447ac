#!/usr/bin/env python3
"""Draws corral-wakebench --json output as an SVG of small bar charts.

usage: build/corral-wakebench --json > wakebench.json
       scripts/plot-wakebench.py wakebench.json docs/wakeup-modes.svg [SCENARIO]

One row of charts per worker count, one chart per metric, one bar per mode.
Uses only the Python standard library.
"""
import json
import sys

METRICS = [
    ("sleeps_per_accept", "worker wakeups per accept", None),
    ("wasted_percent", "wasted accept wakeups, %", None),
    ("max_over_mean", "busiest worker / mean", None),
    ("locality", "accepted on the arrival CPU", 1.0),
]
COLORS = {"roundrobin": "#2b7bba", "affinity": "#3aa655", "exclusive": "#e08a1e",
          "reuseport": "#8e5ac8", "herd": "#c8453b"}
W, H, PAD, TOP = 230, 170, 30, 34


def derived(run):
    accepts = max(run["accepts"], 1)
    return dict(run, sleeps_per_accept=run["sleeps"] / accepts,
                wasted_percent=100.0 * run["wasted_ratio"])


def chart(x0, y0, title, runs, key, fixed_max):
    top = fixed_max or max(r[key] for r in runs) * 1.15 or 1.0
    bar_w = (W - 2 * PAD) / len(runs)
    out = [f'<text x="{x0 + W / 2}" y="{y0 + 14}" text-anchor="middle" font-size="12">{title}</text>']
    base = y0 + H - PAD
    out.append(f'<line x1="{x0 + PAD}" y1="{base}" x2="{x0 + W - PAD}" y2="{base}" stroke="#444"/>')
    for i, r in enumerate(runs):
        h = (H - PAD - TOP) * r[key] / top
        x = x0 + PAD + i * bar_w + 3
        out.append(f'<rect x="{x:.1f}" y="{base - h:.1f}" width="{bar_w - 6:.1f}" height="{h:.1f}" '
                   f'fill="{COLORS.get(r["mode"], "#777")}"/>')
        out.append(f'<text x="{x + (bar_w - 6) / 2:.1f}" y="{base - h - 3:.1f}" text-anchor="middle" '
                   f'font-size="9">{r[key]:.2f}</text>')
        out.append(f'<text x="{x + (bar_w - 6) / 2:.1f}" y="{base + 12:.1f}" text-anchor="middle" '
                   f'font-size="8">{r["mode"][:6]}</text>')
    return out


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    scenario = sys.argv[3] if len(sys.argv) > 3 else "paced"
    runs = [derived(r) for r in json.load(open(sys.argv[1])) if r["scenario"] == scenario]
    worker_counts = sorted({r["workers"] for r in runs})
    width, height = W * len(METRICS), (H + 20) * len(worker_counts) + 20
    svg = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'font-family="sans-serif"><rect width="100%" height="100%" fill="white"/>']
    for row, workers in enumerate(worker_counts):
        y0 = 20 + row * (H + 20)
        svg.append(f'<text x="6" y="{y0 + 2}" font-size="13" font-weight="bold">'
                   f'{workers} workers, {scenario} connections</text>')
        subset = [r for r in runs if r["workers"] == workers]
        for col, (key, title, fixed_max) in enumerate(METRICS):
            svg += chart(col * W, y0 + 6, title, subset, key, fixed_max)
    svg.append("</svg>")
    with open(sys.argv[2], "w") as f:
        f.write("\n".join(svg) + "\n")


if __name__ == "__main__":
    main()
