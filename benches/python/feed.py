"""What feeding Python dicts costs against giving the same instances as a file: list-reduce
with 8 in flight and an update every 8, one worker, the same epochs both ways, runs
alternating (these machines are noisy); prints the medians and the ratio. The dicts' cost
is their conversion to JSON Lines (Python's json module), measured alone too.

    python3 -m venv /tmp/ampenv && /tmp/ampenv/bin/pip install ./python   # a release build
    /tmp/ampenv/bin/python benches/python/feed.py [--instances N] [--epochs E] [--runs R]
"""

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

import amp

ROOT = Path(__file__).resolve().parents[2]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--instances", type=int, default=20000)
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--hidden", type=int, default=128)
    args = parser.parse_args()

    with open(ROOT / "examples" / "data" / "list_reduce.train.jsonl") as lines:
        rows = [json.loads(line) for line, _ in zip(lines, range(args.instances))]
    folder = Path(tempfile.mkdtemp())
    path = folder / "train.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    options = dict(epochs=args.epochs, workers=1, max_active_keys=8, min_update_frequency=8, seed=0)

    def timed(data) -> float:
        model = amp.compile(ROOT / "examples" / "list_reduce.amp", hidden=args.hidden)
        start = time.perf_counter()
        model.train(data, **options)
        return time.perf_counter() - start

    timed(path)  # warm the caches once
    files, dicts, converts = [], [], []
    for _ in range(args.runs):
        files.append(timed(path))
        dicts.append(timed(rows))
        start = time.perf_counter()
        amp._jsonl(rows, "data")
        converts.append(time.perf_counter() - start)
    file_s, dict_s, convert_s = (statistics.median(x) for x in (files, dicts, converts))
    n = len(rows)
    print(f"list-reduce, hidden {args.hidden}, {n} instances x {args.epochs} epoch(s), 8 in flight, 1 worker, "
          f"medians of {args.runs}")
    print(f"  from the file   {file_s:8.3f} s  ({n * args.epochs / file_s:9.0f} instances/s)")
    print(f"  from dicts      {dict_s:8.3f} s  ({n * args.epochs / dict_s:9.0f} instances/s)")
    print(f"  dicts to JSON   {convert_s:8.3f} s  ({1e6 * convert_s / n:.2f} us per instance)")
    print(f"  dicts / file    {dict_s / file_s:8.3f}x;  the conversion is {100 * convert_s / dict_s:.1f}% "
          f"of the run from dicts")


if __name__ == "__main__":
    main()
