#!/usr/bin/env python3
"""Draws the medians of ../shared/bench/peers/run.sh outputs as an SVG bar chart.

usage: run.sh ... > keepalive.txt; run.sh -C ... > close.txt
       scripts/plot-peers.py docs/proxy-peers.svg "keep-alive" keepalive.txt "new connection" close.txt

One group of bars per output file (its "median NAME RPS" lines), one bar per
server, each labelled with requests/s.  Uses only the Python standard library.
"""
import sys

COLORS = {"nginx": "#2b7bba", "haproxy": "#8e5ac8", "h2o": "#e08a1e", "project": "#3aa655"}
W, H, PAD = 360, 230, 40


def medians(path):
    out = {}
    for line in open(path):
        parts = line.split()
        if len(parts) == 3 and parts[0] == "median":
            out[parts[1]] = float(parts[2])
    return out


def main():
    if len(sys.argv) < 4 or len(sys.argv) % 2 != 0:
        sys.exit(__doc__)
    groups = [(sys.argv[i], medians(sys.argv[i + 1])) for i in range(2, len(sys.argv), 2)]
    svg = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W * len(groups)}" height="{H}" '
           f'font-family="sans-serif"><rect width="100%" height="100%" fill="white"/>']
    for g, (title, values) in enumerate(groups):
        x0 = g * W
        top = max(values.values()) * 1.15
        names = list(values)
        bar = (W - 2 * PAD) / len(names)
        base = H - PAD
        svg.append(f'<text x="{x0 + W / 2}" y="18" text-anchor="middle" font-size="13">'
                   f'{title}: requests/s, median</text>')
        svg.append(f'<line x1="{x0 + PAD}" y1="{base}" x2="{x0 + W - PAD}" y2="{base}" stroke="#444"/>')
        for i, name in enumerate(names):
            h = (H - PAD - 40) * values[name] / top
            x = x0 + PAD + i * bar + 4
            label = "corral" if name == "project" else name
            svg.append(f'<rect x="{x:.1f}" y="{base - h:.1f}" width="{bar - 8:.1f}" height="{h:.1f}" '
                       f'fill="{COLORS.get(name, "#777")}"/>')
            svg.append(f'<text x="{x + (bar - 8) / 2:.1f}" y="{base - h - 4:.1f}" text-anchor="middle" '
                       f'font-size="10">{values[name] / 1000:.1f}k</text>')
            svg.append(f'<text x="{x + (bar - 8) / 2:.1f}" y="{base + 14:.1f}" text-anchor="middle" '
                       f'font-size="11">{label}</text>')
    svg.append("</svg>")
    with open(sys.argv[1], "w") as f:
        f.write("\n".join(svg) + "\n")


if __name__ == "__main__":
    main()
