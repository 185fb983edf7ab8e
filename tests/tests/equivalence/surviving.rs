//! Batches that survive from node to node: a Linear node or fused kernel writes the rows
//! of all the messages of its batch into one buffer and each message carries its range of
//! it; the next node that takes those messages together reads the range in place
//! (`amp_exec::message::Payload::pieces`, `Payload::contiguous`). Where instances part
//! ways (another next node, a join by key, a routing decision, another worker) each
//! message goes on with its own range. With many instances in flight, so that batches of
//! several instances form and survive, training still gives the reference's result
//! exactly: synchronously (an update every k instances, k in flight: minibatch SGD) and
//! asynchronously (instances admitted as others end, one update over all of them at the
//! end: one step with the sum of every instance's gradient at the initial parameters),
//! on one worker and on two, JIT on and off.

use super::*;

/// The values of `count` instances of example `name`, from `seed`.
fn values_of(name: &str, seed: u64, count: usize) -> Vec<Value> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    (0..count).map(|_| instance(name, &mut rng)).collect()
}

/// The runs: synchronous with `k` in flight and an update every `k`; asynchronous with
/// 5 in flight, admitted as others end, and one update at the end over all `count`.
pub(super) fn settings(count: usize, k: usize) -> [(&'static str, usize, ExecConfig); 2] {
    let sync = ExecConfig { max_active_keys: k, sync_updates: true, max_batch: 64, ..ExecConfig::default() };
    let asynchronous = ExecConfig { max_active_keys: 5, sync_updates: false, max_batch: 64, ..ExecConfig::default() };
    [("synchronous", k, sync), ("asynchronous", count, asynchronous)]
}

#[test]
fn batches_of_many_instances_train_as_the_reference_on_one_worker_and_two() {
    for (name, count, k) in
        [("mlp", 12, 4), ("list_reduce", 12, 6), ("tree_lstm", 8, 4), ("ggsnn", 8, 4), ("moe", 12, 6)]
    {
        let c = compile(name);
        let values = values_of(name, 41, count);
        for (mode, k, base) in settings(count, k) {
            for workers in [1, 2] {
                for jit in [true, false] {
                    eprintln!("{name}: {mode}, {workers} worker(s), jit {jit}");
                    let config = ExecConfig { workers, jit, ..base.clone() };
                    assert_training_on(&c, name, 43, values.clone(), k, config);
                }
            }
        }
    }
}

/// The batched maps of `batched::LIST_MAPS` (a split and a concat of batches, a gather
/// by a computed index, an arm per element), many lists in flight.
#[test]
fn batches_of_many_lists_train_as_the_reference() {
    let c = compile_source("list_maps", super::batched::LIST_MAPS, Vec::new());
    let values = values_of("list_reduce", 55, 12);
    for (mode, k, base) in settings(12, 4) {
        for workers in [1, 2] {
            eprintln!("list_maps: {mode}, {workers} worker(s)");
            assert_training_on(&c, "list_maps", 57, values.clone(), k, ExecConfig { workers, ..base.clone() });
        }
    }
}

/// The same with the batched maps' other lowerings: masked arms (every arm on all rows)
/// and per element (a message per element, so a batch holds many elements' rows of many
/// instances).
#[test]
fn batches_of_many_instances_train_as_the_reference_in_every_lowering() {
    use amp_lower::LowerOptions;
    for lowering in [
        LowerOptions::default(),
        LowerOptions { masked_arms: true, ..Default::default() },
        LowerOptions { per_element_maps: true, ..Default::default() },
    ] {
        let c =
            compile_source_with("ggsnn", amp_tests::example("ggsnn").expect("example"), defines("ggsnn"), &lowering);
        let values = values_of("ggsnn", 47, 10);
        for (mode, k, base) in settings(10, 5) {
            for workers in [1, 2] {
                eprintln!("ggsnn {lowering:?}: {mode}, {workers} worker(s)");
                assert_training_on(&c, "ggsnn", 49, values.clone(), k, ExecConfig { workers, ..base.clone() });
            }
        }
    }
}

/// A batched map in a loop whose gather index and arm index read the loop's counter: the
/// row values `gather_rows` and `partition_rows`/`merge_rows` keep per instance
/// (`RowValues`) are kept per counter too, so every step gathers and routes its own
/// rows (the reference's loss and gradients, and minibatch SGD with many in flight).
const SHIFTED: &str = r#"
record Example { tokens: [int], label: int }
model Shifted(vocab: int = 14, hidden: int = 8, classes: int = 10) {
    param embed = Embedding(vocab, hidden);
    param arms = [Linear(hidden, hidden); 3];
    param head = Linear(hidden, classes);

    fn forward(x: Example) -> f32[classes] {
        var hs = x.tokens.map(|t| embed(t));
        let n = len(x.tokens);
        for s in 0..3 {
            let shifted = range(n).map(|i| hs[(i + s) % n]);
            hs = zip(shifted, x.tokens).map(|(h, t)| tanh(arms[(t + s) % 3](h)));
        }
        head(sum(hs))
    }
    fn loss(x: Example) -> f32 { cross_entropy(forward(x), x.label) }
}
"#;

#[test]
fn row_values_kept_across_steps_follow_the_loop_counter() {
    let c = compile_source("shifted", SHIFTED, Vec::new());
    let batched = |keyword: &str| c.graph.nodes.node_indices().any(|i| c.graph.nodes[i].op.keyword() == keyword);
    assert!(batched("gather_rows") && batched("partition_rows"), "the maps in the loop are batched");
    let values = values_of("list_reduce", 51, 12);
    assert_values_match(&c, values.clone(), ExecConfig::default());
    for (mode, k, base) in settings(12, 4) {
        for workers in [1, 2] {
            eprintln!("shifted: {mode}, {workers} worker(s)");
            assert_training_on(&c, "shifted", 53, values.clone(), k, ExecConfig { workers, ..base.clone() });
        }
    }
}

/// The graph's `split` nodes, ascending.
pub(super) fn split_nodes(c: &Compiled) -> Vec<u32> {
    let graph = &c.graph.nodes;
    graph
        .node_indices()
        .filter(|&i| matches!(graph[i].op, amp_ir::Op::Split { .. }))
        .map(|i| i.index() as u32)
        .collect()
}

/// Asserts that `executor` runs every split of `splits` inside a fused node, and that its
/// fused nodes are the units the planner places (`amp_ir::units::fused_units`).
pub(super) fn assert_splits_absorbed(c: &Compiled, executor: &Executor, splits: &[u32], what: &str) {
    let mut fused: Vec<Vec<u32>> = executor.fused_nodes().into_iter().map(|(_, members)| members).collect();
    let mut absorbed: Vec<u32> = fused.iter().flatten().copied().filter(|m| splits.contains(m)).collect();
    absorbed.sort_unstable();
    assert_eq!(absorbed, splits, "{what}: every split runs inside the fused node");
    let mut units: Vec<Vec<u32>> =
        amp_ir::units::fused_units(&c.graph).iter().map(|u| u.members().collect::<Vec<u32>>()).collect();
    for list in fused.iter_mut().chain(units.iter_mut()) {
        list.sort_unstable();
    }
    fused.sort();
    units.sort();
    assert_eq!(fused, units, "{what}: the executor fuses the units the planner places");
}

/// GGSNN's GRU reads the `[rows, 3h]` outputs of its two Linear layers in three parts
/// each: the batched map's fused group absorbs both splits of batches (its kernel inputs
/// are column blocks of the Linear's rows; one gradient message back to each Linear) on
/// one worker and two. Loss and every gradient are still the reference's, and with many
/// instances in flight, synchronous and asynchronous, training is still minibatch SGD.
#[test]
fn a_batched_group_absorbs_its_splits_with_many_instances_in_flight() {
    let c = compile("ggsnn");
    let splits = split_nodes(&c);
    assert_eq!(splits.len(), 2, "gru.ih's and gru.hh's");
    for i in c.graph.nodes.node_indices().filter(|i| splits.contains(&(i.index() as u32))) {
        assert!(matches!(c.graph.nodes[i].inputs[0], amp_ir::PayloadTy::Batch(_)), "a split of batches");
    }
    let values = values_of("ggsnn", 61, 8);
    for workers in [1, 2] {
        let config = ExecConfig { workers, max_batch: 8, ..ExecConfig::default() };
        let executor = assert_values_match(&c, values.clone(), config);
        assert_splits_absorbed(&c, &executor, &splits, &format!("{workers} worker(s)"));
    }
    for (mode, k, base) in settings(8, 4) {
        for workers in [1, 2] {
            eprintln!("ggsnn, splits absorbed: {mode}, {workers} worker(s)");
            let config = ExecConfig { workers, ..base.clone() };
            let specs = amp_params::ParamSpec::of_graph(&c.graph);
            let executor = Executor::new(&c.graph, ParamSet::init(&specs, 1), config.clone()).expect("executor");
            assert_splits_absorbed(&c, &executor, &splits, &format!("{mode}, {workers} worker(s)"));
            assert_training_on(&c, "ggsnn", 63, values.clone(), k, config);
        }
    }
}
