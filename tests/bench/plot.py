#!/usr/bin/env python3
"""plot.py: a horizontal bar chart as SVG, for docs/benchmarks.md, from
the figures a benchmark printed.  No dependency beyond Python.

usage: tests/bench/plot.py TITLE UNIT OUT.svg GROUP:NAME=VALUE...

Bars of one GROUP (a case, such as "1 KB") are drawn together, one per
NAME (a server); VALUE is the figure, in UNIT (such as "µs CPU per
request").  Example:
  tests/bench/plot.py "Static files" "µs CPU/request" docs/img/static.svg \\
      "1 KB:nginx=25.1" "1 KB:corral=9.8" "1 MB:nginx=120" "1 MB:corral=80"
"""
import html
import sys

COLOURS = ["#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948"]


def main(argv):
    if len(argv) < 5:
        print(__doc__, file=sys.stderr)
        return 2
    title, unit, out = argv[1], argv[2], argv[3]
    groups, names = {}, []
    for item in argv[4:]:
        group, _, rest = item.partition(":")
        name, _, value = rest.partition("=")
        if not group or not name or not value:
            print(f"plot.py: expected GROUP:NAME=VALUE, got {item!r}", file=sys.stderr)
            return 2
        groups.setdefault(group, []).append((name, float(value)))
        if name not in names:
            names.append(name)
    top = max(v for bars in groups.values() for _, v in bars) or 1.0
    bar_h, gap, label_w, width = 18, 14, 90, 640
    # A bar's label stands after its end: narrow the bars so that every
    # label, guessed at 6.9 px (0.58 em) a character, ends inside the picture.
    plot_w = width - label_w - 80
    for bars in groups.values():
        for name, value in bars:
            room = width - label_w - 4 - 6.9 * len(f"{name} {value:g}")
            if value > 0 and plot_w * value / top > room:
                plot_w = room * top / value
    rows = sum(len(b) for b in groups.values())
    height = 50 + rows * bar_h + len(groups) * gap + 30
    svg = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'font-family="sans-serif" font-size="12">',
           f'<text x="{width / 2}" y="20" text-anchor="middle" font-size="14">'
           f'{html.escape(title)} ({html.escape(unit)})</text>']
    y = 40
    for group, bars in groups.items():
        svg.append(f'<text x="4" y="{y + bar_h * len(bars) / 2 + 4}">{html.escape(group)}</text>')
        for name, value in bars:
            w = max(1.0, plot_w * value / top)
            colour = COLOURS[names.index(name) % len(COLOURS)]
            svg.append(f'<rect x="{label_w}" y="{y}" width="{w:.1f}" height="{bar_h - 3}" '
                       f'fill="{colour}"/>')
            svg.append(f'<text x="{label_w + w + 4:.1f}" y="{y + bar_h - 6}">'
                       f'{html.escape(name)} {value:g}</text>')
            y += bar_h
        y += gap
    svg.append("</svg>")
    with open(out, "w", encoding="utf-8") as f:
        f.write("\n".join(svg) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
