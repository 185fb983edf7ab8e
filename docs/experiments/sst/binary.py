#!/usr/bin/env python3
"""Writes SST's binary task from the fine-grained PTB trees.

usage: binary.py IN.txt OUT.txt

Sentences whose root is neutral (2) are dropped, as in Tai et al. (2015) and the SST
paper. Every node's label is mapped: 0-1 -> 0 (negative), 3-4 -> 1 (positive), and a
neutral node 2 stays 2: with `-D classes=2` the model takes no loss at a node whose label
is not a class (examples/tree_lstm_sst.amp), so neutral phrases inside a kept sentence
are unlabeled rather than forced to a side.
"""
import re
import sys

MAP = {"0": "0", "1": "0", "2": "2", "3": "1", "4": "1"}


def main():
    src, dst = sys.argv[1:3]
    kept = dropped = 0
    with open(src) as f, open(dst, "w") as out:
        for line in f:
            line = line.strip()
            if not line:
                continue
            root = re.match(r"\((\d)", line).group(1)
            if root == "2":
                dropped += 1
                continue
            out.write(re.sub(r"\((\d)", lambda m: "(" + MAP[m.group(1)], line) + "\n")
            kept += 1
    print(f"{dst}: {kept} sentences kept, {dropped} neutral dropped", file=sys.stderr)


if __name__ == "__main__":
    main()
