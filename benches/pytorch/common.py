"""What the PyTorch baselines share: reading Amp's JSON Lines data, the timed SGD loop, and
the check against Amp (`--check`), which loads an Amp checkpoint and compares the loss and
every gradient on the same instances with `amprun grad`.

Each model script (`list_reduce.py`, `ggsnn.py`, `moe.py`, `mlp.py`, `tree_lstm.py`)
gives a `Spec`: how to build the model (PyTorch's default initialisation, which is Amp's
scheme: Embedding N(0, 1), Linear weight and bias U(+-1/sqrt(fan_in))), how to turn JSON
instances into what its batched forward reads, the minibatch loss (the mean over the
minibatch of Amp's per-instance loss), and the `amprun` arguments of the same model.
"""

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time
import warnings

warnings.filterwarnings("ignore", message="Failed to initialize NumPy")
import torch  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEFAULT_AMPRUN = "/tmp/amprun.main" if os.path.exists("/tmp/amprun.main") else os.path.join(
    ROOT, "target", "release", "amprun")

# Gradients and losses must agree to this, relative to the largest magnitude of Amp's
# tensor (f32 sums in another order: a batched GEMM or index_add against one row at a time).
TOLERANCE = 1e-4


class Spec:
    """One model's baseline: `build(args)` -> nn.Module whose `state_dict` names are Amp's;
    `prepare(json_objects, args)` -> instances; `loss(model, instances)` -> mean loss;
    `amp_args(args)` -> the `amprun` model file and `-D` flags."""

    def __init__(self, name, build, prepare, loss, amp_args, add_args=None, strategy="batched", batcher=None,
                 unused_parameters=False):
        self.name = name
        # Whether a step may leave parameters without a gradient (MoE's unrouted experts),
        # which DDP must be told.
        self.unused_parameters = unused_parameters
        # `batcher(instances, batch, count, rng, args)` -> minibatches, when the strategy
        # chooses which instances share a minibatch (list-reduce's length buckets).
        self.batcher = batcher
        self.build = build
        self.prepare = prepare
        self.loss = loss
        self.amp_args = amp_args
        self.add_args = add_args
        self.strategy = strategy


def read_jsonl(path, limit=None):
    """The objects of a JSON Lines file, blank lines skipped, at most `limit`."""
    out = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.strip():
                out.append(json.loads(line))
                if limit is not None and len(out) >= limit:
                    break
    if not out:
        sys.exit(f"{path}: no instances")
    return out


def parser(spec, doc):
    ap = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", required=True, help="Amp's JSON Lines data (the file amprun trains on)")
    ap.add_argument("--batch", type=int, nargs="+", default=[8, 25, 64], help="minibatch sizes (default 8 25 64)")
    ap.add_argument("--instances", type=int, default=2000,
                    help="instances timed per batch size, cycling through the file (default 2000)")
    ap.add_argument("--warmup", type=int, default=200, help="instances trained before timing (default 200)")
    ap.add_argument("--threads", type=int, default=1, help="torch intra-op threads (default 1)")
    ap.add_argument("--ddp", type=int, default=1,
                    help="DistributedDataParallel on the CPU over this many processes (gloo, loopback), "
                         "1 thread each, each training its share of every minibatch (default 1: no DDP)")
    ap.add_argument("--lr", type=float, default=0.01, help="plain SGD learning rate (default 0.01, as the table's Amp runs)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--check", action="store_true",
                    help="compare loss and gradients with Amp's (`amprun grad`) instead of timing")
    ap.add_argument("--check-instances", type=int, default=16,
                    help="--check: instances of the file in the compared minibatch (default 16)")
    ap.add_argument("--params", help="--check: an Amp checkpoint to load (default: one amprun trains on "
                    "the file's first instances for one epoch and saves)")
    ap.add_argument("--amprun", default=DEFAULT_AMPRUN, help=f"amprun binary for --check (default {DEFAULT_AMPRUN})")
    if spec.add_args:
        spec.add_args(ap)
    return ap


def setup(args):
    torch.set_num_threads(args.threads)
    try:
        torch.set_num_interop_threads(1)
    except RuntimeError:
        pass


