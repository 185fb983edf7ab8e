"""From data made in memory to a learning curve: AMPNet's list reduction, generated with
numpy, trained with the `amp` package, one point per epoch (docs/python.md).

    pip install ./python            # once, into a virtual environment
    python examples/python/learning_curve.py [--epochs N] [--out curve.png]

With matplotlib installed, the curve is drawn into --out; without it, it is printed.
"""

import argparse
from pathlib import Path

import numpy as np

import amp

# tokens[0] names the operation, the rest are digits; the label is the result mod 10
# (the same task as examples/data/list_reduce.*.jsonl).
SUM, MAX, MIN, FIRST_MINUS_LAST = 10, 11, 12, 13


def make(count: int, rng: np.random.Generator) -> list:
    instances = []
    for _ in range(count):
        op = int(rng.integers(SUM, FIRST_MINUS_LAST + 1))
        digits = rng.integers(0, 10, size=int(rng.integers(1, 8)))
        result = {SUM: digits.sum(), MAX: digits.max(), MIN: digits.min(),
                  FIRST_MINUS_LAST: digits[0] - digits[-1]}[op]
        instances.append({"tokens": [op, *digits], "label": int(result) % 10})
    return instances


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--epochs", type=int, default=8)
    parser.add_argument("--train", type=int, default=4000, help="training instances")
    parser.add_argument("--out", type=Path, default=Path("learning_curve.png"))
    args = parser.parse_args()

    rng = np.random.default_rng(0)
    train, valid = make(args.train, rng), make(500, rng)
    model = amp.compile(Path(__file__).resolve().parents[1] / "list_reduce.amp", hidden=64)
    curve = {"train": [], "valid": []}
    model.train(train, valid=valid, epochs=args.epochs, optimizer="adam", lr=0.003, min_update_frequency=8,
                callback=lambda report: curve[report["split"]].append(report["accuracy"]))

    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed: the curve, epoch by epoch (train, valid accuracy)")
        for epoch, (t, v) in enumerate(zip(curve["train"], curve["valid"]), start=1):
            print(f"  {epoch:3}  {t:.3f}  {v:.3f}")
        return
    epochs = range(1, len(curve["train"]) + 1)
    plt.plot(epochs, curve["train"], label="train")
    plt.plot(epochs, curve["valid"], "--", label="valid")
    plt.xlabel("epoch")
    plt.ylabel("accuracy")
    plt.title("list reduction, trained with amp from Python")
    plt.legend()
    plt.savefig(args.out, dpi=120)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
