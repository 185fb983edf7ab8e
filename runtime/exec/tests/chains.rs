//! Nodes that run in one worker step. Chains of routing nodes (`ExecConfig::chain_routes`):
//! connected `phi`, `cond`, `switch` and `isu` nodes run as one node. Linear epilogues
//! (`ExecConfig::linear_epilogues`): an activation that alone reads a linear's output runs
//! in the linear's step. Training and inference equal node by node to 1e-5 on list-reduce,
//! Tree-LSTM, GGSNN and the MoE (and the MLP, for epilogues), at 1 and 2 workers (both stop
//! at a worker's border) with several instances in flight; they really form, the planner
//! predicts the same ones, and they leave nothing held at the end of a run (the executor
//! checks every run).

mod common;

use amp_data::Instance;
use amp_exec::{ExecConfig, Executor, Placement};
use amp_ir::verify::Verified;
use amp_params::OptimConfig;
use common::*;

fn models() -> Vec<(&'static str, Verified, Vec<Instance>)> {
    let list = compile_example("list_reduce", &[("hidden", 12)]);
    let lens: Vec<usize> = (0..16).map(|i| i % 6).collect();
    let lists = token_lists(&list, &lens, 14, 2);
    let tree = compile_example("tree_lstm", &[("vocab", 30), ("embed", 10), ("hidden", 8)]);
    let mut rng = Lcg(3);
    let shapes: Vec<Shape> = (0..16).map(|i| Shape::random(1 + i % 7, &mut rng)).collect();
    let trees = sentences(&tree, &shapes, 30, 4);
    let ggsnn = compile_example("ggsnn", &[("hidden", 6), ("steps", 2)]);
    let sizes: Vec<usize> = (0..12).map(|i| 2 + i % 5).collect();
    let graphs = ggsnn_graphs(&ggsnn, &sizes, 7);
    let moe = compile_example("moe", &[("experts", 6)]);
    let samples = moe_samples(&moe, 16, 256, 5);
    vec![("list_reduce", list, lists), ("tree_lstm", tree, trees), ("ggsnn", ggsnn, graphs), ("moe", moe, samples)]
}

#[test]
fn chains_train_and_infer_like_node_by_node() {
    for (name, graph, data) in models() {
        let with = |config: &mut ExecConfig, on| config.chain_routes = on;
        off_and_on_alike(name, &graph, &data, with, |plain, chained, workers| {
            assert!(plain.chained_nodes().is_empty(), "{name}: chains while turned off");
            if workers == 1 {
                assert!(!chained.chained_nodes().is_empty(), "{name}: no chain formed");
            }
        });
    }
}

/// Trains two epochs and infers with a feature off and on (`with` sets it in the config),
/// at 1 worker and at 2 (round-robin), asserting both agree to 1e-5; `formed` checks what
/// the feature made of the program first.
fn off_and_on_alike(
    name: &str,
    graph: &Verified,
    data: &[Instance],
    with: impl Fn(&mut ExecConfig, bool),
    formed: impl Fn(&Executor, &Executor, usize),
) {
    for (workers, placement) in [(1, Placement::Contiguous), (2, Placement::RoundRobin)] {
        let config = |on| {
            let mut config = ExecConfig {
                workers,
                placement: placement.clone(),
                max_active_keys: 8,
                ..ExecConfig::deterministic(4, OptimConfig::sgd(0.1))
            };
            with(&mut config, on);
            config
        };
        let mut off = executor(graph, 7, config(false));
        let mut on = executor(graph, 7, config(true));
        formed(&off, &on, workers);
        for epoch in 0..2 {
            train_alike(&format!("{name}, {workers} workers, epoch {epoch}"), &mut off, &mut on, data);
        }
        let (a, b) = (off.infer(data).expect("infers off"), on.infer(data).expect("infers on"));
        for (x, y) in b.iter().flatten().zip(a.iter().flatten()) {
            assert!((x - y).abs() <= 1e-5 * (1.0 + y.abs()), "{name}: output {x} vs {y}");
        }
    }
}

/// Tree-LSTM's `h` and `c` each pass from the arms' `phi` through `cond` (is root),
/// `isu` (the call site, then the parent), `switch` (call site) and the two call sites'
/// `isu`: one chain each, with the `phi` first; `h` also through the root's `isu` (`c`
/// is not used at the root).
#[test]
fn tree_lstm_results_travel_through_one_chain_each() {
    let graph = compile_example("tree_lstm", &[("vocab", 30), ("embed", 10), ("hidden", 8)]);
    let ex = executor(&graph, 1, ExecConfig::default());
    let chains = ex.chained_nodes();
    let mut sizes: Vec<usize> = chains.iter().map(|(_, members)| members.len()).collect();
    sizes.sort_unstable();
    assert_eq!(sizes, [7, 8], "{chains:?}");
    for (index, members) in &chains {
        assert_eq!(members.first(), Some(index), "a chain keeps its first node's index");
        assert!(ex.node_name(*index).starts_with("chain merge"), "{}", ex.node_name(*index));
    }
}

