//! Lowering and passes on small programs and on the canonical examples.

use amp_ir::{FieldRole, Graph, Op, PayloadTy, StateExpr};
use amp_lower::passes::{self, PassReport};
use amp_sema::{check_source, Options};

fn lower(text: &str) -> Result<Graph, String> {
    lower_with(text, &amp_lower::LowerOptions::default())
}

fn lower_with(text: &str, options: &amp_lower::LowerOptions) -> Result<Graph, String> {
    let (map, checked) = check_source("t.amp", text, &Options::default());
    assert!(!checked.has_errors(), "{}", amp_diagnostics::render_human(&map, &checked.diagnostics, false));
    amp_lower::lower_model_with(&checked.program, &map, checked.program.models[0], options)
        .map_err(|d| format!("{}: {}", d[0].code, d[0].message))
}

fn example(name: &str) -> String {
    std::fs::read_to_string(format!("{}/../../examples/{name}.amp", env!("CARGO_MANIFEST_DIR"))).expect("example")
}

fn count(g: &Graph, keyword: &str) -> usize {
    g.nodes.node_weights().filter(|n| n.op.keyword() == keyword).count()
}

fn nodes<'g>(g: &'g Graph, keyword: &'g str) -> impl Iterator<Item = &'g amp_ir::Node> + 'g {
    g.nodes.node_weights().filter(move |n| n.op.keyword() == keyword)
}

#[test]
fn mlp_is_a_chain_keyed_by_instance() {
    let g = lower(&example("mlp")).unwrap();
    assert_eq!(g.state.len(), 1);
    assert_eq!(count(&g, "linear"), 3);
    assert_eq!(count(&g, "unary"), 2);
    assert_eq!(count(&g, "read"), 1);
    let params: Vec<&str> = g.params.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(params, ["l1.weight", "l1.bias", "l2.weight", "l2.bias", "out.weight", "out.bias"]);
    for n in nodes(&g, "linear") {
        assert_eq!(n.key, vec![amp_ir::FieldId(0)], "Ppts cache their input per instance");
    }
    let loss = nodes(&g, "loss").next().unwrap();
    assert_eq!(loss.inputs, vec![PayloadTy::F32(vec![10])]);
    assert!(matches!(&loss.op, Op::Loss(amp_ir::LossKind::CrossEntropy { label: StateExpr::Data(p) }) if p.len() == 1));
    assert_eq!(count(&g, "sink"), 1);
}

#[test]
fn list_reduce_keys_the_loop_body_by_instance_and_counter() {
    let g = lower(&example("list_reduce")).unwrap();
    assert_eq!(g.state.len(), 2);
    assert_eq!(g.state[1].role, FieldRole::Counter);
    let t = amp_ir::FieldId(1);
    let cell = nodes(&g, "linear").find(|n| n.label == "cell").unwrap();
    assert_eq!(cell.key, vec![amp_ir::FieldId(0), t], "the recurrent cell's activations are per (instance, t)");
    let head = nodes(&g, "linear").find(|n| n.label == "head").unwrap();
    assert_eq!(head.key, vec![amp_ir::FieldId(0)], "after the loop only the instance remains");
    let embed = nodes(&g, "embedding").next().unwrap();
    assert!(embed.reads.contains(&t), "the token index x.tokens[t] reads the counter");
    // One entry isu, phi, cond, step and exit per carried value: h alone. The control,
    // which the body uses only to start the lookup, does not loop: the lookup takes h's
    // message in the body with its payload dropped.
    assert_eq!(count(&g, "phi"), 1);
    assert_eq!(count(&g, "cond"), 1);
    assert_eq!(count(&g, "isu"), 3);
    for phi in nodes(&g, "phi") {
        assert_eq!(phi.key, vec![amp_ir::FieldId(0), t]);
    }
    let find = |keyword: &str| g.nodes.node_indices().find(|&i| g.nodes[i].op.keyword() == keyword).unwrap();
    let producers = |i| g.nodes.neighbors_directed(i, petgraph::Direction::Incoming).collect::<Vec<_>>();
    let [trigger] = producers(find("embedding"))[..] else { panic!("one input") };
    assert_eq!(g.nodes[trigger].op.keyword(), "forget");
    assert_eq!(producers(trigger), [find("cond")]);
}

