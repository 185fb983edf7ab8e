//! Dropout: the executor's masks are the reference's. Masks hash the run's seed, the
//! epoch, the instance's index in its data set, the call's site and its dynamic context
//! (loop step, map element, tree node), so `grads` with training's masks, training on two
//! workers with batching and the JIT, and the reference replaying the same words agree
//! (loss and every gradient, 1e-5); a seed repeats its losses and another changes them;
//! a rate of 0 is no dropout; evaluation and inference ignore dropout.

use super::{compile_source, labelled_trees, relative_error, Compiled};
use amp_data::{Instance, Tensor, Value};
use amp_exec::{ExecConfig, ExecInstance, Executor};
use amp_ir::dropout::DropoutRun;
use amp_ir::{InstanceData, ResolvedStep};
use amp_params::{OptimConfig, ParamSet};
use amp_reference::Reference;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// Dropout in a loop's body (per step), in a `map` closure (per element) and once per
/// instance; every rate follows `drop` (percent), so `-D drop=0` is a rate of 0.
const LOOP_AND_MAP: &str = r#"
record R { tokens: [int], xs: [f32[4]], label: int }
model M(hidden: int = 6, drop: int = 50) {
    param embed = Embedding(10, hidden);
    param cell = Linear(2 * hidden, hidden);
    param lift = Linear(4, hidden);
    param head = Linear(hidden, 3);
    fn forward(r: R) -> f32[3] {
        var h: f32[hidden] = zeros();
        for t in r.tokens {
            h = tanh(cell(concat(dropout(embed(t), drop / 100.0), h)));
        }
        let m = sum(r.xs.map(|x| dropout(relu(lift(x)), drop / 150.0)));
        head(dropout(h + m, drop / 200.0))
    }
    fn loss(r: R) -> f32 { cross_entropy(forward(r), r.label) }
}
"#;

/// Dropout in a structural recursion (per tree node, in both arms), with a loss at every
/// node, `forward` and `loss` walking the same tree.
const TREE: &str = r#"
enum Tree { Leaf { word: int, label: int }, Node { left: Tree, right: Tree, label: int } }
record S { tree: Tree, label: int }
model T(hidden: int = 5, drop: int = 40) {
    param emb = Embedding(20, hidden);
    param branch = Linear(2 * hidden, hidden);
    param head = Linear(hidden, 5);
    fn walk(t: Tree) -> (f32[hidden], f32[5], f32) {
        match t {
            Leaf { word, label } => {
                let h = dropout(emb(word), drop / 100.0);
                let y = head(h);
                (h, y, cross_entropy(y, label))
            }
            Node { left, right, label } => {
                let (hl, _, ll) = walk(left);
                let (hr, _, lr) = walk(right);
                let h = dropout(tanh(branch(concat(hl, hr))), drop / 160.0);
                let y = head(h);
                (h, y, ll + lr + cross_entropy(y, label))
            }
        }
    }
    fn forward(s: S) -> f32[5] { let (_, y, _) = walk(s.tree); y }
    fn loss(s: S) -> f32 { let (_, _, l) = walk(s.tree); l }
}
"#;

/// An instance with its index in a data set, which dropout's masks hash.
struct Indexed(Instance, u64);

impl InstanceData for Indexed {
    fn int_at(&self, path: &[ResolvedStep]) -> Option<i64> {
        self.0.int_at(path)
    }
    fn len_at(&self, path: &[ResolvedStep]) -> Option<i64> {
        self.0.len_at(path)
    }
}

impl ExecInstance for Indexed {
    fn f32_at(&self, path: &[ResolvedStep]) -> Option<&[f32]> {
        self.0.f32_at(path)
    }
    fn data_index(&self) -> Option<u64> {
        Some(self.1)
    }
}

fn loop_and_map_values(count: usize, seed: u64) -> Vec<Value> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    (0..count)
        .map(|_| {
            let tokens = (0..rng.random_range(0..5)).map(|_| Value::Int(rng.random_range(0..10))).collect();
            let xs = (0..rng.random_range(0..4))
                .map(|_| {
                    let x: Vec<f32> = (0..4).map(|_| rng.random_range(-1.0..1.0)).collect();
                    Value::Tensor(Tensor::new(vec![4], x).unwrap())
                })
                .collect();
            Value::Record(vec![Value::Seq(tokens), Value::Seq(xs), Value::Int(rng.random_range(0..3))])
        })
        .collect()
}

