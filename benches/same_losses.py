#!/usr/bin/env python3
"""Deterministic training losses of the five canonical models with one `amprun` binary, to
compare two builds digit for digit (a refactoring must not change them): synchronous
training with 8 instances in flight, and asynchronous training on one worker (reproducible
bit for bit too), 2 epochs of the first 300 instances of each `end_to_end.py` case.

    cp target/release/amprun /tmp/amprun.before   # then change and rebuild, and:
    python3 benches/same_losses.py /tmp/amprun.before > before.txt
    python3 benches/same_losses.py target/release/amprun > after.txt
    diff before.txt after.txt
"""
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import end_to_end  # noqa: E402  (the cases: model, data, limits)

MODES = (["--max-active-keys", "8", "--min-update-frequency", "1"],
         ["--async", "--max-active-keys", "8", "--min-update-frequency", "4"])


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: same_losses.py AMPRUN")
    amprun = os.path.abspath(sys.argv[1])
    with tempfile.TemporaryDirectory() as tmp:
        for model, (args, _) in end_to_end.CASES.items():
            args = [a.replace("{tmp}", tmp) for a in args]
            for mode in MODES:
                metrics = os.path.join(tmp, f"{model}.metrics.jsonl")
                if os.path.exists(metrics):
                    os.remove(metrics)
                cmd = [amprun, "train", *args, "--limit", "300", "--epochs", "2", "--seed", "3", "--workers", "1",
                       "--optimizer", "sgd", "--lr", "0.01", *mode, "--metrics", metrics]
                done = subprocess.run(cmd, cwd=end_to_end.ROOT, capture_output=True, text=True)
                if done.returncode != 0:
                    print(model, " ".join(mode), "FAILED", done.stderr[-500:])
                    continue
                with open(metrics) as f:
                    rows = [json.loads(line) for line in f if line.strip()]
                losses = [(r.get("split"), r.get("loss"), r.get("accuracy")) for r in rows if "loss" in r]
                print(model, " ".join(mode), losses)


if __name__ == "__main__":
    main()
