//! Training and inference throughput of the executor on the canonical models (their
//! default hyperparameters: Tree-LSTM E=300 H=150, MoE d=256 with 64 experts and k=2,
//! list-reduce H=128):
//! `cargo run --release -p amp-exec --example throughput [instances] [model...]
//! [--batching]`, models among mlp, list_reduce, tree_lstm, ggsnn and moe (all by
//! default). Instances: random digits, token lists of 2 to 10 tokens, SST-like trees of 5
//! to 50 leaves, graphs of 5 to 19 nodes with 1.5 edges per node, and 256-value samples.
//!
//! Two tables, measured in one run: the setups (workers, instances in flight, synchronous
//! or not; batching on), then dynamic batching on (`max_batch` 64) against off (1) side by
//! side at 1 worker, 16 instances in flight (and 256 for the MoE, whose 64 experts each
//! see one in 32 instances), asynchronous updates (medians of three
//! alternating runs each), with the mean messages per Linear call, forward and backward
//! (from a traced run). `--batching` prints the second table only. `--jit` prints, in its
//! place, the JIT table: training and inference with every fusion group as one Cranelift
//! kernel call (`ExecConfig::jit`, the default) against node by node (`amprun --no-jit`),
//! at 1 worker and 16 instances in flight with batching on, medians of five alternating
//! runs.

#[path = "../tests/common/mod.rs"]
mod common;

use amp_data::Instance;
use amp_exec::{ExecConfig, TraceKind};
use amp_ir::verify::Verified;
use amp_params::OptimConfig;
use common::*;

const MODELS: [&str; 5] = ["mlp", "list_reduce", "tree_lstm", "ggsnn", "moe"];

/// The model compiled with its default hyperparameters, and `n` instances for it.
fn case(name: &str, n: usize) -> (Verified, Vec<Instance>) {
    let graph = compile_example(name, &[]);
    let data = match name {
        "mlp" => digits(&graph, n, 1),
        "list_reduce" => {
            let lens: Vec<usize> = (0..n).map(|i| 2 + i % 9).collect();
            token_lists(&graph, &lens, 14, 1)
        }
        "tree_lstm" => {
            let mut rng = Lcg(1);
            let shapes: Vec<Shape> = (0..n).map(|_| Shape::random(5 + rng.below(46) as usize, &mut rng)).collect();
            sentences(&graph, &shapes, 5000, 1)
        }
        "ggsnn" => {
            let sizes: Vec<usize> = (0..n).map(|i| 5 + i % 15).collect();
            ggsnn_graphs(&graph, &sizes, 1)
        }
        "moe" => moe_samples(&graph, n, 256, 1),
        other => panic!("unknown model `{other}`; expected one of {MODELS:?}"),
    };
    (graph, data)
}

/// Training and inference instances per second, after a warm-up epoch.
fn measure(graph: &Verified, data: &[Instance], config: ExecConfig) -> (f64, f64) {
    let mut ex = executor(graph, 1, config);
    ex.train_epoch(&data[..data.len() / 10]).expect("warm-up");
    let stats = ex.train_epoch(data).expect("training");
    let start = std::time::Instant::now();
    ex.infer(data).expect("inference");
    (stats.instances_per_s, data.len() as f64 / start.elapsed().as_secs_f64())
}

/// Mean messages per Linear forward and backward call over a traced training epoch.
fn mean_batch(graph: &Verified, data: &[Instance], config: ExecConfig) -> (f64, f64) {
    let mut ex = executor(graph, 1, ExecConfig { trace: true, ..config });
    ex.train_epoch(data).expect("traced training");
    let trace = ex.take_trace();
    let mean = |kind: TraceKind| {
        let batches: Vec<u32> = trace
            .iter()
            .filter(|e| e.kind == kind && ex.node_name(e.node).starts_with("linear"))
            .map(|e| e.batch)
            .collect();
        batches.iter().map(|&b| f64::from(b)).sum::<f64>() / batches.len().max(1) as f64
    };
    (mean(TraceKind::Forward), mean(TraceKind::Backward))
}

fn setups(name: &str, graph: &Verified, data: &[Instance]) {
    for (workers, keys, sync) in
        [(1, 1, true), (1, 8, false), (2, 1, true), (2, 8, true), (2, 8, false), (2, 16, false)]
    {
        let config = ExecConfig {
            workers,
            max_active_keys: keys,
            sync_updates: sync,
            ..ExecConfig::deterministic(8, OptimConfig::sgd(0.01))
        };
        let (train, infer) = measure(graph, data, config);
        println!("{name:<12} {workers:>7} {keys:>5} {sync:>6} {train:>12.0} {infer:>12.0}");
    }
}