fn tree_values(count: usize, seed: u64) -> Vec<Value> {
    labelled_trees(&mut ChaCha8Rng::seed_from_u64(seed), count, 1..7, 5)
}

fn compiled(name: &str, source: &str, drop: i64) -> Compiled {
    compile_source(name, source, vec![("drop".to_string(), drop)])
}

fn instances(c: &Compiled, values: &[Value], index: impl Fn(usize) -> u64) -> Vec<Indexed> {
    let schema = c.graph.input.clone().expect("schema");
    values
        .iter()
        .enumerate()
        .map(|(i, v)| Indexed(Instance::new(&schema, v.clone()).expect("instance"), index(i)))
        .collect()
}

/// `Executor::grads` with training's masks gives the reference's loss and gradients given
/// the same masks, for instances of several indices and epochs, with the JIT and without;
/// and the masks matter (some loss differs from the one without dropout).
pub(super) fn assert_grads_match(c: &Compiled, values: &[Value]) {
    let reference = Reference::new(&c.program, c.program.models[0]).expect("reference");
    let params = ParamSet::init(&amp_params::ParamSpec::of_graph(&c.graph), 4);
    let seed = 17;
    let inputs = instances(c, values, |i| 3 * i as u64 + 1);
    for jit in [true, false] {
        let config = ExecConfig { jit, dropout_seed: seed, dropout_in_grads: true, ..ExecConfig::default() };
        let mut executor = Executor::new(&c.graph, params.clone(), config).expect("executor");
        let mut changed = 0;
        for (i, (value, input)) in values.iter().zip(&inputs).enumerate() {
            let epoch = i as u64 % 3;
            executor.set_epoch(epoch);
            let run = DropoutRun { seed, epoch, instance: input.1 };
            let (ref_loss, ref_grads) = reference.loss_and_grads_with(&params, value, Some(run)).expect("reference");
            let (loss, grads) = executor.grads(input).unwrap_or_else(|e| panic!("#{i}: {e}"));
            assert!(relative_error(&[loss], &[ref_loss]) <= 1e-5, "jit {jit} #{i}: {loss} vs {ref_loss}\n{value:?}");
            for (spec, expected) in ref_grads.iter() {
                let err = relative_error(grads.get(&spec.name).expect("gradient"), expected);
                assert!(err <= 1e-5, "jit {jit} #{i}: gradient of `{}` differs by {err:e}\n{value:?}", spec.name);
            }
            let plain = reference.loss(&params, value).expect("reference");
            if (plain - ref_loss).abs() > 1e-4 {
                changed += 1;
            }
        }
        assert!(changed > values.len() / 2, "dropout changed only {changed} of {} losses", values.len());
    }
}

#[test]
fn dropout_in_a_loop_and_a_map_matches_the_reference() {
    let c = compiled("dropout_loop_map", LOOP_AND_MAP, 50);
    assert_grads_match(&c, &loop_and_map_values(12, 1));
}

#[test]
fn dropout_in_a_recursive_tree_matches_the_reference() {
    let c = compiled("dropout_tree", TREE, 40);
    assert_grads_match(&c, &tree_values(12, 2));
}

