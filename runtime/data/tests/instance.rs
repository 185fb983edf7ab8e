//! The view the runtime evaluates data paths on: fields, indices, and flattened trees.

mod common;

use amp_data::{DataErrorKind, Instance, Tensor, Value};
use amp_ir::{InstanceData, ResolvedStep, ResolvedStep::Field as F, ResolvedStep::Index as I};

fn leaf(word: i64, label: i64) -> Value {
    Value::Variant { tag: 0, fields: vec![Value::Int(word), Value::Int(label)] }
}

fn node(left: Value, right: Value, label: i64) -> Value {
    Value::Variant { tag: 1, fields: vec![left, right, Value::Int(label)] }
}

/// `(4 (3 (1 a) (2 b)) (0 c))` with words a = 10, b = 11, c = 12. Pre-order:
/// 0 root, 1 left branch, 2 a, 3 b, 4 c.
fn sentence() -> Instance {
    let tree = node(node(leaf(10, 1), leaf(11, 2), 3), leaf(12, 0), 4);
    Instance::new(&common::tree_schema(), Value::Record(vec![tree, Value::Int(4)])).expect("valid sentence")
}

fn at(n: i64, field: &str) -> Vec<ResolvedStep<'_>> {
    vec![F("tree"), I(n), F(field)]
}

#[test]
fn tree_nodes_are_numbered_in_pre_order() {
    let s = sentence();
    assert_eq!(s.len_at(&[F("tree")]), Some(5));
    let tags: Vec<_> = (0..5).map(|n| s.int_at(&at(n, "$tag"))).collect();
    assert_eq!(tags, [1, 1, 0, 0, 0].map(Some));
    let parents: Vec<_> = (0..5).map(|n| s.int_at(&at(n, "$parent"))).collect();
    assert_eq!(parents, [-1, 0, 1, 1, 0].map(Some));
    let labels: Vec<_> = (0..5).map(|n| s.int_at(&at(n, "label"))).collect();
    assert_eq!(labels, [4, 3, 1, 2, 0].map(Some));
    let words: Vec<_> = (0..5).map(|n| s.int_at(&at(n, "word"))).collect();
    assert_eq!(words, [None, None, Some(10), Some(11), Some(12)]);
}

#[test]
fn sites_and_children_follow_the_schema_numbering() {
    // Tree's sites: Leaf.word 0, Leaf.label 1, Node.left 2, Node.right 3, Node.label 4.
    let s = sentence();
    let sites: Vec<_> = (0..5).map(|n| s.int_at(&at(n, "$site"))).collect();
    assert_eq!(sites, [-1, 2, 2, 3, 3].map(Some));
    let child = |n: i64, site: i64| s.int_at(&[F("tree"), I(n), F("$child"), I(site)]);
    assert_eq!((child(0, 2), child(0, 3)), (Some(1), Some(4)));
    assert_eq!((child(1, 2), child(1, 3)), (Some(2), Some(3)));
    assert_eq!(child(2, 2), Some(-1), "a leaf has no left child");
    assert_eq!(child(0, 0), Some(-1), "a branch has no word site");
    assert_eq!(child(0, 5), None, "not a site of Tree");
    assert_eq!(child(0, -1), None);
    // A child's fields can be read through `$child`.
    assert_eq!(s.int_at(&[F("tree"), I(1), F("$child"), I(3), F("word")]), Some(11));
}

#[test]
fn recursive_fields_give_node_numbers_and_lead_on() {
    let s = sentence();
    assert_eq!(s.int_at(&[F("tree"), I(0), F("left")]), Some(1));
    assert_eq!(s.int_at(&[F("tree"), I(0), F("right")]), Some(4));
    assert_eq!(s.int_at(&[F("tree"), I(1), F("right")]), Some(3));
    assert_eq!(s.int_at(&[F("tree"), F("left"), F("right"), F("word")]), Some(11), "fields of the tree act on node 0");
    assert_eq!(s.int_at(&[F("tree"), F("label")]), Some(4));
    assert_eq!(s.int_at(&[F("label")]), Some(4));
}

#[test]
fn paths_that_do_not_fit_give_none() {
    let s = sentence();
    for path in [
        vec![F("tree"), I(5)],
        vec![F("tree"), I(-1)],
        vec![F("tree"), I(0), I(0)],
        vec![F("tree"), I(2), F("left")],
        vec![F("tree"), I(2), F("word"), F("x")],
        vec![F("nope")],
        vec![I(0)],
        vec![F("label"), I(0)],
        vec![F("tree"), I(1), F("$child")],
        vec![F("tree"), I(1), F("left"), I(0)],
    ] {
        assert_eq!(s.int_at(&path), None, "{path:?}");
        assert_eq!(s.len_at(&path), None, "{path:?}");
    }
    assert_eq!(s.len_at(&[F("tree"), I(0)]), None, "a node is not a tree");
    assert_eq!(s.len_at(&[F("label")]), None);
}

