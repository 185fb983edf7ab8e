//! Batched maps (`docs/IR.md`, Collections): a `map` whose body is row-wise runs on one
//! batch per collection (`gather_rows`, `partition_rows`/`merge_rows` around a parameter
//! array's arms, `linear` and elementwise ops on all rows); `LowerOptions::masked_arms`
//! runs every arm on all rows and masks them (`mask_rows`) instead, and
//! `LowerOptions::per_element_maps` forces the per-element lowering. All three lowerings
//! of every model they apply to give the reference's loss and gradients (JIT on and off)
//! and train as minibatch SGD (one worker; two workers with batching), and the compiler
//! chose the batched one where it should.

use super::*;
use amp_ir::{Op, PayloadTy};
use amp_lower::LowerOptions;

/// A list model whose maps are an embedding lookup per token (`embedding_rows`), Linear
/// layers and elementwise chains over the rows of a computed sequence, a `zip` with
/// `concat`, `split`, a gather by a computed index from a range, and a parameter array
/// chosen per element by the data.
pub(super) const LIST_MAPS: &str = r#"
record Example { tokens: [int], label: int }
model ListMaps(vocab: int = 14, hidden: int = 8, classes: int = 10) {
    param embed = Embedding(vocab, hidden);
    param lin = Linear(hidden, hidden);
    param gate = Linear(2 * hidden, 2 * hidden);
    param by_parity = [Linear(hidden, hidden); 2];
    param head = Linear(hidden, classes);

    fn forward(x: Example) -> f32[classes] {
        let es = x.tokens.map(|t| embed(t));
        let hs = es.map(|e| tanh(lin(e)) * sigmoid(e) + 0.5);
        let gs = zip(hs, es).map(|(h, e)| {
            let [a, b] = split(gate(concat(h, e)), 2);
            relu(a) - b * 0.25
        });
        let n = len(x.tokens);
        let rev = range(n).map(|i| gs[n - 1 - i] * hs[i]);
        let routed = zip(rev, x.tokens).map(|(r, t)| by_parity[t % 2](r));
        head(sum(routed) + sum(gs))
    }
    fn loss(x: Example) -> f32 { cross_entropy(forward(x), x.label) }
}
"#;

fn lowerings() -> [(&'static str, LowerOptions); 3] {
    [
        ("batched", LowerOptions::default()),
        ("batched, masked arms", LowerOptions { masked_arms: true, ..Default::default() }),
        ("per element", LowerOptions { per_element_maps: true, ..Default::default() }),
    ]
}

fn ops_named(c: &Compiled, keyword: &str) -> usize {
    c.graph.nodes.node_indices().filter(|&i| c.graph.nodes[i].op.keyword() == keyword).count()
}

fn compile_list_maps(lowering: &LowerOptions) -> Compiled {
    compile_source_with("list_maps", LIST_MAPS, Vec::new(), lowering)
}

fn compile_ggsnn(lowering: &LowerOptions) -> Compiled {
    compile_source_with("ggsnn", amp_tests::example("ggsnn").expect("example"), defines("ggsnn"), lowering)
}

fn compile_child_sum(lowering: &LowerOptions) -> Compiled {
    let source = amp_tests::example("child_sum_tree_lstm").expect("example");
    compile_source_with("child_sum_tree_lstm", source, defines("child_sum_tree_lstm"), lowering)
}

fn child_sum_values(seed: u64, count: usize) -> Vec<Value> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    (0..count).map(|_| instance("child_sum_tree_lstm", &mut rng)).collect()
}

fn list_values(seed: u64, count: usize) -> Vec<Value> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    // list_reduce's generator: 0 to 5 tokens below 14, empty lists included.
    (0..count).map(|_| instance("list_reduce", &mut rng)).collect()
}

fn ggsnn_values(seed: u64, count: usize) -> Vec<Value> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    (0..count).map(|_| instance("ggsnn", &mut rng)).collect()
}

