#!/usr/bin/env python3
"""The response-time experiment of docs/rollouts.md (SPEC §6, the paper's Fig. 9 on digits).

Trains the three networks of examples/rollout/ under their streaming and sequential
rollouts on the 8x8 digits shown for F frames with Gaussian noise (`amprun --frame-noise`),
evaluates each on held-out digits with fresh noise (another --seed), and writes the
accuracy per update step as a markdown table (results.md) and an SVG plot (accuracy.svg)
beside this script. With --bench it also times `amprun eval` with 1 and 2 workers for both
patterns (time per frame) and writes bench.md.

Standard library only. Run from the repository root:
    python3 docs/experiments/rollout/run.py [--epochs 8] [--frames 8] [--noise 0.5] [--bench]
AMPRUN names the binary (default target/release/amprun, else target/debug/amprun).
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", "..", ".."))
NETWORKS = [("FeedForward", "feed_forward.amp"), ("Skip", "skip.amp"), ("SkipRecurrent", "skip_recurrent.amp")]
PATTERNS = ["streaming", "sequential"]
COLOURS = {"FeedForward": "#1f77b4", "Skip": "#d62728", "SkipRecurrent": "#2ca02c"}


def amprun_binary():
    if os.environ.get("AMPRUN"):
        return os.environ["AMPRUN"]
    for build in ["release", "debug"]:
        path = os.path.join(ROOT, "target", build, "amprun")
        if os.path.exists(path):
            return path
    sys.exit("no amprun binary: cargo build --release -p amprun (or set AMPRUN)")


def run(cmd):
    result = subprocess.run(cmd, capture_output=True, text=True)
    if result.returncode != 0:
        sys.exit(f"failed ({result.returncode}): {' '.join(cmd)}\n{result.stderr}")
    return result.stdout


def split_digits(data, scratch, test_share):
    with open(data) as f:
        rows = [line for line in f if line.strip()]
    cut = int(len(rows) * (1 - test_share))
    paths = []
    for name, part in [("train.csv", rows[:cut]), ("test.csv", rows[cut:])]:
        path = os.path.join(scratch, name)
        with open(path, "w") as f:
            f.writelines(part)
        paths.append(path)
    return paths, cut, len(rows) - cut


def experiment(args, amprun, train, test, scratch):
    curves = {}
    for network, source in NETWORKS:
        model = os.path.join(ROOT, "examples", "rollout", source)
        for pattern in PATTERNS:
            flags = ["--network", network, "--pattern", pattern, "--frames", str(args.frames)]
            noise = ["--frame-noise", str(args.noise), "--scale", "0.0625"]
            params = os.path.join(scratch, f"{network}-{pattern}.safetensors")
            metrics = os.path.join(scratch, f"{network}-{pattern}.jsonl")
            started = time.time()
            run([amprun, "train", model, *flags, "--data", train, *noise, "--epochs", str(args.epochs),
                 "--lr", str(args.lr), "--seed", "0", "--save", params, "--deterministic"])
            run([amprun, "eval", model, *flags, "--data", test, *noise, "--seed", "1", "--params", params,
                 "--metrics", metrics])
            with open(metrics) as f:
                rows = [json.loads(line) for line in f if line.strip()]
            steps = [(r["update_step"], r["accuracy"]) for r in rows if "update_step" in r]
            curves[(network, pattern)] = steps
            print(f"{network} {pattern}: {time.time() - started:.0f}s, final {steps[-1][1]:.3f}", file=sys.stderr)
    return curves


def first_response(steps):
    return next(s for s, a in steps if a is not None)


def at(steps, step):
    for s, a in steps:
        if s == step:
            return a
    return None


def fmt(x):
    return "-" if x is None else f"{100 * x:.1f}%"


def table(curves, frames):
    lines = ["| network | pattern | F(R) | first response (step) | accuracy at the sequential's first response | accuracy after the last frame (step) |",
             "|---|---|---|---|---|---|"]
    for network, _ in NETWORKS:
        sequential_first = first_response(curves[(network, "sequential")])
        for pattern in PATTERNS:
            steps = curves[(network, pattern)]
            factor = steps[-1][0] // frames if pattern == "sequential" else 1
            last_step, last = steps[-1]
            lines.append(f"| {network} | {pattern} | {factor} | {first_response(steps)} | "
                         f"{fmt(at(steps, sequential_first))} | {fmt(last)} ({last_step}) |")
    return "\n".join(lines)


def svg(curves, path):
    width, height, left, right, top, bottom = 720, 420, 60, 170, 20, 50
    last = max(s for steps in curves.values() for s, _ in steps)
    x = lambda s: left + (width - left - right) * (s - 1) / max(1, last - 1)
    y = lambda a: top + (height - top - bottom) * (1 - a)
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" font-family="sans-serif" font-size="12">',
           f'<rect width="{width}" height="{height}" fill="white"/>']
    for tick in range(0, 11, 2):
        a = tick / 10
        out.append(f'<line x1="{left}" y1="{y(a):.1f}" x2="{width - right}" y2="{y(a):.1f}" stroke="#ddd"/>')
        out.append(f'<text x="{left - 8}" y="{y(a) + 4:.1f}" text-anchor="end">{tick * 10}%</text>')
    step_tick = max(1, last // 8)
    for s in range(1, last + 1, step_tick):
        out.append(f'<text x="{x(s):.1f}" y="{height - bottom + 18}" text-anchor="middle">{s}</text>')
    out.append(f'<text x="{(left + width - right) / 2}" y="{height - 10}" text-anchor="middle">update step</text>')
    out.append(f'<text x="14" y="{(top + height - bottom) / 2}" transform="rotate(-90 14 {(top + height - bottom) / 2})" text-anchor="middle">test accuracy</text>')
    out.append(f'<rect x="{left}" y="{top}" width="{width - left - right}" height="{height - top - bottom}" fill="none" stroke="black"/>')
    legend_y = top + 10
    for (network, pattern), steps in curves.items():
        colour = COLOURS[network]
        dash = "" if pattern == "streaming" else ' stroke-dasharray="6 4"'
        points = []
        previous = None
        for s, a in steps:
            if a is None:
                continue
            if previous is not None:
                points.append(f"{x(s):.1f},{y(previous):.1f}")  # a step function
            points.append(f"{x(s):.1f},{y(a):.1f}")
            previous = a
        out.append(f'<polyline points="{" ".join(points)}" fill="none" stroke="{colour}" stroke-width="2"{dash}/>')
        out.append(f'<line x1="{width - right + 10}" y1="{legend_y}" x2="{width - right + 35}" y2="{legend_y}" stroke="{colour}" stroke-width="2"{dash}/>')
        out.append(f'<text x="{width - right + 40}" y="{legend_y + 4}">{network} {pattern}</text>')
        legend_y += 18
    out.append("</svg>")
    with open(path, "w") as f:
        f.write("\n".join(out) + "\n")


def bench(args, amprun, test):
    lines = ["| network | pattern | workers | instances/s | µs per frame |", "|---|---|---|---|---|"]
    for network, source in NETWORKS:
        model = os.path.join(ROOT, "examples", "rollout", source)
        for pattern in PATTERNS:
            flags = ["--network", network, "--pattern", pattern, "--frames", str(args.frames),
                     "-D", f"hidden={args.bench_hidden}"]
            with tempfile.TemporaryDirectory() as scratch:
                params = os.path.join(scratch, "p.safetensors")
                run([amprun, "train", model, *flags, "--data", test, "--frame-noise", "0.5", "--scale", "0.0625",
                     "--epochs", "1", "--save", params, "--limit", "10"])
                for workers in [1, 2]:
                    best = 0.0
                    for _ in range(3):
                        out = run([amprun, "eval", model, *flags, "--data", args.data, "--frame-noise", "0.5",
                                   "--scale", "0.0625", "--params", params, "--workers", str(workers),
                                   "--max-active-keys", "16"])
                        rate = float(out.split("instances/s")[1].split()[0])
                        best = max(best, rate)
                    per_frame = 1e6 / (best * args.frames)
                    lines.append(f"| {network} | {pattern} | {workers} | {best:.0f} | {per_frame:.0f} |")
                    print(lines[-1], file=sys.stderr)
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=8)
    parser.add_argument("--frames", type=int, default=8)
    parser.add_argument("--noise", type=float, default=0.5)
    parser.add_argument("--lr", type=float, default=0.1)
    parser.add_argument("--test-share", type=float, default=0.2)
    parser.add_argument("--data", default=os.path.join(ROOT, "data", "digits", "digits.csv"))
    parser.add_argument("--bench", action="store_true", help="also time eval with 1 and 2 workers")
    parser.add_argument("--bench-only", action="store_true")
    parser.add_argument("--bench-hidden", type=int, default=512,
                        help="layer width of the timed networks (at 32 a frame is too little work to split)")
    args = parser.parse_args()
    amprun = amprun_binary()
    with tempfile.TemporaryDirectory() as scratch:
        (train, test), n_train, n_test = split_digits(args.data, scratch, args.test_share)
        if not args.bench_only:
            curves = experiment(args, amprun, train, test, scratch)
            with open(os.path.join(HERE, "results.md"), "w") as f:
                f.write(f"Digits: {n_train} train, {n_test} test rows; {args.frames} frames, noise {args.noise} "
                        f"(pixels scaled to 0..1), {args.epochs} epochs of SGD at lr {args.lr}, binary {os.path.relpath(amprun, ROOT)}.\n\n")
                f.write(table(curves, args.frames) + "\n\n")
                f.write("Accuracy per update step:\n\n| step | " + " | ".join(f"{n} {p}" for n, p in curves) + " |\n")
                f.write("|---" * (len(curves) + 1) + "|\n")
                last = max(s for steps in curves.values() for s, _ in steps)
                for s in range(1, last + 1):
                    f.write(f"| {s} | " + " | ".join(fmt(at(steps, s)) for steps in curves.values()) + " |\n")
            svg(curves, os.path.join(HERE, "accuracy.svg"))
            print(table(curves, args.frames))
        if args.bench or args.bench_only:
            result = bench(args, amprun, test)
            with open(os.path.join(HERE, "bench.md"), "w") as f:
                f.write(result + "\n")
            print(result)


if __name__ == "__main__":
    main()