def minibatches(instances, batch, count, rng):
    """`count` instances (rounded up to whole minibatches) in minibatches of `batch`,
    through shuffled passes over `instances`."""
    order, out = [], []
    while len(out) * batch < count:
        if len(order) < batch:
            order = list(range(len(instances)))
            rng.shuffle(order)
        out.append([instances[k] for k in order[:batch]])
        order = order[batch:]
    return out


def train(spec, model, opt, mbs):
    total = 0.0
    for mb in mbs:
        loss = spec.loss(model, mb)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        total += loss.item()
    return total / max(len(mbs), 1)


def sgd(model, lr):
    try:  # PyTorch's fused CPU kernel (torch >= 2.4), its fastest SGD here
        return torch.optim.SGD(model.parameters(), lr=lr, fused=True)
    except (RuntimeError, ValueError, TypeError):
        return torch.optim.SGD(model.parameters(), lr=lr)


class Loss(torch.nn.Module):
    """The model with the spec's minibatch loss as its forward, so that DDP's forward (which
    readies its gradient all-reduce) runs whatever the spec's loss calls."""

    def __init__(self, spec, model):
        super().__init__()
        self.model = model
        self.loss = spec.loss

    def forward(self, batch):
        return self.loss(self.model, batch)


def ddp_worker(rank, spec, args, port):
    """One DDP process: the same initialisation and minibatches on every rank, rank r
    training instances r, r + N, ... of each; DDP averages the gradients over the ranks, so
    a step is the whole minibatch's mean gradient. Rank 0 times and prints, as `bench`.
    Each rank reads the data itself (sending it would share every tensor through a file
    descriptor of its own)."""
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    instances = spec.prepare(read_jsonl(args.data), args)

    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", str(port)
    dist.init_process_group("gloo", rank=rank, world_size=args.ddp)
    torch.set_num_threads(1)
    try:
        for b in args.batch:
            torch.manual_seed(args.seed)
            model = DistributedDataParallel(Loss(spec, spec.build(args)), find_unused_parameters=spec.unused_parameters)
            opt = sgd(model, args.lr)
            rng = random.Random(args.seed + b)
            make = spec.batcher or (lambda inst, size, count, r, _: minibatches(inst, size, count, r))
            # Every rank takes part in every step; a minibatch smaller than the ranks (a
            # bucket's remainder) is left out on all of them alike.
            warm = [mb for mb in make(instances, b, max(args.warmup, b), rng, args) if len(mb) >= args.ddp]
            timed = [mb for mb in make(instances, b, args.instances, rng, args) if len(mb) >= args.ddp]
            n = sum(len(mb) for mb in timed)

            def steps(mbs):
                total = 0.0
                for mb in mbs:
                    loss = model(mb[rank::args.ddp])
                    opt.zero_grad(set_to_none=True)
                    loss.backward()
                    opt.step()
                    total += loss.item()
                return total / max(len(mbs), 1)

            steps(warm)
            dist.barrier()
            t0 = time.perf_counter()
            loss = steps(timed)
            dist.barrier()
            dt = time.perf_counter() - t0
            if rank == 0:
                print(f"train {spec.name} {spec.strategy}-ddp{args.ddp} {b} {n / dt:.1f} {loss:.4f}", flush=True)
    finally:
        dist.destroy_process_group()


def bench_ddp(spec, args, count):
    """`bench` over `args.ddp` processes with DistributedDataParallel (gloo, loopback)."""
    import socket

    import torch.multiprocessing as mp

    if min(args.batch) < args.ddp:
        sys.exit(f"--ddp {args.ddp}: every minibatch needs at least one instance per process")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    print(f"{spec.name} ({spec.strategy}): torch {torch.__version__}, DDP over {args.ddp} processes (gloo), "
          f"1 thread each, {count} instances from {args.data}, plain SGD lr {args.lr}", flush=True)
    mp.spawn(ddp_worker, args=(spec, args, port), nprocs=args.ddp, join=True)