/// A routing chain takes the gradients queued for it one after another in one worker step,
/// whatever exits they come back through: Tree-LSTM's come back through its two call sites
/// interleaved (left and right children), and with a step for each (one port per step),
/// nearly every step of a chain's backward carried one message.
#[test]
fn a_chain_takes_its_queued_gradients_together_whatever_their_ports() {
    let graph = compile_example("tree_lstm", &[("vocab", 30), ("embed", 10), ("hidden", 8)]);
    let mut rng = Lcg(5);
    let shapes: Vec<Shape> = (0..32).map(|i| Shape::random(2 + i % 9, &mut rng)).collect();
    let trees = sentences(&graph, &shapes, 30, 4);
    let config =
        ExecConfig { max_active_keys: 16, trace: true, ..ExecConfig::deterministic(16, OptimConfig::sgd(0.1)) };
    let mut ex = executor(&graph, 7, config);
    ex.train_epoch(&trees).unwrap();
    let chains: Vec<u32> = ex.chained_nodes().iter().map(|(index, _)| *index).collect();
    let trace = ex.take_trace();
    let steps: Vec<u32> = trace
        .iter()
        .filter(|e| e.kind == amp_exec::TraceKind::Backward && chains.contains(&e.node))
        .map(|e| e.batch)
        .collect();
    let messages: u32 = steps.iter().sum();
    assert!(messages >= 3 * steps.len() as u32, "{messages} gradients in {} steps of the chains", steps.len());
}

/// The planner's cost model charges a chain member's messages only when it is cut from its
/// producer (`amp_plan`'s `topology.rs` mirrors the rules of `chain.rs`): on one worker,
/// the nodes it takes for members are exactly those the executor chains after a root.
#[test]
fn the_planner_knows_the_chains_the_executor_forms() {
    for (name, graph, _) in models() {
        let ex = executor(&graph, 1, ExecConfig::default());
        let mut formed: Vec<u32> =
            ex.chained_nodes().into_iter().flat_map(|(_, members)| members.into_iter().skip(1)).collect();
        formed.sort_unstable();
        let activations = ex.epilogue_nodes().into_iter().flat_map(|(_, members)| members.into_iter().skip(1));
        formed.extend(activations);
        formed.sort_unstable();
        let costs = amp_plan::estimate(&graph, &amp_plan::Assumptions::default(), None).unwrap();
        let predicted: Vec<u32> = costs.nodes.iter().flatten().filter(|n| n.chained).map(|n| n.id).collect();
        assert!(!formed.is_empty(), "{name}: no chain");
        assert_eq!(predicted, formed, "{name}");
    }
}

/// `a`'s relu and `c`'s tanh run in their linears' steps; the relu's output fans out to `b`
/// and the concat, whose gradients it sums before its linear's backward.
const FANNED: &str = "record R { x: f32[4], label: int }
model Fanned(h: int = 6) {
    param a = Linear(4, h);
    param b = Linear(h, h);
    param c = Linear(2 * h, 3);
    fn forward(r: R) -> f32[3] { let u = relu(a(r.x)); tanh(c(concat(b(u), u))) }
    fn loss(r: R) -> f32 { cross_entropy(forward(r), r.label) }
}";

#[test]
fn epilogues_train_and_infer_like_node_by_node() {
    let mut all = models();
    let mlp = compile_example("mlp", &[("hidden", 12)]);
    let images = digits(&mlp, 24, 3);
    all.push(("mlp", mlp, images));
    let fanned = compile_source("fanned", FANNED, &[]);
    let rows: Vec<Instance> = (0..20)
        .map(|i| {
            let x: Vec<f32> = (0..4).map(|k| ((i * 5 + k * 3) % 7) as f32 / 3.0 - 1.0).collect();
            let x = amp_data::Value::Tensor(amp_data::Tensor::new(vec![4], x).unwrap());
            instance(&fanned, amp_data::Value::Record(vec![x, amp_data::Value::Int((i % 3) as i64)]))
        })
        .collect();
    all.push(("fanned", fanned, rows));
    for (name, graph, data) in all {
        let with = |config: &mut ExecConfig, on| config.linear_epilogues = on;
        off_and_on_alike(name, &graph, &data, with, |plain, fused, workers| {
            assert!(plain.epilogue_nodes().is_empty(), "{name}: epilogues while turned off");
            if workers == 1 {
                let formed = !fused.epilogue_nodes().is_empty();
                assert_eq!(formed, ["list_reduce", "moe", "mlp", "fanned"].contains(&name), "{name}");
            }
        });
    }
}
