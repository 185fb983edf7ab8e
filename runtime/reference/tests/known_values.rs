//! Losses and outputs computed by hand.

mod common;

use amp_data::Value;
use amp_params::ParamSet;
use amp_reference::{param_specs, Reference};
use common::{compile, example, ints, tensor};

fn set(params: &mut ParamSet, name: &str, values: &[(usize, f32)]) {
    let data = params.get_mut(name).unwrap_or_else(|| panic!("no parameter `{name}`"));
    for &(i, v) in values {
        data[i] = v;
    }
}

#[test]
fn mlp_with_hand_set_weights_gives_the_hand_computed_loss() {
    let (program, model) = compile(&example("mlp"), &[("hidden", 2)]);
    let reference = Reference::new(&program, model).unwrap();
    let mut params = ParamSet::zeros(reference.specs());
    // l1 picks pixel 0 and minus pixel 1; l2 is the identity; out maps hidden 0 to class 3
    // and hidden 1 to class 5.
    set(&mut params, "l1.weight", &[(0, 1.0), (64 + 1, -1.0)]);
    set(&mut params, "l2.weight", &[(0, 1.0), (3, 1.0)]);
    set(&mut params, "out.weight", &[(3 * 2, 1.0), (5 * 2 + 1, 1.0)]);
    let mut pixels = vec![0.0; 64];
    pixels[0] = 2.0;
    pixels[1] = -3.0;
    let input = Value::Record(vec![tensor(pixels), Value::Int(5)]);
    let logits = reference.forward(&params, &input).unwrap();
    assert_eq!(logits, [0.0, 0.0, 0.0, 2.0, 0.0, 3.0, 0.0, 0.0, 0.0, 0.0]);
    let expected = -(3.0 - (8.0 + 2f64.exp() + 3f64.exp()).ln());
    let loss = reference.loss(&params, &input).unwrap();
    assert!((f64::from(loss) - expected).abs() < 1e-5, "{loss} vs {expected}");
    // d loss / d out.bias = softmax(logits) - onehot(5).
    let (_, grads) = reference.loss_and_grads(&params, &input).unwrap();
    let z = 8.0 + 2f64.exp() + 3f64.exp();
    let bias_grad = grads.get("out.bias").unwrap();
    assert!((f64::from(bias_grad[5]) - (3f64.exp() / z - 1.0)).abs() < 1e-5);
    assert!((f64::from(bias_grad[0]) - 1.0 / z).abs() < 1e-5);
}

#[test]
fn list_reduce_with_zero_weights_is_cross_entropy_of_the_head_bias() {
    let (program, model) = compile(&example("list_reduce"), &[("hidden", 4)]);
    let reference = Reference::new(&program, model).unwrap();
    let mut params = ParamSet::zeros(reference.specs());
    let bias: Vec<f32> = (0..10).map(|i| i as f32 * 0.1).collect();
    params.get_mut("head.bias").unwrap().copy_from_slice(&bias);
    let input = Value::Record(vec![ints(&[1, 2, 3]), Value::Int(7)]);
    let z: f64 = bias.iter().map(|&b| f64::from(b).exp()).sum();
    let expected = -(0.7 - z.ln());
    let loss = reference.loss(&params, &input).unwrap();
    assert!((f64::from(loss) - expected).abs() < 1e-5, "{loss} vs {expected}");
}

#[test]
fn cross_entropy_of_uniform_logits_is_ln_classes() {
    let text = "record R { label: int }
        model Uniform(classes: int = 7) {
            fn forward(_r: R) -> f32[classes] { zeros(classes) }
            fn loss(r: R) -> f32 { cross_entropy(forward(r), r.label) }
        }";
    let (program, model) = compile(text, &[]);
    let reference = Reference::new(&program, model).unwrap();
    let params = ParamSet::zeros(reference.specs());
    let loss = reference.loss(&params, &Value::Record(vec![Value::Int(3)])).unwrap();
    assert!((loss - 7f32.ln()).abs() < 1e-6);
    let (program, model) = compile(text, &[("classes", 3)]);
    let reference = Reference::new(&program, model).unwrap();
    let loss = reference.loss(&params, &Value::Record(vec![Value::Int(0)])).unwrap();
    assert!((loss - 3f32.ln()).abs() < 1e-6);
}

#[test]
fn param_specs_follow_pytorch_names_and_shapes() {
    let (program, model) = compile(&example("moe"), &[("experts", 3), ("classes", 4)]);
    let specs = param_specs(&program, model).unwrap();
    let names: Vec<&str> = specs.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names[..4], ["gate.weight", "gate.bias", "expert.0.l1.weight", "expert.0.l1.bias"]);
    assert_eq!(names.last(), Some(&"head.bias"));
    assert_eq!(specs.len(), 2 + 3 * 4 + 2);
    assert_eq!(specs[2].shape, [256, 256]);
    assert_eq!(specs[0].init, amp_ir::ParamInit::Uniform { fan_in: 256 });
    let (program, model) = compile(&example("tree_lstm"), &[]);
    let specs = param_specs(&program, model).unwrap();
    assert_eq!(specs[0].name, "emb.weight");
    assert_eq!(specs[0].shape, [5000, 300]);
    assert_eq!(specs[0].init, amp_ir::ParamInit::Normal);
}