/// Training and inference instances/s of `off` and `on`, medians of `runs` alternating runs
/// each (a busy machine slows both alike): `(train_off, infer_off, train_on, infer_on)`.
fn compare(graph: &Verified, data: &[Instance], off: &ExecConfig, on: &ExecConfig, runs: usize) -> [f64; 4] {
    let mut measured_off = Vec::new();
    let mut measured_on = Vec::new();
    for _ in 0..runs {
        measured_off.push(measure(graph, data, off.clone()));
        measured_on.push(measure(graph, data, on.clone()));
    }
    let median = |runs: &[(f64, f64)], pick: fn(&(f64, f64)) -> f64| {
        let mut values: Vec<f64> = runs.iter().map(pick).collect();
        values.sort_by(f64::total_cmp);
        values[values.len() / 2]
    };
    [
        median(&measured_off, |r| r.0),
        median(&measured_off, |r| r.1),
        median(&measured_on, |r| r.0),
        median(&measured_on, |r| r.1),
    ]
}

fn batching(name: &str, graph: &Verified, data: &[Instance], keys: usize) {
    let config = |max_batch| ExecConfig {
        max_active_keys: keys,
        sync_updates: false,
        max_batch,
        ..ExecConfig::deterministic(8, OptimConfig::sgd(0.01))
    };
    let [train_off, infer_off, train_on, infer_on] = compare(graph, data, &config(1), &config(64), 3);
    let (forward, backward) = mean_batch(graph, &data[..data.len() / 4], config(64));
    println!(
        "{name:<12} {keys:>5} {train_off:>10.0} {train_on:>10.0} {:>7.2}x {infer_off:>10.0} {infer_on:>10.0} {:>7.2}x {forward:>9.1} {backward:>9.1}",
        train_on / train_off,
        infer_on / infer_off,
    );
}

fn jit(name: &str, graph: &Verified, data: &[Instance]) {
    let config = |jit| ExecConfig {
        max_active_keys: 16,
        sync_updates: false,
        jit,
        ..ExecConfig::deterministic(8, OptimConfig::sgd(0.01))
    };
    let fused = executor(graph, 1, config(true)).fused_nodes();
    let members: usize = fused.iter().map(|(_, m)| m.len()).sum();
    let [train_off, infer_off, train_on, infer_on] = compare(graph, data, &config(false), &config(true), 5);
    println!(
        "{name:<12} {:>6} {members:>7} {train_off:>10.0} {train_on:>10.0} {:>7.2}x {infer_off:>10.0} {infer_on:>10.0} {:>7.2}x",
        fused.len(),
        train_on / train_off,
        infer_on / infer_off,
    );
}

fn main() {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    let only_batching = args.iter().any(|a| a == "--batching");
    let only_jit = args.iter().any(|a| a == "--jit");
    args.retain(|a| a != "--batching" && a != "--jit");
    let n: usize = args.first().and_then(|a| a.parse().ok()).unwrap_or(2000);
    let mut models: Vec<String> = args.into_iter().filter(|a| a.parse::<usize>().is_err()).collect();
    if models.is_empty() {
        models = MODELS.iter().map(|m| m.to_string()).collect();
    }
    let cases: Vec<(&str, Verified, Vec<Instance>)> =
        models.iter().map(|name| (name.as_str(), case(name, n))).map(|(name, (g, d))| (name, g, d)).collect();
    if only_jit {
        println!(
            "JIT, 1 worker, 16 in flight, asynchronous updates every 8 instances; inst/s, --no-jit (off) and JIT (on)"
        );
        println!(
            "{:<12} {:>6} {:>7} {:>10} {:>10} {:>8} {:>10} {:>10} {:>8}",
            "model", "kernels", "nodes", "train off", "train on", "ratio", "infer off", "infer on", "ratio"
        );
        for (name, graph, data) in &cases {
            jit(name, graph, data);
        }
        return;
    }
    if !only_batching {
        println!(
            "{:<12} {:>7} {:>5} {:>6} {:>12} {:>12}",
            "model", "workers", "keys", "sync", "train inst/s", "infer inst/s"
        );
        for (name, graph, data) in &cases {
            setups(name, graph, data);
        }
        println!();
    }
    println!(
        "dynamic batching, 1 worker, asynchronous updates every 8 instances; inst/s, max_batch 1 (off) and 64 (on)"
    );
    println!(
        "{:<12} {:>5} {:>10} {:>10} {:>8} {:>10} {:>10} {:>8} {:>9} {:>9}",
        "model", "keys", "train off", "train on", "ratio", "infer off", "infer on", "ratio", "batch fwd", "batch bwd"
    );
    for (name, graph, data) in &cases {
        batching(name, graph, data, 16);
        // 64 experts see 2 of every 64 messages: batches at the experts need many more
        // instances in flight.
        if *name == "moe" {
            batching(name, graph, data, 256);
        }
    }
}
