//! Losses anywhere: a loss per tree node, per time step and per element, an auxiliary term
//! computed from tensors, weighted sums and losses that differ between arms all lower to
//! loss nodes whose reports sum to the reference's loss, with every gradient equal (1e-5,
//! JIT on and off).

use super::{assert_training_on, assert_values_match, compile_source, labelled_trees, random_tree};
use amp_data::{Tensor, Value};
use amp_exec::ExecConfig;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

const SST: &str = include_str!("../../../examples/tree_lstm_sst.amp");

/// Every value matches the reference with the JIT's fused kernels and without.
fn check(name: &str, source: &str, defines: &[(&str, i64)], values: Vec<Value>) -> super::Compiled {
    let defines = defines.iter().map(|(k, v)| (k.to_string(), *v)).collect();
    let c = compile_source(name, source, defines);
    for jit in [true, false] {
        assert_values_match(&c, values.clone(), ExecConfig { jit, ..ExecConfig::default() });
    }
    c
}

fn losses(c: &super::Compiled) -> Vec<amp_ir::LossKind> {
    c.graph
        .nodes
        .node_weights()
        .filter_map(|n| match &n.op {
            amp_ir::Op::Loss(kind) => Some(kind.clone()),
            _ => None,
        })
        .collect()
}

#[test]
fn tree_lstm_with_a_loss_at_every_node_matches_the_reference() {
    let mut rng = ChaCha8Rng::seed_from_u64(21);
    let values = labelled_trees(&mut rng, 10, 1..8, 5);
    let c = check("tree_lstm_sst", SST, &[("vocab", 20), ("embed", 6), ("hidden", 5)], values);
    // One cross-entropy per arm, in the traversal, judged at the root only.
    let kinds = losses(&c);
    assert_eq!(kinds.len(), 2, "{kinds:?}");
    assert!(kinds.iter().all(|k| matches!(k, amp_ir::LossKind::Term { weight, judge: Some(_), .. } if *weight == 1.0)));
}

/// SST's binary task (`-D classes=2`): a node whose label is not a class (here 2, 3 and 4
/// of the random 0-4) takes no loss, and the executor still matches the reference. Every
/// root has a class, as `docs/experiments/sst/binary.py` keeps only such sentences (an
/// instance with no loss term at all is refused by `Executor::grads`).
#[test]
fn tree_lstm_sst_binary_skips_the_nodes_whose_label_is_not_a_class() {
    let mut rng = ChaCha8Rng::seed_from_u64(23);
    let values: Vec<Value> = (0..12)
        .map(|_| {
            let leaves = rng.random_range(1..8);
            let label = rng.random_range(0..2);
            let mut tree = random_tree(&mut rng, leaves);
            match &mut tree {
                Value::Variant { fields, .. } => {
                    if let Some(root) = fields.last_mut() {
                        *root = Value::Int(label);
                    }
                }
                _ => unreachable!("random_tree builds variants"),
            }
            Value::Record(vec![tree, Value::Int(label)])
        })
        .collect();
    let c = check("tree_lstm_sst", SST, &[("vocab", 20), ("embed", 6), ("hidden", 5), ("classes", 2)], values);
    assert_eq!(losses(&c).len(), 2);
}

/// Deterministic training with a loss at every node (many loss reports per instance,
/// batched across instances) is minibatch SGD on the reference's gradients, with and
/// without the JIT and on two workers.
#[test]
fn training_with_a_loss_at_every_node_is_minibatch_sgd() {
    let defines = [("vocab", 20), ("embed", 6), ("hidden", 5)].iter().map(|(k, v)| (k.to_string(), *v)).collect();
    let c = compile_source("tree_lstm_sst", SST, defines);
    let mut rng = ChaCha8Rng::seed_from_u64(25);
    let values = labelled_trees(&mut rng, 8, 1..7, 5);
    for base in [
        ExecConfig::default(),
        ExecConfig { jit: false, ..ExecConfig::default() },
        ExecConfig { workers: 2, ..ExecConfig::default() },
    ] {
        assert_training_on(&c, "tree_lstm_sst", 25, values.clone(), 4, base);
    }
}

const TAGGER: &str = r#"
record Tok { word: int, tag: int }
record Sent { words: [Tok], label: int }
model Tagger(hidden: int = 6) {
    param emb = Embedding(20, 5);
    param cell = Linear(5 + hidden, hidden);
    param out = Linear(hidden, 4);
    param cls = Linear(hidden, 3);
    fn forward(s: Sent) -> f32[3] {
        var h: f32[hidden] = zeros();
        for w in s.words {
            h = tanh(cell(concat(emb(w.word), h)));
        }
        cls(h)
    }
    fn loss(s: Sent) -> f32 {
        var h: f32[hidden] = zeros();
        var total = 0.0;
        for w in s.words {
            h = tanh(cell(concat(emb(w.word), h)));
            total = total + cross_entropy(out(h), w.tag);
        }
        let per_word = mean(s.words.map(|w| cross_entropy(out(tanh(cell(concat(emb(w.word), h)))), w.tag)));
        total + 0.5 * per_word + cross_entropy(forward(s), s.label)
    }
}
"#;