/// Training with dropout on two workers, several instances in flight, batching and the
/// JIT, one synchronous update at the end of the epoch, instances named by shuffled data
/// indices: each instance's loss and the update are the reference's with the same masks.
#[test]
fn training_with_dropout_on_two_workers_is_the_reference_s_step() {
    for (name, source, values) in
        [("dropout_loop_map", LOOP_AND_MAP, loop_and_map_values(10, 3)), ("dropout_tree", TREE, tree_values(10, 4))]
    {
        let c = compiled(name, source, 50);
        let reference = Reference::new(&c.program, c.program.models[0]).expect("reference");
        let initial = ParamSet::init(&amp_params::ParamSpec::of_graph(&c.graph), 6);
        let (seed, epoch, lr) = (23, 4, 0.1);
        let order: Vec<u64> = (0..values.len() as u64).map(|i| (i * 7 + 3) % values.len() as u64).collect();
        let inputs = instances(&c, &values, |i| order[i]);
        let mut sum = initial.zeros_like();
        let mut expected_losses = Vec::new();
        for (value, input) in values.iter().zip(&inputs) {
            let run = DropoutRun { seed, epoch, instance: input.1 };
            let (loss, g) = reference.loss_and_grads_with(&initial, value, Some(run)).expect("reference");
            expected_losses.push(loss);
            for i in 0..sum.len() {
                sum.data_mut(i).iter_mut().zip(g.data(i)).for_each(|(s, x)| *s += x);
            }
        }
        let config = ExecConfig {
            workers: 2,
            max_active_keys: 6,
            min_update_frequency: values.len() as u64,
            optimizer: OptimConfig::sgd(lr),
            dropout_seed: seed,
            ..ExecConfig::default()
        };
        let mut executor = Executor::new(&c.graph, initial.clone(), config).expect("executor");
        executor.set_epoch(epoch);
        let stats = executor.train_epoch(&inputs).unwrap_or_else(|e| panic!("{name}: {e}"));
        for (i, (got, want)) in stats.losses.iter().zip(&expected_losses).enumerate() {
            assert!(relative_error(&[*got], &[*want]) <= 1e-5, "{name} #{i}: loss {got} vs {want}");
        }
        let n = values.len() as f32;
        for (i, (spec, start)) in initial.iter().enumerate() {
            let want: Vec<f32> = start.iter().zip(sum.data(i)).map(|(p, g)| p - lr * g / n).collect();
            let err = relative_error(executor.params().get(&spec.name).expect("parameter"), &want);
            assert!(err <= 1e-5, "{name}: `{}` after the update differs by {err:e}", spec.name);
        }
        assert_eq!(executor.epoch(), epoch + 1, "an epoch moves the masks on");
    }
}

/// Deterministic training (one worker, an update every 2 instances) for two epochs:
/// the same seed gives the same losses bit for bit, another seed other losses.
#[test]
fn a_seed_repeats_its_losses_and_another_seed_changes_them() {
    let c = compiled("dropout_tree", TREE, 50);
    let values = tree_values(8, 5);
    let inputs = instances(&c, &values, |i| i as u64);
    let params = ParamSet::init(&amp_params::ParamSpec::of_graph(&c.graph), 8);
    let run = |seed: u64| -> Vec<f32> {
        let config = ExecConfig { dropout_seed: seed, ..ExecConfig::deterministic(2, OptimConfig::sgd(0.1)) };
        let mut executor = Executor::new(&c.graph, params.clone(), config).expect("executor");
        (0..2).flat_map(|_| executor.train_epoch(&inputs).expect("epoch").losses).collect()
    };
    let first = run(5);
    assert_eq!(first, run(5), "the same seed");
    let other = run(6);
    let differ = first.iter().zip(&other).filter(|(a, b)| a != b).count();
    assert!(differ > first.len() / 2, "another seed changed only {differ} of {} losses", first.len());
}

