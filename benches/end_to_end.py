#!/usr/bin/env python3
"""End-to-end training throughput of the five canonical models through `amprun`, two
setups side by side in one run: the `instances_per_s` of `--metrics` (training split),
medians of alternating runs (a busy machine slows both alike).

    cargo build --release -p amprun
    python3 benches/end_to_end.py jit        # JIT on vs --no-jit
    python3 benches/end_to_end.py epilogues --models mlp list_reduce moe   # --no-epilogues vs on
    python3 benches/end_to_end.py batching   # --max-batch 64 vs 1
    python3 benches/end_to_end.py unbatched --models moe --runs 6   # nothing batched, --max-batch 1, 64
    python3 benches/end_to_end.py placement  # 1 worker; 2 workers: plan, contiguous, round-robin
    python3 benches/end_to_end.py refined    # 2 workers: the model's plan vs one refined by a profile
    python3 benches/end_to_end.py copies --in-flight 25 --epochs 3  # 1 worker; 2: stages, copies, the plan's layout
    python3 benches/end_to_end.py copies --defaults --epochs 2   # the same with amprun's own training setup
    python3 benches/end_to_end.py placement --workers 16   # on a 16-core machine: 1 vs 16 workers
    python3 benches/end_to_end.py replicas --models ggsnn tree_lstm mlp   # the plan with and without replicas
    python3 benches/end_to_end.py placement --cpus 0,1   # on a bigger machine: amprun on two of its cores
    python3 benches/end_to_end.py jit --runs 5 --models tree_lstm ggsnn
    python3 benches/end_to_end.py maps --models ggsnn    # --per-element-maps vs batched maps
    python3 benches/end_to_end.py build-maps --baseline /tmp/amprun.before --models ggsnn   # and a build before
    cp target/release/amprun /tmp/amprun.before   # then change and rebuild, and:
    python3 benches/end_to_end.py build --baseline /tmp/amprun.before
    python3 benches/end_to_end.py build --baseline /tmp/amprun.before --extra=--workers=2
    python3 benches/end_to_end.py build --baseline /tmp/amprun.before --cpu --repeat 4   # CPU time, data 4x

Data: the shipped list-reduce and MoE files, the digits and molecules of `data/` and SST
from the cache folder (`amprun data get sst` first), named as amprun knows them (first N
instances each, see CASES). One worker (but in `placement`), 16 instances
in flight, asynchronous updates every 8 instances, one epoch. Ratios are against the first
setup of the line.

`unbatched` compares a run that batches nothing (`--max-batch 1 --no-deferred-grads`: each
message alone, each weight-gradient product added at once) with `--max-batch 1` (the
weight-gradient products still kept and added together) and batching (64), in the
setting of the MoE comparison of docs/PERFORMANCE.md ("Dynamic batching"): 256 instances
in flight, an update every 64, and the data ten times over (20,000 MoE instances: an epoch
long enough for a steady rate).

`--cpu` rates each run by the CPU time (user + system) of the whole `amprun` command,
compiling and loading included, instead of `--metrics`' wall-clock rate: on a machine
other processes load, wall time swings with their turns on the cores. `--repeat N`
reads the data N times over, for epochs long enough that starting up weighs little.

`replicas` runs, beside one worker and the plan, the plan with each model's heaviest
products replicated (`--replicate`, `REPLICAS`: one copy more on the next worker) and with
the replicas the plan proposes (`--plan-replicas`; none where it proposes none).

`--cpus LIST` runs every `amprun` under `taskset -c LIST`: two cores of a larger, quiet
machine stand in for this project's shared 2-core one.

`refined` first profiles each model on one worker (`--profile`), then compares, at two
workers, the plan of the cost model alone with the plan that profile refines
(`--plan-profile`).
"""

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
AMPRUN = os.path.join(ROOT, "target", "release", "amprun")

# model: (amprun arguments after `train`, instances)
CASES = {
    "mlp": (["examples/mlp.amp", "--data", "digits", "--scale", "0.0625"], 1797),
    "list_reduce": (["examples/list_reduce.amp", "--data", "examples/data/list_reduce.train.jsonl"], 8000),
    "tree_lstm": (["examples/tree_lstm.amp", "--data", "sst:train", "--vocab", "{tmp}/sst.vocab"], 1500),
    "ggsnn": (
        ["examples/ggsnn.amp", "-D", "classes=3", "-D", "edge_kinds=3", "--data", "molecules:train"],
        2000,
    ),
    "moe": (["examples/moe.amp", "--data", "examples/data/moe.train.jsonl"], 2000),
}