def bench(spec, args, instances):
    """Training instances/s per batch size: forward, backward and SGD step per minibatch,
    the Python bookkeeping of the batching included. One line per batch size:
    `train MODEL STRATEGY BATCH RATE LOSS`, which table.py reads."""
    print(f"{spec.name} ({spec.strategy}): torch {torch.__version__}, {torch.get_num_threads()} thread(s), {len(instances)} "
          f"instances from {args.data}, plain SGD lr {args.lr}", flush=True)
    for b in args.batch:
        torch.manual_seed(args.seed)
        model = spec.build(args)
        opt = sgd(model, args.lr)
        rng = random.Random(args.seed + b)
        make = spec.batcher or (lambda inst, size, count, r, _: minibatches(inst, size, count, r))
        warm = make(instances, b, max(args.warmup, b), rng, args)
        timed = make(instances, b, args.instances, rng, args)
        n = sum(len(mb) for mb in timed)
        train(spec, model, opt, warm)
        t0 = time.perf_counter()
        loss = train(spec, model, opt, timed)
        dt = time.perf_counter() - t0
        print(f"train {spec.name} {spec.strategy} {b} {n / dt:.1f} {loss:.4f}", flush=True)


def load_safetensors(path):
    from safetensors.torch import load_file

    return load_file(path)


def amp_check(spec, args, objects):
    """Amp and this script on the same parameters and instances: the mean loss and every
    parameter's mean gradient over the first `--check-instances` instances, to TOLERANCE
    relative to the largest magnitude of Amp's tensor. Exits 1 on a mismatch."""
    n = min(args.check_instances, len(objects))
    with tempfile.TemporaryDirectory() as tmp:
        data = os.path.join(tmp, "check.jsonl")
        with open(data, "w") as f:
            for o in objects[:n]:
                f.write(json.dumps(o) + "\n")
        model_args = spec.amp_args(args)
        params = args.params
        if params is None:
            # Parameters Amp initialised and then trained for a few SGD steps, so that the
            # check is not at an initialisation where, e.g., every bias is small.
            params = os.path.join(tmp, "amp.safetensors")
            run([args.amprun, "train", *model_args, "--data", data, "--epochs", "1", "--optimizer", "sgd",
                 "--lr", "0.01", "--min-update-frequency", "4", "--seed", str(args.seed), "--save", params])
        grads = os.path.join(tmp, "grads.safetensors")
        out = run([args.amprun, "grad", *model_args, "--params", params, "--data", data, "--out", grads])
        from safetensors import safe_open

        with safe_open(grads, "pt") as f:
            amp_loss = float(f.metadata()["mean_loss"])
            amp_grads = {k: f.get_tensor(k) for k in f.keys()}
        state = load_safetensors(params)
        model = spec.build(args)
        names = set(model.state_dict())
        extra = sorted(set(k for k in state if k in amp_grads) - names)
        missing = sorted(names - set(state))
        if extra or missing:
            sys.exit(f"parameter names differ: Amp only {extra}, PyTorch only {missing}")
        model.load_state_dict({k: state[k] for k in names})
        instances = spec.prepare(objects[:n], args)
        loss = spec.loss(model, instances)
        loss.backward()
        ok = abs(loss.item() - amp_loss) <= TOLERANCE * max(1.0, abs(amp_loss))
        print(f"{spec.name} --check on {n} instances ({out.strip().splitlines()[0]})")
        print(f"  loss: PyTorch {loss.item():.6f}, Amp {amp_loss:.6f} {'ok' if ok else 'MISMATCH'}")
        for name, p in model.named_parameters():
            g = p.grad if p.grad is not None else torch.zeros_like(p)
            a = amp_grads[name]
            if a.shape != g.shape:
                sys.exit(f"  {name}: Amp's gradient is {tuple(a.shape)}, PyTorch's {tuple(g.shape)}")
            scale = max(float(a.abs().max()), 1e-6)
            rel = float((a - g).abs().max()) / scale
            good = rel <= TOLERANCE
            ok = ok and good
            print(f"  {name:<22} {str(tuple(a.shape)):<14} max |Amp| {scale:.3e}  max diff / max |Amp| "
                  f"{rel:.1e} {'ok' if good else 'MISMATCH'}")
        print("check: " + ("ok" if ok else "MISMATCH"))
        if not ok:
            sys.exit(1)


def run(cmd):
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed ({done.returncode}):\n{done.stdout}{done.stderr}")
    return done.stdout


def main(spec, doc):
    args = parser(spec, doc).parse_args()
    spec.strategy = getattr(args, "strategy", spec.strategy)
    setup(args)
    objects = read_jsonl(args.data)
    if args.check:
        amp_check(spec, args, objects)
        return
    if args.ddp > 1:
        bench_ddp(spec, args, len(objects))
    else:
        bench(spec, args, spec.prepare(objects, args))
