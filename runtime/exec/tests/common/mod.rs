//! Shared by the executor's tests: compiling Amp sources with the real compiler, building
//! instances, comparing parameter sets.
#![allow(dead_code)]
#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use amp_data::{Instance, Tensor, Value};
use amp_exec::{EpochStats, ExecConfig, Executor};
use amp_ir::verify::Verified;
use amp_params::ParamSet;
use amp_reference::Reference;
use amp_sema::{check_source, Options};

/// A compiled model with the checked program it came from (for the reference evaluator).
pub struct Compiled {
    pub graph: Verified,
    pub program: amp_sema::Program,
    pub model: amp_sema::ComponentId,
}

/// Checks, lowers, optimises and verifies an Amp program (as `ampc compile` does).
pub fn compile_source(name: &str, text: &str, defines: &[(&str, i64)]) -> Verified {
    compile_with_program(name, text, defines).graph
}

/// [`compile_source`], keeping the checked program.
pub fn compile_with_program(name: &str, text: &str, defines: &[(&str, i64)]) -> Compiled {
    let options = Options { defines: defines.iter().map(|(k, v)| (k.to_string(), *v)).collect() };
    let (map, checked) = check_source(name, text, &options);
    assert!(!checked.has_errors(), "{}", amp_diagnostics::render_human(&map, &checked.diagnostics, false));
    let model = checked.program.models[0];
    let mut graph = match amp_lower::lower_model(&checked.program, &map, model) {
        Ok(g) => g,
        Err(d) => panic!("lowering failed: {}", amp_diagnostics::render_human(&map, &d, false)),
    };
    amp_lower::passes::optimize(&mut graph);
    let graph = match Verified::new(graph) {
        Ok(graph) => graph,
        Err(r) => panic!("{:?}\n{}", r.errors, amp_ir::text::print(&r.graph)),
    };
    Compiled { graph, program: checked.program, model }
}

/// Compiles `examples/NAME.amp` with `-D` overrides.
pub fn compile_example(name: &str, defines: &[(&str, i64)]) -> Verified {
    compile_example_with_program(name, defines).graph
}