/// A body that routes its control (an `if`) keeps the control's own loop.
#[test]
fn a_control_the_body_routes_loops_on_its_own() {
    let source = r#"
record Example { tokens: [int], label: int }
model M {
    param embed = Embedding(14, 8);
    param cell = Linear(16, 8);
    param head = Linear(8, 10);
    fn forward(x: Example) -> f32[10] {
        var h: f32[8] = zeros();
        for tok in x.tokens {
            if tok > 2 { h = relu(cell(concat(embed(tok), h))); }
        }
        head(h)
    }
    fn loss(x: Example) -> f32 { cross_entropy(forward(x), x.label) }
}
"#;
    let g = lower(source).unwrap();
    assert_eq!(count(&g, "forget"), 0);
    assert_eq!(nodes(&g, "phi").filter(|n| n.label == "loop").count(), 2, "h and the control");
}

fn field(g: &amp_ir::Graph, name: &str) -> amp_ir::FieldId {
    g.field_named(name).unwrap_or_else(|| panic!("no field {name}"))
}

#[test]
fn tree_lstm_keys_branch_activations_by_instance_and_tree_node() {
    let g = lower(&example("tree_lstm")).unwrap();
    let (inst, n) = (field(&g, "inst"), field(&g, "n0"));
    assert_eq!(g.field(n).unwrap().role, FieldRole::TreeNode);
    for label in ["leaf", "branch"] {
        let ppt = nodes(&g, "linear").find(|x| x.label == label).unwrap();
        assert_eq!(ppt.key, vec![inst, n], "{label} activations are per (instance, tree node)");
    }
    let head = nodes(&g, "linear").find(|x| x.label == "head").unwrap();
    assert_eq!(head.key, vec![inst], "the root's result is back in the instance's context");
    // One flatmap over the tree's nodes; the match is a switch on the variant tag; the
    // children's results reach the branch arm through a switch on the call site.
    assert_eq!(count(&g, "flatmap"), 1);
    let switches: Vec<String> = nodes(&g, "switch").map(|x| amp_ir::text::op_text(&g, &x.op)).collect();
    assert!(switches.iter().any(|s| s.contains("$tag")), "{switches:?}");
    assert!(switches.iter().any(|s| s.contains("[%site0] 5")), "{switches:?}");
}

/// Batched (the default), GGSNN's message step and GRU update are one message per step:
/// keyed by (instance, step), the edges' sources a `gather_rows`, split by edge kind
/// (`partition_rows`) into one part per message layer and put back in edge order
/// (`merge_rows`); the embedding map is one `embedding_rows`: no element context is left.
#[test]
fn ggsnn_batched_keys_messages_and_updates_by_step() {
    let g = lower(&example("ggsnn")).unwrap();
    let (inst, t) = (field(&g, "inst"), field(&g, "t0"));
    for label in ["msg.0", "msg.1", "gru.ih", "gru.hh"] {
        let linear = nodes(&g, "linear").find(|x| x.label == label).unwrap();
        assert_eq!(linear.key, vec![inst, t], "{label}: per (instance, step)");
        assert!(matches!(linear.inputs[0], PayloadTy::Batch(_)), "{label} takes all rows");
    }
    assert_eq!((count(&g, "gather_rows"), count(&g, "mask_rows")), (1, 0));
    assert_eq!((count(&g, "partition_rows"), count(&g, "merge_rows")), (1, 1));
    assert_eq!((count(&g, "flatmap"), count(&g, "group"), count(&g, "ungroup"), count(&g, "switch")), (0, 0, 0, 0));
    assert_eq!((count(&g, "embedding_rows"), count(&g, "embedding")), (1, 0));
}