/// The compiler batches GGSNN's message step and the GRU update (one `gather_rows` of
/// the sources, one `partition_rows` of them by edge kind and one `merge_rows` of the
/// arms' results, GEMMs on batches, no element context in the loop) and the embedding map
/// (one `embedding_rows`); `masked_arms` masks instead (one `mask_rows` per edge kind),
/// and `per_element_maps` keeps every map per element.
#[test]
fn the_compiler_batches_row_wise_maps_only() {
    let batched = compile_ggsnn(&LowerOptions::default());
    assert_eq!(ops_named(&batched, "gather_rows"), 1);
    assert_eq!(ops_named(&batched, "mask_rows"), 0);
    assert_eq!(ops_named(&batched, "partition_rows"), 1);
    assert_eq!(ops_named(&batched, "merge_rows"), 1);
    // Each arm's Linear reads its own part of the partition.
    for i in batched.graph.nodes.node_indices() {
        if let Op::Linear { param } = &batched.graph.nodes[i].op {
            if let Some(arm) = param.strip_prefix("msg.") {
                let (producer, edge) = batched.graph.input_edge(i, 0).expect("an input");
                assert_eq!(batched.graph.nodes[producer].op.keyword(), "partition_rows");
                assert_eq!(edge.from_port.to_string(), arm);
            }
        }
    }
    let masked = compile_ggsnn(&LowerOptions { masked_arms: true, ..Default::default() });
    assert_eq!(ops_named(&masked, "mask_rows"), 2);
    assert_eq!(ops_named(&masked, "partition_rows") + ops_named(&masked, "merge_rows"), 0);
    // No element context is left: the embedding map is one lookup of all the nodes' rows.
    assert_eq!(ops_named(&batched, "embedding_rows"), 1);
    assert_eq!(ops_named(&batched, "embedding"), 0);
    assert_eq!(ops_named(&batched, "group") + ops_named(&batched, "ungroup") + ops_named(&batched, "flatmap"), 0);
    let batch_linears = batched
        .graph
        .nodes
        .node_indices()
        .filter(|&i| {
            let n = &batched.graph.nodes[i];
            matches!(n.op, Op::Linear { .. }) && matches!(n.inputs[0], PayloadTy::Batch(_))
        })
        .count();
    // msg.0, msg.1, gru.ih, gru.hh.
    assert_eq!(batch_linears, 4);
    let per_element = compile_ggsnn(&LowerOptions { per_element_maps: true, ..Default::default() });
    assert_eq!(ops_named(&per_element, "gather_rows") + ops_named(&per_element, "mask_rows"), 0);
    assert_eq!(ops_named(&per_element, "embedding_rows"), 0);
    assert_eq!(ops_named(&per_element, "group"), 3);

    let list = compile_list_maps(&LowerOptions::default());
    assert_eq!(ops_named(&list, "group"), 0, "every map is batched");
    assert_eq!(ops_named(&list, "embedding_rows"), 1);
    assert_eq!(ops_named(&list, "gather_rows"), 2);
    assert_eq!(ops_named(&list, "partition_rows"), 1);
    assert_eq!(ops_named(&list, "mask_rows"), 0);
}

/// A map whose body calls `dropout` stays per element: the mask hashes the element's
/// index, which a batch has no field for (invariants 22 and 23). The other maps are still
/// batched, and the reference replays the masks of the mixed graph.
#[test]
fn a_map_with_dropout_stays_per_element() {
    let source = LIST_MAPS.replace("es.map(|e| tanh(lin(e))", "es.map(|e| dropout(tanh(lin(e)), 0.5)");
    assert_ne!(source, LIST_MAPS, "the body to change is in the model");
    let c = compile_source_with("list_maps_dropout", &source, Vec::new(), &LowerOptions::default());
    assert_eq!(ops_named(&c, "dropout"), 1);
    assert_eq!(ops_named(&c, "group"), 1, "the dropout map is per element");
    assert_eq!(ops_named(&c, "gather_rows"), 2, "the later maps are still batched");
    let dropout =
        c.graph.nodes.node_indices().find(|&i| c.graph.nodes[i].op.keyword() == "dropout").expect("a dropout node");
    assert!(matches!(c.graph.nodes[dropout].inputs[0], PayloadTy::F32(_)), "one element per message");
    super::dropout::assert_grads_match(&c, &list_values(3, 12));
}

