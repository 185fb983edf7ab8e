#!/bin/sh
# The instances-in-flight x update-frequency grid of docs/PERFORMANCE.md, on list-reduce.
# Run from anywhere after `cargo build --release -p amprun`; writes the metrics files here.
cd "$(dirname "$0")/../../.." || exit 1
for k in 1 4 16; do for m in 1 4 16; do
  ./target/release/amprun train examples/list_reduce.amp --data examples/data/list_reduce.train.jsonl \
    --valid examples/data/list_reduce.valid.jsonl --epochs 8 --optimizer adam --lr 0.001 --clip-norm 1.0 \
    --max-active-keys $k --min-update-frequency $m --async \
    --metrics docs/experiments/tradeoff/k${k}_m${m}.jsonl > "${TMPDIR:-/tmp}/tradeoff_k${k}_m${m}.log" 2>&1
done; done
# The nine runs on shared axes: validation accuracy per epoch and over time, throughput.
"${AMPRUN:-./target/release/amprun}" report docs/experiments/tradeoff/k*_m*.jsonl -o "${TMPDIR:-/tmp}/tradeoff_report.html"
