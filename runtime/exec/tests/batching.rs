//! Dynamic batching: with several instances in flight, Linear nodes take their waiting
//! messages as one matrix; training, gradients and inference equal those of the unbatched
//! executor (`max_batch` 1, weight-gradient products added per message) to 1e-5, on mlp,
//! list-reduce, Tree-LSTM and the MoE; batches really form and show in the trace;
//! `max_batch` 0 is refused.

mod common;

use amp_data::Instance;
use amp_exec::{ExecConfig, ExecError, TraceKind};
use amp_ir::verify::Verified;
use amp_params::OptimConfig;
use common::*;

/// The models at small sizes (the MoE keeps its 256 inputs), with enough instances that
/// several of them meet at each Linear.
fn models() -> Vec<(&'static str, Verified, Vec<Instance>)> {
    let mlp = compile_example("mlp", &[("hidden", 16)]);
    let digits = digits(&mlp, 24, 1);
    let list = compile_example("list_reduce", &[("hidden", 12)]);
    let lens: Vec<usize> = (0..24).map(|i| i % 6).collect();
    let lists = token_lists(&list, &lens, 14, 2);
    let tree = compile_example("tree_lstm", &[("vocab", 30), ("embed", 10), ("hidden", 8)]);
    let mut rng = Lcg(3);
    let shapes: Vec<Shape> = (0..16).map(|i| Shape::random(1 + i % 7, &mut rng)).collect();
    let trees = sentences(&tree, &shapes, 30, 4);
    let moe = compile_example("moe", &[("experts", 6)]);
    let samples = moe_samples(&moe, 24, 256, 5);
    vec![("mlp", mlp, digits), ("list_reduce", list, lists), ("tree_lstm", tree, trees), ("moe", moe, samples)]
}

/// One worker, 8 instances in flight, synchronous SGD updates every 4 instances.
fn config(max_batch: usize) -> ExecConfig {
    ExecConfig { max_active_keys: 8, max_batch, trace: true, ..ExecConfig::deterministic(4, OptimConfig::sgd(0.1)) }
}

#[test]
fn batched_training_equals_unbatched_training() {
    for (name, graph, data) in models() {
        // Unbatched through and through: no weight-gradient product is deferred either.
        let mut unbatched = executor(&graph, 7, ExecConfig { defer_weight_grads: false, ..config(1) });
        let mut batched = executor(&graph, 7, config(64));
        for epoch in 0..2 {
            let (a, b) = train_alike(&format!("{name}, epoch {epoch}"), &mut unbatched, &mut batched, &data);
            assert_eq!(a.updates, b.updates, "{name}");
        }
        // Batches formed at the Linear nodes, forward and backward, and none unbatched.
        let trace = batched.take_trace();
        let largest = |kind: TraceKind| trace.iter().filter(|e| e.kind == kind).map(|e| e.batch).max().unwrap_or(0);
        assert!(largest(TraceKind::Forward) > 1 && largest(TraceKind::Backward) > 1, "{name}: no batch formed");
        assert!(trace.iter().filter(|e| e.kind == TraceKind::Update).all(|e| e.batch == 0 && e.instances == 0));
        // A batch serves one instance or more, never more than it has messages; with 8 in
        // flight, some serve several (the instances move through the nodes together).
        let work = || trace.iter().filter(|e| e.kind != TraceKind::Update);
        assert!(work().all(|e| (1..=e.batch).contains(&e.instances)), "{name}");
        assert!(work().any(|e| e.instances > 1), "{name}: no batch of several instances");
        let unbatched_trace = unbatched.take_trace();
        let mut unbatched_work = unbatched_trace.iter().filter(|e| e.kind != TraceKind::Update);
        assert!(unbatched_work.all(|e| e.batch == 1 && e.instances == 1), "{name}");
    }
}

