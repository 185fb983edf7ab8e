//! The collection ops (`flatmap`, `group`, `ungroup`, `gather`, `scatter_sum`, `reduce`,
//! `top_k`, `state_from_payload`) at their edges, on small models of `tests/models/`:
//! empty maps and batches, scatter destinations that get nothing, routing on tied values,
//! batches dropped by a branch; indices out of range, negative counts and the mean of
//! nothing end the run with an error naming the node and the instance. Then, on the
//! tree_lstm, ggsnn and moe examples and these models: several workers agree with one,
//! asynchronous training finishes without leaks, and inference and evaluation agree with
//! the training forward pass and the reference evaluator.
#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

mod common;

use amp_data::{Instance, Tensor, Value};
use amp_exec::{ExecConfig, ExecError, Executor, OpError, Placement};
use amp_params::{OptimConfig, ParamSet, ParamSpec};
use common::*;

fn bags() -> Compiled {
    compile_with_program("bags.amp", include_str!("models/bags.amp"), &[])
}

fn bag(c: &Compiled, xs: &[i64], v: [f32; 3], label: i64) -> Instance {
    let xs = Value::Seq(xs.iter().map(|&x| Value::Int(x)).collect());
    let v = Value::Tensor(Tensor::new(vec![3], v.to_vec()).unwrap());
    instance(&c.graph, Value::Record(vec![xs, v, Value::Int(label)]))
}

fn bag_data(c: &Compiled) -> Vec<Instance> {
    vec![
        bag(c, &[], [0.5, -1.0, 0.25], 0),
        bag(c, &[3], [1.0, 0.0, -0.5], 1),
        bag(c, &[1, 1, 9], [-0.25, 0.75, 0.5], 2),
        bag(c, &[0, 4], [0.0, 0.0, 0.0], 1),
    ]
}

fn scatter() -> Compiled {
    compile_with_program("scatter.amp", include_str!("models/scatter.amp"), &[])
}

fn msgs(c: &Compiled, vals: &[i64], dst: &[i64], n: i64, i: i64) -> Instance {
    let ints = |xs: &[i64]| Value::Seq(xs.iter().map(|&x| Value::Int(x)).collect());
    let value = Value::Record(vec![ints(vals), ints(dst), Value::Int(n), Value::Int(i), Value::Int(1)]);
    instance(&c.graph, value)
}

fn scatter_data(c: &Compiled) -> Vec<Instance> {
    vec![
        // Destinations 1 and 3 get nothing.
        msgs(c, &[1, 2, 3], &[0, 0, 2], 4, 1),
        // Nothing to scatter into two rows; the gather's branch is not taken.
        msgs(c, &[], &[], 2, 0),
        // Nothing into nothing.
        msgs(c, &[], &[], 0, 0),
        msgs(c, &[5], &[0], 1, 0),
    ]
}

