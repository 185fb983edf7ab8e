#!/bin/sh
# Stragglers and staleness (issue 30): time to a target validation accuracy for lock-step
# synchronous training, asynchronous training (AMPNet) and asynchronous training with the
# layer-wise staleness bound (DSP: --max-staleness 0 --staleness-schedule layerwise: the
# head 0, each group before it one more), each
# with no straggler and with the last worker slowed 2x and 4x (--slow-worker), and
# asynchronous training with the heaviest Ppt replicated on every worker.
#
# usage: run.sh WORKERS [MODEL ...]     MODEL: list_reduce (default) and/or tree_lstm
# Run after `cargo build --release -p amprun` (or set AMPRUN to another binary); writes one
# metrics file per run into this folder (NAME_w<WORKERS>_<mode>_s<F>.jsonl), then the
# table (RESULTS_w<WORKERS>.md) and the plot (stragglers_w<WORKERS>.svg) by summarize.py.
# Tree-LSTM expects the SST files in ../shared/data/sst/ beside the repository.
set -e
WORKERS=${1:?usage: run.sh WORKERS [MODEL ...]}
shift
MODELS=${*:-list_reduce}
HERE=$(cd "$(dirname "$0")" && pwd)
cd "$HERE/../../.."
AMPRUN=${AMPRUN:-./target/release/amprun}
SLOW=$((WORKERS - 1))
for model in $MODELS; do
  case $model in
    list_reduce)
      # README's list-reduce setup, 16 in flight, an update every 16 instances.
      args="examples/list_reduce.amp -D hidden=32 --data examples/data/list_reduce.train.jsonl
        --valid examples/data/list_reduce.valid.jsonl --epochs 4 --optimizer adam --lr 0.003"
      heavy=cell ;;
    tree_lstm)
      # docs/experiments/tradeoff_tree_lstm's fastest cell: 16 in flight, updates every 16.
      args="examples/tree_lstm.amp --data ../shared/data/sst/train.txt --valid ../shared/data/sst/dev.txt
        --vocab ${TMPDIR:-/tmp}/sst.vocab --epochs 3 --optimizer adam --lr 0.002"
      heavy=branch ;;
    *) echo "unknown model $model" >&2; exit 2 ;;
  esac
  # --plan naive: contiguous stages on every worker. The planner keeps these small models on
  # one worker (a split costs more in messages than it gains on this machine), and a
  # straggler that holds no node slows nothing.
  common="--workers $WORKERS --plan naive --max-active-keys 16 --min-update-frequency 16 --seed 0"
  for f in 1 2 4; do
    slow=""
    [ "$f" != 1 ] && slow="--slow-worker $SLOW=$f"
    for mode in sync async bounded replicas; do
      case $mode in
        sync) flags="" ;;
        async) flags="--async" ;;
        bounded) flags="--async --max-staleness 0 --staleness-schedule layerwise" ;;
        replicas) flags="--async --replicate $heavy=$WORKERS" ;;
      esac
      out="$HERE/${model}_w${WORKERS}_${mode}_s${f}.jsonl"
      echo "$model $mode slowdown $f" >&2
      # shellcheck disable=SC2086
      "$AMPRUN" train $args $common $flags $slow --metrics "$out" > "${TMPDIR:-/tmp}/stragglers.log" 2>&1 \
        || { cat "${TMPDIR:-/tmp}/stragglers.log" >&2; exit 1; }
    done
  done
done
python3 "$HERE/summarize.py" "$WORKERS" $MODELS