/// Per element (`LowerOptions::per_element_maps`): one message per edge and per node.
#[test]
fn ggsnn_keys_messages_by_edge_and_updates_by_node() {
    let per_element = amp_lower::LowerOptions { per_element_maps: true, ..Default::default() };
    let g = lower_with(&example("ggsnn"), &per_element).unwrap();
    let inst = field(&g, "inst");
    let t = field(&g, "t0");
    let msg = nodes(&g, "linear").find(|x| x.label == "msg.0").unwrap();
    let gru = nodes(&g, "linear").find(|x| x.label == "gru.ih").unwrap();
    assert_eq!(msg.key.len(), 3);
    assert_eq!(&msg.key[..2], &[inst, t]);
    assert_eq!(g.field(msg.key[2]).unwrap().role, FieldRole::Element, "per (instance, step, edge)");
    assert_eq!(g.field(gru.key[2]).unwrap().role, FieldRole::Element, "per (instance, step, node)");
    assert_ne!(msg.key[2], gru.key[2], "edges and nodes are different collections");
    for op in ["gather", "scatter_sum", "group", "ungroup", "reduce"] {
        assert!(count(&g, op) >= 1, "{op}");
    }
}

#[test]
fn moe_routes_each_slot_to_the_chosen_expert() {
    let g = lower(&example("moe")).unwrap();
    let slot = field(&g, "slot0");
    assert_eq!(g.field(slot).unwrap().role, FieldRole::Slot);
    assert_eq!(count(&g, "top_k"), 1);
    assert!(count(&g, "state_from_payload") >= 1, "the expert input gets the slot from the top_k indices");
    let route = nodes(&g, "switch").next().unwrap();
    assert!(matches!(route.op, Op::Switch { arms: 64, .. }));
    assert_eq!(nodes(&g, "linear").filter(|x| x.label.starts_with("expert.")).count(), 128);
}

#[test]
fn while_loops_carry_int_variables_in_the_state() {
    let source = r#"
record R { x: f32[4], n: int, label: int }
model M {
    param l = Linear(4, 4);
    fn forward(r: R) -> f32[4] {
        var h = r.x;
        var a = 0;
        var b = 1;
        while a < r.n { h = relu(l(h)); a = b; b = a + b; }
        h
    }
    fn loss(r: R) -> f32 { cross_entropy(forward(r), r.label) }
}
"#;
    let g = lower(source).unwrap();
    let t = g.state.iter().position(|f| f.role == FieldRole::Counter).unwrap();
    let l = nodes(&g, "linear").next().unwrap();
    assert!(l.key.contains(&amp_ir::FieldId(t as u16)), "the body is keyed by the iteration count");
    // a and b change together: two temporaries hold the new values first.
    let updates = nodes(&g, "isu").filter(|x| x.label == "loop update").count();
    // The control, which the body does not use, does not loop.
    assert_eq!(updates, 6, "per circulating value (h): 2 temps, 2 fields, 2 clears");
}

#[test]
fn unsupported_constructs_are_named() {
    let source = r#"
record R { x: f32[4], n: int, label: int }
model M {
    fn forward(r: R) -> f32[4] {
        var i = 0;
        while i < r.n { i = i + 1; }
        if i > 2 { r.x } else { relu(r.x) }
    }
    fn loss(r: R) -> f32 { cross_entropy(forward(r), r.label) }
}
"#;
    let err = lower(source).unwrap_err();
    assert!(err.starts_with("E0600") && err.contains("after the loop"), "{err}");
}

