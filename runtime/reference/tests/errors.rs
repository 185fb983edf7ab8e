//! Bad instance data and runaway programs give a `RefError` that points at the source,
//! never a panic; random ill-typed data never crashes the evaluator.
#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

mod common;

use amp_data::{Tensor, Value};
use amp_params::ParamSet;
use amp_reference::{ErrorKind, RefError, Reference};
use common::{compile, example, init_params, ints, tensor, Rng};

/// The source text an error points at.
fn pointed<'t>(text: &'t str, err: &RefError) -> &'t str {
    &text[err.span.range()]
}

fn edge(src: i64, dst: i64, kind: i64) -> Value {
    Value::Record(vec![Value::Int(src), Value::Int(dst), Value::Int(kind)])
}

#[test]
fn a_label_out_of_range_is_an_error_at_cross_entropy() {
    let text = example("mlp");
    let (program, model) = compile(&text, &[("hidden", 4)]);
    let reference = Reference::new(&program, model).unwrap();
    let params = init_params(&program, model, 1);
    for label in [10, -1] {
        let input = Value::Record(vec![tensor(vec![0.5; 64]), Value::Int(label)]);
        let err = reference.loss_and_grads(&params, &input).unwrap_err();
        assert_eq!(err.kind, ErrorKind::LabelOutOfRange { label, classes: 10 });
        assert!(pointed(&text, &err).starts_with("cross_entropy("), "{}", pointed(&text, &err));
        assert!(err.to_string().contains(&format!("label {label} is out of range for 10 classes")), "{err}");
    }
}

#[test]
fn an_embedding_index_out_of_range_is_an_error_at_the_lookup() {
    let text = example("list_reduce");
    let (program, model) = compile(&text, &[("hidden", 4)]);
    let reference = Reference::new(&program, model).unwrap();
    let params = init_params(&program, model, 1);
    let input = Value::Record(vec![ints(&[3, 14]), Value::Int(1)]);
    let err = reference.loss(&params, &input).unwrap_err();
    assert_eq!(err.kind, ErrorKind::EmbeddingOutOfRange { index: 14, count: 14 });
    assert_eq!(pointed(&text, &err), "embed(tok)");
    assert!(err.to_string().contains("embedding index 14 is out of range"), "{err}");
}

#[test]
fn gather_and_parameter_array_indices_out_of_range_are_errors() {
    let text = example("ggsnn");
    let (program, model) = compile(&text, &[("hidden", 4), ("steps", 1)]);
    let reference = Reference::new(&program, model).unwrap();
    let params = init_params(&program, model, 1);
    let graph = |edges: Vec<Value>| Value::Record(vec![ints(&[0, 1]), Value::Seq(edges), Value::Int(0)]);
    let err = reference.forward(&params, &graph(vec![edge(0, 1, 0), edge(2, 0, 0)])).unwrap_err();
    assert_eq!(err.kind, ErrorKind::IndexOutOfRange { index: 2, len: 2 });
    assert_eq!(pointed(&text, &err), "h[e.src]");
    let err = reference.forward(&params, &graph(vec![edge(0, 1, 2)])).unwrap_err();
    assert_eq!(err.kind, ErrorKind::IndexOutOfRange { index: 2, len: 2 });
    assert_eq!(pointed(&text, &err), "msg[e.kind]");
    let err = reference.forward(&params, &graph(vec![edge(0, 5, 0)])).unwrap_err();
    assert_eq!(err.kind, ErrorKind::ScatterIndexOutOfRange { index: 5, n: 2 });
    assert!(pointed(&text, &err).starts_with("scatter_sum("));
}

const RUNAWAY: &str = r#"
enum Tree { Leaf { word: int }, Node { left: Tree, right: Tree } }
record R { tree: Tree, a: int, b: int, spin: bool, v: f32[2], label: int }

model Runaway(n: int = 2) {
    fn depth(t: Tree) -> int {
        match t {
            Leaf { .. } => 1,
            Node { left, right } => {
                let a = depth(left);
                let b = depth(right);
                if a > b { a + 1 } else { b + 1 }
            }
        }
    }

    fn forward(r: R) -> (int, int) {
        var i = 0;
        while r.spin {
            i = i + 1;
        }
        (r.a / r.b + i, depth(r.tree))
    }

    fn loss(r: R) -> f32 { mse(r.v, zeros(n)) }
}
"#;

fn runaway_input(tree: Value, b: i64, spin: bool) -> Value {
    Value::Record(vec![tree, Value::Int(7), Value::Int(b), Value::Bool(spin), tensor(vec![1.0, 2.0]), Value::Int(0)])
}

fn leaf() -> Value {
    Value::Variant { tag: 0, fields: vec![Value::Int(0)] }
}

/// A left comb of `depth` nodes.
fn comb(depth: usize) -> Value {
    (0..depth).fold(leaf(), |t, _| Value::Variant { tag: 1, fields: vec![t, leaf()] })
}

/// Runs `f` on a thread with a large stack: dropping a deeply nested `Value` recurses.
fn with_large_stack(f: impl FnOnce() + Send) {
    std::thread::scope(|s| {
        std::thread::Builder::new().stack_size(256 << 20).spawn_scoped(s, f).unwrap().join().unwrap();
    });
}