#[test]
fn sequences_records_tuples_bools_and_tensors() {
    let schema = common::mixed_schema();
    let value = mixed_value();
    let m = Instance::new(&schema, value.clone()).expect("valid");
    assert_eq!(m.int_at(&[F("flag")]), Some(1));
    assert_eq!(m.int_at(&[F("pair"), I(0)]), Some(-7));
    assert_eq!(m.int_at(&[F("pair"), I(1)]), Some(0));
    assert_eq!(m.int_at(&[F("pair"), I(2)]), None);
    assert_eq!(m.int_at(&[F("shape"), F("$tag")]), Some(1));
    assert_eq!(m.int_at(&[F("shape"), F("side")]), Some(3));
    assert_eq!(m.len_at(&[F("points")]), Some(2));
    assert_eq!(m.int_at(&[F("points"), I(1), F("y")]), Some(5));
    assert_eq!(m.int_at(&[F("points"), I(2), F("y")]), None);
    assert_eq!(m.tensor_at(&[F("grid")]).map(|t| t.shape.clone()), Some(vec![2, 3]));
    assert_eq!(m.tensor_at(&[F("scale")]).map(|t| t.data.clone()), Some(vec![0.5]));
    assert_eq!(m.int_at(&[F("scale")]), None);
    // Each tree of the forest has its own numbering.
    assert_eq!(m.len_at(&[F("forest")]), Some(2));
    assert_eq!(m.len_at(&[F("forest"), I(0)]), Some(3));
    assert_eq!(m.len_at(&[F("forest"), I(1)]), Some(3));
    assert_eq!(m.int_at(&[F("forest"), I(1), I(2), F("value")]), Some(9));
    assert_eq!(m.int_at(&[F("forest"), I(1), I(1), F("$site")]), Some(4), "Neg.inner is Expr's site 4");
    assert_eq!(m.int_at(&[F("forest"), I(1), I(1), F("flag")]), Some(0));
    assert_eq!(m.to_value(), value, "flattening loses nothing");
}

fn mixed_value() -> Value {
    let num = |v| Value::Variant { tag: 0, fields: vec![Value::Int(v)] };
    let add = |a, b| Value::Variant { tag: 1, fields: vec![a, b] };
    let neg = |flag, a| Value::Variant { tag: 2, fields: vec![Value::Bool(flag), a] };
    Value::Record(vec![
        Value::Bool(true),
        Value::Tensor(Tensor::scalar(0.5)),
        Value::Tensor(Tensor::new(vec![2, 3], vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0]).expect("2x3")),
        Value::Tuple(vec![Value::Int(-7), Value::Bool(false)]),
        Value::Variant { tag: 1, fields: vec![Value::Int(3)] },
        Value::Seq(vec![add(num(1), num(2)), neg(true, neg(false, num(9)))]),
        Value::Seq(vec![
            Value::Record(vec![Value::Int(1), Value::Int(2)]),
            Value::Record(vec![Value::Int(4), Value::Int(5)]),
        ]),
    ])
}

#[test]
fn deep_trees_are_flattened_without_recursion() {
    // A left spine of 20,000 branches: far deeper than any recursive walk could go.
    let mut tree = leaf(0, 0);
    for i in 0..20_000 {
        tree = node(tree, leaf(i, 1), 2);
    }
    let s = Instance::new(&common::tree_schema(), Value::Record(vec![tree, Value::Int(0)])).expect("valid");
    assert_eq!(s.len_at(&[F("tree")]), Some(40_001));
    assert_eq!(s.int_at(&at(20_000, "$tag")), Some(0), "the deepest leaf comes right after the spine");
    assert_eq!(s.int_at(&at(40_000, "word")), Some(19_999));
    assert_eq!(s.int_at(&at(40_000, "$parent")), Some(0));
}

