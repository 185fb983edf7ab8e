#!/usr/bin/env bash
# Stragglers and staleness (issue 30): time to a target validation accuracy for lock-step
# synchronous training, asynchronous training (AMPNet) and asynchronous training with the
# layer-wise staleness bound (DSP: --max-staleness 1 --staleness-schedule layerwise: the
# group nearest the loss 1, each group before it one more; admission holds while a group
# defers), each with no straggler and with the last worker slowed 2x and 4x
# (--slow-worker), and asynchronous training with the heaviest Ppt replicated on every
# worker.
#
# usage: run.sh WORKERS [MODEL ...]     MODEL: list_reduce and/or tree_lstm (default: both)
# Run from anywhere after `cargo build --release -p amprun` (or set AMPRUN to another
# binary); writes one metrics file per run into this folder
# (NAME_w<WORKERS>_<mode>_s<F>.jsonl) and the load average before and after each run
# (load_w<WORKERS>.txt), then the table (RESULTS_w<WORKERS>.md) and the plot
# (stragglers_w<WORKERS>.svg) by summarize.py. Tree-LSTM reads SST from SST (default: the
# cache folder's, after `amprun data get sst`) and keeps its binary files in TMPDIR.
set -euo pipefail
WORKERS=${1:?usage: run.sh WORKERS [MODEL ...]}
shift
MODELS=${*:-list_reduce tree_lstm}
HERE=$(cd "$(dirname "$0")" && pwd)
cd "$HERE/../../.."
AMPRUN=${AMPRUN:-./target/release/amprun}
SST=${SST:-$(dirname "$("$AMPRUN" data path sst:train)")}
TMP=${TMPDIR:-/tmp}
SLOW=$((WORKERS - 1))
LOAD="$HERE/load_w${WORKERS}.txt"
: > "$LOAD"
load() { cut -d' ' -f1-3 /proc/loadavg; }
for model in $MODELS; do
  case $model in
    list_reduce)
      # README's list-reduce setup.
      args=(examples/list_reduce.amp -D hidden=32 --data examples/data/list_reduce.train.jsonl
        --valid examples/data/list_reduce.valid.jsonl --epochs 4 --optimizer adam --lr 0.003)
      heavy=cell ;;
    tree_lstm)
      # The Tree-LSTM with a loss at every node on binary SST (docs/learning.md: neutral
      # sentences dropped, neutral phrases given no loss), every third training tree (2,307;
      # the file's first trees are nearly all positive) and 100-d embeddings, 64-d states,
      # so that twelve runs take minutes, not hours; the whole dev set (872).
      for s in train dev; do
        [ -s "$TMP/sst.$s.binary.txt" ] || python3 docs/experiments/sst/binary.py "$SST/$s.txt" "$TMP/sst.$s.binary.txt"
      done
      awk 'NR % 3 == 1' "$TMP/sst.train.binary.txt" > "$TMP/sst.train.third.txt"
      args=(examples/tree_lstm_sst.amp -D classes=2 -D embed=100 -D hidden=64
        --data "$TMP/sst.train.third.txt" --valid "$TMP/sst.dev.binary.txt"
        --vocab "$TMP/sst.third.vocab" --lowercase --epochs 4 --optimizer adam --lr 0.003)
      heavy=branch ;;
    *) echo "unknown model $model" >&2; exit 2 ;;
  esac
  # --plan naive: contiguous stages on every worker. The planner keeps these small models on
  # one worker (a split costs more in messages than it gains on this machine), and a
  # straggler that holds no node slows nothing. 16 in flight, an update every 16 instances.
  common=(--workers "$WORKERS" --plan naive --max-active-keys 16 --min-update-frequency 16 --seed 0)
  for f in 1 2 4; do
    slow=()
    [ "$f" != 1 ] && slow=(--slow-worker "$SLOW=$f")
    for mode in sync async bounded replicas; do
      case $mode in
        sync) flags=() ;;
        async) flags=(--async) ;;
        bounded) flags=(--async --max-staleness 1 --staleness-schedule layerwise) ;;
        replicas) flags=(--async --replicate "$heavy=$WORKERS") ;;
      esac
      out="$HERE/${model}_w${WORKERS}_${mode}_s${f}.jsonl"
      rm -f "$out"
      echo "$model $mode slowdown $f" >&2
      before=$(load)
      "$AMPRUN" train "${args[@]}" "${common[@]}" "${flags[@]}" "${slow[@]}" --metrics "$out" \
        > "$TMP/stragglers.log" 2>&1 || { cat "$TMP/stragglers.log" >&2; exit 1; }
      echo "$model $mode $f $before $(load)" >> "$LOAD"
    done
  done
  # The model's runs on shared axes: accuracy per epoch and over time, staleness.
  "$AMPRUN" report "$HERE/${model}_w${WORKERS}_"*.jsonl -o "$TMP/stragglers_${model}_w${WORKERS}.html"
done
# Where replicas route: list-reduce's `cell` on every worker, one epoch of 4,000 instances,
# asynchronous, the last worker slowed 1x and 4x, traced; the forward messages each copy
# served (copies_w<WORKERS>.txt).
COPIES="$HERE/copies_w${WORKERS}.txt"
: > "$COPIES"
for f in 1 4; do
  slow=()
  [ "$f" != 1 ] && slow=(--slow-worker "$SLOW=$f")
  "$AMPRUN" train examples/list_reduce.amp -D hidden=32 --data examples/data/list_reduce.train.jsonl --limit 4000 \
    --epochs 1 --optimizer adam --lr 0.003 --workers "$WORKERS" --plan naive --max-active-keys 16 \
    --min-update-frequency 16 --seed 0 --async --replicate "cell=$WORKERS" "${slow[@]}" \
    --trace "$TMP/stragglers.trace.json" > "$TMP/stragglers.log" 2>&1 || { cat "$TMP/stragglers.log" >&2; exit 1; }
  echo "slowdown $f: $(python3 "$HERE/copies.py" "$TMP/stragglers.trace.json" cell)" >> "$COPIES"
done
# shellcheck disable=SC2086
python3 "$HERE/summarize.py" "$WORKERS" $MODELS
