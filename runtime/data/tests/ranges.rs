//! The class-label ranges a compiled model puts on its data: a loss's label must be below
//! the classes, unless the model guards the loss with `label < k` (k at most the classes),
//! where a larger label marks a node without a loss (SST's binary task keeps neutral
//! phrases as 2 with 2 classes).

mod common;

use amp_data::ranges::{first_out_of_range, model_ranges, Range, RangeStep};
use amp_data::{Instance, Vocab, VocabOptions};

/// The ranges of `source` (one model) compiled with `defines`.
fn compiled_ranges(source: &str, defines: &[(&str, i64)]) -> Vec<Range> {
    let options = amp_sema::Options { defines: defines.iter().map(|(k, v)| (k.to_string(), *v)).collect() };
    let (map, checked) = amp_sema::check_source("m.amp", source, &options);
    assert!(!checked.has_errors(), "{:?}", checked.diagnostics);
    let model = checked.program.models[0];
    let (graph, _) = amp_lower::compile_model(&checked.program, &map, model).expect("compiles");
    model_ranges(&graph)
}

fn label_ranges(ranges: &[Range]) -> Vec<(Vec<RangeStep>, i64)> {
    ranges.iter().filter(|r| r.what.contains("class label")).map(|r| (r.path.clone(), r.limit)).collect()
}

const TREE: &str = "
enum Tree { Leaf { word: int, label: int }, Node { left: Tree, right: Tree, label: int } }
record Sentence { tree: Tree, label: int }
model M(classes: int = 2, bound: int = 2) {
    param emb = Embedding(10, 4);
    param cell = Linear(8, 4);
    param head = Linear(4, classes);
    fn own(y: f32[classes], label: int) -> f32 {
        GUARD
    }
    fn walk(t: Tree) -> (f32[4], f32[classes], f32) {
        match t {
            Leaf { word, label } => { let h = tanh(emb(word)); let y = head(h); (h, y, own(y, label)) }
            Node { left, right, label } => {
                let (hl, _, ll) = walk(left);
                let (hr, _, lr) = walk(right);
                let h = tanh(cell(concat(hl, hr)));
                let y = head(h);
                (h, y, ll + lr + own(y, label))
            }
        }
    }
    fn forward(s: Sentence) -> f32[classes] { let (_, y, _) = walk(s.tree); y }
    fn loss(s: Sentence) -> f32 { let (_, _, l) = walk(s.tree); l }
}
";

fn tree_model(guard: &str) -> String {
    TREE.replace("GUARD", guard)
}

/// The label of every node, one range per variant (`Leaf`, then `Node`), both of `limit`.
fn every_node_label(limit: i64) -> Vec<(Vec<RangeStep>, i64)> {
    let of = |variant| {
        let steps = [RangeStep::Field("tree".into()), RangeStep::Each, RangeStep::Variant(variant)];
        (steps.into_iter().chain([RangeStep::Field("label".into())]).collect(), limit)
    };
    vec![of(0), of(1)]
}

#[test]
fn an_unguarded_loss_ranges_every_nodes_label() {
    let ranges = compiled_ranges(&tree_model("cross_entropy(y, label)"), &[]);
    assert_eq!(label_ranges(&ranges), every_node_label(2));
}

#[test]
fn a_loss_guarded_below_the_classes_leaves_larger_labels_to_the_model() {
    for guard in [
        "if label < classes { cross_entropy(y, label) } else { 0.0 }",
        "if label <= 1 { cross_entropy(y, label) } else { 0.0 }",
    ] {
        let ranges = compiled_ranges(&tree_model(guard), &[]);
        assert_eq!(label_ranges(&ranges), vec![], "{guard}");
        // The Embedding's range stays.
        assert!(ranges.iter().any(|r| r.what.contains("Embedding")), "{guard}");
    }
}

#[test]
fn a_guard_that_lets_a_label_past_the_classes_through_keeps_the_range() {
    // `label < 3` with 2 classes: a 2 would reach the loss.
    let guard = "if label < bound { cross_entropy(y, label) } else { 0.0 }";
    let ranges = compiled_ranges(&tree_model(guard), &[("bound", 3)]);
    assert_eq!(label_ranges(&ranges), every_node_label(2));
    // The other side of the guard is not a guard either.
    let ranges = compiled_ranges(&tree_model("if label < classes { 0.0 } else { cross_entropy(y, label) }"), &[]);
    assert_eq!(label_ranges(&ranges), every_node_label(2));
}