/// Recursion that the checker accepts but the runtime's numbering of trees cannot run is
/// a coded error naming what to write instead: a traversal starting below a tree's root
/// (the runtime numbers whole trees), and a recursive record (trees are enums).
#[test]
fn recursion_the_runtime_cannot_number_is_refused_with_what_to_write() {
    let subtree = r#"
enum Tree { Leaf { word: int }, Node { left: Tree, right: Tree } }
record S { tree: Tree, label: int }
model M {
    param emb = Embedding(20, 4);
    param head = Linear(4, 3);
    fn encode(t: Tree) -> f32[4] {
        match t { Leaf { word } => emb(word), Node { left, right } => encode(left) + encode(right) }
    }
    fn forward(s: S) -> f32[3] {
        match s.tree { Leaf { word } => head(emb(word)), Node { left, .. } => head(encode(left)) }
    }
    fn loss(s: S) -> f32 { cross_entropy(forward(s), s.label) }
}
"#;
    let err = lower(subtree).unwrap_err();
    assert!(err.starts_with("E0600") && err.contains("recurse from the tree's root"), "{err}");
    let record = r#"
record Node { word: int, children: [Node] }
record S { tree: Node, label: int }
model M {
    param emb = Embedding(20, 4);
    param head = Linear(4, 3);
    fn encode(n: Node) -> f32[4] { tanh(emb(n.word) + sum(n.children.map(|c| encode(c)))) }
    fn forward(s: S) -> f32[3] { head(encode(s.tree)) }
    fn loss(s: S) -> f32 { cross_entropy(forward(s), s.label) }
}
"#;
    let err = lower(record).unwrap_err();
    assert!(err.starts_with("E0600") && err.contains("an enum of one variant"), "{err}");
}

const LAYERED: &str = r#"
use std::nn::{GruCell, Mlp};
record R { xs: [int], x: f32[8], label: int, flag: int }
model M(h: int = 8) {
    param emb = Embedding(5, h);
    param gru = GruCell(h, h);
    param mlp = Mlp(h, 16, 3);
    fn forward(r: R) -> f32[3] {
        var s: f32[h] = r.x;
        for i in 0..len(r.xs) {
            s = gru(emb(r.xs[i]), s);
        }
        if r.flag > 0 { s = relu(s); } else { s = s * 0.5; }
        mlp(s)
    }
    fn loss(r: R) -> f32 { cross_entropy(forward(r), r.label) }
}
"#;

#[test]
fn layers_are_inlined_with_pytorch_parameter_names() {
    let g = lower(LAYERED).unwrap();
    let linears: Vec<&str> = nodes(&g, "linear").map(|n| n.label.as_str()).collect();
    assert_eq!(linears, ["gru.ih", "gru.hh", "mlp.l1", "mlp.l2"]);
    assert!(g.param("gru.ih.weight").is_some_and(|p| p.shape == vec![24, 8]));
    assert_eq!(count(&g, "split"), 2);
    // The if: a cond per routed value plus the control; phis merge `s` and the control.
    let conds_on_flag =
        nodes(&g, "cond").filter(|n| matches!(&n.op, Op::Cond { pred: StateExpr::Bin(amp_ir::IntOp::Gt, ..) })).count();
    assert_eq!(conds_on_flag, 2);
}

#[test]
fn passes_remove_dead_nodes_fold_constants_merge_duplicates_and_group_nppts() {
    let text = r#"
record R { x: f32[4], label: int }
model M {
    param l = Linear(4, 4);
    fn forward(r: R) -> f32[4] {
        let unused = relu(l(r.x));
        let k = 2.0 * 3.0;
        let a = tanh(l(r.x));
        let b = tanh(l(r.x));
        sigmoid(a * k) + b
    }
    fn loss(r: R) -> f32 { cross_entropy(forward(r), r.label) }
}
"#;
    let mut g = lower(text).unwrap();
    let before = g.nodes.node_count();
    let reports = passes::optimize(&mut g);
    let report = |name: &str| -> &PassReport { reports.iter().find(|r| r.pass == name).unwrap() };
    assert_eq!(report("constant folding").changed, 1, "2.0 * 3.0 becomes one constant");
    assert!(nodes(&g, "const").any(|n| n.op == Op::Const { value: amp_ir::ConstValue::Scalar(6.0) }));
    assert!(report("common-subexpression elimination").changed >= 2, "the repeated l(r.x) and tanh merge");
    assert_eq!(count(&g, "linear"), 1);
    assert!(report("dead-node elimination").changed >= 1, "the unused relu goes");
    assert!(g.nodes.node_count() < before);
    assert_eq!(count(&g, "unary"), 2, "tanh and sigmoid remain");
    let fused: Vec<Option<u32>> =
        g.nodes.node_weights().filter(|n| matches!(n.op, Op::Unary(_) | Op::Binary(_))).map(|n| n.fusion).collect();
    assert!(fused.iter().all(|f| *f == Some(0)), "tanh, mul, sigmoid, add form one fusion group: {fused:?}");
}

