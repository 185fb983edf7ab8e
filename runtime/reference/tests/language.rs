//! The language constructs the checker accepts in function bodies, run on small programs
//! with outputs computed by hand, and gradient checks of the tensor constructs the five
//! examples do not reach (gather, scatter with an empty destination, tensor indexing,
//! `top_k`, parameter arrays, stdlib layers, layer functions, catch-all match arms).

mod common;

use amp_data::Value;
use amp_reference::Reference;
use common::{compile, grad_check, init_params, ints, tensor};

const CONTROL: &str = r#"
enum Op { Add { n: int }, Mul { n: int }, Skip }
record R { ops: [Op], xs: [int], v: f32[8], label: int }

model Control(size: int = 8) {
    fn count(op: Op) -> int {
        match op {
            Add { n } => n,
            Mul { n: m } => m * 2,
            _ => 0 - 1,
        }
    }

    fn forward(r: R) -> (int, int, int, bool, [int], f32, [int]) {
        var acc = 0;
        for op in r.ops {
            acc = acc + count(op);
        }
        var i = 0;
        var evens = 0;
        while i < len(r.xs) && !(evens >= 3) {
            if r.xs[i] % 2 == 0 {
                evens = evens + 1;
            } else if r.xs[i] < 0 || r.xs[i] > 100 {
                evens = evens + 1;
            }
            i = i + 1;
        }
        let (a, b) = (acc / 3, -acc % 4);
        let doubled = r.xs.map(|x| x * 2);
        let total = sum(doubled) + len(range(size)) + sum(0..3);
        var dot = 0;
        for (x, y) in zip(r.xs, doubled) {
            dot = dot + x * y;
        }
        let pair = (acc, i);
        (a, b, total, evens == 3, doubled, r.v[i], [pair.1, pair.0, dot])
    }

    fn loss(r: R) -> f32 { r.v[r.label] * r.v[0] }
}
"#;

fn op(tag: u32, n: Option<i64>) -> Value {
    Value::Variant { tag, fields: n.map(Value::Int).into_iter().collect() }
}

#[test]
fn ints_bools_loops_match_and_tuples_evaluate_as_written() {
    let (program, model) = compile(CONTROL, &[]);
    let reference = Reference::new(&program, model).unwrap();
    let params = init_params(&program, model, 0);
    let ops = Value::Seq(vec![op(0, Some(5)), op(1, Some(3)), op(2, None), op(0, Some(3))]);
    let v: Vec<f32> = (0..8).map(|i| i as f32 + 0.5).collect();
    let input = Value::Record(vec![ops, ints(&[1, 4, 201, 6, 8, 10]), tensor(v), Value::Int(2)]);
    // acc = 5 + 6 - 1 + 3 = 13; the loop stops after 4, 201 and 6 (i = 4); 13 / 3 = 4 and
    // -13 % 4 = -1 (truncating); 2 * (1 + 4 + 201 + 6 + 8 + 10) + 8 + (0 + 1 + 2) = 471;
    // the dot product of xs and 2 xs is 2 * (1 + 16 + 40401 + 36 + 64 + 100) = 81236.
    let out = reference.forward(&params, &input).unwrap();
    let expected = [4.0, -1.0, 471.0, 1.0, 2.0, 8.0, 402.0, 12.0, 16.0, 20.0, 4.5, 4.0, 13.0, 81236.0];
    assert_eq!(out, expected);
    let (loss, grads) = reference.loss_and_grads(&params, &input).unwrap();
    assert_eq!(loss, 2.5 * 0.5);
    assert!(grads.is_empty());
}

const TREE: &str = r#"
use std::nn::TreeLstmCell;
enum Tree { Leaf { word: int }, Node { left: Tree, right: Tree }, Empty }
record S { tree: Tree, label: int }

model Trees(hidden: int = 4) {
    param emb = Embedding(10, 3);
    param cell = TreeLstmCell(3, hidden);
    param head = Linear(hidden, 3);

    fn encode(t: Tree) -> (f32[hidden], f32[hidden]) {
        match t {
            Leaf { word } => cell.leaf(emb(word)),
            Node { left, right } => cell.branch(encode(left), encode(right)),
            _ => (zeros(), zeros()),
        }
    }

    fn depth(t: Tree) -> int {
        match t {
            Node { left, right } => {
                let a = depth(left);
                let b = depth(right);
                if a > b { a + 1 } else { b + 1 }
            }
            other => is_leaf(other),
        }
    }

    fn is_leaf(t: Tree) -> int {
        match t {
            Leaf { .. } => 1,
            _ => 0,
        }
    }

    fn forward(s: S) -> (f32[3], int) {
        let (h, _) = encode(s.tree);
        (head(h), depth(s.tree))
    }

    fn loss(s: S) -> f32 {
        let (logits, _) = forward(s);
        cross_entropy(logits, s.label)
    }
}
"#;

fn leaf(word: i64) -> Value {
    Value::Variant { tag: 0, fields: vec![Value::Int(word)] }
}