#[test]
fn invalid_values_are_rejected_with_the_field() {
    let schema = common::tree_schema();
    let bad_leaf = Value::Variant { tag: 0, fields: vec![Value::Bool(true), Value::Int(1)] };
    let value = Value::Record(vec![node(leaf(1, 1), node(leaf(2, 2), bad_leaf, 3), 4), Value::Int(0)]);
    let error = Instance::new(&schema, value).expect_err("a bool word");
    assert_eq!(error.field(), Some("tree.right.right.word"));
    assert_eq!(error.to_string(), "field `tree.right.right.word`: expected an int, found the bool true");

    let value = Value::Record(vec![node(leaf(1, 1), Value::Int(3), 4), Value::Int(0)]);
    let error = Instance::new(&schema, value).expect_err("an int for a tree");
    assert_eq!(error.field(), Some("tree.right"));

    let value = Value::Record(vec![Value::Variant { tag: 7, fields: vec![] }, Value::Int(0)]);
    assert!(Instance::new(&schema, value).is_err());
    let value = Value::Record(vec![leaf(1, 1)]);
    assert!(Instance::new(&schema, value).is_err());

    let digits = common::digit_schema();
    let short = Value::Record(vec![Value::Tensor(Tensor::scalar(1.0)), Value::Int(0)]);
    let error = Instance::new(&digits, short).expect_err("a scalar for f32[64]");
    assert!(matches!(error.kind(), DataErrorKind::Mismatch { .. }), "{error}");
    let lying = Tensor { shape: vec![64], data: vec![0.0; 3] };
    assert!(Instance::new(&digits, Value::Record(vec![Value::Tensor(lying), Value::Int(0)])).is_err());
}

#[test]
fn ints_along_rows_are_the_ints_at_each_row() {
    let m = Instance::new(&common::mixed_schema(), mixed_value()).expect("valid");
    let one_by_one = |prefix: &[ResolvedStep], rows: i64, suffix: &[ResolvedStep]| -> Option<Vec<i64>> {
        (0..rows).map(|r| m.int_at(&[prefix, &[I(r)], suffix].concat())).collect()
    };
    // An int field of every element of a top-level sequence (kept as a column), and an
    // element of a tuple or a tree's nodes (the general walk).
    let cases: [(&[ResolvedStep], usize, &[ResolvedStep]); 8] = [
        (&[F("points")], 2, &[F("y")]),
        (&[F("points")], 2, &[F("x")]),
        (&[F("points")], 0, &[F("x")]),
        (&[F("pair")], 2, &[]),
        (&[F("forest"), I(1)], 3, &[F("$tag")]),
        (&[F("forest"), I(0)], 3, &[F("$parent")]),
        (&[F("points")], 3, &[F("y")]),
        (&[F("points")], 2, &[F("z")]),
    ];
    for (prefix, rows, suffix) in cases {
        let along = m.ints_along(prefix, rows, suffix);
        assert_eq!(along, one_by_one(prefix, rows as i64, suffix), "{prefix:?} {rows} {suffix:?}");
    }
    assert_eq!(m.ints_along(&[F("points")], 2, &[F("y")]), Some(vec![2, 5]));
    assert_eq!(m.ints_along(&[F("points")], 3, &[F("y")]), None, "past the end");
    assert_eq!(m.ints_along(&[F("points")], 2, &[F("z")]), None, "no such field");
    assert_eq!(m.ints_along(&[F("forest"), I(1)], 3, &[F("$tag")]), Some(vec![2, 2, 0]));
}

/// `enum Dep { Word { word: int, kids: [Dep], label: int } }` with a `bool` beside: the
/// child-sum Tree-LSTM's dependency trees, whose nodes have any number of children.
fn dependency_schema() -> amp_ir::Schema {
    use amp_ir::{DataTy, EnumSchema, RecordSchema, Schema, VariantSchema};
    let fields = vec![
        common::field("word", DataTy::Int),
        common::field("kids", common::seq(DataTy::Enum(0))),
        common::field("label", DataTy::Int),
    ];
    Schema {
        records: vec![RecordSchema { name: "Parse".into(), fields: vec![common::field("tree", DataTy::Enum(0))] }],
        enums: vec![EnumSchema { name: "Dep".into(), variants: vec![VariantSchema { name: "Word".into(), fields }] }],
        input: 0,
    }
}

fn word(word: i64, kids: Vec<Value>) -> Value {
    Value::Variant { tag: 0, fields: vec![Value::Int(word), Value::Seq(kids), Value::Int(word % 3)] }
}

