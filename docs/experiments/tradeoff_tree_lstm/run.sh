#!/bin/sh
# The instances-in-flight x update-frequency grid on Tree-LSTM (SST fine-grained, root label):
# --max-active-keys {1,4,16} x --min-update-frequency {1,4,16}, 1 worker, --async, Adam lr 0.002,
# 3 epochs over the full 8,544 training trees, validated on the full 1,101-tree dev set.
# Run from anywhere after `cargo build --release -p amprun` (or set AMPRUN to another binary);
# needs SST in the cache folder (`amprun data get sst`); writes the metrics files here.
# No --limit: the SST files are grouped by label, so their first N trees are not a fair sample.
cd "$(dirname "$0")/../../.." || exit 1
AMPRUN=${AMPRUN:-./target/release/amprun}
VOCAB=${TMPDIR:-/tmp}/sst.vocab   # built from the training data on the first run when missing
for k in 1 4 16; do for m in 1 4 16; do
  "$AMPRUN" train examples/tree_lstm.amp --data sst:train \
    --valid sst:dev --vocab "$VOCAB" --epochs 3 --optimizer adam --lr 0.002 \
    --max-active-keys $k --min-update-frequency $m --async \
    --metrics docs/experiments/tradeoff_tree_lstm/k${k}_m${m}.jsonl > "${TMPDIR:-/tmp}/tradeoff_tree_lstm_k${k}_m${m}.log" 2>&1
done; done
# The runs on shared axes: validation accuracy per epoch and over time, throughput.
"$AMPRUN" report docs/experiments/tradeoff_tree_lstm/k*_m*.jsonl -o "${TMPDIR:-/tmp}/tradeoff_tree_lstm_report.html"