#[test]
fn integer_division_by_zero_a_runaway_loop_and_deep_recursion_are_errors() {
    let (program, model) = compile(RUNAWAY, &[]);
    let reference = Reference::new(&program, model).unwrap();
    let params = ParamSet::zeros(reference.specs());
    let out = reference.forward(&params, &runaway_input(comb(3), 2, false)).unwrap();
    assert_eq!(out, [3.0, 4.0]);
    let err = reference.forward(&params, &runaway_input(comb(3), 0, false)).unwrap_err();
    assert_eq!(err.kind, ErrorKind::DivisionByZero);
    assert_eq!(pointed(RUNAWAY, &err), "r.a / r.b");
    let err = reference.forward(&params, &runaway_input(comb(3), 2, true)).unwrap_err();
    assert!(matches!(err.kind, ErrorKind::LoopLimit { .. }), "{err}");
    assert_eq!(pointed(RUNAWAY, &err), "r.spin");
    with_large_stack(|| {
        // Deep but within the limit: evaluates.
        let out = reference.forward(&params, &runaway_input(comb(1500), 2, false)).unwrap();
        assert_eq!(out[1], 1501.0);
        let err = reference.forward(&params, &runaway_input(comb(5000), 2, false)).unwrap_err();
        assert!(matches!(err.kind, ErrorKind::RecursionLimit { .. }), "{err}");
        assert_eq!(pointed(RUNAWAY, &err), "depth(left)");
        let err = reference.forward(&params, &runaway_input(comb(12_000), 2, false)).unwrap_err();
        assert!(matches!(err.kind, ErrorKind::BadInput { .. }), "{err}");
    });
}

#[test]
fn recursion_nested_deep_inside_expressions_stops_before_the_stack_overflows() {
    // Each level of recursion sits under 200 additions: within the call-depth limit, but
    // far more stack per level than usual.
    let sum = format!("depth(left){}", " + 1".repeat(200));
    let text = RUNAWAY.replace("let a = depth(left);", &format!("let a = {sum};"));
    let (program, model) = compile(&text, &[]);
    let reference = Reference::new(&program, model).unwrap();
    let params = ParamSet::zeros(reference.specs());
    with_large_stack(|| {
        let out = reference.forward(&params, &runaway_input(comb(10), 2, false)).unwrap();
        assert_eq!(out[1], 2011.0, "10 levels of 200 additions and 1, and the leaf");
        // An unoptimised build runs out of stack budget (an error, not an overflow); an
        // optimised one has smaller frames and may finish.
        match reference.forward(&params, &runaway_input(comb(1990), 2, false)) {
            Ok(out) => assert_eq!(out[1], (201 * 1990 + 1) as f32),
            Err(err) => assert!(matches!(err.kind, ErrorKind::StackLimit { .. }), "{err}"),
        }
    });
}

#[test]
fn data_that_does_not_fit_the_input_type_names_the_field() {
    let text = example("tree_lstm");
    let (program, model) = compile(&text, &[("vocab", 10), ("embed", 3), ("hidden", 2)]);
    let reference = Reference::new(&program, model).unwrap();
    let params = init_params(&program, model, 1);
    let leaf = |word: Value| Value::Variant { tag: 0, fields: vec![word, Value::Int(0)] };
    let sentence = |tree: Value| Value::Record(vec![tree, Value::Int(0)]);
    let cases = [
        (sentence(Value::Variant { tag: 2, fields: vec![] }), "tree", "variant tag 2 is out of range"),
        (sentence(leaf(Value::Bool(true))), "tree.Leaf.word", "expected an int, found a bool"),
        (
            sentence(Value::Variant { tag: 1, fields: vec![leaf(Value::Int(1)), Value::Int(3), Value::Int(0)] }),
            "tree.Node.right",
            "expected an enum variant, found an int",
        ),
        (Value::Record(vec![leaf(Value::Int(1))]), "", "1 fields given, 2 expected"),
        (Value::Int(3), "", "expected a record, found an int"),
    ];
    for (input, path, problem) in cases {
        let err = reference.loss(&params, &input).unwrap_err();
        let ErrorKind::BadInput { path: p, problem: m } = &err.kind else { panic!("{err}") };
        assert_eq!((p.as_str(), m.starts_with(problem)), (path, true), "{err}");
        assert_eq!(pointed(&text, &err), "s", "points at the entry point's parameter");
    }
    let mlp = example("mlp");
    let (program, model) = compile(&mlp, &[("hidden", 4)]);
    let reference = Reference::new(&program, model).unwrap();
    let params = init_params(&program, model, 1);
    let input = Value::Record(vec![tensor(vec![0.0; 63]), Value::Int(0)]);
    let err = reference.loss(&params, &input).unwrap_err();
    assert!(err.to_string().contains("bad input data at `pixels`: expected a tensor of shape [64]"), "{err}");
}

