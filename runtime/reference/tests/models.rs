//! Whole-model gradient checks on the five canonical examples, the attention example and
//! `layer_norm` (small hyperparameters,
//! hand-built instances): the analytic gradient of every parameter against finite
//! differences of the loss.

mod common;

use amp_data::Value;
use amp_reference::Reference;
use common::{compile, example, grad_check, init_params, ints, tensor, Rng};

fn leaf(word: i64, label: i64) -> Value {
    Value::Variant { tag: 0, fields: vec![Value::Int(word), Value::Int(label)] }
}

fn node(left: Value, right: Value, label: i64) -> Value {
    Value::Variant { tag: 1, fields: vec![left, right, Value::Int(label)] }
}

fn edge(src: i64, dst: i64, kind: i64) -> Value {
    Value::Record(vec![Value::Int(src), Value::Int(dst), Value::Int(kind)])
}

#[test]
fn mlp_gradients_match_finite_differences() {
    let (program, model) = compile(&example("mlp"), &[("hidden", 8)]);
    let reference = Reference::new(&program, model).unwrap();
    let params = init_params(&program, model, 1);
    let mut rng = Rng::new(7);
    let input = Value::Record(vec![tensor(rng.vec(64)), Value::Int(3)]);
    assert_eq!(reference.forward(&params, &input).unwrap().len(), 10);
    grad_check(&reference, &params, &input, 11, 2);
}

#[test]
fn list_reduce_gradients_match_finite_differences() {
    let (program, model) = compile(&example("list_reduce"), &[("hidden", 8)]);
    let reference = Reference::new(&program, model).unwrap();
    let params = init_params(&program, model, 2);
    let input = Value::Record(vec![ints(&[3, 5, 1, 7, 2, 13]), Value::Int(4)]);
    grad_check(&reference, &params, &input, 12, 2);
}

#[test]
fn list_reduce_of_an_empty_list_uses_only_the_head() {
    let (program, model) = compile(&example("list_reduce"), &[("hidden", 8)]);
    let reference = Reference::new(&program, model).unwrap();
    let params = init_params(&program, model, 2);
    let input = Value::Record(vec![ints(&[]), Value::Int(4)]);
    let (_, grads) = reference.loss_and_grads(&params, &input).unwrap();
    assert!(grads.get("embed.weight").unwrap().iter().all(|&g| g == 0.0));
    assert!(grads.get("cell.weight").unwrap().iter().all(|&g| g == 0.0));
    assert!(grads.get("head.bias").unwrap().iter().any(|&g| g != 0.0));
}

#[test]
fn tree_lstm_gradients_match_finite_differences() {
    let defines = [("vocab", 20), ("embed", 6), ("hidden", 8)];
    let (program, model) = compile(&example("tree_lstm"), &defines);
    let reference = Reference::new(&program, model).unwrap();
    let params = init_params(&program, model, 3);
    let tree = node(node(leaf(3, 1), leaf(7, 2), 1), node(leaf(11, 0), leaf(3, 4), 3), 2);
    let input = Value::Record(vec![tree, Value::Int(2)]);
    grad_check(&reference, &params, &input, 13, 2);
}

#[test]
fn ggsnn_gradients_match_finite_differences() {
    let defines = [("hidden", 8), ("steps", 3)];
    let (program, model) = compile(&example("ggsnn"), &defines);
    let reference = Reference::new(&program, model).unwrap();
    let params = init_params(&program, model, 4);
    let edges = vec![edge(0, 1, 0), edge(1, 2, 1), edge(2, 0, 0), edge(3, 1, 1), edge(0, 3, 1)];
    let input = Value::Record(vec![ints(&[1, 3, 0, 5]), Value::Seq(edges), Value::Int(1)]);
    grad_check(&reference, &params, &input, 14, 2);
}

