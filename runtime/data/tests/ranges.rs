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

fn every_node_label() -> Vec<RangeStep> {
    vec![RangeStep::Field("tree".into()), RangeStep::Each, RangeStep::Field("label".into())]
}

#[test]
fn an_unguarded_loss_ranges_every_nodes_label() {
    let ranges = compiled_ranges(&tree_model("cross_entropy(y, label)"), &[]);
    assert_eq!(label_ranges(&ranges), vec![(every_node_label(), 2)]);
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
    assert_eq!(label_ranges(&ranges), vec![(every_node_label(), 2)]);
    // The other side of the guard is not a guard either.
    let ranges = compiled_ranges(&tree_model("if label < classes { 0.0 } else { cross_entropy(y, label) }"), &[]);
    assert_eq!(label_ranges(&ranges), vec![(every_node_label(), 2)]);
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
