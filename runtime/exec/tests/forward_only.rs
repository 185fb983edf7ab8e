//! Predictions the loss does not use (issue 43, item 2): a Tree-LSTM whose `forward`
//! classifies the root's cell state while its `loss` classifies the root's hidden state
//! compiles (it stopped the compiler with "never reaches a loss"), its loss and every
//! gradient equal the reference's, its inference is the reference's `forward`, and in
//! training the prediction's nodes run forward only: no backward batch at all.
#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

mod common;

use amp_exec::{ExecConfig, TraceKind};
use amp_params::OptimConfig;
use common::*;

fn model() -> String {
    let path = format!("{}/../../examples/tree_lstm.amp", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&path).unwrap();
    let forward = "fn forward(s: Sentence) -> f32[classes] { let (h, _) = encode(s.tree); head(h) }";
    let loss = "fn loss(s: Sentence) -> f32 { cross_entropy(forward(s), s.label) }";
    assert!(text.contains(forward) && text.contains(loss), "the example changed: update this test");
    text.replace(forward, "fn forward(s: Sentence) -> f32[classes] { let (_h, c) = encode(s.tree); head(c) }")
        .replace(loss, "fn loss(s: Sentence) -> f32 { let (h, _c) = encode(s.tree); cross_entropy(head(h), s.label) }")
}

#[test]
fn a_prediction_the_loss_does_not_use_trains_forward_only() {
    let defines = [("vocab", 30), ("embed", 10), ("hidden", 8)];
    let compiled = compile_with_program("tree_lstm.amp", &model(), &defines);
    let mut rng = Lcg(5);
    let shapes: Vec<Shape> = (0..8).map(|i| Shape::random(1 + i % 6, &mut rng)).collect();
    let trees = sentences(&compiled.graph, &shapes, 30, 4);
    check_against_reference(&compiled, &trees, 3);

    let config = ExecConfig { max_active_keys: 4, trace: true, ..ExecConfig::deterministic(4, OptimConfig::sgd(0.1)) };
    let mut ex = executor(&compiled.graph, 3, config);
    ex.train_epoch(&trees).unwrap();
    check_inference_against_reference(&compiled, &ex, &trees);
    let trace = ex.take_trace();
    let heads: Vec<u32> =
        (0..ex.placement().len() as u32).filter(|&n| ex.node_name(n).starts_with("linear head")).collect();
    assert_eq!(heads.len(), 2, "the loss's classifier and the prediction's");
    let batches = |node: u32, kind: TraceKind| trace.iter().filter(|e| e.node == node && e.kind == kind).count();
    let mut backward: Vec<usize> = heads.iter().map(|&h| batches(h, TraceKind::Backward)).collect();
    backward.sort_unstable();
    assert_eq!(backward[0], 0, "the prediction's classifier runs no backward batch");
    assert!(backward[1] > 0, "the loss's classifier does");
    assert!(heads.iter().all(|&h| batches(h, TraceKind::Forward) > 0), "both run forward");
}