#[test]
fn moe_gradients_match_finite_differences() {
    // `Sample.x` is `f32[256]` in the record, so `d` stays 256; fewer experts keep it small.
    let defines = [("experts", 4), ("k", 2)];
    let (program, model) = compile(&example("moe"), &defines);
    let reference = Reference::new(&program, model).unwrap();
    let params = init_params(&program, model, 5);
    let mut rng = Rng::new(9);
    let input = Value::Record(vec![tensor(rng.vec(256)), Value::Int(6)]);
    grad_check(&reference, &params, &input, 15, 1);
    // Exactly the two routed experts get gradients.
    let (_, grads) = reference.loss_and_grads(&params, &input).unwrap();
    let routed =
        (0..4).filter(|e| grads.get(&format!("expert.{e}.l1.weight")).unwrap().iter().any(|&g| g != 0.0)).count();
    assert_eq!(routed, 2);
}

/// The new built-ins through the whole evaluator: `examples/attention.amp` (`gelu`, `dot`,
/// a `softmax` across a sequence of scores, a weighted sum) and `layer_norm`.
#[test]
fn attention_gradients_match_finite_differences() {
    let (program, model) = compile(&example("attention"), &[("hidden", 6)]);
    let reference = Reference::new(&program, model).unwrap();
    let params = init_params(&program, model, 3);
    let input = Value::Record(vec![ints(&[3, 5, 1, 7, 2]), Value::Int(4)]);
    grad_check(&reference, &params, &input, 13, 2);
}

#[test]
fn layer_norm_gradients_match_finite_differences() {
    let source = r#"
record R { x: f32[5], label: int }
model M {
    param a = Linear(5, 4);
    param b = Linear(4, 3);
    fn forward(r: R) -> f32[3] { b(gelu(layer_norm(a(r.x)) * 2.0)) }
    fn loss(r: R) -> f32 { cross_entropy(forward(r), r.label) }
}
"#;
    let (program, model) = compile(source, &[]);
    let reference = Reference::new(&program, model).unwrap();
    let params = init_params(&program, model, 4);
    let mut rng = Rng::new(9);
    let input = Value::Record(vec![tensor(rng.vec(5)), Value::Int(1)]);
    grad_check(&reference, &params, &input, 14, 2);
}

/// A `LayerNorm(d)` layer: its parameters are PyTorch's (`ln.weight` ones, `ln.bias`
/// zeros, both `[d]`), and with other values the gradients of both, and of what feeds the
/// layer, agree with finite differences.
#[test]
fn layer_norm_layer_gradients_match_finite_differences() {
    let source = r#"
record R { x: f32[5], label: int }
model M {
    param a = Linear(5, 4);
    param ln = LayerNorm(4);
    param b = Linear(4, 3);
    fn forward(r: R) -> f32[3] { b(tanh(ln(a(r.x)))) }
    fn loss(r: R) -> f32 { cross_entropy(forward(r), r.label) }
}
"#;
    let (program, model) = compile(source, &[]);
    let reference = Reference::new(&program, model).unwrap();
    let specs = amp_reference::param_specs(&program, model).unwrap();
    let ln: Vec<(&str, &[usize], amp_ir::ParamInit)> =
        specs.iter().filter(|s| s.name.starts_with("ln.")).map(|s| (s.name.as_str(), &s.shape[..], s.init)).collect();
    assert_eq!(
        ln,
        vec![
            ("ln.weight", &[4usize][..], amp_ir::ParamInit::Ones),
            ("ln.bias", &[4usize][..], amp_ir::ParamInit::Zeros)
        ]
    );
    let mut params = init_params(&program, model, 4);
    assert!(params.get("ln.weight").unwrap().iter().all(|&w| w == 1.0));
    assert!(params.get("ln.bias").unwrap().iter().all(|&b| b == 0.0));
    let mut rng = Rng::new(10);
    for name in ["ln.weight", "ln.bias"] {
        let i = params.index(name).unwrap();
        params.data_mut(i).iter_mut().for_each(|v| *v = rng.uniform() * 2.0 - 0.5);
    }
    let input = Value::Record(vec![tensor(rng.vec(5)), Value::Int(1)]);
    grad_check(&reference, &params, &input, 15, 2);
}
