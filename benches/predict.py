#!/usr/bin/env python3
"""The planner's prediction past this machine, beside what was measured here: for each
canonical model of `end_to_end.py`, the training throughput (instances/s) that `amp-plan`
predicts for its own plan on 1, 2, 4, 8 and 16 workers, in one process and split over 2,
3 and 4 hosts (a stated link latency and bandwidth), from a profile taken here; next to
it the measured throughput of the points this machine can run.

    cargo build --release -p amprun -p ampc
    python3 benches/predict.py                      # predict; measure 1 and 2 workers
    python3 benches/predict.py --measure --repeat 4 # on a larger machine: every worker
                                                    # count up to its cores, 1 to 4 processes
    python3 benches/predict.py --no-measure --link-latency-us 500 --link-bandwidth-mbps 1000  # another link
    python3 benches/predict.py --workers 1 2 --hosts 1 --in-flight 8   # m in flight, an update every m
    python3 benches/predict.py --without-profile    # the plan amprun makes by default (no profile)

How: `amprun train --workers 1 --profile` (the settings of `end_to_end.py`: 16 instances
in flight, asynchronous, an update every 8) measures each node's messages and times;
`ampc compile --workers W --processes H --profile ... --emit plan` plans with it and
prints the plan, whose chosen layout's `bottleneck_us_per_instance` (`layouts`: copies of
the graph × stages; else `cost_model`'s: the busiest worker, link or latency bound) gives
the prediction: 10^6 / that. It is a prediction: the cost model
assumes a worker per core and ignores the controller's own thread, memory bandwidth and
the operating system. A measured point is `amprun train --workers W` (with `--processes H`
over loopback when H > 1) and the planner's plan (`--plan auto`, the same
link flags), the median of `--runs` runs.

Hosts hold contiguous blocks of the workers (worker w on host w * H / W, as amprun splits
them); a plan for H hosts needs at least H workers.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from end_to_end import AMPRUN, CASES, COMMON, ROOT, in_flight, repeated  # noqa: E402

AMPC = os.path.join(ROOT, "target", "release", "ampc")
WORKERS = [1, 2, 4, 8, 16]
HOSTS = [1, 2, 3, 4]
# amprun runs at most this many processes (`amp_ir::placement::MAX_RUN_PROCESSES`).
MAX_PROCESSES = 16


def flag(args, name, default):
    return args[args.index(name) + 1] if name in args else default


def link_flags(opts):
    return ["--link-latency-us", str(opts.link_latency_us), "--link-bandwidth-mbps", str(opts.link_bandwidth_mbps)]


def predict(opts, model, args, profile, workers, hosts):
    """The planner's plan for `workers` workers on `hosts` hosts: (instances/s, plan)."""
    defines = [x for i, a in enumerate(args) if a == "-D" for x in ("-D", args[i + 1])]
    cmd = [opts.ampc, "compile", args[0], *defines, "--workers", str(workers), "--processes", str(hosts),
           *(["--profile", profile] if profile else []),
           "--min-update-frequency", flag(opts.common, "--min-update-frequency", "1"),
           "--optimizer", flag(opts.common, "--optimizer", "sgd"),
           *(["--async"] if "--async" in opts.common else []),
           "--max-active-keys", flag(opts.common, "--max-active-keys", "1"), *link_flags(opts), "--emit", "plan"]
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed ({done.returncode}):\n{done.stderr}")
    plan = json.loads(done.stdout)
    bottleneck = plan["cost_model"]["bottleneck_us_per_instance"]
    # The layout chosen among copies of the graph × stages, when the plan weighed several.
    for option in plan.get("layouts", []):
        if option["copies"] == plan.get("copies", 1) and option["stage_workers"] == plan["workers"]:
            bottleneck = option["bottleneck_us_per_instance"]
    return (1e6 / bottleneck if bottleneck > 0 else float("inf")), plan


