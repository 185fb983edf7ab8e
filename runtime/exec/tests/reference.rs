//! `Executor::grads` against the eager reference evaluator (`amp-reference`, the
//! correctness oracle): the loss and the gradient of every parameter agree to 1e-5
//! relative (per tensor, in norm) on all five examples, including the edge cases of the
//! collection ops (empty lists and graphs, one-leaf trees, top-k ties).

mod common;

use amp_params::ParamSet;
use common::*;

#[test]
fn mlp_and_list_reduce_match_the_reference() {
    let mlp = compile_example_with_program("mlp", &[("hidden", 8)]);
    check_against_reference(&mlp, &digits(&mlp.graph, 3, 1), 1);
    let lr = compile_example_with_program("list_reduce", &[("hidden", 6)]);
    check_against_reference(&lr, &token_lists(&lr.graph, &[0, 1, 4], 14, 2), 2);
}

#[test]
fn tree_lstm_matches_the_reference() {
    let c = compile_example_with_program("tree_lstm", &[("vocab", 20), ("embed", 6), ("hidden", 5)]);
    let mut rng = Lcg(3);
    let unbalanced = Shape::node(Shape::node(Shape::node(Shape::Leaf, Shape::Leaf), Shape::Leaf), Shape::Leaf);
    let shapes = [
        Shape::Leaf,
        Shape::node(Shape::Leaf, Shape::Leaf),
        Shape::node(unbalanced, Shape::Leaf),
        Shape::random(7, &mut rng),
    ];
    check_against_reference(&c, &sentences(&c.graph, &shapes, 20, 4), 5);
}

#[test]
fn ggsnn_matches_the_reference() {
    let c = compile_example_with_program("ggsnn", &[("hidden", 6), ("steps", 2)]);
    let g = &c.graph;
    let mut data = vec![
        ggsnn_graph(g, &[3], &[], 1),
        ggsnn_graph(g, &[1, 2, 5], &[], 0),
        ggsnn_graph(g, &[4, 0], &[(1, 1, 0), (0, 1, 1)], 1),
        ggsnn_graph(g, &[2, 6, 1], &[(0, 2, 1), (0, 2, 1), (2, 0, 0)], 0),
    ];
    data.extend(ggsnn_graphs(g, &[4, 6], 7));
    check_against_reference(&c, &data, 6);
}

#[test]
fn moe_matches_the_reference() {
    let c = compile_example_with_program("moe", &[("experts", 4)]);
    let mut data = moe_samples(&c.graph, 3, 256, 8);
    // Ties in the gate: zero input, so the gate's logits are its biases; with equal
    // biases every expert ties and the lower indices win.
    data.push(moe_sample(&c.graph, vec![0.0; 256], 3));
    check_against_reference(&c, &data, 9);
    // Ties in the gate: with a zero input its logits are its biases, so equal biases tie
    // (experts 0 and 2 win over 3), and all-equal ones route to experts 0 and 1.
    let zero = moe_sample(&c.graph, vec![0.0; 256], 3);
    for (biases, chosen) in [([0.5, 0.25, 0.5, 0.5], [0, 2]), ([0.1; 4], [0, 1])] {
        let mut params = ParamSet::init(&amp_params::ParamSpec::of_graph(&c.graph), 10);
        let bias = params.index("gate.bias").unwrap();
        params.data_mut(bias).copy_from_slice(&biases);
        let grads = check_with_params(&c, params, std::slice::from_ref(&zero));
        for expert in 0..4 {
            let used = grads[0]
                .iter()
                .any(|(spec, g)| spec.name.starts_with(&format!("expert.{expert}.")) && g.iter().any(|&v| v != 0.0));
            assert_eq!(used, chosen.contains(&expert), "biases {biases:?}: expert {expert}");
        }
    }
}