#[test]
fn a_guarded_tree_with_a_neutral_node_is_in_range_and_an_unguarded_one_is_not() {
    // (1 (2 a) (0 b)): the leaf labelled 2 is a neutral phrase of the binary task.
    let tree = common::tree_schema();
    let text = "(1 (2 a) (0 b))\n";
    let vocab = Vocab::from_words(["a", "b"], &VocabOptions::default());
    let loaded = amp_data::ptb::parse(&tree, text.as_bytes(), "t.txt", &vocab, &Default::default()).expect("parses");
    let instance = &Instance::new(&tree, loaded.instances[0].clone()).expect("fits the schema");
    let guarded = compiled_ranges(&tree_model("if label < classes { cross_entropy(y, label) } else { 0.0 }"), &[]);
    assert!(first_out_of_range(instance, &guarded).is_none());
    let unguarded = compiled_ranges(&tree_model("cross_entropy(y, label)"), &[]);
    let (field, value, _) = first_out_of_range(instance, &unguarded).expect("a 2 for 2 classes");
    assert_eq!((field.as_str(), value), ("tree[1].label", 2));
}

/// GGSNN's edge kinds choose among the message layers in every lowering: a `switch` per
/// edge, or (batched) one `partition_rows` of the edges, or one `mask_rows` per layer;
/// either way every edge's kind must be below the layers. Its node kinds index the
/// Embedding, looked up per node or (batched) by one `embedding_rows`.
#[test]
fn a_parameter_array_index_is_ranged_in_both_lowerings() {
    let source = include_str!("../../../examples/ggsnn.amp");
    let kinds = vec![RangeStep::Field("edges".into()), RangeStep::Each, RangeStep::Field("kind".into())];
    let nodes = vec![RangeStep::Field("nodes".into()), RangeStep::Each];
    for (per_element_maps, masked_arms) in [(false, false), (false, true), (true, false)] {
        let (map, checked) = amp_sema::check_source("ggsnn.amp", source, &amp_sema::Options::default());
        let model = checked.program.models[0];
        let options = amp_lower::LowerOptions { per_element_maps, masked_arms };
        let (graph, _) = amp_lower::compile_model_with(&checked.program, &map, model, &options).expect("compiles");
        let ranges = model_ranges(&graph);
        let kind = ranges.iter().find(|r| r.path == kinds).expect("the edge kinds are ranged");
        assert_eq!(kind.limit, 2, "per element: {per_element_maps}, masked: {masked_arms}");
        assert!(kind.what.contains("2 arms"), "{}", kind.what);
        let node = ranges.iter().find(|r| r.path == nodes).expect("the node kinds are ranged");
        assert_eq!(node.limit, 8, "per element: {per_element_maps}, masked: {masked_arms}");
        assert!(node.what.contains("Embedding `emb`"), "{}", node.what);
    }
}

/// A module network's program: two variants share the field name `op`, each choosing
/// among its own modules (3 unary, 4 binary). Each variant's `op` has its own range: a
/// `Bin` with `op = 3` is valid, a `Un` with `op = 3` is not (issue 48, finding 2: both
/// shared the smaller range).
const MODULES: &str = "
enum Step { Un { op: int, arg: int }, Bin { op: int, left: int, right: int } }
record Program { prog: [Step], label: int }
model M(d: int = 4) {
    param emb = Embedding(6, d);
    param unary = [Linear(d, d); 3];
    param binary = [Linear(2 * d, d); 4];
    param head = Linear(d, 2);
    fn forward(p: Program) -> f32[2] {
        let hs = p.prog.map(|s| match s {
            Un { op, arg } => tanh(unary[op](emb(arg))),
            Bin { op, left, right } => tanh(binary[op](concat(emb(left), emb(right)))),
        });
        head(sum(hs))
    }
    fn loss(p: Program) -> f32 { cross_entropy(forward(p), p.label) }
}
";