#[test]
fn a_parameter_set_of_another_model_is_refused() {
    let (program, model) = compile(&example("mlp"), &[("hidden", 4)]);
    let reference = Reference::new(&program, model).unwrap();
    let other = init_params(&program, model, 1);
    let (program8, model8) = compile(&example("mlp"), &[("hidden", 8)]);
    let params8 = init_params(&program8, model8, 1);
    let input = Value::Record(vec![tensor(vec![0.0; 64]), Value::Int(0)]);
    assert!(reference.loss(&other, &input).is_ok());
    let err = reference.loss(&params8, &input).unwrap_err();
    assert!(matches!(err.kind, ErrorKind::ParamMismatch { .. }), "{err}");
    let err = reference.loss(&ParamSet::zeros(&[]), &input).unwrap_err();
    assert!(matches!(err.kind, ErrorKind::ParamMismatch { .. }), "{err}");
}

/// A random value of any shape: kinds, lengths, tags and tensor shapes all arbitrary.
fn random_value(rng: &mut Rng, depth: usize) -> Value {
    let kind = if depth > 3 { rng.below(3) } else { rng.below(7) };
    let small = |rng: &mut Rng| rng.below(40) as i64 - 10;
    match kind {
        0 => Value::Int(small(rng)),
        1 => Value::Bool(rng.below(2) == 0),
        2 => {
            let shape = if rng.below(2) == 0 { vec![rng.below(70)] } else { vec![rng.below(3), rng.below(3)] };
            let data = rng.vec(shape.iter().product());
            Value::Tensor(Tensor { shape, data })
        }
        3 => Value::Seq((0..rng.below(5)).map(|_| random_value(rng, depth + 1)).collect()),
        4 => Value::Tuple((0..rng.below(3)).map(|_| random_value(rng, depth + 1)).collect()),
        5 => Value::Record((0..rng.below(4)).map(|_| random_value(rng, depth + 1)).collect()),
        _ => Value::Variant {
            tag: rng.below(4) as u32,
            fields: (0..rng.below(4)).map(|_| random_value(rng, depth + 1)).collect(),
        },
    }
}

/// `value` with some ints replaced by small random ones (indices and labels out of
/// range) and, now and then, a part replaced by a random value.
fn mutate(rng: &mut Rng, value: &Value) -> Value {
    if rng.below(40) == 0 {
        return random_value(rng, 2);
    }
    fn each(rng: &mut Rng, items: &[Value]) -> Vec<Value> {
        items.iter().map(|v| mutate(rng, v)).collect()
    }
    match value {
        Value::Int(_) if rng.below(4) == 0 => Value::Int(rng.below(40) as i64 - 10),
        Value::Seq(items) => Value::Seq(each(rng, items)),
        Value::Tuple(items) => Value::Tuple(each(rng, items)),
        Value::Record(items) => Value::Record(each(rng, items)),
        Value::Variant { tag, fields } => Value::Variant { tag: *tag, fields: each(rng, fields) },
        other => other.clone(),
    }
}

/// A canonical example: its name, `-D` overrides and a valid instance.
type ExampleCase = (&'static str, &'static [(&'static str, i64)], Value);

#[test]
fn random_and_mutated_data_never_panics() {
    let tree = |w: i64| Value::Variant { tag: 0, fields: vec![Value::Int(w), Value::Int(0)] };
    let models: [ExampleCase; 5] = [
        ("mlp", &[("hidden", 4)], Value::Record(vec![tensor(vec![0.5; 64]), Value::Int(3)])),
        ("list_reduce", &[("hidden", 4)], Value::Record(vec![ints(&[1, 2, 3]), Value::Int(3)])),
        (
            "tree_lstm",
            &[("vocab", 10), ("embed", 3), ("hidden", 2)],
            Value::Record(vec![
                Value::Variant { tag: 1, fields: vec![tree(1), tree(2), Value::Int(0)] },
                Value::Int(1),
            ]),
        ),
        (
            "ggsnn",
            &[("hidden", 4), ("steps", 2)],
            Value::Record(vec![ints(&[0, 1, 2]), Value::Seq(vec![edge(0, 1, 0), edge(2, 1, 1)]), Value::Int(1)]),
        ),
        ("moe", &[("experts", 3)], Value::Record(vec![tensor(vec![0.1; 256]), Value::Int(2)])),
    ];
    let mut rng = Rng::new(99);
    for (name, defines, base) in models {
        let (program, model) = compile(&example(name), defines);
        let reference = Reference::new(&program, model).unwrap();
        let params = init_params(&program, model, 1);
        assert!(reference.loss_and_grads(&params, &base).is_ok(), "{name}: the base instance is valid");
        let (mut ok, mut failed) = (0, 0);
        for i in 0..200 {
            let input = if i % 4 == 0 { random_value(&mut rng, 0) } else { mutate(&mut rng, &base) };
            // Either outcome is fine; a panic or an internal error is not.
            match reference.loss_and_grads(&params, &input) {
                Ok(_) => ok += 1,
                Err(e) => {
                    assert!(!matches!(e.kind, ErrorKind::Internal { .. }), "{name}: {e}");
                    failed += 1;
                }
            }
        }
        assert!(ok > 0 && failed > 0, "{name}: {ok} ok, {failed} failed: the mutations should reach both");
    }
}