/// A value that leaves a fusion group and comes back (`dot` is a product and a `reduce`
/// outside the group; `h * s` reads the reduce) splits the group: a fused group runs as
/// one node, so it cannot wait for what its own output feeds. The part before the exit
/// keeps its group, what follows it gets another.
#[test]
fn fusion_groups_are_never_reentered() {
    let text = r#"
record R { x: f32[4], label: int }
model M {
    param a = Linear(4, 6);
    param q = Linear(4, 6);
    param b = Linear(6, 3);
    fn forward(r: R) -> f32[3] {
        let h = gelu(a(r.x));
        let s = dot(h, q(r.x));
        b(tanh(h * s) + h)
    }
    fn loss(r: R) -> f32 { cross_entropy(forward(r), r.label) }
}
"#;
    let mut g = lower(text).unwrap();
    passes::optimize(&mut g);
    let reduce = g.nodes.node_indices().find(|&i| g.nodes[i].op.keyword() == "reduce").expect("dot's reduce");
    let (from, to) = (
        g.nodes.neighbors_directed(reduce, petgraph::Direction::Incoming).next().expect("product"),
        g.nodes.neighbors_directed(reduce, petgraph::Direction::Outgoing).next().expect("h * s"),
    );
    let (before, after) = (g.nodes[from].fusion, g.nodes[to].fusion);
    assert!(before.is_some() && after.is_some(), "both sides still fuse: {before:?} {after:?}");
    assert_ne!(before, after, "the product and `h * s` are in different groups");
    // `h * s`, `tanh` and `+` stay together.
    let late: Vec<Option<u32>> =
        g.nodes.node_weights().filter(|n| matches!(n.label.as_str(), "tanh" | "+")).map(|n| n.fusion).collect();
    assert!(late.iter().all(|f| *f == after), "{late:?} vs {after:?}");
}

#[test]
fn optimized_examples_keep_their_structure() {
    let mut g = lower(&example("list_reduce")).unwrap();
    let reports = passes::optimize(&mut g);
    let dce = reports.iter().find(|r| r.pass == "dead-node elimination").unwrap();
    assert_eq!(dce.changed, 1, "only the control's loop exit is unused: {:?}", dce.details);
    assert_eq!(count(&g, "linear"), 2);
}

/// Found by the random-program generator: two loop-carried variables holding the same
/// tensor get identical loop-entry nodes; CSE merges them, and the merged node fans out,
/// so it must keep its key. Keys are therefore minimised after the other passes.
#[test]
fn regression_merged_loop_entries_keep_their_key() {
    let text = r#"
record R { x: f32[4], xs: [int], label: int }
model M {
    param emb = Embedding(10, 4);
    param cell = Linear(8, 4);
    param head = Linear(4, 3);
    fn forward(r: R) -> f32[3] {
        let v0 = r.x;
        var v1 = v0;
        for tok in r.xs { v1 = tanh(cell(concat(v1 + v0, emb(tok)))); }
        head(v1)
    }
    fn loss(r: R) -> f32 { cross_entropy(forward(r), r.label) }
}
"#;
    let mut g = lower(text).unwrap();
    passes::optimize(&mut g);
    if let Err(errors) = amp_ir::verify::verify(&g) {
        panic!("{}", errors.iter().map(|e| e.to_string()).collect::<Vec<_>>().join("\n"));
    }
}