/// [`compile_example`], keeping the checked program.
pub fn compile_example_with_program(name: &str, defines: &[(&str, i64)]) -> Compiled {
    let path = format!("{}/../../examples/{name}.amp", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    compile_with_program(&format!("{name}.amp"), &text, defines)
}

pub fn instance(graph: &Verified, value: Value) -> Instance {
    Instance::new(graph.input.as_ref().expect("the graph has an input schema"), value).expect("a valid instance")
}

/// A tiny deterministic generator (tests must not depend on a crate's RNG stream).
pub struct Lcg(pub u64);

impl Lcg {
    pub fn next_u32(&mut self) -> u32 {
        self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        (self.0 >> 33) as u32
    }

    /// Uniform in [-1, 1).
    pub fn unit(&mut self) -> f32 {
        self.next_u32() as f32 / (1u64 << 31) as f32 - 1.0
    }

    pub fn below(&mut self, n: u32) -> u32 {
        self.next_u32() % n
    }
}

/// `Digit { pixels: f32[64], label }` instances with random pixels.
pub fn digits(graph: &Verified, n: usize, seed: u64) -> Vec<Instance> {
    let mut rng = Lcg(seed);
    (0..n)
        .map(|_| {
            let pixels: Vec<f32> = (0..64).map(|_| rng.unit()).collect();
            // A learnable label: which quarter of the image is brightest.
            let sums: Vec<f32> = pixels.chunks(16).map(|c| c.iter().sum()).collect();
            let label = (0..4).max_by(|&a, &b| sums[a].total_cmp(&sums[b])).unwrap_or(0) as i64;
            let value = Value::Record(vec![Value::Tensor(Tensor::new(vec![64], pixels).unwrap()), Value::Int(label)]);
            instance(graph, value)
        })
        .collect()
}

/// `Example { tokens, label }` instances with `len` tokens below `vocab`.
pub fn token_lists(graph: &Verified, lens: &[usize], vocab: u32, seed: u64) -> Vec<Instance> {
    let mut rng = Lcg(seed);
    lens.iter()
        .map(|&len| {
            let tokens: Vec<i64> = (0..len).map(|_| i64::from(rng.below(vocab))).collect();
            // A learnable label: the first token mod 10 (0 for an empty list).
            let label = tokens.first().map_or(0, |t| t % 10);
            let value =
                Value::Record(vec![Value::Seq(tokens.into_iter().map(Value::Int).collect()), Value::Int(label)]);
            instance(graph, value)
        })
        .collect()
}

/// Four copies on four workers, asynchronous SGD with 8 in flight, traced: the run in
/// which each copy's share of the work is counted, in one process and across two.
pub fn four_traced_copies() -> ExecConfig {
    ExecConfig {
        workers: 4,
        copies: 4,
        max_active_keys: 16,
        sync_updates: false,
        trace: true,
        ..ExecConfig::deterministic(8, amp_params::OptimConfig::sgd(0.1))
    }
}

pub fn executor(graph: &Verified, seed: u64, config: ExecConfig) -> Executor {
    let params = ParamSet::init(&amp_params::ParamSpec::of_graph(graph), seed);
    Executor::new(graph, params, config).expect("the executor accepts the graph")
}

/// The largest difference between two parameter sets, relative to `1 + |b|`.
pub fn max_rel_diff(a: &ParamSet, b: &ParamSet) -> f32 {
    assert!(a.same_layout(b));
    a.iter()
        .zip(b.iter())
        .flat_map(|((_, x), (_, y))| x.iter().zip(y).map(|(p, q)| (p - q).abs() / (1.0 + q.abs())))
        .fold(0.0, f32::max)
}

/// Trains `reference` and `other` one epoch each on `data`; asserts that their losses
/// agree to 1e-5 relative and their parameters afterwards to 1e-5 (`max_rel_diff`).
/// `what` names the comparison in failures. Returns both epochs' stats, `reference`'s
/// first.
pub fn train_alike(
    what: &str,
    reference: &mut Executor,
    other: &mut Executor,
    data: &[Instance],
) -> (EpochStats, EpochStats) {
    let a = reference.train_epoch(data).unwrap();
    let b = other.train_epoch(data).unwrap();
    for (x, y) in b.losses.iter().zip(&a.losses) {
        assert!((x - y).abs() <= 1e-5 * (1.0 + y.abs()), "{what}: loss {x} vs {y}");
    }
    let diff = max_rel_diff(other.params(), reference.params());
    assert!(diff < 1e-5, "{what}: parameters differ by {diff}");
    (a, b)
}

/// The shape of a binary tree for `Sentence` instances: a leaf, or a node of two subtrees.
#[derive(Clone, Debug)]
pub enum Shape {
    Leaf,
    Node(Box<Shape>, Box<Shape>),
}

impl Shape {
    pub fn node(l: Shape, r: Shape) -> Shape {
        Shape::Node(Box::new(l), Box::new(r))
    }

    /// A random tree of `leaves` leaves (at least 1), split at random points.
    pub fn random(leaves: usize, rng: &mut Lcg) -> Shape {
        if leaves <= 1 {
            return Shape::Leaf;
        }
        let left = 1 + rng.below(leaves as u32 - 1) as usize;
        Shape::node(Shape::random(left, rng), Shape::random(leaves - left, rng))
    }

    fn value(&self, rng: &mut Lcg, vocab: u32, classes: u32) -> Value {
        let label = Value::Int(i64::from(rng.below(classes)));
        match self {
            Shape::Leaf => Value::Variant { tag: 0, fields: vec![Value::Int(i64::from(rng.below(vocab))), label] },
            Shape::Node(l, r) => {
                let (l, r) = (l.value(rng, vocab, classes), r.value(rng, vocab, classes));
                Value::Variant { tag: 1, fields: vec![l, r, label] }
            }
        }
    }
}

/// `Sentence { tree, label }` instances of tree_lstm, words below `vocab`, 5 classes.
pub fn sentences(graph: &Verified, shapes: &[Shape], vocab: u32, seed: u64) -> Vec<Instance> {
    let mut rng = Lcg(seed);
    shapes
        .iter()
        .map(|shape| {
            let tree = shape.value(&mut rng, vocab, 5);
            let value = Value::Record(vec![tree, Value::Int(i64::from(rng.below(5)))]);
            instance(graph, value)
        })
        .collect()
}

/// A ggsnn `Graph { nodes, edges: [Edge { src, dst, kind }], label }` instance.
pub fn ggsnn_graph(graph: &Verified, nodes: &[i64], edges: &[(i64, i64, i64)], label: i64) -> Instance {
    let nodes = Value::Seq(nodes.iter().map(|&k| Value::Int(k)).collect());
    let edges = Value::Seq(
        edges.iter().map(|&(s, d, k)| Value::Record(vec![Value::Int(s), Value::Int(d), Value::Int(k)])).collect(),
    );
    instance(graph, Value::Record(vec![nodes, edges, Value::Int(label)]))
}

/// Random ggsnn graphs of `sizes[i]` nodes (kinds below 8) and about 1.5 edges per node
/// (kinds below 2), labels below 2.
pub fn ggsnn_graphs(graph: &Verified, sizes: &[usize], seed: u64) -> Vec<Instance> {
    let mut rng = Lcg(seed);
    sizes
        .iter()
        .map(|&n| {
            let nodes: Vec<i64> = (0..n).map(|_| i64::from(rng.below(8))).collect();
            let m = if n == 0 { 0 } else { n + n / 2 };
            let edges: Vec<(i64, i64, i64)> = (0..m)
                .map(|_| {
                    let s = i64::from(rng.below(n as u32));
                    let d = i64::from(rng.below(n as u32));
                    (s, d, i64::from(rng.below(2)))
                })
                .collect();
            let label = i64::from(rng.below(2));
            ggsnn_graph(graph, &nodes, &edges, label)
        })
        .collect()
}

/// A moe `Sample { x: f32[d], label }` instance.
pub fn moe_sample(graph: &Verified, x: Vec<f32>, label: i64) -> Instance {
    let d = x.len();
    instance(graph, Value::Record(vec![Value::Tensor(Tensor::new(vec![d], x).unwrap()), Value::Int(label)]))
}

/// Random moe samples of `d` values, labels below 10.
pub fn moe_samples(graph: &Verified, n: usize, d: usize, seed: u64) -> Vec<Instance> {
    let mut rng = Lcg(seed);
    (0..n)
        .map(|_| {
            let x: Vec<f32> = (0..d).map(|_| rng.unit()).collect();
            moe_sample(graph, x, i64::from(rng.below(10)))
        })
        .collect()
}

fn norm(x: &[f32]) -> f64 {
    x.iter().map(|&v| f64::from(v) * f64::from(v)).sum::<f64>().sqrt()
}

/// [`check_with_params`] at parameters initialised from `seed`.
pub fn check_against_reference(compiled: &Compiled, instances: &[Instance], seed: u64) -> Vec<ParamSet> {
    let params = ParamSet::init(&amp_params::ParamSpec::of_graph(&compiled.graph), seed);
    check_with_params(compiled, params, instances)
}

/// Compares the loss and the gradients of `Executor::grads` with the reference
/// evaluator's on every instance: the losses to 1e-5 relative, each gradient tensor to
/// 1e-5 of the reference's norm. Returns the executor's gradients.
pub fn check_with_params(compiled: &Compiled, params: ParamSet, instances: &[Instance]) -> Vec<ParamSet> {
    let mut ex = Executor::new(&compiled.graph, params.clone(), ExecConfig::default()).unwrap();
    let reference = Reference::new(&compiled.program, compiled.model).expect("the reference accepts the model");
    let names: Vec<&str> = reference.specs().iter().map(|s| s.name.as_str()).collect();
    let ours: Vec<&str> = params.iter().map(|(s, _)| s.name.as_str()).collect();
    assert_eq!(names, ours, "parameter layouts differ");
    let mut all = Vec::new();
    for (n, inst) in instances.iter().enumerate() {
        let (loss, grads) = ex.grads(inst).unwrap_or_else(|e| panic!("instance {n}: {e}"));
        let (ref_loss, ref_grads) =
            reference.loss_and_grads(&params, &inst.to_value()).unwrap_or_else(|e| panic!("instance {n}: {e:?}"));
        assert!(
            (loss - ref_loss).abs() <= 1e-5 * (1.0 + ref_loss.abs()),
            "instance {n}: loss {loss} vs reference {ref_loss}"
        );
        let total: f64 = ref_grads.iter().map(|(_, r)| norm(r)).sum();
        assert!(total > 1e-3, "instance {n}: the gradient is (nearly) zero, which tests nothing");
        for ((spec, g), (_, r)) in grads.iter().zip(ref_grads.iter()) {
            let diff: Vec<f32> = g.iter().zip(r).map(|(a, b)| a - b).collect();
            let (d, scale) = (norm(&diff), norm(r));
            let name = &spec.name;
            assert!(d <= 1e-5 * scale + 1e-7, "instance {n}, `{name}`: |difference| {d:e}, |reference| {scale:e}");
        }
        all.push(grads);
    }
    all
}

/// `Executor::infer` against the reference's `forward`, to 1e-5 relative per instance.
pub fn check_inference_against_reference(compiled: &Compiled, ex: &Executor, instances: &[Instance]) {
    let reference = Reference::new(&compiled.program, compiled.model).expect("the reference accepts the model");
    let outputs = ex.infer(instances).unwrap();
    for (n, (inst, out)) in instances.iter().zip(&outputs).enumerate() {
        let expected = reference.forward(ex.params(), &inst.to_value()).unwrap();
        assert_eq!(out.len(), expected.len(), "instance {n}");
        let diff: Vec<f32> = out.iter().zip(&expected).map(|(a, b)| a - b).collect();
        assert!(norm(&diff) <= 1e-5 * norm(&expected) + 1e-7, "instance {n}: {out:?} vs reference {expected:?}");
    }
}

/// Minibatch SGD from per-instance gradients (one worker's `grads`, which the equivalence
/// tests check against the reference): the mean over each `batch` instances, one step
/// per batch.
pub fn minibatch_sgd(
    graph: &Verified,
    data: &[Instance],
    batch: usize,
    config: amp_params::OptimConfig,
    epochs: usize,
) -> ParamSet {
    let mut ex = executor(graph, 1, ExecConfig::default());
    let mut params = ex.params().clone();
    let mut opt = amp_params::Optimizer::new(config, &amp_params::ParamSpec::of_graph(graph));
    for _ in 0..epochs {
        for chunk in data.chunks(batch) {
            let mut sum = params.zeros_like();
            for inst in chunk {
                ex.set_params(params.clone()).unwrap();
                let (_, g) = ex.grads(inst).unwrap();
                for (i, (_, values)) in g.iter().enumerate() {
                    sum.data_mut(i).iter_mut().zip(values).for_each(|(s, v)| *s += v);
                }
            }
            opt.step(&mut params, &sum, 1.0 / chunk.len() as f32);
        }
    }
    params
}