#[test]
fn a_sequence_model_with_a_loss_per_step_matches_the_reference() {
    let mut rng = ChaCha8Rng::seed_from_u64(22);
    let values: Vec<Value> = (0..10)
        .map(|_| {
            let n = rng.random_range(1..6);
            let words = (0..n)
                .map(|_| Value::Record(vec![Value::Int(rng.random_range(0..20)), Value::Int(rng.random_range(0..4))]))
                .collect();
            Value::Record(vec![Value::Seq(words), Value::Int(rng.random_range(0..3))])
        })
        .collect();
    let c = check("tagger", TAGGER, &[], values.clone());
    // Several loss nodes per instance, batched across instances: still minibatch SGD.
    assert_training_on(&c, "tagger", 22, values, 3, ExecConfig::default());
    // The step losses, the per-word mean (halved, over the length) and the sentence's.
    let kinds = losses(&c);
    assert_eq!(kinds.len(), 3, "{kinds:?}");
    let mean = kinds.iter().find(|k| matches!(k, amp_ir::LossKind::Term { count: Some(_), .. }));
    assert!(matches!(mean, Some(amp_ir::LossKind::Term { weight, judge: None, .. }) if *weight == 0.5), "{kinds:?}");
    // Accuracy is the forward output's: the sentence's cross-entropy judges.
    assert!(kinds.iter().any(|k| matches!(k, amp_ir::LossKind::CrossEntropy { .. })), "{kinds:?}");
}

const MOE: &str = r#"
use std::nn::Mlp;
record Sample { x: f32[8], label: int }
model Moe(d: int = 8, experts: int = 4, k: int = 2, classes: int = 3) {
    param gate = Linear(d, experts);
    param expert = [Mlp(d, d, d); experts];
    param head = Linear(d, classes);
    fn forward(s: Sample) -> f32[classes] {
        let (idx, w) = top_k(softmax(gate(s.x)), k);
        head(sum(range(k).map(|j| w[j] * expert[idx[j]](s.x))))
    }
    fn loss(s: Sample) -> f32 {
        let p = softmax(gate(s.x));
        cross_entropy(forward(s), s.label) + 0.1 * sum(p * p)
    }
}
"#;

#[test]
fn a_moe_with_an_auxiliary_balance_term_matches_the_reference() {
    let mut rng = ChaCha8Rng::seed_from_u64(23);
    let values: Vec<Value> = (0..8)
        .map(|_| {
            let x: Vec<f32> = (0..8).map(|_| rng.random_range(-1.0..1.0)).collect();
            Value::Record(vec![Value::Tensor(Tensor::new(vec![8], x).unwrap()), Value::Int(rng.random_range(0..3))])
        })
        .collect();
    let c = check("moe_aux", MOE, &[], values);
    let kinds = losses(&c);
    assert!(kinds.iter().any(|k| matches!(k, amp_ir::LossKind::CrossEntropy { .. })), "{kinds:?}");
    // `0.1 * sum(p * p)` is a tensor: one scalar term.
    let scalar = amp_ir::LossKind::Term { base: amp_ir::LossBase::Scalar, weight: 1.0, count: None, judge: None };
    assert_eq!(kinds.len(), 2, "{kinds:?}");
    assert!(kinds.contains(&scalar), "{kinds:?}");
}

const WEIGHTED: &str = r#"
enum Kind { Plain { }, Scaled { factor: int } }
record R { x: f32[4], target: f32[2], kind: Kind, label: int }
model Weighted {
    param a = Linear(4, 3);
    param b = Linear(4, 2);
    fn forward(r: R) -> f32[3] { a(r.x) }
    fn loss(r: R) -> f32 {
        let main = 0.7 * cross_entropy(forward(r), r.label) + mse(b(r.x), r.target) / 4.0;
        let extra = match r.kind {
            Plain { } => mse(b(r.x), r.target),
            Scaled { factor } => 2.0 * cross_entropy(a(relu(r.x)), r.label) - 0.5,
        };
        main + 0.3 * extra
    }
}
"#;

#[test]
fn a_weighted_sum_of_two_losses_matches_the_reference() {
    let mut rng = ChaCha8Rng::seed_from_u64(24);
    let values: Vec<Value> = (0..8)
        .map(|i| {
            let x: Vec<f32> = (0..4).map(|_| rng.random_range(-1.0..1.0)).collect();
            let t: Vec<f32> = (0..2).map(|_| rng.random_range(-1.0..1.0)).collect();
            let kind = if i % 2 == 0 {
                Value::Variant { tag: 0, fields: vec![] }
            } else {
                Value::Variant { tag: 1, fields: vec![Value::Int(3)] }
            };
            Value::Record(vec![
                Value::Tensor(Tensor::new(vec![4], x).unwrap()),
                Value::Tensor(Tensor::new(vec![2], t).unwrap()),
                kind,
                Value::Int(rng.random_range(0..3)),
            ])
        })
        .collect();
    check("weighted", WEIGHTED, &[], values);
}