# The heaviest products of each model (the plan tables' largest linear loads), for the
# `replicas` setup.
REPLICAS = {
    "mlp": ["l1=2", "l2=2"],
    "list_reduce": ["cell=2"],
    "tree_lstm": ["branch=2"],
    "ggsnn": ["gru.ih=2", "gru.hh=2"],
    "moe": [],
}

COMMON = ["--epochs", "1", "--max-active-keys", "16", "--async", "--min-update-frequency", "8",
          "--optimizer", "sgd", "--lr", "0.01"]

# The `unbatched` setups' settings, and how many times over they read the data.
UNBATCHED_COMMON = ["--epochs", "1", "--max-active-keys", "256", "--async", "--min-update-frequency", "64",
                    "--optimizer", "sgd", "--lr", "0.01"]
UNBATCHED_REPEAT = 10

SETUPS = {
    "jit": (("--no-jit", ["--no-jit"]), ("jit", [])),
    "epilogues": (("--no-epilogues", ["--no-epilogues"]), ("epilogues", [])),
    "batching": (("max-batch 1", ["--max-batch", "1"]), ("max-batch 64", ["--max-batch", "64"])),
    "unbatched": (
        ("nothing batched", ["--max-batch", "1", "--no-deferred-grads"]),
        ("max-batch 1", ["--max-batch", "1"]),
        ("max-batch 64", ["--max-batch", "64"]),
    ),
    "build": (("baseline", []), ("this build", [])),
    "maps": (("per-element maps", ["--per-element-maps"]), ("batched maps", [])),
    "build-maps": (("baseline", []), ("per-element maps", ["--per-element-maps"]), ("batched maps", [])),
    "placement": (
        ("1 worker", ["--workers", "1"]),
        ("{w} w plan", ["--workers", "{w}", "--plan", "auto"]),
        ("{w} w naive", ["--workers", "{w}", "--plan", "naive"]),
        ("{w} w rr", ["--workers", "{w}", "--plan", "round-robin"]),
    ),
    "replicas": (
        ("1 worker", ["--workers", "1"]),
        ("{w} w plan", ["--workers", "{w}"]),
        ("{w} w replicated", ["--workers", "{w}", "{replicas}"]),
        ("{w} w --plan-replicas", ["--workers", "{w}", "--plan-replicas"]),
    ),
    "copies": (
        ("1 worker", ["--workers", "1"]),
        ("{w} w stages", ["--workers", "{w}", "--copies", "1"]),
        ("{w} w copies", ["--workers", "{w}", "--copies", "{w}"]),
        ("{w} w plan", ["--workers", "{w}"]),
    ),
    "refined": (
        ("{w} w model plan", ["--workers", "{w}"]),
        ("{w} w refined", ["--workers", "{w}", "--plan-profile", "{tmp}/profile.json"]),
    ),
}


def with_values(args, values):
    """`args` with the value after each flag named in `values` replaced by its value there."""
    return [str(values[prev]) if prev in values else a for prev, a in zip([None, *args], args)]


def in_flight(args, m):
    """`args` with m instances in flight and an update every m."""
    return with_values(args, {"--max-active-keys": m, "--min-update-frequency": m})


def repeated(args, tmp, times):
    """`args` with its `--data` file replaced by one holding it `times` over (in `tmp`)."""
    args = list(args)
    at = args.index("--data") + 1
    source = os.path.join(ROOT, args[at])
    copy = os.path.join(tmp, f"{times}x-" + os.path.basename(source))
    if not os.path.exists(copy):
        with open(source, "rb") as f:
            text = f.read()
        if not text.endswith(b"\n"):
            text += b"\n"
        with open(copy, "wb") as f:
            f.write(text * times)
    args[at] = copy
    return args


def cpu_seconds():
    """CPU time (user + system) of the children waited for so far."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def with_replicas(model, args):
    """`args` with `{replicas}` replaced by the model's `--replicate` flags."""
    out = []
    for a in args:
        if a == "{replicas}":
            out += [x for r in REPLICAS[model] for x in ("--replicate", r)]
        else:
            out.append(a)
    return out


