#!/usr/bin/env python3
"""Forward messages each copy of a replicated node served, from an amprun --trace file.

usage: copies.py TRACE NODE
Prints one line: per worker (each copy runs on its own), the forward messages of the
events named NODE (a node's label) it ran, and their share.
"""
import json
import sys


def main():
    if len(sys.argv) != 3:
        print(__doc__)
        sys.exit(2)
    path, node = sys.argv[1], sys.argv[2]
    with open(path) as f:
        events = json.load(f)["traceEvents"]
    served = {}
    for e in events:
        if e.get("ph") == "X" and e.get("cat") == "forward" and node in e.get("name", ""):
            served[e["tid"]] = served.get(e["tid"], 0) + e["args"]["batch"]
    total = sum(served.values()) or 1
    print(", ".join(f"worker {w}: {n} ({100 * n / total:.0f}%)" for w, n in sorted(served.items())))


if __name__ == "__main__":
    main()
