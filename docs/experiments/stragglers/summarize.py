#!/usr/bin/env python3
"""Table and plot of the straggler experiment (run.sh) from its metrics files.

usage: summarize.py WORKERS [MODEL ...]
Writes RESULTS_w<WORKERS>.md (one table per model) and stragglers_w<WORKERS>.svg (time to
the target validation accuracy against the slowdown, one line per mode; no dependencies).
"""
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
TARGETS = {"list_reduce": 0.56, "tree_lstm": 0.70}
MODES = ["sync", "async", "bounded", "replicas"]
LABELS = {
    "sync": "lock-step synchronous",
    "async": "asynchronous",
    "bounded": "async, layer-wise bound (from K=1)",
    "replicas": "async, heaviest Ppt replicated",
}
SLOWDOWNS = [1, 2, 4]
COLORS = {"sync": "#d62728", "async": "#1f77b4", "bounded": "#2ca02c", "replicas": "#ff7f0e"}


def run(model, workers, mode, slowdown):
    path = os.path.join(HERE, f"{model}_w{workers}_{mode}_s{slowdown}.jsonl")
    if not os.path.exists(path):
        return None
    train, valid = {}, {}
    with open(path) as f:
        for line in f:
            row = json.loads(line)
            if row.get("split") == "train":
                train[row["epoch"]] = row
            elif row.get("split") == "valid":
                valid[row["epoch"]] = row
    target = TARGETS[model]
    reached = next((e for e in sorted(valid) if (valid[e].get("accuracy") or 0) >= target and e in train), None)
    stale = [g for row in train.values() for g in row.get("staleness", [])]
    grads = sum(g["gradients"] for g in stale)
    return {
        "time": train[reached]["elapsed_s"] if reached else None,
        "epoch": reached,
        "total": max((r["elapsed_s"] for r in train.values()), default=0.0),
        "best": max((v.get("accuracy") or 0 for v in valid.values()), default=0.0),
        "rate": sum(r["instances_per_s"] for r in train.values()) / max(len(train), 1),
        "stale_mean": sum(g["mean"] * g["gradients"] for g in stale) / grads if grads else 0.0,
        "stale_max": max((g["max"] for g in stale), default=0),
        "epochs": len(train),
    }


def cell(r):
    if r is None:
        return "not run"
    time = f"{r['time']:.1f} s (epoch {r['epoch']})" if r["time"] is not None else f"not reached in {r['total']:.1f} s"
    return (
        f"{time}; best {100 * r['best']:.1f}%, {r['rate']:.0f}/s, "
        f"staleness {r['stale_mean']:.2f} (max {r['stale_max']})"
    )


def table(model, workers):
    lines = [
        f"### {model}, {workers} workers, target {100 * TARGETS[model]:.0f}% validation accuracy",
        "",
        "| mode | " + " | ".join(f"slowdown {s}x" for s in SLOWDOWNS) + " | time at 4x / at 1x |",
        "|---|" + "---|" * (len(SLOWDOWNS) + 1),
    ]
    results = {}
    for mode in MODES:
        rs = [run(model, workers, mode, s) for s in SLOWDOWNS]
        results[mode] = rs
        ratio = "–"
        if rs[0] and rs[-1] and rs[0]["time"] and rs[-1]["time"]:
            ratio = f"{rs[-1]['time'] / rs[0]['time']:.2f}"
        lines.append(f"| {LABELS[mode]} | " + " | ".join(cell(r) for r in rs) + f" | {ratio} |")
    load = loads(model, workers)
    if load:
        lines += ["", f"Load average (1 min) around the runs: {load}."]
    return "\n".join(lines) + "\n", results


def loads(model, workers):
    """The 1-minute load averages run.sh recorded before and after each of the model's runs."""
    path = os.path.join(HERE, f"load_w{workers}.txt")
    if not os.path.exists(path):
        return None
    values = []
    with open(path) as f:
        for line in f:
            parts = line.split()
            if len(parts) >= 9 and parts[0] == model:
                values += [float(parts[3]), float(parts[6])]
    if not values:
        return None
    return f"{min(values):.1f} to {max(values):.1f} (mean {sum(values) / len(values):.1f})"


