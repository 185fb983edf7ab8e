//! `Executor::grads` against central finite differences of the loss computed by
//! forward-only runs, for every parameter: two random directions per tensor and a few
//! coordinates, on mlp, list_reduce (several lengths, repeated tokens), a model that
//! uses every straight-line op the lowering emits (split, the unary functions, broadcast
//! arithmetic, if/else, loops, embedding, softmaxes, mse), and the collection models:
//! tree_lstm (trees of 1, 2 and 5 leaves, unbalanced), ggsnn (no edges, a self-loop,
//! parallel edges, every edge of one kind, a node kind twice: its batched message step
//! partitions the edges' rows by kind and merges them back, its embeddings are one
//! `embedding_rows`) and moe (random routing and tied gates). These hold with the input
//! gradients that reach no parameter skipped (`Graph::parameter_dependent`, whose
//! verdicts on the canonical models are checked here too).
#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

mod common;

use amp_data::{Instance, Tensor, Value};
use amp_exec::{ExecConfig, Executor};
use amp_ir::verify::Verified;
use amp_params::ParamSet;
use common::*;

const EPS: f32 = 5e-3;

fn loss_at(ex: &mut Executor, params: &ParamSet, inst: &Instance) -> f32 {
    ex.set_params(params.clone()).unwrap();
    ex.evaluate(std::slice::from_ref(inst)).unwrap().loss
}

/// Checks the analytic gradient of every tensor along random directions and at random
/// coordinates; returns how many checks ran.
fn check_gradients(graph: &Verified, instances: &[Instance], seed: u64) -> usize {
    let params = ParamSet::init(&amp_params::ParamSpec::of_graph(graph), seed);
    check_gradients_at(graph, params, instances, seed)
}

/// [`check_gradients`] at the given parameters.
fn check_gradients_at(graph: &Verified, base: ParamSet, instances: &[Instance], seed: u64) -> usize {
    let mut ex = Executor::new(graph, base.clone(), ExecConfig::default()).unwrap();
    let mut rng = Lcg(seed ^ 0x5eed);
    let mut checks = 0;
    let mut kinks = 0;
    for (n, inst) in instances.iter().enumerate() {
        ex.set_params(base.clone()).unwrap();
        let (loss, grads) = ex.grads(inst).unwrap();
        let forward = loss_at(&mut ex, &base, inst);
        assert!((loss - forward).abs() <= 1e-5 * (1.0 + loss.abs()), "grads' loss {loss} vs evaluate {forward}");
        for (t, (spec, g)) in grads.iter().enumerate() {
            let len = g.len();
            let mut directions: Vec<Vec<f32>> = Vec::new();
            for _ in 0..2 {
                let d: Vec<f32> = (0..len).map(|_| rng.unit()).collect();
                let norm = d.iter().map(|x| x * x).sum::<f32>().sqrt().max(1e-12);
                directions.push(d.iter().map(|x| x / norm).collect());
            }
            for _ in 0..3.min(len) {
                let mut d = vec![0.0; len];
                d[rng.below(len as u32) as usize] = 1.0;
                directions.push(d);
            }
            for d in directions {
                let analytic: f32 = g.iter().zip(&d).map(|(a, b)| a * b).sum();
                let close =
                    |numeric: f32| (numeric - analytic).abs() <= 2e-3 + 2e-2 * numeric.abs().max(analytic.abs());
                let numeric = central_difference(&mut ex, &base, inst, t, &d, EPS);
                if !close(numeric) {
                    // A relu kink within EPS bends the difference quotient; a smaller
                    // step must agree (it is noisier, hence counted and bounded below).
                    let fine = central_difference(&mut ex, &base, inst, t, &d, EPS / 5.0);
                    assert!(
                        close(fine),
                        "instance {n}, `{}`: finite differences {numeric}, {fine} vs gradient {analytic}",
                        spec.name
                    );
                    kinks += 1;
                }
                checks += 1;
            }
        }
    }
    assert!(kinks * 10 <= checks, "{kinks} of {checks} checks needed the smaller step");
    checks
}

fn central_difference(ex: &mut Executor, base: &ParamSet, inst: &Instance, t: usize, d: &[f32], eps: f32) -> f32 {
    let mut plus = base.clone();
    let mut minus = base.clone();
    for ((p, m), dv) in plus.data_mut(t).iter_mut().zip(minus.data_mut(t).iter_mut()).zip(d) {
        *p += eps * dv;
        *m -= eps * dv;
    }
    (loss_at(ex, &plus, inst) - loss_at(ex, &minus, inst)) / (2.0 * eps)
}

#[test]
fn mlp_gradients_match_finite_differences() {
    let graph = compile_example("mlp", &[("hidden", 8)]);
    let data = digits(&graph, 3, 7);
    assert!(check_gradients(&graph, &data, 3) >= 3 * 6 * 4);
}

#[test]
fn list_reduce_gradients_match_finite_differences_for_several_lengths() {
    let graph = compile_example("list_reduce", &[("hidden", 6)]);
    let mut data = token_lists(&graph, &[0, 1, 2, 5], 14, 11);
    // A repeated token: its embedding row gets two contributions.
    let repeated = Value::Record(vec![Value::Seq(vec![Value::Int(3), Value::Int(9), Value::Int(3)]), Value::Int(4)]);
    data.push(instance(&graph, repeated));
    check_gradients(&graph, &data, 5);
}