/// A rate of 0 keeps every unit as it is: training's loss and gradients are those of no
/// dropout, bit for bit. Evaluation and inference apply no mask at any rate: their losses
/// and outputs are those of the rate-0 graph and the reference's.
#[test]
fn rate_zero_is_no_dropout_and_evaluation_ignores_dropout() {
    let values = loop_and_map_values(8, 7);
    let zero = compiled("dropout_loop_map", LOOP_AND_MAP, 0);
    let half = compiled("dropout_loop_map", LOOP_AND_MAP, 50);
    let params = ParamSet::init(&amp_params::ParamSpec::of_graph(&zero.graph), 2);
    let reference = Reference::new(&zero.program, zero.program.models[0]).expect("reference");
    let inputs = instances(&zero, &values, |i| i as u64);
    let with_masks = ExecConfig { dropout_seed: 9, dropout_in_grads: true, ..ExecConfig::default() };
    let mut masked = Executor::new(&zero.graph, params.clone(), with_masks).expect("executor");
    let mut plain = Executor::new(&zero.graph, params.clone(), ExecConfig::default()).expect("executor");
    let dropouts =
        |c: &Compiled| c.graph.nodes.node_weights().filter(|n| matches!(n.op, amp_ir::Op::Dropout { .. })).count();
    assert_eq!((dropouts(&zero), dropouts(&half)), (0, 3), "a rate of 0 lowers to no node");
    for (i, (value, input)) in values.iter().zip(&inputs).enumerate() {
        let (loss, grads) = masked.grads(input).expect("grads");
        let (plain_loss, plain_grads) = plain.grads(input).expect("grads");
        assert_eq!(loss, plain_loss);
        assert_eq!(grads, plain_grads);
        // The reference applies rate-0 masks (all ones): the same bits as none.
        let run = DropoutRun { seed: 9, epoch: 0, instance: i as u64 };
        let (ref_loss, ref_grads) = reference.loss_and_grads(&params, value).expect("reference");
        assert_eq!(
            (ref_loss, ref_grads.clone()),
            reference.loss_and_grads_with(&params, value, Some(run)).expect("reference")
        );
        assert!(relative_error(&[loss], &[ref_loss]) <= 1e-5);
    }
    let evaluate = |c: &Compiled| {
        let config = ExecConfig { workers: 2, max_active_keys: 4, dropout_seed: 9, ..ExecConfig::default() };
        let executor = Executor::new(&c.graph, params.clone(), config).expect("executor");
        (executor.evaluate(&inputs).expect("evaluate").losses, executor.infer(&inputs).expect("infer"))
    };
    // On two workers, batches form as messages arrive, and a batch's path changes the
    // rounding only (ARCHITECTURE, invariant 14): equal to f32 rounding, not bit for bit.
    let (losses, outputs) = evaluate(&half);
    let (zero_losses, zero_outputs) = evaluate(&zero);
    assert!(relative_error(&losses, &zero_losses) <= 1e-6);
    for (i, value) in values.iter().enumerate() {
        assert!(relative_error(&outputs[i], &zero_outputs[i]) <= 1e-6, "#{i}: output");
        let want = reference.loss(&params, value).expect("reference");
        assert!(relative_error(&[losses[i]], &[want]) <= 1e-5, "#{i}: {} vs {want}", losses[i]);
        let forward = reference.forward(&params, value).expect("reference");
        assert!(relative_error(&outputs[i], &forward) <= 1e-5, "#{i}: output");
    }
}

/// Dropout in a `while` loop (its counter numbers the iterations from 0) and in a `for`
/// over a range that does not start at 0 (its counter is the range's value), with an int
/// variable the loop updates: the reference keeps the same words.
#[test]
fn dropout_in_while_and_range_loops_matches_the_reference() {
    let source = r#"
record R { tokens: [int], label: int }
model W(hidden: int = 5) {
    param embed = Embedding(10, hidden);
    param cell = Linear(2 * hidden, hidden);
    param head = Linear(hidden, 3);
    fn forward(r: R) -> f32[3] {
        var h: f32[hidden] = zeros();
        var i = 0;
        while i < len(r.tokens) {
            h = tanh(cell(concat(dropout(embed(r.tokens[i]), 0.4), h)));
            i = i + 1;
        }
        for k in 2..5 {
            h = tanh(cell(concat(dropout(h, 0.3), embed(k))));
        }
        head(h)
    }
    fn loss(r: R) -> f32 { cross_entropy(forward(r), r.label) }
}
"#;
    let c = compile_source("dropout_while", source, Vec::new());
    let mut rng = ChaCha8Rng::seed_from_u64(12);
    let values: Vec<Value> = (0..10)
        .map(|_| {
            let tokens = (0..rng.random_range(0..5)).map(|_| Value::Int(rng.random_range(0..10))).collect();
            Value::Record(vec![Value::Seq(tokens), Value::Int(rng.random_range(0..3))])
        })
        .collect();
    assert_grads_match(&c, &values);
}