/// What cannot be lowered is E0600 with the reason, not a wrong loss.
#[test]
fn losses_that_are_not_weighted_sums_are_e0600() {
    let cases = [
        (
            "fn loss(r: R) -> f32 { cross_entropy(a(r.x), r.label) * sum(r.x) }",
            "a loss multiplied or divided by a tensor computed at run time",
        ),
        (
            "fn loss(r: R) -> f32 { cross_entropy(a(r.x), r.label) * mse(r.x, r.x) }",
            "a product or quotient of two losses",
        ),
        (
            "fn loss(r: R) -> f32 { var t = 0.0; for i in 0..3 { t = 0.5 * t + cross_entropy(a(r.x), r.label); } t }",
            "a loss in a loop that is not accumulated as `total = total + term`",
        ),
        (
            "fn loss(r: R) -> f32 { let l = cross_entropy(a(r.x), r.label); sum(range(3).map(|i| l + mse(r.x, r.x))) }",
            "a `map` closure adding a loss computed outside it",
        ),
    ];
    for (loss, expected) in cases {
        let source = format!(
            "record R {{ x: f32[4], label: int }}\nmodel M {{\n    param a = Linear(4, 3);\n    fn forward(r: R) -> f32[3] {{ a(r.x) }}\n    {loss}\n}}\n"
        );
        let (map, checked) = amp_sema::check_source("m.amp", &source, &amp_sema::Options::default());
        assert!(!checked.has_errors(), "{loss} checks");
        let model = checked.program.models[0];
        let Err(errors) = amp_lower::compile_model(&checked.program, &map, model) else { panic!("refused") };
        let text = format!("{errors:?}");
        assert!(text.contains("E0600") || text.contains("NotLowered"), "{text}");
        assert!(text.contains(expected), "{loss}: {text}");
    }
}

/// A child's loss that is not added exactly once would make the sum over the tree wrong.
#[test]
fn a_tree_loss_must_add_each_child_once() {
    let dropped = SST.replace("(h, c, y, ll + lr + node_loss(y, label))", "(h, c, y, ll + node_loss(y, label))");
    let doubled =
        SST.replace("(h, c, y, ll + lr + node_loss(y, label))", "(h, c, y, ll + lr + lr + node_loss(y, label))");
    for source in [dropped, doubled] {
        assert_ne!(source, SST);
        let (map, checked) = amp_sema::check_source("m.amp", &source, &amp_sema::Options::default());
        assert!(!checked.has_errors());
        let model = checked.program.models[0];
        let Err(errors) = amp_lower::compile_model(&checked.program, &map, model) else { panic!("refused") };
        assert!(format!("{errors:?}").contains("each child's loss exactly once"), "{errors:?}");
    }
}

/// With a loss at every node, accuracy is still the root's answer: one verdict per
/// instance, argmax of `forward`'s output against the root's label.
#[test]
fn accuracy_with_a_loss_at_every_node_is_the_roots() {
    let defines = [("vocab", 20), ("embed", 6), ("hidden", 5)].iter().map(|(k, v)| (k.to_string(), *v)).collect();
    let c = compile_source("tree_lstm_sst", SST, defines);
    let reference = amp_reference::Reference::new(&c.program, c.program.models[0]).expect("reference");
    let params = amp_params::ParamSet::init(&amp_params::ParamSpec::of_graph(&c.graph), 26);
    let schema = c.graph.input.clone().expect("schema");
    let mut rng = ChaCha8Rng::seed_from_u64(26);
    let values = labelled_trees(&mut rng, 24, 2..7, 5);
    let mut right = 0;
    for v in &values {
        let Value::Record(fields) = v else { unreachable!() };
        let Value::Variant { fields: root, .. } = &fields[0] else { unreachable!() };
        let Some(Value::Int(label)) = root.last() else { unreachable!() };
        let logits = reference.forward(&params, v).expect("forward");
        let best = (0..logits.len()).max_by(|&a, &b| logits[a].total_cmp(&logits[b])).expect("classes");
        right += usize::from(best as i64 == *label);
    }
    let instances: Vec<amp_data::Instance> =
        values.into_iter().map(|v| amp_data::Instance::new(&schema, v).expect("instance")).collect();
    let executor = amp_exec::Executor::new(&c.graph, params, ExecConfig::default()).expect("executor");
    let stats = executor.evaluate(&instances).expect("evaluates");
    assert!(stats.judgements.iter().all(|j| j.len() == 1), "{:?}", stats.judgements);
    assert_eq!(stats.accuracy, Some(right as f32 / 24.0));
}
