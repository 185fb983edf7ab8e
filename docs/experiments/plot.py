#!/usr/bin/env python3
"""Draws learning curves from `amprun --metrics` files as one SVG (no dependencies), for the
figures the Markdown pages embed (a Markdown page cannot embed an HTML page). To look at
runs, `amprun report RUN.jsonl... -o report.html` draws every chart, several runs on
shared axes; the experiment scripts write one beside their metrics.

usage: plot.py OUT.svg METRIC SPLIT [--x epoch|elapsed_s] LABEL=metrics.jsonl [...]
  METRIC: accuracy or loss; SPLIT: valid or train. One line per file, by epoch (default)
  or by elapsed seconds.
"""
import json
import sys

COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#17becf"]


def series(path, metric, split, x):
    points = []
    with open(path) as f:
        for line in f:
            row = json.loads(line)
            if row.get("split") == split and row.get(metric) is not None:
                points.append((row[x], row[metric]))
    return sorted(points)


def main():
    if len(sys.argv) < 5:
        print(__doc__)
        sys.exit(2)
    out, metric, split = sys.argv[1:4]
    rest = sys.argv[4:]
    x = "epoch"
    if rest[:1] == ["--x"]:
        x, rest = rest[1], rest[2:]
    lines = []
    for arg in rest:
        label, path = arg.split("=", 1)
        lines.append((label, series(path, metric, split, x)))
    xs = [x for _, pts in lines for x, _ in pts] or [0, 1]
    ys = [y for _, pts in lines for _, y in pts] or [0, 1]
    x0, x1 = min(xs), max(max(xs), min(xs) + 1)
    y0, y1 = (0.0, 1.0) if metric == "accuracy" else (0.0, max(ys) * 1.05)
    w, h, m = 640, 400, 60
    sx = lambda x: m + (x - x0) / (x1 - x0) * (w - 2 * m)
    sy = lambda y: h - m - (y - y0) / ((y1 - y0) or 1) * (h - 2 * m)
    svg = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" font-size="12">',
           f'<rect width="{w}" height="{h}" fill="white"/>',
           f'<line x1="{m}" y1="{h-m}" x2="{w-m}" y2="{h-m}" stroke="black"/>',
           f'<line x1="{m}" y1="{m}" x2="{m}" y2="{h-m}" stroke="black"/>',
           f'<text x="{w/2}" y="{h-15}" text-anchor="middle">{x}</text>',
           f'<text x="15" y="{h/2}" transform="rotate(-90 15 {h/2})" text-anchor="middle">{split} {metric}</text>']
    for i in range(6):
        y = y0 + (y1 - y0) * i / 5
        svg.append(f'<text x="{m-8}" y="{sy(y)+4}" text-anchor="end">{y:.2f}</text>')
        svg.append(f'<line x1="{m}" y1="{sy(y)}" x2="{w-m}" y2="{sy(y)}" stroke="#eee"/>')
    ticks = sorted(set(xs)) if x == "epoch" else [x0 + (x1 - x0) * i / 5 for i in range(6)]
    for e in ticks:
        label = e if x == "epoch" else f"{e:.0f}"
        svg.append(f'<text x="{sx(e)}" y="{h-m+16}" text-anchor="middle">{label}</text>')
    for k, (label, pts) in enumerate(lines):
        color = COLORS[k % len(COLORS)]
        if pts:
            path = " ".join(f"{sx(x):.1f},{sy(y):.1f}" for x, y in pts)
            svg.append(f'<polyline points="{path}" fill="none" stroke="{color}" stroke-width="2"/>')
            for x, y in pts:
                svg.append(f'<circle cx="{sx(x):.1f}" cy="{sy(y):.1f}" r="3" fill="{color}"/>')
        svg.append(f'<text x="{w-m+5 - 200}" y="{h - m - 20 - 16*(len(lines)-1-k)}" fill="{color}">{label}</text>')
    svg.append("</svg>")
    with open(out, "w") as f:
        f.write("\n".join(svg) + "\n")


if __name__ == "__main__":
    main()