#[test]
fn every_lowered_op_has_the_right_gradient() {
    let text = include_str!("ops.amp");
    let graph = compile_source("ops.amp", text, &[("h", 5)]);
    let mut rng = Lcg(21);
    let data: Vec<Instance> = [0i64, 1, 2, 3]
        .iter()
        .map(|&n| {
            let x: Vec<f32> = (0..4).map(|_| rng.unit()).collect();
            let y: Vec<f32> = (0..3).map(|_| rng.unit()).collect();
            let value = Value::Record(vec![
                Value::Tensor(Tensor::new(vec![4], x).unwrap()),
                Value::Tensor(Tensor::new(vec![3], y).unwrap()),
                Value::Int(n),
                Value::Int(n % 5),
            ]);
            instance(&graph, value)
        })
        .collect();
    check_gradients(&graph, &data, 9);
}

#[test]
fn tree_lstm_gradients_match_finite_differences() {
    let graph = compile_example("tree_lstm", &[("vocab", 20), ("embed", 6), ("hidden", 5)]);
    let left_heavy = Shape::node(Shape::node(Shape::node(Shape::Leaf, Shape::Leaf), Shape::Leaf), Shape::Leaf);
    let shapes = [Shape::Leaf, Shape::node(Shape::Leaf, Shape::Leaf), Shape::node(left_heavy, Shape::Leaf)];
    let data = sentences(&graph, &shapes, 20, 31);
    check_gradients(&graph, &data, 13);
}

#[test]
fn ggsnn_gradients_match_finite_differences() {
    let graph = compile_example("ggsnn", &[("hidden", 6), ("steps", 2)]);
    let data = [
        // No edges: every message context is empty.
        ggsnn_graph(&graph, &[1, 4], &[], 0),
        // A self-loop and parallel edges into one node; the kinds interleave, so the rows
        // `partition_rows` splits by kind come back in order from `merge_rows`.
        ggsnn_graph(&graph, &[3, 0, 7], &[(1, 1, 0), (0, 2, 1), (1, 2, 1), (2, 0, 0)], 1),
        // Every edge of one kind: the other arm's Linear runs on no rows. Two nodes of one
        // kind: `embedding_rows` adds both rows' gradients into one table row.
        ggsnn_graph(&graph, &[2, 5, 2], &[(0, 1, 1), (2, 1, 1), (1, 0, 1)], 0),
    ];
    check_gradients(&graph, &data, 17);
}

#[test]
fn moe_gradients_match_finite_differences() {
    // One random sample (each costs a few hundred forward passes; the reference tests
    // cover more routings).
    let graph = compile_example("moe", &[("experts", 4)]);
    check_gradients(&graph, &moe_samples(&graph, 1, 256, 41), 19);
    // A tie between the two chosen experts (a zero input makes the gate's logits its
    // biases): the loss does not depend on their order, so it is smooth there.
    let mut params = ParamSet::init(&amp_params::ParamSpec::of_graph(&graph), 23);
    let bias = params.index("gate.bias").unwrap();
    params.data_mut(bias).copy_from_slice(&[0.5, 0.5, 0.1, 0.1]);
    check_gradients_at(&graph, params, &[moe_sample(&graph, vec![0.0; 256], 4)], 23);
}

/// The labels of the Linear nodes whose input does (or does not) depend on a parameter.
fn linear_inputs(graph: &Verified) -> (Vec<String>, Vec<String>) {
    let dependent = graph.parameter_dependent();
    let (mut with, mut without) = (Vec::new(), Vec::new());
    for index in graph.nodes.node_indices() {
        if !matches!(graph.nodes[index].op, amp_ir::Op::Linear { .. }) {
            continue;
        }
        let (producer, _) = graph.input_edge(index, 0).expect("an input");
        let label = graph.nodes[index].label.clone();
        if dependent[producer.index()] {
            with.push(label);
        } else {
            without.push(label);
        }
    }
    with.sort();
    without.sort();
    (with, without)
}

/// The MoE's gate and its experts' first layers read the sample (routed by a decision
/// made from the gate, which carries no gradient); the second layers and the head read
/// what parameters computed. In Tree-LSTM every Linear reads embeddings or cells' states;
/// the MLP's first layer reads the pixels.
#[test]
fn inputs_that_depend_on_parameters() {
    let (with, without) = linear_inputs(&compile_example("moe", &[("experts", 3)]));
    assert_eq!(with, ["expert.0.l2", "expert.1.l2", "expert.2.l2", "head"]);
    assert_eq!(without, ["expert.0.l1", "expert.1.l1", "expert.2.l1", "gate"]);
    let (with, without) = linear_inputs(&compile_example("tree_lstm", &[("vocab", 30), ("embed", 10), ("hidden", 8)]));
    assert!(!with.is_empty() && without.is_empty(), "{without:?}");
    let (_, without) = linear_inputs(&compile_example("mlp", &[("hidden", 16)]));
    assert_eq!(without.len(), 1, "the first layer reads the pixels: {without:?}");
}