fn canonical() -> Compiled {
    let path = format!("{}/../../tests/ui/pass_canonical_features.amp", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    compile_with_program("pass_canonical_features.amp", &text, &[])
}

fn canonical_graph(c: &Compiled, nodes: &[i64], edges: &[(i64, i64)], label: i64) -> Instance {
    let nodes = Value::Seq(nodes.iter().map(|&k| Value::Int(k)).collect());
    let edges = Value::Seq(edges.iter().map(|&(s, d)| Value::Record(vec![Value::Int(s), Value::Int(d)])).collect());
    let x = Value::Tensor(Tensor::new(vec![8], (0..8).map(|i| i as f32 / 8.0 - 0.4).collect()).unwrap());
    instance(&c.graph, Value::Record(vec![nodes, edges, x, Value::Int(label)]))
}

/// Runs `grads` on a bad instance and returns the node error (op, error) it must end with.
fn node_error(c: &Compiled, inst: &Instance) -> (&'static str, OpError, String) {
    let mut ex = executor(&c.graph, 1, ExecConfig { workers: 2, ..ExecConfig::default() });
    let err = ex.grads(inst).unwrap_err();
    let text = err.to_string();
    match err {
        ExecError::Node { op, error, instance: 0, node, label, .. } => {
            assert!(text.contains(&format!("%{node} `{label}`")), "{text}");
            (op, error, text)
        }
        other => panic!("expected a node error on instance 0, got {other}"),
    }
}

#[test]
fn empty_maps_tensor_reductions_and_routing_match_the_reference() {
    let c = bags();
    check_against_reference(&c, &bag_data(&c), 1);
    // Tied gate values (a zero input makes them the biases): argmax takes expert 0, the
    // first of the tie, and the second of the top two is expert 1.
    let mut params = ParamSet::init(&ParamSpec::of_graph(&c.graph), 2);
    let bias = params.index("g.bias").unwrap();
    params.data_mut(bias).copy_from_slice(&[0.2, 0.2, 0.1]);
    let tied = bag(&c, &[2], [0.0; 3], 0);
    let grads = check_with_params(&c, params, std::slice::from_ref(&tied));
    let used = |name: &str| grads[0].iter().any(|(s, g)| s.name.starts_with(name) && g.iter().any(|&v| v != 0.0));
    assert!(used("pick.0.") && used("pick.1.") && !used("pick.2."));
}

#[test]
fn scatter_into_empty_and_missing_rows_matches_the_reference() {
    let c = scatter();
    check_against_reference(&c, &scatter_data(&c), 3);
}

#[test]
fn indices_out_of_range_and_negative_counts_are_clean_errors() {
    let c = scatter();
    let (op, error, text) = node_error(&c, &msgs(&c, &[1, 2], &[0, 1], 2, -1));
    assert_eq!((op, error), ("gather", OpError::OutOfRange { what: "gather index", index: -1, len: 2 }), "{text}");
    assert!(text.contains("`gather`") && text.contains("instance 0"), "{text}");
    let (op, error, text) = node_error(&c, &msgs(&c, &[1, 2], &[0, 3], 2, 0));
    assert_eq!((op, error), ("scatter_sum", OpError::OutOfRange { what: "scatter_sum index", index: 3, len: 2 }));
    assert!(text.contains("`scatter_sum`"), "{text}");
    let (_, error, _) = node_error(&c, &msgs(&c, &[1], &[0], -1, 0));
    assert!(matches!(error, OpError::NegativeCount { count: -1, .. }), "{error:?}");
    // The reference refuses them too.
    let reference = amp_reference::Reference::new(&c.program, c.model).unwrap();
    let params = ParamSet::init(&ParamSpec::of_graph(&c.graph), 1);
    assert!(reference.loss(&params, &msgs(&c, &[1, 2], &[0, 3], 2, 0).to_value()).is_err());
}

#[test]
fn a_row_index_past_the_data_is_a_clean_error() {
    // Two rows to scatter, one destination: the rows are read in one walk, and the row
    // that does not fit is reported as evaluating it alone would.
    let c = scatter();
    let (op, error, text) = node_error(&c, &msgs(&c, &[1, 2], &[0], 2, 0));
    assert_eq!(op, "scatter_sum", "{text}");
    assert!(matches!(&error, OpError::Eval { what: "scatter_sum index", why } if why.contains("dst")), "{error:?}");
}

#[test]
fn the_mean_of_an_empty_batch_is_a_clean_error() {
    let c = canonical();
    let data = [canonical_graph(&c, &[1, 3, 0], &[(0, 1), (2, 2), (1, 0)], 1), canonical_graph(&c, &[2], &[], 0)];
    check_against_reference(&c, &data, 4);
    let empty = canonical_graph(&c, &[], &[], 0);
    let (op, error, text) = node_error(&c, &empty);
    assert_eq!((op, error), ("reduce", OpError::Empty { what: "mean" }));
    assert!(text.contains("`mean`") && text.contains("cannot take the mean"), "{text}");
    let reference = amp_reference::Reference::new(&c.program, c.model).unwrap();
    let params = ParamSet::init(&ParamSpec::of_graph(&c.graph), 1);
    assert!(reference.loss(&params, &empty.to_value()).is_err());
    // Evaluation fails the same way, and the executor stays usable.
    let ex = executor(&c.graph, 1, ExecConfig::default());
    assert!(ex.evaluate(std::slice::from_ref(&empty)).is_err());
    assert_eq!(ex.evaluate(&data).unwrap().instances, 2);
}

/// The collection models with data for multi-worker and inference checks.
fn models() -> Vec<(&'static str, Compiled, Vec<Instance>)> {
    let tree = compile_example_with_program("tree_lstm", &[("vocab", 20), ("embed", 6), ("hidden", 5)]);
    let mut rng = Lcg(5);
    let shapes: Vec<Shape> = [1, 2, 5, 3, 1, 4, 6, 2, 3].iter().map(|&n| Shape::random(n, &mut rng)).collect();
    let trees = sentences(&tree.graph, &shapes, 20, 6);
    let ggsnn = compile_example_with_program("ggsnn", &[("hidden", 6), ("steps", 2)]);
    let mut graphs = ggsnn_graphs(&ggsnn.graph, &[3, 0, 5, 1, 4, 2, 6, 3], 7);
    graphs.push(ggsnn_graph(&ggsnn.graph, &[1, 2], &[(0, 0, 1), (1, 0, 0)], 1));
    let moe = compile_example_with_program("moe", &[("experts", 4)]);
    let samples = moe_samples(&moe.graph, 7, 256, 8);
    let bags = bags();
    let bag_data = bag_data(&bags);
    let scatter = scatter();
    let scatter_data = scatter_data(&scatter);
    vec![
        ("tree_lstm", tree, trees),
        ("ggsnn", ggsnn, graphs),
        ("moe", moe, samples),
        ("bags", bags, bag_data),
        ("scatter", scatter, scatter_data),
    ]
}

/// Unbatched (`max_batch` 1), so that every message is computed the same way whatever the
/// setup: Adam's first steps are `lr * sign(g)`, so the rounding of a nearly cancelling
/// gradient element, which batching rows into one GEMM changes, can move a parameter by
/// `2 lr`. Batched runs are held to unbatched ones with SGD in `batching.rs`.
#[test]
fn several_workers_train_as_one() {
    for (name, c, data) in models() {
        let optimizer = OptimConfig::adam(0.01);
        let unbatched = ExecConfig { max_batch: 1, ..ExecConfig::deterministic(3, optimizer) };
        let mut single = executor(&c.graph, 2, unbatched.clone());
        let first = single.train_epoch(&data).unwrap();
        single.train_epoch(&data).unwrap();
        for (workers, placement) in [(2, Placement::Contiguous), (3, Placement::RoundRobin), (4, Placement::Contiguous)]
        {
            let config = ExecConfig { workers, placement, max_active_keys: 4, ..unbatched.clone() };
            let mut multi = executor(&c.graph, 2, config);
            let stats = multi.train_epoch(&data).unwrap();
            multi.train_epoch(&data).unwrap();
            for (a, b) in stats.losses.iter().zip(&first.losses) {
                assert!((a - b).abs() <= 1e-4 * (1.0 + b.abs()), "{name}, {workers} workers: loss {a} vs {b}");
            }
            let diff = max_rel_diff(multi.params(), single.params());
            assert!(diff < 1e-4, "{name}: {workers} workers differ by {diff}");
        }
    }
}

#[test]
fn asynchronous_training_finishes_without_leaks() {
    for (name, c, data) in models() {
        let config = ExecConfig {
            workers: 3,
            max_active_keys: 8,
            sync_updates: false,
            ..ExecConfig::deterministic(2, OptimConfig::sgd(0.05))
        };
        let mut ex = executor(&c.graph, 3, config);
        for _ in 0..2 {
            let stats = ex.train_epoch(&data).unwrap_or_else(|e| panic!("{name}: {e}"));
            assert!(stats.loss.is_finite(), "{name}");
        }
    }
}

/// Bit for bit unbatched; batched, rows of a batch go through another GEMM path than a
/// lone row, so to rounding (1e-5). A batched map's Linear (GGSNN's) gets many rows in one
/// message even unbatched, and which path they take depends on the rows the weight served
/// before (invariant 14): to rounding too.
#[test]
fn inference_and_evaluation_agree_with_the_training_forward_pass() {
    for max_batch in [1, 64] {
        for (name, c, data) in models() {
            let rows_in_one_message = c.graph.nodes.node_weights().any(|n| {
                matches!(n.op, amp_ir::Op::Linear { .. }) && matches!(n.inputs[0], amp_ir::PayloadTy::Batch(_))
            });
            let exact = max_batch == 1 && !rows_in_one_message;
            let agree = |a: f32, b: f32| if exact { a == b } else { (a - b).abs() <= 1e-5 * (1.0 + b.abs()) };
            let config = ExecConfig {
                workers: 2,
                max_active_keys: 4,
                max_batch,
                ..ExecConfig::deterministic(1, OptimConfig::sgd(0.0))
            };
            let mut ex = executor(&c.graph, 4, config);
            let evaluated = ex.evaluate(&data).unwrap();
            let trained = ex.train_epoch(&data).unwrap();
            for (n, inst) in data.iter().enumerate() {
                let (loss, _) = ex.grads(inst).unwrap();
                let (a, b, t) = (evaluated.losses[n], loss, trained.losses[n]);
                assert!(agree(a, b) && agree(a, t), "{name}, instance {n}: evaluate {a}, grads {b}, train {t}");
            }
            check_inference_against_reference(&c, &ex, &data);
            let single_config = ExecConfig { max_batch, ..ExecConfig::default() };
            let single = Executor::new(&c.graph, ex.params().clone(), single_config).unwrap();
            let (ours, theirs) = (ex.infer(&data).unwrap(), single.infer(&data).unwrap());
            for (a, b) in ours.iter().flatten().zip(theirs.iter().flatten()) {
                assert!(agree(*a, *b), "{name}, max_batch {max_batch}: infer {a} vs {b}");
            }
        }
    }
}

/// Every op of the IR runs (none is refused any more): a `reduce` of a tensor in IR text,
/// `loss = (sum(W 1 + b))^2`, against its hand-computed loss and gradient.
#[test]
fn a_reduce_of_a_tensor_written_as_ir_text_runs() {
    let text = r#"amp.graph @T {
  state %inst: instance
  param l.weight: f32[2, 3] uniform(3)
  param l.bias: f32[2] uniform(3)
  %0 = source() -> unit writes(%inst) "instances"
  %1 = const ones (%0#0: unit) -> f32[3] "c"
  %2 = linear @l (%1#0: f32[3]) -> f32[2] key(%inst) "l"
  %3 = reduce sum (%2#0: f32[2]) -> f32 key(%inst) "r"
  %4 = const zeros (%0#0: unit) -> f32 "z"
  %5 = loss mse (%3#0: f32, %4#0: f32) -> () key(%inst) "loss"
}
"#;
    let graph = amp_ir::verify::verify(amp_ir::text::parse(text).unwrap()).unwrap();
    let params = ParamSet::init(&ParamSpec::of_graph(&graph), 0);
    let r: f32 = params.data(0).iter().sum::<f32>() + params.data(1).iter().sum::<f32>();
    let mut ex = Executor::new(&graph, params, ExecConfig::default()).unwrap();
    let (loss, grads) = ex.grads(&NoData).unwrap();
    assert!((loss - r * r).abs() <= 1e-5 * (1.0 + r * r), "{loss} vs {}", r * r);
    for (_, g) in grads.iter() {
        assert!(g.iter().all(|&v| (v - 2.0 * r).abs() <= 1e-5), "{g:?} vs {}", 2.0 * r);
    }
}

/// An instance without data, for graphs that read none.
struct NoData;
impl amp_ir::InstanceData for NoData {
    fn int_at(&self, _: &[amp_ir::ResolvedStep]) -> Option<i64> {
        None
    }
    fn len_at(&self, _: &[amp_ir::ResolvedStep]) -> Option<i64> {
        None
    }
}
impl amp_exec::ExecInstance for NoData {
    fn f32_at(&self, _: &[amp_ir::ResolvedStep]) -> Option<&[f32]> {
        None
    }
}

/// A `forget` of a batch answers with a zero gradient of the batch's run-time size (the
/// lowering emits none today; the IR allows it).
#[test]
fn a_forgotten_batch_gets_a_zero_gradient_of_its_size() {
    let text = r#"amp.graph @F {
  state %inst: instance, %e0: element
  param l.weight: f32[2, 3] uniform(3)
  param l.bias: f32[2] uniform(3)
  %0 = source() -> unit writes(%inst) "instances"
  %1 = flatmap %e0 [3] (%0#0: unit) -> unit writes(%e0) key(%inst) "elements"
  %2 = const ones (%1#0: unit) -> f32[3] "c"
  %3 = group %e0 [3] (%2#0: f32[3], %0#0: unit) -> f32[?, 3] writes(%e0) key(%inst) "batch"
  %4 = forget(%3#0: f32[?, 3]) -> unit "forget"
  %5 = const ones (%4#0: unit) -> f32[3] "c"
  %6 = linear @l (%5#0: f32[3]) -> f32[2] key(%inst) "l"
  %7 = const zeros (%0#0: unit) -> f32[2] "z"
  %8 = loss mse (%6#0: f32[2], %7#0: f32[2]) -> () key(%inst) "loss"
}
"#;
    let graph =
        amp_ir::verify::verify(amp_ir::text::parse(text).unwrap()).unwrap_or_else(|errors| panic!("{errors:?}"));
    let config = ExecConfig { workers: 2, placement: Placement::RoundRobin, ..ExecConfig::default() };
    let mut ex = executor(&graph, 0, config);
    let (loss, grads) = ex.grads(&NoData).unwrap();
    assert!(loss > 0.0 && grads.iter().all(|(_, g)| g.iter().all(|v| v.is_finite())));
    ex.train_epoch(&[NoData, NoData]).unwrap();
}
