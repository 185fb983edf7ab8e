//! Training throughput of the executor on the canonical mlp and list_reduce models (their
//! default hyperparameters), at 1 and 2 workers:
//! `cargo run --release -p amp-exec --example throughput [instances]`.

#[path = "../tests/common/mod.rs"]
mod common;

use amp_exec::ExecConfig;
use amp_params::OptimConfig;
use common::*;

fn main() {
    let n: usize = std::env::args().nth(1).and_then(|a| a.parse().ok()).unwrap_or(2000);
    let mlp = compile_example("mlp", &[]);
    let lr = compile_example("list_reduce", &[]);
    let lens: Vec<usize> = (0..n).map(|i| 2 + i % 9).collect();
    let cases = [("mlp", &mlp, digits(&mlp, n, 1)), ("list_reduce", &lr, token_lists(&lr, &lens, 14, 1))];
    println!(
        "{:<12} {:>7} {:>5} {:>6} {:>12} {:>12}",
        "model", "workers", "keys", "sync", "train inst/s", "infer inst/s"
    );
    for (name, graph, data) in &cases {
        for (workers, keys, sync) in
            [(1, 1, true), (1, 8, false), (2, 1, true), (2, 8, true), (2, 8, false), (2, 16, false)]
        {
            let config = ExecConfig {
                workers,
                max_active_keys: keys,
                sync_updates: sync,
                ..ExecConfig::deterministic(8, OptimConfig::sgd(0.01))
            };
            let mut ex = executor(graph, 1, config);
            ex.train_epoch(&data[..n / 10]).expect("warm-up");
            let stats = ex.train_epoch(data).expect("training");
            let start = std::time::Instant::now();
            ex.infer(data).expect("inference");
            let infer = n as f64 / start.elapsed().as_secs_f64();
            println!("{name:<12} {workers:>7} {keys:>5} {sync:>6} {:>12.0} {:>12.0}", stats.instances_per_s, infer);
        }
    }
}