def svg(all_results, workers):
    width, height, pad = 360, 260, 50
    panels = len(all_results)
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width * panels}" height="{height + 70}" '
        'font-family="sans-serif" font-size="11">'
    ]
    for p, (model, results) in enumerate(all_results.items()):
        x0 = p * width
        times = [r["time"] for rs in results.values() for r in rs if r and r["time"]]
        top = max(times, default=1.0) * 1.1
        def px(s):
            return x0 + pad + (SLOWDOWNS.index(s)) * (width - 2 * pad) / (len(SLOWDOWNS) - 1)
        def py(t):
            return height - pad + 20 - t / top * (height - 2 * pad)
        out.append(f'<text x="{x0 + width / 2}" y="15" text-anchor="middle">{model}, {workers} workers: '
                   f'time to {100 * TARGETS[model]:.0f}% validation accuracy</text>')
        out.append(f'<line x1="{x0 + pad}" y1="{py(0)}" x2="{x0 + width - pad}" y2="{py(0)}" stroke="black"/>')
        out.append(f'<line x1="{x0 + pad}" y1="{py(0)}" x2="{x0 + pad}" y2="{py(top)}" stroke="black"/>')
        for s in SLOWDOWNS:
            out.append(f'<text x="{px(s)}" y="{py(0) + 14}" text-anchor="middle">{s}x</text>')
        for k in range(5):
            t = top * k / 4
            out.append(f'<text x="{x0 + pad - 4}" y="{py(t) + 4}" text-anchor="end">{t:.0f}</text>')
        out.append(f'<text x="{x0 + width / 2}" y="{py(0) + 28}" text-anchor="middle">slowdown of worker '
                   f'{workers - 1}</text>')
        out.append(f'<text x="{x0 + 12}" y="{py(top / 2)}" transform="rotate(-90 {x0 + 12} {py(top / 2)})" '
                   'text-anchor="middle">seconds</text>')
        for i, (mode, rs) in enumerate(results.items()):
            pts = [(px(s), py(r["time"])) for s, r in zip(SLOWDOWNS, rs) if r and r["time"]]
            if pts:
                path = " ".join(f"{x:.1f},{y:.1f}" for x, y in pts)
                out.append(f'<polyline points="{path}" fill="none" stroke="{COLORS[mode]}" stroke-width="2"/>')
                for x, y in pts:
                    out.append(f'<circle cx="{x:.1f}" cy="{y:.1f}" r="3" fill="{COLORS[mode]}"/>')
            ly = height + 22 + 12 * (i // 2)
            lx = x0 + pad + (i % 2) * 150
            out.append(f'<rect x="{lx}" y="{ly - 8}" width="10" height="3" fill="{COLORS[mode]}"/>')
            out.append(f'<text x="{lx + 14}" y="{ly - 4}">{LABELS[mode]}</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


def main():
    if len(sys.argv) < 2:
        print(__doc__)
        sys.exit(2)
    workers = int(sys.argv[1])
    models = sys.argv[2:] or ["list_reduce"]
    text, all_results = [], {}
    for model in models:
        t, results = table(model, workers)
        text.append(t)
        all_results[model] = results
    copies = os.path.join(HERE, f"copies_w{workers}.txt")
    if os.path.exists(copies):
        with open(copies) as f:
            lines = [line.strip() for line in f if line.strip()]
        text.append(
            f"### Forward messages each copy of list_reduce's `cell` served (worker {workers - 1} slowed)\n\n"
            + "\n".join(f"- {line}" for line in lines)
            + "\n"
        )
    with open(os.path.join(HERE, f"RESULTS_w{workers}.md"), "w") as f:
        f.write("\n".join(text))
    with open(os.path.join(HERE, f"stragglers_w{workers}.svg"), "w") as f:
        f.write(svg(all_results, workers))
    print("\n".join(text))


if __name__ == "__main__":
    main()