#[test]
fn collection_fields_of_a_tree_hold_children_numbered_in_order() {
    // 10 with kids [11 with kids [12, 13], 14, 15]: pre-order 10, 11, 12, 13, 14, 15.
    let value = Value::Record(vec![word(
        10,
        vec![word(11, vec![word(12, vec![]), word(13, vec![])]), word(14, vec![]), word(15, vec![])],
    )]);
    let p = Instance::new(&dependency_schema(), value.clone()).expect("a valid parse");
    assert_eq!(p.len_at(&[F("tree")]), Some(6));
    let words: Vec<_> = (0..6).map(|n| p.int_at(&at(n, "word"))).collect();
    assert_eq!(words, [10, 11, 12, 13, 14, 15].map(Some));
    let parents: Vec<_> = (0..6).map(|n| p.int_at(&at(n, "$parent"))).collect();
    assert_eq!(parents, [-1, 0, 1, 1, 0, 0].map(Some));
    let index: Vec<_> = (0..6).map(|n| p.int_at(&at(n, "$index"))).collect();
    assert_eq!(index, [-1, 0, 0, 1, 1, 2].map(Some));
    // Dep's sites: Word.word 0, Word.kids 1, Word.label 2.
    let sites: Vec<_> = (0..6).map(|n| p.int_at(&at(n, "$site"))).collect();
    assert_eq!(sites, [-1, 1, 1, 1, 1, 1].map(Some));
    let kids = |n: i64| p.len_at(&[F("tree"), I(n), F("kids")]);
    assert_eq!((0..6).map(kids).collect::<Vec<_>>(), [3, 2, 0, 0, 0, 0].map(Some));
    assert_eq!(p.int_at(&[F("tree"), I(0), F("kids"), I(2)]), Some(5));
    assert_eq!(p.int_at(&[F("tree"), I(0), F("kids"), I(0), F("kids"), I(1), F("word")]), Some(13));
    assert_eq!(p.int_at(&[F("tree"), I(0), F("kids"), I(3)]), None);
    // `$child[s][e]` finds a child from its parent, site and position (a backward step's
    // inverse); `$child[s]` alone is the first.
    let child = |n: i64, s: i64, e: i64| p.int_at(&[F("tree"), I(n), F("$child"), I(s), I(e)]);
    assert_eq!((child(0, 1, 0), child(0, 1, 1), child(0, 1, 2)), (Some(1), Some(4), Some(5)));
    assert_eq!((child(0, 1, 3), child(2, 1, 0), child(0, 0, 0)), (Some(-1), Some(-1), Some(-1)));
    assert_eq!(p.int_at(&[F("tree"), I(1), F("$child"), I(1)]), Some(2));
    // Every node's label is visited once, children included.
    let mut labels = Vec::new();
    let each = [
        amp_data::ranges::RangeStep::Field("tree".into()),
        amp_data::ranges::RangeStep::Each,
        amp_data::ranges::RangeStep::Field("label".into()),
    ];
    p.each_int(&each, &mut |_, v| {
        labels.push(v);
        true
    });
    assert_eq!(labels, [1, 2, 0, 1, 2, 0]);
    assert_eq!(p.to_value(), value, "flattening loses nothing");
}

#[test]
fn a_collection_field_that_is_not_a_sequence_is_named_in_the_error() {
    let bad = Value::Record(vec![word(
        1,
        vec![Value::Variant { tag: 0, fields: vec![Value::Int(2), Value::Int(7), Value::Int(0)] }],
    )]);
    let err = Instance::new(&dependency_schema(), bad).expect_err("kids must be a sequence");
    assert!(err.to_string().contains("tree.kids[0].kids"), "{err}");
}

#[test]
fn an_instance_is_as_large_as_its_sequences_and_trees() {
    // What the executor balances copies of the graph by: a graph's nodes and edges, a
    // tree's nodes, and at least 1 for data with neither.
    let edge = |s, d| Value::Record(vec![Value::Int(s), Value::Int(d), Value::Int(0)]);
    let graph = |nodes: usize, edges: Vec<Value>| {
        let nodes = (0..nodes).map(|n| Value::Int(n as i64)).collect();
        Instance::new(&common::graph_schema(), Value::Record(vec![Value::Seq(nodes), Value::Seq(edges), Value::Int(0)]))
            .expect("a valid graph")
    };
    assert_eq!(graph(3, vec![edge(0, 1), edge(1, 2)]).size(), 5);
    assert_eq!(graph(0, vec![]).size(), 1);
    assert_eq!(sentence().size(), 5);
    let pixels = Value::Tensor(Tensor::new(vec![64], vec![0.0; 64]).expect("64 values"));
    let digit = Instance::new(&common::digit_schema(), Value::Record(vec![pixels, Value::Int(3)]));
    assert_eq!(digit.expect("a valid digit").size(), 1);
}