def throughput(model, extra, tmp, amprun=AMPRUN, common=COMMON, repeat=1, cpu=False, cpus=None):
    args, limit = CASES[model]
    args = [a.replace("{tmp}", tmp) for a in args]
    if repeat > 1:
        args, limit = repeated(args, tmp, repeat), limit * repeat
    metrics = os.path.join(tmp, f"{model}.metrics.jsonl")
    if os.path.exists(metrics):
        os.remove(metrics)
    extra = with_replicas(model, extra)
    # One worker unless the setup says (amprun's default is every core).
    given = any(a == "--workers" or a.startswith("--workers=") for a in extra)
    workers = [] if given else ["--workers", "1"]
    cmd = [amprun, "train", *args, "--limit", str(limit), *common, *workers, *extra, "--metrics", metrics]
    if cpus:
        cmd = ["taskset", "-c", cpus, *cmd]
    before = cpu_seconds()
    done = subprocess.run(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if done.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed ({done.returncode}):\n{done.stderr}")
    spent = cpu_seconds() - before
    with open(metrics) as f:
        rows = [json.loads(line) for line in f if line.strip()]
    train = [r for r in rows if r.get("split") == "train"][-1]
    if cpu:
        # Instances per CPU second of the whole command (compiling and loading included):
        # on a machine other processes share, what the run spent rather than how long it
        # waited for the cores.
        return train["instances"] / spent if "instances" in train and spent > 0 else limit / spent
    return train["instances_per_s"]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("setup", choices=sorted(SETUPS))
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--models", nargs="+", default=list(CASES), choices=list(CASES))
    parser.add_argument("--baseline", help="build: the amprun binary to compare this build's with")
    parser.add_argument("--extra", action="append", default=[], help="an argument added to every run")
    parser.add_argument("--cpu", action="store_true",
                        help="instances per CPU second of the whole amprun command instead of --metrics' rate")
    parser.add_argument("--repeat", type=int, default=None, help="read the data this many times over")
    parser.add_argument("--workers", type=int, default=2,
                        help="placement, replicas, refined: the workers of the plans compared")
    parser.add_argument("--cpus", help="run amprun under `taskset -c CPUS` (e.g. 0,1)")
    parser.add_argument("--in-flight", type=int, default=None,
                        help="m: instances in flight and the update size (default: 16 in flight, an update every 8)")
    parser.add_argument("--defaults", action="store_true",
                        help="amprun's own training setup (synchronous, 16 in flight, an update every 16) "
                             "instead of --async with an update every 8")
    parser.add_argument("--epochs", type=int, default=1,
                        help="epochs per run; the rate is the last epoch's (a longer run for small data sets)")
    opts = parser.parse_args()
    if opts.setup.startswith("build") != (opts.baseline is not None):
        sys.exit("--baseline BINARY goes with the build setup, and only with it")
    baseline = os.path.abspath(opts.baseline) if opts.baseline else AMPRUN
    if not os.path.exists(AMPRUN):
        sys.exit("build first: cargo build --release -p amprun")
    workers = str(opts.workers)
    setups = [(name.replace("{w}", workers), [a.replace("{w}", workers) for a in extra])
              for name, extra in SETUPS[opts.setup]]
    common, repeat = (UNBATCHED_COMMON, UNBATCHED_REPEAT) if opts.setup == "unbatched" else (COMMON, 1)
    repeat = opts.repeat or repeat
    if opts.defaults:
        if opts.in_flight:
            sys.exit("--defaults runs amprun's own 16 in flight: it cannot go with --in-flight")
        common = common[:2]
    if opts.in_flight:
        common = in_flight(common, opts.in_flight)
    common = with_values(common, {"--epochs": opts.epochs})
    names = [name for name, _ in setups]
    unit = "training instances per CPU second (whole command)" if opts.cpu else "training instances/s"
    print(f"{unit}, medians of {opts.runs} alternating runs: {' vs '.join(names)}")
    widths = [max(12, len(n)) for n in names]
    print(f"{'model':<12} " + " ".join(f"{n:>{w}}" for n, w in zip(names, widths)) + " "
          + " ".join(f"{'ratio':>7}" for _ in names[1:]))
    with tempfile.TemporaryDirectory() as tmp:
        for model in opts.models:
            if opts.setup == "refined":
                profile = os.path.join(tmp, "profile.json")
                throughput(model, ["--workers", "1", "--profile", profile, *opts.extra], tmp, common=common,
                           cpus=opts.cpus)
            runs = [[] for _ in setups]
            for _ in range(opts.runs):
                for i, (_, extra) in enumerate(setups):
                    args = [a.replace("{tmp}", tmp) for a in [*extra, *opts.extra]]
                    amprun = baseline if i == 0 else AMPRUN
                    runs[i].append(throughput(model, args, tmp, amprun, common, repeat, opts.cpu, opts.cpus))
            medians = [statistics.median(r) for r in runs]
            cells = " ".join(f"{m:>{w}.0f}" for m, w in zip(medians, widths))
            ratios = " ".join(f"{m / medians[0]:>6.2f}x" for m in medians[1:])
            print(f"{model:<12} {cells} {ratios}", flush=True)


if __name__ == "__main__":
    main()