def train(opts, args, limit, tmp, extra):
    """Training instances/s of the last epoch of `amprun train` with `extra`."""
    metrics = os.path.join(tmp, "metrics.jsonl")
    if os.path.exists(metrics):
        os.remove(metrics)
    if opts.repeat > 1:
        args, limit = repeated(args, tmp, opts.repeat), limit * opts.repeat
    cmd = [opts.amprun, "train", *args, "--limit", str(limit), *opts.common, *extra, "--metrics", metrics]
    done = subprocess.run(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if done.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed ({done.returncode}):\n{done.stderr[-2000:]}")
    with open(metrics) as f:
        rows = [json.loads(line) for line in f if line.strip()]
    return [r for r in rows if r.get("split") == "train"][-1]["instances_per_s"]


def measure(opts, args, limit, tmp, workers, hosts):
    extra = ["--workers", str(workers)]
    if hosts > 1:
        # The plan amprun makes for the processes assumes the same link as the prediction.
        extra += ["--processes", str(hosts), *link_flags(opts)]
    return statistics.median(train(opts, args, limit, tmp, extra) for _ in range(opts.runs))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", nargs="+", default=list(CASES), choices=list(CASES))
    parser.add_argument("--amprun", default=AMPRUN)
    parser.add_argument("--ampc", default=AMPC)
    parser.add_argument("--workers", nargs="+", type=int, default=WORKERS)
    parser.add_argument("--hosts", nargs="+", type=int, default=HOSTS)
    parser.add_argument("--link-latency-us", type=float, default=50.0)
    parser.add_argument("--link-bandwidth-mbps", type=float, default=10000.0)
    parser.add_argument("--runs", type=int, default=3, help="measured points: the median of this many runs")
    parser.add_argument("--repeat", type=int, default=1,
                        help="read each data set this many times over (on many workers one pass is too short "
                             "for a steady rate)")
    parser.add_argument("--measure", action="store_true",
                        help="measure every worker count up to this machine's cores, over 1 to 4 processes "
                             "(without it: 1 and 2 workers in one process)")
    parser.add_argument("--no-measure", action="store_true", help="predictions only (still one profiled run)")
    parser.add_argument("--profiles", metavar="DIR",
                        help="keep the profiles here, and reuse those already here (predictions for "
                             "another link from the same profiles)")
    parser.add_argument("--without-profile", action="store_true",
                        help="plan from the cost model alone, as `amprun train --workers N` does by default")
    parser.add_argument("--json", help="also write every prediction and measurement here")
    parser.add_argument("--in-flight", type=int, metavar="M",
                        help="M instances in flight and an update every M (default: 16 in flight, an update every 8)")
    opts = parser.parse_args()
    opts.common = in_flight(COMMON, opts.in_flight) if opts.in_flight else COMMON
    opts.amprun, opts.ampc = os.path.abspath(opts.amprun), os.path.abspath(opts.ampc)
    if opts.profiles:
        opts.profiles = os.path.abspath(opts.profiles)
        os.makedirs(opts.profiles, exist_ok=True)
    for tool in (opts.amprun, opts.ampc):
        if not os.path.exists(tool):
            sys.exit(f"{tool} is missing: cargo build --release -p amprun -p ampc")
    cores = os.cpu_count() or 1
    if opts.no_measure:
        measured_points = set()
    elif opts.measure:
        measured_points = {(w, h) for w in opts.workers for h in opts.hosts
                           if w <= cores and h <= min(w, MAX_PROCESSES)}
    else:
        measured_points = {(w, 1) for w in opts.workers if w <= 2}
    source = "the cost model alone" if opts.without_profile else "a profile taken here"
    print(f"PREDICTED training instances/s (amp-plan with {source}, link "
          f"{opts.link_latency_us:g} us one way, {opts.link_bandwidth_mbps:g} Mb/s); "
          f"in brackets MEASURED here ({cores} cores; hosts > 1 measured as processes over loopback)")
    print("| model | hosts | " + " | ".join(f"{w} worker{'s' if w > 1 else ''}" for w in opts.workers) + " |")
    print("|---|---|" + "---|" * len(opts.workers))
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for model in opts.models:
            args, limit = CASES[model]
            args = [a.replace("{tmp}", tmp) for a in args]
            name = f"{model}.m{opts.in_flight}" if opts.in_flight else model
            profile = os.path.join(opts.profiles or tmp, f"{name}.profile.json")
            if opts.without_profile:
                profile = None
            elif not os.path.exists(profile):
                train(opts, args, limit, tmp, ["--workers", "1", "--profile", profile])
            for hosts in opts.hosts:
                cells = []
                for workers in opts.workers:
                    if hosts > workers:
                        cells.append("–")
                        continue
                    rate, plan = predict(opts, model, args, profile, workers, hosts)
                    copies = plan.get("copies", 1)
                    used = copies * len({n["worker"] for n in plan["nodes"]})
                    cell = f"{rate:,.0f}"
                    if used < workers:
                        cell += f" ({used} used)" if used > 1 else " (1 used)"
                    if copies > 1:
                        cell += f" [{copies} copies]"
                    point = {"model": model, "workers": workers, "hosts": hosts, "predicted": rate,
                             "workers_used": used, "copies": copies}
                    if (workers, hosts) in measured_points:
                        got = measure(opts, args, limit, tmp, workers, hosts)
                        point["measured"] = got
                        cell += f" [{got:,.0f}]"
                    results.append(point)
                    cells.append(cell)
                print(f"| {model} | {hosts} | " + " | ".join(cells) + " |", flush=True)
    if opts.json:
        with open(opts.json, "w") as f:
            json.dump({"link_latency_us": opts.link_latency_us, "link_bandwidth_mbps": opts.link_bandwidth_mbps,
                       "cores": cores, "points": results}, f, indent=1)


if __name__ == "__main__":
    main()
