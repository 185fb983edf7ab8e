//! Dropout in the reference: with a run's masks, the gradient given the masks agrees with
//! finite differences of the loss (the masks depend on the run, never on the parameters),
//! in a loop, a `map` and a recursive tree; without, dropout is the identity; the masks
//! follow the seed, the epoch, the instance and the dynamic context.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

mod common;

use amp_data::{Tensor, Value};
use amp_reference::{DropoutRun, Reference};
use common::{compile, grad_check_with, init_params, ints, Rng};

/// Dropout per loop step, per `map` element and once per instance.
const LOOP_AND_MAP: &str = r#"
record R { tokens: [int], xs: [f32[4]], label: int }
model M(hidden: int = 6) {
    param embed = Embedding(10, hidden);
    param cell = Linear(2 * hidden, hidden);
    param lift = Linear(4, hidden);
    param head = Linear(hidden, 3);
    fn forward(r: R) -> f32[3] {
        var h: f32[hidden] = zeros();
        for t in r.tokens {
            h = tanh(cell(concat(dropout(embed(t), 0.5), h)));
        }
        let m = sum(r.xs.map(|x| dropout(tanh(lift(x)), 0.3)));
        head(dropout(h + m, 0.25))
    }
    fn loss(r: R) -> f32 { cross_entropy(forward(r), r.label) }
}
"#;

const RUN: DropoutRun = DropoutRun { seed: 3, epoch: 1, instance: 4 };

fn loop_and_map_input(rng: &mut Rng) -> Value {
    let xs = (0..3).map(|_| Value::Tensor(Tensor::new(vec![4], rng.vec(4)).unwrap())).collect();
    Value::Record(vec![ints(&[3, 5, 1, 7]), Value::Seq(xs), Value::Int(2)])
}

fn leaf(word: i64, label: i64) -> Value {
    Value::Variant { tag: 0, fields: vec![Value::Int(word), Value::Int(label)] }
}

fn node(left: Value, right: Value, label: i64) -> Value {
    Value::Variant { tag: 1, fields: vec![left, right, Value::Int(label)] }
}

fn sst_input() -> Value {
    let tree = node(node(leaf(3, 1), leaf(7, 2), 1), node(leaf(11, 0), leaf(3, 4), 3), 2);
    Value::Record(vec![tree, Value::Int(2)])
}

#[test]
fn gradients_given_the_masks_match_finite_differences_in_a_loop_and_a_map() {
    let (program, model) = compile(LOOP_AND_MAP, &[]);
    let reference = Reference::new(&program, model).unwrap();
    let params = init_params(&program, model, 5);
    let input = loop_and_map_input(&mut Rng::new(1));
    grad_check_with(&reference, &params, &input, Some(RUN), 21, 2);
}

#[test]
fn gradients_given_the_masks_match_finite_differences_in_a_tree() {
    let sst = include_str!("../../../examples/tree_lstm_sst.amp");
    let defines = [("vocab", 20), ("embed", 6), ("hidden", 8), ("drop", 50)];
    let (program, model) = compile(sst, &defines);
    let reference = Reference::new(&program, model).unwrap();
    let params = init_params(&program, model, 6);
    grad_check_with(&reference, &params, &sst_input(), Some(RUN), 22, 2);
}

/// Without a run, dropout is the identity: the loss of the model with its rates at 0. With
/// one, each word of the run changes the loss.
#[test]
fn masks_follow_the_run() {
    let sst = include_str!("../../../examples/tree_lstm_sst.amp");
    let defines = |drop| [("vocab", 20), ("embed", 6), ("hidden", 8), ("drop", drop)];
    let (program, model) = compile(sst, &defines(50));
    let (plain_program, plain_model) = compile(sst, &defines(0));
    let reference = Reference::new(&program, model).unwrap();
    let plain = Reference::new(&plain_program, plain_model).unwrap();
    let params = init_params(&program, model, 6);
    let input = sst_input();
    assert_eq!(reference.loss(&params, &input).unwrap(), plain.loss(&params, &input).unwrap());
    assert_eq!(reference.loss_with(&params, &input, None).unwrap(), plain.loss(&params, &input).unwrap());
    let loss = |run| reference.loss_with(&params, &input, Some(run)).unwrap();
    let base = loss(RUN);
    assert_eq!(base, loss(RUN), "a run's masks are a function of its words");
    for other in [DropoutRun { seed: 4, ..RUN }, DropoutRun { epoch: 2, ..RUN }, DropoutRun { instance: 5, ..RUN }] {
        assert_ne!(base, loss(other), "{other:?}");
    }
}