#[test]
fn gradients_and_inference_equal_unbatched_ones() {
    for (name, graph, data) in models() {
        let mut unbatched = executor(&graph, 8, config(1));
        let mut batched = executor(&graph, 8, config(64));
        for (n, inst) in data.iter().enumerate().take(6) {
            let (la, ga) = unbatched.grads(inst).unwrap();
            let (lb, gb) = batched.grads(inst).unwrap();
            assert!((la - lb).abs() <= 1e-5 * (1.0 + la.abs()), "{name}, instance {n}: loss {lb} vs {la}");
            let diff = max_rel_diff(&gb, &ga);
            assert!(diff < 1e-5, "{name}, instance {n}: gradients differ by {diff}");
        }
        let (a, b) = (unbatched.infer(&data).unwrap(), batched.infer(&data).unwrap());
        for (n, (x, y)) in b.iter().zip(&a).enumerate() {
            assert_eq!(x.len(), y.len());
            for (p, q) in x.iter().zip(y) {
                assert!((p - q).abs() <= 1e-5 * (1.0 + q.abs()), "{name}, instance {n}: output {p} vs {q}");
            }
        }
        let (ea, eb) = (unbatched.evaluate(&data).unwrap(), batched.evaluate(&data).unwrap());
        assert!((ea.loss - eb.loss).abs() <= 1e-5 * (1.0 + ea.loss.abs()), "{name}: {} vs {}", eb.loss, ea.loss);
    }
}

/// Asynchronous runs with batches and several workers finish, leak nothing and learn.
#[test]
fn asynchronous_batched_training_on_several_workers_learns() {
    let graph = compile_example("list_reduce", &[("hidden", 16)]);
    let lens: Vec<usize> = (0..48).map(|i| 1 + i % 4).collect();
    let data = token_lists(&graph, &lens, 10, 8);
    for workers in [1, 2] {
        let config = ExecConfig {
            workers,
            max_active_keys: 16,
            sync_updates: false,
            max_batch: 8,
            ..ExecConfig::deterministic(4, OptimConfig::adam(0.02))
        };
        let mut ex = executor(&graph, 3, config);
        let before = ex.evaluate(&data).unwrap().loss;
        for _ in 0..12 {
            ex.train_epoch(&data).unwrap();
        }
        let after = ex.evaluate(&data).unwrap().loss;
        assert!(after < 0.6 * before, "{workers} workers: loss {before} -> {after}");
    }
}

#[test]
fn a_zero_max_batch_is_refused() {
    let graph = compile_example("mlp", &[("hidden", 4)]);
    let config = ExecConfig { max_batch: 0, ..ExecConfig::default() };
    let params = amp_params::ParamSet::init(&amp_params::ParamSpec::of_graph(&graph), 1);
    match amp_exec::Executor::new(&graph, params, config) {
        Err(ExecError::Config { message }) => assert!(message.contains("max_batch"), "{message}"),
        Err(e) => panic!("unexpected error {e}"),
        Ok(_) => panic!("max_batch 0 accepted"),
    }
}

/// Fusion groups run as one node calling their JIT kernel (`ExecConfig::jit`), which
/// stacks the keys a batch of messages completes as rows of one call: training with and
/// without the JIT agrees to 1e-5 on Tree-LSTM and GGSNN, with 2 workers as with 1, and
/// the fused nodes really batch.
#[test]
fn fused_kernels_batch_and_train_like_node_by_node() {
    let tree = compile_example("tree_lstm", &[("vocab", 30), ("embed", 10), ("hidden", 8)]);
    let mut rng = Lcg(5);
    let shapes: Vec<Shape> = (0..16).map(|i| Shape::random(1 + i % 7, &mut rng)).collect();
    let trees = sentences(&tree, &shapes, 30, 6);
    let ggsnn = compile_example("ggsnn", &[("hidden", 6), ("steps", 2)]);
    let sizes: Vec<usize> = (0..16).map(|i| 2 + i % 5).collect();
    let graphs = ggsnn_graphs(&ggsnn, &sizes, 7);
    for (name, graph, data) in [("tree_lstm", tree, trees), ("ggsnn", ggsnn, graphs)] {
        for workers in [1, 2] {
            let config = |jit| ExecConfig { workers, jit, ..config(64) };
            let mut plain = executor(&graph, 7, config(false));
            let mut fused = executor(&graph, 7, config(true));
            assert!(plain.fused_nodes().is_empty());
            let fused_nodes: Vec<u32> = fused.fused_nodes().into_iter().map(|(n, _)| n).collect();
            assert!(!fused_nodes.is_empty(), "{name}: nothing fused");
            for epoch in 0..2 {
                train_alike(&format!("{name}, {workers} workers, epoch {epoch}"), &mut plain, &mut fused, &data);
            }
            let trace = fused.take_trace();
            let batched = |kind: TraceKind| {
                trace.iter().filter(|e| e.kind == kind && fused_nodes.contains(&e.node)).map(|e| e.batch).max()
            };
            assert!(batched(TraceKind::Forward) > Some(1), "{name}: fused forward never batched");
            assert!(batched(TraceKind::Backward) > Some(1), "{name}: fused backward never batched");
        }
    }
}
