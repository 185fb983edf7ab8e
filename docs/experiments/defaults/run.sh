#!/bin/bash
# amprun's training defaults against `--deterministic` (the defaults before: one instance
# in flight, an update after each, SGD at 0.01) on the five canonical models.
#
#   cargo build --release -p amprun
#   docs/experiments/defaults/run.sh speed      # training instances/s, alternating, 3 runs
#   docs/experiments/defaults/run.sh learn      # held-out accuracy per epoch
#
# From the repository root, after `amprun data get sst`; AMPRUN names the binary (default
# target/release/amprun), MODELS some of the five (default all: mlp
# list_reduce tree_lstm ggsnn moe); writes into ${OUT:-/tmp/amp-defaults}.
set -e
AMPRUN=${AMPRUN:-target/release/amprun}
OUT=${OUT:-/tmp/amp-defaults}
RUNS=${RUNS:-3}
MODELS=${MODELS:-mlp list_reduce tree_lstm ggsnn moe}
mkdir -p "$OUT"

# name, then amprun's arguments after `train` (the end_to_end.py cases; --valid for learn)
cases() {
  echo "mlp examples/mlp.amp --data digits --scale 0.0625"
  echo "list_reduce examples/list_reduce.amp --data examples/data/list_reduce.train.jsonl --valid examples/data/list_reduce.valid.jsonl"
  echo "tree_lstm examples/tree_lstm.amp --data sst:train --valid sst:dev --vocab $OUT/sst.vocab"
  echo "ggsnn examples/ggsnn.amp -D classes=3 -D edge_kinds=3 --data molecules:train --valid molecules:test"
  echo "moe examples/moe.amp --data examples/data/moe.train.jsonl --valid examples/data/moe.valid.jsonl"
}

# The cases MODELS names.
chosen() { cases | while read -r name args; do case " $MODELS " in *" $name "*) echo "$name $args";; esac; done; }

rate() { python3 -c "import json,sys; print(round([json.loads(l) for l in open(sys.argv[1])][0]['instances_per_s']))" "$1"; }

case "$1" in
  speed)
    # One epoch of the training data (up to 2,000 instances), no validation.
    chosen | while read -r name args; do
      args=$(echo "$args" | sed 's/ --valid [^ ]*//')
      for r in $(seq "$RUNS"); do
        for setup in defaults deterministic; do
          flag=""; [ "$setup" = deterministic ] && flag="--deterministic"
          rm -f "$OUT/$name.$setup.jsonl"
          # shellcheck disable=SC2086
          "$AMPRUN" train $args --limit 2000 --epochs 1 $flag --metrics "$OUT/$name.$setup.jsonl" > /dev/null 2>&1
          echo "$name $setup run$r $(rate "$OUT/$name.$setup.jsonl")"
        done
      done
    done
    ;;
  learn)
    epochs() { case $1 in mlp) echo 10;; list_reduce) echo 4;; tree_lstm) echo 2;; ggsnn) echo 8;; moe) echo 5;; esac; }
    chosen | while read -r name args; do
      for setup in defaults deterministic; do
        flag=""; [ "$setup" = deterministic ] && flag="--deterministic"
        # shellcheck disable=SC2086
        "$AMPRUN" train $args --epochs "$(epochs "$name")" $flag > "$OUT/$name.$setup.learn.txt" 2>&1
        # MLP has no held-out file here: its training accuracy.
        split=valid; [ "$name" = mlp ] && split=train
        echo "$name $setup ($split): $(grep -E "^epoch [0-9]+/[0-9]+: $split" "$OUT/$name.$setup.learn.txt" \
          | sed -E 's/.*acc ([0-9.]+%).*/\1/' | tr '\n' ' ')"
      done
    done
    ;;
  *)
    echo "usage: $0 speed|learn" >&2
    exit 2
    ;;
esac
