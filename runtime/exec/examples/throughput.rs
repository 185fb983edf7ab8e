//! Training and inference throughput of the executor on the canonical models (their
//! default hyperparameters) at 1 and 2 workers:
//! `cargo run --release -p amp-exec --example throughput [instances] [model...]`, models
//! among mlp, list_reduce, tree_lstm, ggsnn and moe (all by default). Instances: random
//! digits, token lists of 2 to 10 tokens, trees of 5 to 24 leaves, graphs of 5 to 19
//! nodes with 1.5 edges per node, and 256-value samples.

#[path = "../tests/common/mod.rs"]
mod common;

use amp_data::Instance;
use amp_exec::ExecConfig;
use amp_ir::Graph;
use amp_params::OptimConfig;
use common::*;

const MODELS: [&str; 5] = ["mlp", "list_reduce", "tree_lstm", "ggsnn", "moe"];

/// The model compiled with its default hyperparameters, and `n` instances for it.
fn case(name: &str, n: usize) -> (Graph, Vec<Instance>) {
    let graph = compile_example(name, &[]);
    let data = match name {
        "mlp" => digits(&graph, n, 1),
        "list_reduce" => {
            let lens: Vec<usize> = (0..n).map(|i| 2 + i % 9).collect();
            token_lists(&graph, &lens, 14, 1)
        }
        "tree_lstm" => {
            let mut rng = Lcg(1);
            let shapes: Vec<Shape> = (0..n).map(|i| Shape::random(5 + i % 20, &mut rng)).collect();
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

fn main() {
    let mut args = std::env::args().skip(1);
    let n: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(2000);
    let mut models: Vec<String> = args.collect();
    if models.is_empty() {
        models = MODELS.iter().map(|m| m.to_string()).collect();
    }
    println!(
        "{:<12} {:>7} {:>5} {:>6} {:>12} {:>12}",
        "model", "workers", "keys", "sync", "train inst/s", "infer inst/s"
    );
    for name in &models {
        let (graph, data) = case(name, n);
        for (workers, keys, sync) in
            [(1, 1, true), (1, 8, false), (2, 1, true), (2, 8, true), (2, 8, false), (2, 16, false)]
        {
            let config = ExecConfig {
                workers,
                max_active_keys: keys,
                sync_updates: sync,
                ..ExecConfig::deterministic(8, OptimConfig::sgd(0.01))
            };
            let mut ex = executor(&graph, 1, config);
            ex.train_epoch(&data[..n / 10]).expect("warm-up");
            let stats = ex.train_epoch(&data).expect("training");
            let start = std::time::Instant::now();
            ex.infer(&data).expect("inference");
            let infer = n as f64 / start.elapsed().as_secs_f64();
            println!("{name:<12} {workers:>7} {keys:>5} {sync:>6} {:>12.0} {:>12.0}", stats.instances_per_s, infer);
        }
    }
}
