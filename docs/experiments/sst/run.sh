#!/usr/bin/env bash
# Reproduces the SST runs of docs/learning.md: the Tree-LSTM with a loss at every node
# (examples/tree_lstm_sst.amp), random 300-d embeddings, no dropout. Fine-grained (5
# classes) over four seeds and binary (neutral sentences dropped) over three, each trained
# with early stopping on dev accuracy and its best checkpoint evaluated once on test; then
# the fine-grained runs of seeds 0 and 1 and the binary run of seed 0 again with dropout
# 0.5 on the classifier's input (`-D drop=50`, as Tai et al.).
#
# usage: docs/experiments/sst/run.sh [OUT]   (from the repository root; OUT defaults to
#        sst-runs; AMPRUN names the binary, default `amprun`; SST the data folder, default
#        the cache folder's, where `amprun data get sst` put the verified release)
set -euo pipefail
AMPRUN=${AMPRUN:-amprun}
SST=${SST:-$(dirname "$("$AMPRUN" data path sst:train)")}
OUT=${1:-sst-runs}
HERE=$(dirname "$0")
MODEL=examples/tree_lstm_sst.amp
mkdir -p "$OUT"

# Adam 0.002 with L2 1e-4, minibatch 25 (Tai et al.: Adagrad 0.05, L2 1e-4, batch 25),
# lowercased words.
OPT="--lowercase --optimizer adam --lr 0.002 --weight-decay 1e-4 --min-update-frequency 25 --epochs 15"

# Fine-grained: 5 classes, every node's label; the 8,000 most frequent lowercased training
# words (about those seen twice), the rest <unk>.
for seed in 0 1 2 3; do
    "$AMPRUN" train $MODEL -D vocab=8000 --data "$SST/train.txt" --valid "$SST/dev.txt" \
        --vocab "$OUT/fine.vocab" $OPT --patience 4 --seed $seed \
        --keep-best "$OUT/fine.seed$seed.best.safetensors" \
        --metrics "$OUT/fine.seed$seed.metrics.jsonl" 2>&1 | tee "$OUT/fine.seed$seed.train.log"
    "$AMPRUN" eval $MODEL -D vocab=8000 --params "$OUT/fine.seed$seed.best.safetensors" \
        --vocab "$OUT/fine.vocab" --lowercase --data "$SST/test.txt" 2>&1 | tee "$OUT/fine.seed$seed.test.log"
done

# Binary: sentences with a neutral root dropped, node labels 0-1 -> 0, 3-4 -> 1, neutral
# phrases kept as 2 and given no loss by the model (`-D classes=2`); 5,000 words.
for s in train dev test; do python3 "$HERE/binary.py" "$SST/$s.txt" "$OUT/$s.binary.txt"; done
for seed in 0 1 2; do
    "$AMPRUN" train $MODEL -D classes=2 --data "$OUT/train.binary.txt" --valid "$OUT/dev.binary.txt" \
        --vocab "$OUT/binary.vocab" $OPT --patience 5 --seed $seed \
        --keep-best "$OUT/binary.seed$seed.best.safetensors" \
        --metrics "$OUT/binary.seed$seed.metrics.jsonl" 2>&1 | tee "$OUT/binary.seed$seed.train.log"
    "$AMPRUN" eval $MODEL -D classes=2 --params "$OUT/binary.seed$seed.best.safetensors" \
        --vocab "$OUT/binary.vocab" --lowercase --data "$OUT/test.binary.txt" 2>&1 | tee "$OUT/binary.seed$seed.test.log"
done

# With dropout: the same commands with `-D drop=50`.
for seed in 0 1; do
    "$AMPRUN" train $MODEL -D vocab=8000 -D drop=50 --data "$SST/train.txt" --valid "$SST/dev.txt" \
        --vocab "$OUT/fine.vocab" $OPT --patience 4 --seed $seed \
        --keep-best "$OUT/fine.drop50.seed$seed.best.safetensors" \
        --metrics "$OUT/fine.drop50.seed$seed.metrics.jsonl" 2>&1 | tee "$OUT/fine.drop50.seed$seed.train.log"
    "$AMPRUN" eval $MODEL -D vocab=8000 -D drop=50 --params "$OUT/fine.drop50.seed$seed.best.safetensors" \
        --vocab "$OUT/fine.vocab" --lowercase --data "$SST/test.txt" 2>&1 | tee "$OUT/fine.drop50.seed$seed.test.log"
done
"$AMPRUN" train $MODEL -D classes=2 -D drop=50 --data "$OUT/train.binary.txt" --valid "$OUT/dev.binary.txt" \
    --vocab "$OUT/binary.vocab" $OPT --patience 5 --seed 0 \
    --keep-best "$OUT/binary.drop50.seed0.best.safetensors" \
    --metrics "$OUT/binary.drop50.seed0.metrics.jsonl" 2>&1 | tee "$OUT/binary.drop50.seed0.train.log"
"$AMPRUN" eval $MODEL -D classes=2 -D drop=50 --params "$OUT/binary.drop50.seed0.best.safetensors" \
    --vocab "$OUT/binary.vocab" --lowercase --data "$OUT/test.binary.txt" 2>&1 | tee "$OUT/binary.drop50.seed0.test.log"

python3 docs/experiments/plot.py "$OUT/sst_accuracy.svg" accuracy valid \
    "fine seed 0=$OUT/fine.seed0.metrics.jsonl" "fine seed 1=$OUT/fine.seed1.metrics.jsonl" \
    "fine seed 2=$OUT/fine.seed2.metrics.jsonl" "fine seed 3=$OUT/fine.seed3.metrics.jsonl" \
    "binary seed 0=$OUT/binary.seed0.metrics.jsonl" \
    "fine dropout seed 0=$OUT/fine.drop50.seed0.metrics.jsonl" "fine dropout seed 1=$OUT/fine.drop50.seed1.metrics.jsonl" \
    "binary dropout seed 0=$OUT/binary.drop50.seed0.metrics.jsonl"
# Every run on shared axes, to look at: loss, accuracy per epoch and over time, staleness.
"$AMPRUN" report "$OUT"/*.metrics.jsonl -o "$OUT/report.html"
grep -h accuracy "$OUT"/fine.seed*.test.log "$OUT"/binary.seed*.test.log "$OUT"/*.drop50.*.test.log