fn node(left: Value, right: Value) -> Value {
    Value::Variant { tag: 1, fields: vec![left, right] }
}

fn empty() -> Value {
    Value::Variant { tag: 2, fields: Vec::new() }
}

#[test]
fn recursion_layer_functions_and_catch_all_arms() {
    let (program, model) = compile(TREE, &[]);
    let reference = Reference::new(&program, model).unwrap();
    let params = init_params(&program, model, 21);
    let tree = node(node(leaf(1), empty()), node(node(leaf(4), leaf(9)), leaf(2)));
    let input = Value::Record(vec![tree, Value::Int(1)]);
    let out = reference.forward(&params, &input).unwrap();
    assert_eq!(out.len(), 4);
    assert_eq!(out[3], 4.0, "depth (root, right, node, leaf): the catch-all arm binds the whole value");
    grad_check(&reference, &params, &input, 22, 2);
    // A lone leaf: depth 1 through `other => is_leaf(other)`.
    let out = reference.forward(&params, &Value::Record(vec![leaf(3), Value::Int(0)])).unwrap();
    assert_eq!(out[3], 1.0);
}

const FEATURES: &str = r#"
use std::nn::{LstmCell, Mlp};
record R { xs: [int], idx: [int], v: f32[4], target: f32[4], label: int }

model Features(h: int = 4) {
    param emb = Embedding(6, h);
    param lin = Linear(h, h);
    param experts = [Linear(h, h); 3];
    param lstm = LstmCell(h, h);
    param mlp = Mlp(h, 6, h);

    fn forward(r: R) -> f32[h] {
        let hs = r.xs.map(|x| emb(x));
        let gathered = r.idx.map(|i| lin(hs[i]));
        let scattered = scatter_sum(gathered, r.idx, 3);
        var state: (f32[h], f32[h]) = (zeros(), zeros());
        for x in scattered {
            state = lstm(x, state);
        }
        let (hfin, cfin) = state;
        let m = mean(hs) + sum(scattered) * r.v[1];
        let (top, w) = top_k(softmax(m), 2);
        let routed = experts[top[0]](hfin) * w[0] + experts[top[1] % 3](cfin) * w[1];
        let [a, b] = split(concat(routed, mlp(m)), 2);
        let gate = if argmax(a) == 0 { exp(-a) } else { log(ones(h) + a * a) };
        gate / (ones(h) * 2.0 + b * b) + mean(a) - sum(b) / 4.0 + mse(a, r.target) + log_softmax(b)[0]
    }

    fn loss(r: R) -> f32 { cross_entropy(forward(r), r.label) }
}
"#;

#[test]
fn gather_scatter_indexing_top_k_arrays_and_layers_have_correct_gradients() {
    let (program, model) = compile(FEATURES, &[]);
    let reference = Reference::new(&program, model).unwrap();
    let params = init_params(&program, model, 31);
    let input = Value::Record(vec![
        ints(&[1, 5, 2, 0]),
        ints(&[2, 0, 2]), // destination 1 of the scatter stays empty
        tensor(vec![0.3, -0.7, 0.2, 0.9]),
        tensor(vec![0.1, 0.2, -0.3, 0.4]),
        Value::Int(3),
    ]);
    grad_check(&reference, &params, &input, 32, 2);
    // Only the experts `top_k` picked get gradients.
    let (_, grads) = reference.loss_and_grads(&params, &input).unwrap();
    let used = (0..3).filter(|e| grads.get(&format!("experts.{e}.weight")).unwrap().iter().any(|&g| g != 0.0));
    assert!((1..=2).contains(&used.count()));
}

#[test]
fn hyperparameters_inside_layers_take_the_instance_values() {
    let text = r#"
        layer Scaled(n: int) {
            param lin = Linear(n, 2 * n);
            fn apply(x: f32[n]) -> f32[2 * n] {
                var acc: f32[2 * n] = zeros();
                for _ in 0..n {
                    acc = acc + lin(x);
                }
                acc
            }
        }
        record R { x: f32[3], label: int }
        model UsesLayer(k: int = 3) {
            param s = Scaled(k);
            fn forward(r: R) -> f32[2 * k] { s(r.x) }
            fn loss(r: R) -> f32 { cross_entropy(forward(r), r.label) }
        }
    "#;
    let (program, model) = compile(text, &[]);
    let reference = Reference::new(&program, model).unwrap();
    let mut params = amp_params::ParamSet::zeros(reference.specs());
    params.get_mut("s.lin.bias").unwrap().copy_from_slice(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
    let input = Value::Record(vec![tensor(vec![1.0, 2.0, 3.0]), Value::Int(0)]);
    // `n` is 3 inside the layer: three additions of the bias, shape `2 * n` = 6.
    assert_eq!(reference.forward(&params, &input).unwrap(), [3.0, 6.0, 9.0, 12.0, 15.0, 18.0]);
}