#[test]
fn two_variants_sharing_a_field_name_keep_their_own_ranges_in_json_lines() {
    let (map, checked) = amp_sema::check_source("m.amp", MODULES, &amp_sema::Options::default());
    assert!(!checked.has_errors(), "{:?}", checked.diagnostics);
    let model = checked.program.models[0];
    for (per_element_maps, masked_arms) in [(false, false), (false, true), (true, false)] {
        let options = amp_lower::LowerOptions { per_element_maps, masked_arms };
        let (graph, _) = amp_lower::compile_model_with(&checked.program, &map, model, &options).expect("compiles");
        let ranges = model_ranges(&graph);
        let schema = graph.input.clone().expect("a schema");
        let load = |line: &str| {
            let loaded = amp_data::jsonl::parse(&schema, line.as_bytes(), "p.jsonl", &Default::default());
            Instance::new(&schema, loaded.expect("parses").instances[0].clone()).expect("fits the schema")
        };
        let case = format!("per element: {per_element_maps}, masked: {masked_arms}");
        // Every module of each kind, the last binary one (3) included.
        let valid =
            load(r#"{"prog": [{"Un": {"op": 2, "arg": 1}}, {"Bin": {"op": 3, "left": 0, "right": 5}}], "label": 1}"#);
        assert_eq!(first_out_of_range(&valid, &ranges), None, "{case}: {ranges:?}");
        let unary_past =
            load(r#"{"prog": [{"Bin": {"op": 3, "left": 0, "right": 1}}, {"Un": {"op": 3, "arg": 1}}], "label": 0}"#);
        let (field, value, range) = first_out_of_range(&unary_past, &ranges).expect("a unary op of 3");
        assert_eq!((field.as_str(), value, range.limit), ("prog[1].op", 3, 3), "{case}");
        assert!(range.what.contains("3 arms"), "{case}: {}", range.what);
        let binary_past = load(r#"{"prog": [{"Bin": {"op": 4, "left": 0, "right": 1}}], "label": 0}"#);
        let (field, value, range) = first_out_of_range(&binary_past, &ranges).expect("a binary op of 4");
        assert_eq!((field.as_str(), value, range.limit), ("prog[0].op", 4, 4), "{case}");
    }
}

/// PTB trees: `Leaf` and `Node` share `label`; here leaves are classified among 2 classes
/// and inner nodes among 5, so a node labelled 4 is valid and a leaf labelled 4 is not.
#[test]
fn two_variants_sharing_a_field_name_keep_their_own_ranges_in_ptb_trees() {
    let source = "
enum Tree { Leaf { word: int, label: int }, Node { left: Tree, right: Tree, label: int } }
record Sentence { tree: Tree, label: int }
model M() {
    param emb = Embedding(10, 4);
    param cell = Linear(8, 4);
    param leaf_head = Linear(4, 2);
    param node_head = Linear(4, 5);
    fn walk(t: Tree) -> (f32[4], f32) {
        match t {
            Leaf { word, label } => { let h = tanh(emb(word)); (h, cross_entropy(leaf_head(h), label)) }
            Node { left, right, label } => {
                let (hl, ll) = walk(left);
                let (hr, lr) = walk(right);
                let h = tanh(cell(concat(hl, hr)));
                (h, ll + lr + cross_entropy(node_head(h), label))
            }
        }
    }
    fn forward(s: Sentence) -> f32[5] { let (h, _) = walk(s.tree); node_head(h) }
    fn loss(s: Sentence) -> f32 { let (_, l) = walk(s.tree); l + cross_entropy(forward(s), s.label) }
}
";
    let ranges = compiled_ranges(source, &[]);
    let tree = common::tree_schema();
    let vocab = Vocab::from_words(["a", "b"], &VocabOptions::default());
    let load = |text: &str| {
        let loaded = amp_data::ptb::parse(&tree, text.as_bytes(), "t.txt", &vocab, &Default::default());
        Instance::new(&tree, loaded.expect("parses").instances[0].clone()).expect("fits the schema")
    };
    assert_eq!(first_out_of_range(&load("(4 (1 a) (0 b))\n"), &ranges), None, "{ranges:?}");
    let (field, value, range) = first_out_of_range(&load("(4 (1 a) (4 b))\n"), &ranges).expect("a leaf labelled 4");
    assert_eq!((field.as_str(), value, range.limit), ("tree[2].label", 4, 2));
    let (field, value, range) = first_out_of_range(&load("(5 (1 a) (0 b))\n"), &ranges).expect("a node labelled 5");
    assert_eq!((field.as_str(), value, range.limit), ("tree[0].label", 5, 5));
}