/// Loss and every gradient equal the reference's, in every lowering, JIT on and off, on
/// one worker and on two with batching;
/// with the JIT, the elementwise chains of the batched bodies are kernels too.
#[test]
fn both_lowerings_match_the_reference() {
    for (which, lowering) in lowerings() {
        for (name, c, values) in [
            ("ggsnn", compile_ggsnn(&lowering), ggsnn_values(21, 12)),
            ("list_maps", compile_list_maps(&lowering), list_values(22, 12)),
            // A map over a node's children whose results are tuples (a zip of batches).
            ("child_sum_tree_lstm", compile_child_sum(&lowering), child_sum_values(23, 8)),
        ] {
            for jit in [true, false] {
                eprintln!("{name}, {which}, jit {jit}");
                let executor = assert_values_match(&c, values.clone(), ExecConfig { jit, ..ExecConfig::default() });
                // The elementwise chains run as kernels, on all rows of a batch at once
                // when batched (a scalar constant repeated per row).
                assert_eq!(executor.fused_nodes().is_empty(), !jit, "{name}, {which}");
                // Two workers with dynamic batching: an arm's rows of several instances
                // meet at its Linear.
                let two = ExecConfig { jit, workers: 2, max_batch: 8, ..ExecConfig::default() };
                assert_values_match(&c, values.clone(), two);
            }
        }
    }
}

/// Deterministic training is minibatch SGD in both lowerings: one worker, and two
/// workers with dynamic batching and every Ppt replicated, JIT on and off.
#[test]
fn both_lowerings_train_as_minibatch_sgd() {
    for (which, lowering) in lowerings() {
        for (name, c, values) in [
            ("ggsnn", compile_ggsnn(&lowering), ggsnn_values(23, 8)),
            ("list_maps", compile_list_maps(&lowering), list_values(24, 9)),
        ] {
            let ppts: Vec<amp_exec::NodeSelector> = c
                .graph
                .nodes
                .node_indices()
                .filter(|&i| c.graph.nodes[i].op.is_ppt())
                .map(|i| amp_exec::NodeSelector::Id(i.index() as u32))
                .collect();
            let replicas: Vec<_> = ppts.into_iter().map(|s| (s, 2)).collect();
            for jit in [true, false] {
                eprintln!("{name}, {which}, jit {jit}");
                let one = ExecConfig { jit, ..ExecConfig::default() };
                assert_training_on(&c, name, 31, values.clone(), 3, one);
                let two =
                    ExecConfig { jit, workers: 2, max_batch: 8, replicas: replicas.clone(), ..ExecConfig::default() };
                assert_training_on(&c, name, 32, values.clone(), 4, two);
            }
        }
    }
}

/// An edge whose source is not a node is an error naming the `gather_rows` index, not a
/// panic, in both lowerings.
#[test]
fn a_row_index_past_the_collection_is_an_error() {
    let edge = |src: i64| Value::Record(vec![Value::Int(src), Value::Int(0), Value::Int(1)]);
    let bad = Value::Record(vec![
        Value::Seq(vec![Value::Int(1), Value::Int(2)]),
        Value::Seq(vec![edge(0), edge(7)]),
        Value::Int(0),
    ]);
    for (which, lowering) in lowerings() {
        let c = compile_ggsnn(&lowering);
        let params = ParamSet::init(&amp_params::ParamSpec::of_graph(&c.graph), 1);
        let mut executor = Executor::new(&c.graph, params, ExecConfig::default()).expect("executor");
        let inst = Instance::new(c.graph.input.as_ref().expect("schema"), bad.clone()).expect("instance");
        let error = executor.grads(&inst).expect_err("an edge from node 7 of 2").to_string();
        assert!(error.contains("index") && error.contains('7'), "{which}: {error}");
    }
}

