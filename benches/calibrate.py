#!/usr/bin/env python3
"""The cost model's defaults beside measured profiles: for each canonical model, a
profiled training run through `amprun` (one worker, the settings of `end_to_end.py`) and
the planner's `calibrate` example, which prints, by kind of op, the modelled and the
measured µs per instance and the routing time the profile leaves over per event.

    cargo build --release -p amprun -p ampc -p amp-plan --example calibrate
    python3 benches/calibrate.py [--models tree_lstm moe]

Use it to re-derive `amp_plan::Assumptions`' defaults after the executor changed.
"""

import argparse
import os
import subprocess
import sys
import tempfile

from end_to_end import AMPRUN, CASES, COMMON, ROOT

AMPC = os.path.join(ROOT, "target", "release", "ampc")
CALIBRATE = os.path.join(ROOT, "target", "release", "examples", "calibrate")


def flag(args, name, default):
    return args[args.index(name) + 1] if name in args else default


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", nargs="+", default=list(CASES), choices=list(CASES))
    opts = parser.parse_args()
    for tool in (AMPRUN, AMPC, CALIBRATE):
        if not os.path.exists(tool):
            sys.exit("build first: cargo build --release -p amprun -p ampc -p amp-plan --example calibrate")
    with tempfile.TemporaryDirectory() as tmp:
        for model in opts.models:
            args, limit = CASES[model]
            args = [a.replace("{tmp}", tmp) for a in args]
            defines = [x for i, a in enumerate(args) if a == "-D" for x in ("-D", args[i + 1])]
            graph = os.path.join(tmp, f"{model}.ampg")
            profile = os.path.join(tmp, f"{model}.profile.json")
            subprocess.run([AMPC, "compile", args[0], "-o", graph, *defines], cwd=ROOT, check=True)
            train = [AMPRUN, "train", *args, "--limit", str(limit), *COMMON, "--workers", "1", "--profile", profile]
            subprocess.run(train, cwd=ROOT, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            every, optimizer = flag(COMMON, "--min-update-frequency", "1"), flag(COMMON, "--optimizer", "sgd")
            subprocess.run([CALIBRATE, graph, profile, every, optimizer], cwd=ROOT, check=True)
            print(flush=True)


if __name__ == "__main__":
    main()