/// An edge kind past the message array is an error naming the arm index, not a panic,
/// when the rows are partitioned by it (`amprun` refuses such data before training, from
/// the graph's ranges; the executor still checks).
#[test]
fn an_arm_index_past_the_array_is_an_error() {
    let edge = |kind: i64| Value::Record(vec![Value::Int(0), Value::Int(1), Value::Int(kind)]);
    let bad = Value::Record(vec![
        Value::Seq(vec![Value::Int(1), Value::Int(2)]),
        Value::Seq(vec![edge(1), edge(5)]),
        Value::Int(0),
    ]);
    let c = compile_ggsnn(&LowerOptions::default());
    let params = ParamSet::init(&amp_params::ParamSpec::of_graph(&c.graph), 1);
    let mut executor = Executor::new(&c.graph, params, ExecConfig::default()).expect("executor");
    let inst = Instance::new(c.graph.input.as_ref().expect("schema"), bad).expect("instance");
    let error = executor.grads(&inst).expect_err("an edge of kind 5 of 2").to_string();
    assert!(error.contains("arm index") && error.contains('5'), "{error}");
}

/// A batched map whose elementwise chain reads two splits of batches: one only it reads,
/// with a part read twice and a part read by nobody, and one with a part read by a Linear
/// outside the group, which stays a node.
const SPLIT_PARTS: &str = r#"
record Example { tokens: [int], label: int }
model SplitParts(vocab: int = 14, hidden: int = 4, classes: int = 10) {
    param embed = Embedding(vocab, hidden);
    param a = Linear(hidden, 12);
    param b = Linear(hidden, 9);
    param c = Linear(3, 3);
    param head = Linear(3, classes);

    fn forward(x: Example) -> f32[classes] {
        let es = x.tokens.map(|t| embed(t));
        let ys = es.map(|e| {
            let [p, q, s, unused] = split(a(e), 4);
            let [u, v, w] = split(b(e), 3);
            sigmoid(p) * tanh(q) + p * s - u * v + c(w)
        });
        head(sum(ys))
    }
    fn loss(x: Example) -> f32 { cross_entropy(forward(x), x.label) }
}
"#;

/// The fused group of a batched map reads the parts of the split only it reads as column
/// blocks of the split's input rows (the part read by nobody gets a zero gradient), and
/// leaves the other split a node: loss and every gradient equal the reference's, on lists
/// of 0 to 5 tokens, one worker and two, and training with many lists in flight is
/// minibatch SGD. Without the JIT both splits run as nodes.
#[test]
fn a_batched_group_reads_its_splits_parts_as_column_blocks() {
    let c = compile_source("split_parts", SPLIT_PARTS, Vec::new());
    let splits = super::surviving::split_nodes(&c);
    assert_eq!(splits.len(), 2);
    let batch_split = |i: u32| {
        c.graph.nodes.node_indices().any(|n| n.index() as u32 == i && c.graph.nodes[n].inputs[0].elements() == 12)
    };
    let only_group: Vec<u32> = splits.iter().copied().filter(|&s| batch_split(s)).collect();
    assert_eq!(only_group.len(), 1, "a(e)'s split");
    for &s in &splits {
        let node = c.graph.nodes.node_indices().find(|n| n.index() as u32 == s).expect("split");
        assert!(matches!(c.graph.nodes[node].inputs[0], PayloadTy::Batch(_)), "the map is batched");
    }
    let values = list_values(71, 12);
    for workers in [1, 2] {
        for jit in [true, false] {
            let config = ExecConfig { workers, jit, max_batch: 8, ..ExecConfig::default() };
            let executor = assert_values_match(&c, values.clone(), config);
            if jit {
                super::surviving::assert_splits_absorbed(&c, &executor, &only_group, &format!("{workers} worker(s)"));
            } else {
                assert!(executor.fused_nodes().is_empty());
            }
        }
    }
    for (mode, k, base) in super::surviving::settings(12, 4) {
        for workers in [1, 2] {
            eprintln!("split_parts: {mode}, {workers} worker(s)");
            assert_training_on(&c, "split_parts", 73, values.clone(), k, ExecConfig { workers, ..base.clone() });
        }
    }
}
