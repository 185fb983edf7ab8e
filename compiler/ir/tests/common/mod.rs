//! Shared fixtures for the IR's serialization tests: hand-built graphs covering each
//! feature of the text and file forms, a structural equality check, and a proptest
//! generator of arbitrary (not necessarily verifiable) graphs.
#![allow(dead_code)] // each test binary uses a different subset

use amp_ir::*;
use petgraph::stable_graph::NodeIndex;
use petgraph::visit::{EdgeRef, IntoEdgeReferences};
use proptest::prelude::*;
use std::collections::BTreeMap;

pub fn f32ty(dims: &[u64]) -> PayloadTy {
    PayloadTy::F32(dims.to_vec())
}

pub fn node(op: Op, inputs: Vec<PayloadTy>, outputs: Vec<PayloadTy>, label: &str) -> Node {
    Node {
        op,
        inputs,
        outputs,
        reads: vec![],
        writes: vec![],
        key: vec![],
        label: label.into(),
        loc: None,
        fusion: None,
    }
}

pub fn field(i: u16) -> StateExpr {
    StateExpr::Field(FieldId(i))
}

pub fn data(path: &[&str]) -> Vec<DataStep> {
    path.iter().map(|s| DataStep::Field(s.to_string())).collect()
}

pub fn batch(dims: &[u64]) -> PayloadTy {
    PayloadTy::Batch(dims.to_vec())
}

/// `$.seq[INDEX].field`.
pub fn element_of(seq: &str, index: StateExpr, field: &str) -> StateExpr {
    StateExpr::Data(vec![DataStep::Field(seq.into()), DataStep::Index(Box::new(index)), DataStep::Field(field.into())])
}

fn connect(g: &mut Graph, src: NodeIndex, from_port: u16, dst: NodeIndex, to_port: u16) {
    g.nodes.add_edge(src, dst, Edge { from_port, to_port });
}

fn loc(line: u32) -> Option<Loc> {
    Some(Loc { file: 0, start: line * 10, end: line * 10 + 7, line, col: 5 })
}

/// source → read → linear → log_softmax → loss, plus a sink: no control flow.
pub fn straight_line() -> Graph {
    let mut g = Graph { name: "Mlp".into(), files: vec!["examples/mlp.amp".into()], ..Graph::default() };
    g.state.push(StateField { name: "inst".into(), role: FieldRole::Instance });
    g.params.push(Param { name: "fc.weight".into(), shape: vec![10, 784], init: ParamInit::Uniform { fan_in: 784 } });
    g.params.push(Param { name: "fc.bias".into(), shape: vec![10], init: ParamInit::Uniform { fan_in: 784 } });
    g.meta.insert("hidden".into(), "10".into());
    let src = g.nodes.add_node(Node { loc: loc(3), ..node(Op::Source, vec![], vec![PayloadTy::Unit], "d") });
    let read = g.nodes.add_node(Node {
        loc: loc(4),
        ..node(Op::Read { path: data(&["pixels"]) }, vec![PayloadTy::Unit], vec![f32ty(&[784])], "d.pixels")
    });
    let fc = g.nodes.add_node(Node {
        key: vec![FieldId(0)],
        loc: loc(5),
        ..node(Op::Linear { param: "fc".into() }, vec![f32ty(&[784])], vec![f32ty(&[10])], "fc")
    });
    let act = g.nodes.add_node(Node {
        key: vec![FieldId(0)],
        fusion: Some(0),
        ..node(Op::Unary(UnaryFn::LogSoftmax), vec![f32ty(&[10])], vec![f32ty(&[10])], "")
    });
    let label = StateExpr::Data(data(&["label"]));
    let loss = g.nodes.add_node(Node {
        key: vec![FieldId(0)],
        ..node(Op::Loss(LossKind::CrossEntropy { label }), vec![f32ty(&[10])], vec![PayloadTy::Unit], "loss")
    });
    let sink = g.nodes.add_node(node(Op::Sink { name: "logits".into() }, vec![f32ty(&[10])], vec![], "out"));
    connect(&mut g, src, 0, read, 0);
    connect(&mut g, read, 0, fc, 0);
    connect(&mut g, fc, 0, act, 0);
    connect(&mut g, act, 0, loss, 0);
    connect(&mut g, act, 0, sink, 0);
    g
}

/// A ListReduce-style loop: `h = zeros; for tok in x.tokens { h = tanh(cell([embed[tok], h])) }`.
pub fn list_reduce() -> Graph {
    let mut g = Graph { name: "ListReduce".into(), files: vec!["examples/list_reduce.amp".into()], ..Graph::default() };
    g.state.push(StateField { name: "inst".into(), role: FieldRole::Instance });
    g.state.push(StateField { name: "t0".into(), role: FieldRole::Counter });
    g.params.push(Param { name: "embed.weight".into(), shape: vec![14, 128], init: ParamInit::Normal });
    g.params.push(Param {
        name: "cell.weight".into(),
        shape: vec![128, 256],
        init: ParamInit::Uniform { fan_in: 256 },
    });
    g.params.push(Param { name: "cell.bias".into(), shape: vec![128], init: ParamInit::Uniform { fan_in: 256 } });
    let (inst, t) = (FieldId(0), FieldId(1));
    let h = f32ty(&[128]);
    let src = g.nodes.add_node(Node { loc: loc(13), ..node(Op::Source, vec![], vec![PayloadTy::Unit], "x") });
    let h0 =
        g.nodes.add_node(node(Op::Const { value: ConstValue::Zeros }, vec![PayloadTy::Unit], vec![h.clone()], "h"));
    let enter = g.nodes.add_node(Node {
        writes: vec![t],
        ..node(Op::Isu { field: t, value: StateExpr::Const(0), inverse: None }, vec![h.clone()], vec![h.clone()], "for")
    });
    let phi = g.nodes.add_node(Node {
        key: vec![inst, t],
        ..node(Op::Phi { arms: 2 }, vec![h.clone(), h.clone()], vec![h.clone()], "h")
    });
    let bound = StateExpr::Len(data(&["tokens"]));
    let cond = g.nodes.add_node(Node {
        reads: vec![t],
        ..node(
            Op::Cond { pred: StateExpr::bin(IntOp::Lt, field(1), bound) },
            vec![h.clone()],
            vec![h.clone(), h.clone()],
            "",
        )
    });
    let token = StateExpr::Data(vec![DataStep::Field("tokens".into()), DataStep::Index(Box::new(field(1)))]);
    let embed = g.nodes.add_node(Node {
        key: vec![inst, t],
        reads: vec![t],
        ..node(Op::Embedding { param: "embed".into(), index: token }, vec![PayloadTy::Unit], vec![h.clone()], "embed")
    });
    let forget = g.nodes.add_node(node(Op::Forget, vec![h.clone()], vec![PayloadTy::Unit], ""));
    let cat = g
        .nodes
        .add_node(Node { key: vec![inst, t], ..node(Op::Concat, vec![h.clone(), h.clone()], vec![f32ty(&[256])], "") });
    let cell = g.nodes.add_node(Node {
        key: vec![inst, t],
        loc: loc(15),
        ..node(Op::Linear { param: "cell".into() }, vec![f32ty(&[256])], vec![h.clone()], "cell")
    });
    let tanh = g
        .nodes
        .add_node(Node { key: vec![inst, t], ..node(Op::Unary(UnaryFn::Tanh), vec![h.clone()], vec![h.clone()], "h") });
    let step = g.nodes.add_node(Node {
        reads: vec![t],
        writes: vec![t],
        ..node(
            Op::Isu {
                field: t,
                value: StateExpr::bin(IntOp::Add, field(1), StateExpr::Const(1)),
                inverse: Some(StateExpr::bin(IntOp::Sub, field(1), StateExpr::Const(1))),
            },
            vec![h.clone()],
            vec![h.clone()],
            "",
        )
    });
    let exit = g.nodes.add_node(Node {
        writes: vec![t],
        key: vec![inst],
        ..node(
            Op::Isu { field: t, value: StateExpr::Const(-1), inverse: None },
            vec![h.clone()],
            vec![h.clone()],
            "end for",
        )
    });
    let sink = g.nodes.add_node(node(Op::Sink { name: "h".into() }, vec![h.clone()], vec![], ""));
    connect(&mut g, src, 0, h0, 0);
    connect(&mut g, h0, 0, enter, 0);
    connect(&mut g, enter, 0, phi, 0);
    connect(&mut g, step, 0, phi, 1);
    connect(&mut g, phi, 0, cond, 0);
    connect(&mut g, cond, 0, forget, 0);
    connect(&mut g, forget, 0, embed, 0);
    connect(&mut g, embed, 0, cat, 0);
    connect(&mut g, cond, 0, cat, 1);
    connect(&mut g, cat, 0, cell, 0);
    connect(&mut g, cell, 0, tanh, 0);
    connect(&mut g, tanh, 0, step, 0);
    connect(&mut g, cond, 1, exit, 0);
    connect(&mut g, exit, 0, sink, 0);
    g
}

/// `list_reduce` with nodes removed in the middle and at the end, leaving holes.
pub fn with_holes() -> Graph {
    let mut g = list_reduce();
    for index in [7, 2, 12, 11] {
        g.nodes.remove_node(NodeIndex::new(index));
    }
    g
}

/// An input schema using every kind of data type: records referring to each other in both
/// directions (`Edge` names `Example`, declared after it), a recursive enum, an enum without
/// variants, a variant without fields, sequences (nested too), tuples (empty too), tensors
/// and scalars; the input is the second record, so its index is not the default 0.
pub fn every_data_type() -> Schema {
    let named = |name: &str, ty: DataTy| FieldSchema { name: name.into(), ty };
    let (example, edge, tree) = (DataTy::Record(1), DataTy::Record(0), DataTy::Enum(0));
    let seq = |ty: DataTy| DataTy::Seq(Box::new(ty));
    Schema {
        records: vec![
            RecordSchema {
                name: "Edge".into(),
                fields: vec![named("src", DataTy::Int), named("dst", DataTy::Int), named("owner", example)],
            },
            RecordSchema {
                name: "Example".into(),
                fields: vec![
                    named("xs", seq(DataTy::Int)),
                    named("edges", seq(edge)),
                    named("tree", tree.clone()),
                    named("pair", DataTy::Tuple(vec![DataTy::Int, DataTy::Bool])),
                    named("nothing", DataTy::Tuple(vec![])),
                    named("grid", DataTy::F32(vec![2, 3])),
                    named("scale", DataTy::F32(vec![])),
                    named("deep", seq(seq(DataTy::F32(vec![4])))),
                ],
            },
        ],
        enums: vec![
            EnumSchema {
                name: "Tree".into(),
                variants: vec![
                    VariantSchema { name: "Leaf".into(), fields: vec![named("word", DataTy::Int)] },
                    VariantSchema {
                        name: "Node".into(),
                        fields: vec![named("left", tree.clone()), named("right", tree)],
                    },
                    VariantSchema { name: "Nil".into(), fields: vec![] },
                ],
            },
            EnumSchema { name: "Never".into(), variants: vec![] },
        ],
        input: 1,
    }
}

/// One node of every op (and every function, const kind and awkward name), unwired
/// except for a few edges; an unconnected input prints as `_`. It carries the input
/// schema of [`every_data_type`], and batches (`f32[?, 32]`, `f32[?]`) on a few ports.
pub fn every_op() -> Graph {
    let mut g =
        Graph { name: "every op!".into(), files: vec!["a.amp".into(), "dir/b \"q\".amp".into()], ..Graph::default() };
    g.state.push(StateField { name: "inst".into(), role: FieldRole::Instance });
    g.state.push(StateField { name: "t".into(), role: FieldRole::Counter });
    g.state.push(StateField { name: "odd name".into(), role: FieldRole::Element });
    g.state.push(StateField { name: "n".into(), role: FieldRole::Data });
    g.state.push(StateField { name: "tn".into(), role: FieldRole::TreeNode });
    g.state.push(StateField { name: "s".into(), role: FieldRole::Slot });
    g.params.push(Param { name: "layers.0.weight".into(), shape: vec![4, 4], init: ParamInit::Uniform { fan_in: 4 } });
    g.params.push(Param { name: "scalar param".into(), shape: vec![], init: ParamInit::Normal });
    g.params.push(Param { name: "norm.weight".into(), shape: vec![4], init: ParamInit::Ones });
    g.params.push(Param { name: "norm.bias".into(), shape: vec![4], init: ParamInit::Zeros });
    g.meta.insert("quote\"key".into(), "line\nbreak\tand \\ \u{7}".into());
    g.meta.insert("empty".into(), String::new());
    let u = PayloadTy::Unit;
    let v = f32ty(&[4]);
    let deep = StateExpr::bin(
        IntOp::Or,
        StateExpr::bin(IntOp::And, StateExpr::Not(Box::new(field(1))), StateExpr::bin(IntOp::Ge, field(2), field(3))),
        StateExpr::bin(
            IntOp::Eq,
            StateExpr::bin(IntOp::Rem, StateExpr::bin(IntOp::Sub, field(1), StateExpr::Const(-3)), StateExpr::Const(2)),
            StateExpr::bin(IntOp::Mul, StateExpr::Const(i64::MIN), StateExpr::bin(IntOp::Div, field(4), field(5))),
        ),
    );
    let mut ops = vec![
        (Op::Source, vec![], vec![u.clone()]),
        (Op::Read { path: vec![] }, vec![u.clone()], vec![f32ty(&[])]),
        (
            Op::Read {
                path: vec![
                    DataStep::Field("seq".into()),
                    DataStep::Index(Box::new(StateExpr::Len(data(&["len", "x y"])))),
                    DataStep::Variant(1),
                    DataStep::Field("weird \"field\"".into()),
                ],
            },
            vec![u.clone()],
            vec![v.clone()],
        ),
        (Op::Const { value: ConstValue::Zeros }, vec![u.clone()], vec![v.clone()]),
        (Op::Const { value: ConstValue::Ones }, vec![u.clone()], vec![v.clone()]),
        (Op::Linear { param: "layers.0".into() }, vec![v.clone()], vec![v.clone()]),
        (Op::Linear { param: "with space".into() }, vec![v.clone()], vec![v.clone()]),
        (Op::Embedding { param: "e".into(), index: StateExpr::Data(vec![]) }, vec![u.clone()], vec![v.clone()]),
        (Op::Concat, vec![v.clone(), v.clone(), v.clone()], vec![f32ty(&[12])]),
        (Op::Split { parts: 3 }, vec![f32ty(&[12])], vec![v.clone(), v.clone(), v.clone()]),
        (Op::Forget, vec![v.clone()], vec![u.clone()]),
        (Op::Cond { pred: deep.clone() }, vec![v.clone()], vec![v.clone(), v.clone()]),
        (Op::Switch { index: field(5), arms: 3 }, vec![v.clone()], vec![v.clone(), v.clone(), v.clone()]),
        (Op::Phi { arms: 3 }, vec![v.clone(), v.clone(), v.clone()], vec![v.clone()]),
        (Op::Isu { field: FieldId(2), value: deep, inverse: None }, vec![v.clone()], vec![v.clone()]),
        (
            Op::Isu {
                field: FieldId(1),
                value: StateExpr::Not(Box::new(StateExpr::Not(Box::new(StateExpr::Const(-1))))),
                inverse: Some(StateExpr::bin(
                    IntOp::Sub,
                    field(1),
                    StateExpr::bin(IntOp::Sub, StateExpr::Const(1), StateExpr::Const(-2)),
                )),
            },
            vec![v.clone()],
            vec![v.clone()],
        ),
        (Op::Loss(LossKind::CrossEntropy { label: field(3) }), vec![v.clone()], vec![u.clone()]),
        (Op::Loss(LossKind::CrossEntropyMean { label: field(3), count: field(1) }), vec![v.clone()], vec![u.clone()]),
        (Op::Loss(LossKind::Mse), vec![v.clone(), v.clone()], vec![u.clone()]),
        (
            Op::Loss(LossKind::Term {
                base: LossBase::CrossEntropy { label: field(3) },
                weight: 0.1,
                count: Some(field(1)),
                judge: Some(StateExpr::bin(IntOp::Eq, field(1), StateExpr::Const(-1))),
            }),
            vec![v.clone()],
            vec![u.clone()],
        ),
        (
            Op::Loss(LossKind::Term { base: LossBase::Mse, weight: -2.5, count: None, judge: None }),
            vec![v.clone(), v.clone()],
            vec![u.clone()],
        ),
        (
            Op::Loss(LossKind::Term { base: LossBase::Scalar, weight: f32::MIN_POSITIVE, count: None, judge: None }),
            vec![PayloadTy::F32(Vec::new())],
            vec![u.clone()],
        ),
        (Op::Sink { name: "out \"x\"\n".into() }, vec![v.clone()], vec![]),
    ];
    for bits in
        [1.5f32.to_bits(), (-0.0f32).to_bits(), 0x7fc0_0001, 0xffc0_0000, f32::INFINITY.to_bits(), 1, 0x4b7f_ffff]
    {
        ops.push((Op::Const { value: ConstValue::Scalar(f32::from_bits(bits)) }, vec![u.clone()], vec![v.clone()]));
    }
    let unary = [UnaryFn::Relu, UnaryFn::Sigmoid, UnaryFn::Tanh, UnaryFn::Exp, UnaryFn::Log, UnaryFn::Neg];
    for f in unary.into_iter().chain([UnaryFn::Softmax, UnaryFn::LogSoftmax]) {
        ops.push((Op::Unary(f), vec![v.clone()], vec![v.clone()]));
    }
    for f in [BinaryFn::Add, BinaryFn::Sub, BinaryFn::Mul, BinaryFn::Div] {
        ops.push((Op::Binary(f), vec![v.clone(), f32ty(&[])], vec![v.clone()]));
    }
    // The collection, routing and reduction ops; `%"odd name"` is the element field.
    let (row, rows) = (f32ty(&[32]), batch(&[32]));
    let len_xs = || StateExpr::Len(data(&["xs"]));
    let first_new_op = ops.len();
    ops.extend([
        (Op::Flatmap { field: FieldId(2), count: len_xs() }, vec![u.clone()], vec![u.clone()]),
        (Op::Group { field: FieldId(2), count: field(3) }, vec![row.clone(), u.clone()], vec![rows.clone()]),
        (Op::Ungroup { field: FieldId(2) }, vec![rows.clone()], vec![row.clone()]),
        (Op::Gather { index: element_of("edges", field(2), "src") }, vec![rows.clone()], vec![row.clone()]),
        (Op::Gather { index: StateExpr::Const(0) }, vec![v.clone()], vec![f32ty(&[])]),
        (
            Op::ScatterSum { field: FieldId(2), index: element_of("edges", field(2), "dst"), count: len_xs() },
            vec![rows.clone()],
            vec![rows.clone()],
        ),
        (Op::Reduce(ReduceFn::Sum), vec![rows.clone()], vec![row.clone()]),
        (Op::Reduce(ReduceFn::Mean), vec![batch(&[])], vec![f32ty(&[])]),
        (Op::TopK { k: 2 }, vec![v.clone()], vec![f32ty(&[2])]),
        (
            Op::StateFromPayload { field: FieldId(5), int: PayloadInt::Argmax },
            vec![v.clone(), u.clone()],
            vec![u.clone()],
        ),
        (
            Op::StateFromPayload { field: FieldId(5), int: PayloadInt::TopK { k: 2, slot: field(2) } },
            vec![v.clone(), rows.clone()],
            vec![rows.clone()],
        ),
        (
            Op::Dropout { rate: 0.25, site: (3 << 32) | 17, context: vec![FieldId(2), FieldId(1)] },
            vec![v.clone()],
            vec![v.clone()],
        ),
        (Op::Dropout { rate: f32::from_bits(0x7fc0_0001), site: 0, context: vec![] }, vec![v.clone()], vec![v.clone()]),
        (Op::Affine { param: "norm".into() }, vec![v.clone()], vec![v.clone()]),
        (
            Op::GatherRows { field: FieldId(2), index: element_of("edges", field(2), "src"), count: len_xs() },
            vec![rows.clone()],
            vec![rows.clone()],
        ),
        (
            Op::MaskRows {
                field: FieldId(2),
                pred: StateExpr::bin(IntOp::Eq, element_of("edges", field(2), "dst"), StateExpr::Const(1)),
            },
            vec![rows.clone()],
            vec![rows.clone()],
        ),
        (
            Op::PartitionRows { field: FieldId(2), index: element_of("edges", field(2), "dst"), arms: 3 },
            vec![rows.clone()],
            vec![rows.clone(), rows.clone(), rows.clone()],
        ),
        (
            Op::MergeRows { field: FieldId(2), index: element_of("edges", field(2), "dst"), arms: 2 },
            vec![rows.clone(), rows.clone()],
            vec![rows.clone()],
        ),
        (
            Op::EmbeddingRows {
                param: "e".into(),
                field: FieldId(2),
                index: element_of("edges", field(2), "src"),
                count: len_xs(),
            },
            vec![u.clone()],
            vec![rows.clone()],
        ),
    ]);
    let mut indices = Vec::new();
    for (i, (op, inputs, outputs)) in ops.into_iter().enumerate() {
        let label = if i % 3 == 0 { format!("n{i} \"quoted\" \\ é ✓") } else { String::new() };
        indices.push(g.nodes.add_node(Node {
            reads: if i % 2 == 0 { vec![FieldId(1), FieldId(2)] } else { vec![] },
            writes: if i % 5 == 0 { vec![FieldId(2)] } else { vec![] },
            key: if i % 4 == 0 { vec![FieldId(0), FieldId(1)] } else { vec![] },
            loc: (i % 2 == 1).then_some(Loc { file: (i % 2) as u32, start: 0, end: u32::MAX, line: 1, col: 1 }),
            fusion: (i % 7 == 0).then_some(i as u32),
            ..node(op, inputs, outputs, &label)
        }));
    }
    // source → read; split's three outputs → phi; phi → forget.
    connect(&mut g, indices[0], 0, indices[1], 0);
    for port in 0..3 {
        connect(&mut g, indices[9], port, indices[13], 2 - port);
    }
    connect(&mut g, indices[13], 0, indices[10], 0);
    // group → ungroup and group → scatter_sum: batches on edges.
    let group = indices[first_new_op + 1];
    connect(&mut g, group, 0, indices[first_new_op + 2], 0);
    connect(&mut g, group, 0, indices[first_new_op + 5], 0);
    g.input = Some(every_data_type());
    g
}

pub fn fixtures() -> Vec<(&'static str, Graph)> {
    vec![
        ("straight_line", straight_line()),
        ("list_reduce", list_reduce()),
        ("with_holes", with_holes()),
        ("every_op", every_op()),
        ("empty", Graph::default()),
    ]
}

/// Node-for-node equality: same header tables, same indices (holes included), same node
/// weights (const scalars and dropout rates compared by bits, so NaNs count), same edges.
pub fn assert_same_graph(a: &Graph, b: &Graph) {
    assert_eq!(a.name, b.name, "name");
    assert_eq!(a.files, b.files, "files");
    assert_eq!(a.state, b.state, "state");
    assert_eq!(a.params, b.params, "params");
    assert_eq!(a.meta, b.meta, "meta");
    assert_eq!(a.input, b.input, "input schema");
    let indices = |g: &Graph| g.nodes.node_indices().collect::<Vec<_>>();
    assert_eq!(indices(a), indices(b), "node indices");
    for index in a.nodes.node_indices() {
        let (x, y) = (comparable(&a.nodes[index]), comparable(&b.nodes[index]));
        assert_eq!(x, y, "node %{}", index.index());
    }
    assert_eq!(edges(a), edges(b), "edges");
}

/// The node with a const scalar replaced by its bits (as a `Scalar` of a value that
/// compares equal to itself), so that NaN payloads compare exactly.
fn comparable(node: &Node) -> (Node, Option<u32>) {
    match node.op {
        Op::Const { value: ConstValue::Scalar(x) } => {
            (Node { op: Op::Const { value: ConstValue::Zeros }, ..node.clone() }, Some(x.to_bits()))
        }
        Op::Dropout { rate, site, ref context } => {
            let op = Op::Dropout { rate: 0.0, site, context: context.clone() };
            (Node { op, ..node.clone() }, Some(rate.to_bits()))
        }
        _ => (node.clone(), None),
    }
}

pub fn edges(g: &Graph) -> Vec<(usize, u16, usize, u16)> {
    let mut out: Vec<_> = g
        .nodes
        .edge_references()
        .map(|e| (e.source().index(), e.weight().from_port, e.target().index(), e.weight().to_port))
        .collect();
    out.sort();
    out
}

// ---- arbitrary graphs -----------------------------------------------------------------

fn any_name() -> impl Strategy<Value = String> {
    prop_oneof![3 => "[a-z_][a-z0-9_.]{0,8}", 1 => any::<String>()]
}

fn any_ty() -> impl Strategy<Value = PayloadTy> {
    prop_oneof![
        Just(PayloadTy::Unit),
        // At most 1000³ elements: within `limits::MAX_TENSOR_ELEMENTS`, which files must keep.
        prop::collection::vec(0u64..1000, 0..4).prop_map(PayloadTy::F32),
        prop::collection::vec(0u64..1000, 0..3).prop_map(PayloadTy::Batch),
    ]
}

fn any_expr(fields: u16) -> impl Strategy<Value = StateExpr> {
    let leaf = prop_oneof![
        (0..fields).prop_map(|f| StateExpr::Field(FieldId(f))),
        any::<i64>().prop_map(StateExpr::Const),
        prop::collection::vec(any_name(), 0..3)
            .prop_map(|p| StateExpr::Len(p.into_iter().map(DataStep::Field).collect())),
    ];
    leaf.prop_recursive(5, 24, 2, |inner| {
        prop_oneof![
            inner.clone().prop_map(|e| StateExpr::Not(Box::new(e))),
            (0usize..13, inner.clone(), inner.clone()).prop_map(|(op, a, b)| StateExpr::bin(INT_OPS[op], a, b)),
            (any_name(), inner.clone()).prop_map(|(name, index)| StateExpr::Data(vec![
                DataStep::Field(name),
                DataStep::Index(Box::new(index))
            ])),
            (any_name(), inner, any::<u32>(), any_name()).prop_map(|(name, index, variant, field)| StateExpr::Data(
                vec![
                    DataStep::Field(name),
                    DataStep::Index(Box::new(index)),
                    DataStep::Variant(variant),
                    DataStep::Field(field)
                ]
            )),
        ]
    })
}

const INT_OPS: [IntOp; 13] = [
    IntOp::Add,
    IntOp::Sub,
    IntOp::Mul,
    IntOp::Div,
    IntOp::Rem,
    IntOp::Eq,
    IntOp::Ne,
    IntOp::Lt,
    IntOp::Le,
    IntOp::Gt,
    IntOp::Ge,
    IntOp::And,
    IntOp::Or,
];

fn any_op(fields: u16) -> impl Strategy<Value = Op> {
    let e = move || any_expr(fields);
    prop_oneof![
        Just(Op::Source),
        prop::collection::vec(any_name(), 0..3)
            .prop_map(|p| Op::Read { path: p.into_iter().map(DataStep::Field).collect() }),
        any::<u32>().prop_map(|bits| Op::Const { value: ConstValue::Scalar(f32::from_bits(bits)) }),
        Just(Op::Const { value: ConstValue::Ones }),
        any_name().prop_map(|param| Op::Linear { param }),
        any_name().prop_map(|param| Op::Affine { param }),
        (any_name(), e()).prop_map(|(param, index)| Op::Embedding { param, index }),
        (any_name(), 0..fields, e(), e()).prop_map(|(param, f, index, count)| Op::EmbeddingRows {
            param,
            field: FieldId(f),
            index,
            count
        }),
        Just(Op::Unary(UnaryFn::Softmax)),
        Just(Op::Binary(BinaryFn::Div)),
        Just(Op::Concat),
        any::<u32>().prop_map(|parts| Op::Split { parts }),
        Just(Op::Forget),
        e().prop_map(|pred| Op::Cond { pred }),
        (e(), any::<u32>()).prop_map(|(index, arms)| Op::Switch { index, arms }),
        any::<u32>().prop_map(|arms| Op::Phi { arms }),
        (0..fields, e(), prop::option::of(e())).prop_map(|(f, value, inverse)| Op::Isu {
            field: FieldId(f),
            value,
            inverse
        }),
        e().prop_map(|label| Op::Loss(LossKind::CrossEntropy { label })),
        (e(), e()).prop_map(|(label, count)| Op::Loss(LossKind::CrossEntropyMean { label, count })),
        Just(Op::Loss(LossKind::Mse)),
        (e(), any::<f32>(), prop::option::of(e()), prop::option::of(e())).prop_map(|(label, weight, count, judge)| {
            Op::Loss(LossKind::Term { base: LossBase::CrossEntropy { label }, weight, count, judge })
        }),
        any::<f32>().prop_map(|weight| Op::Loss(LossKind::Term {
            base: LossBase::Scalar,
            weight,
            count: None,
            judge: None
        })),
        any::<String>().prop_map(|name| Op::Sink { name }),
        (0..fields, e()).prop_map(|(f, count)| Op::Flatmap { field: FieldId(f), count }),
        (0..fields, e()).prop_map(|(f, count)| Op::Group { field: FieldId(f), count }),
        (0..fields).prop_map(|f| Op::Ungroup { field: FieldId(f) }),
        e().prop_map(|index| Op::Gather { index }),
        (0..fields, e(), e()).prop_map(|(f, index, count)| Op::ScatterSum { field: FieldId(f), index, count }),
        (0..fields, e(), any::<u32>()).prop_map(|(f, index, arms)| Op::PartitionRows {
            field: FieldId(f),
            index,
            arms
        }),
        (0..fields, e(), any::<u32>()).prop_map(|(f, index, arms)| Op::MergeRows { field: FieldId(f), index, arms }),
        prop_oneof![Just(ReduceFn::Sum), Just(ReduceFn::Mean)].prop_map(Op::Reduce),
        any::<u32>().prop_map(|k| Op::TopK { k }),
        (0..fields, prop::option::of((any::<u32>(), e()))).prop_map(|(f, top_k)| Op::StateFromPayload {
            field: FieldId(f),
            int: top_k.map_or(PayloadInt::Argmax, |(k, slot)| PayloadInt::TopK { k, slot }),
        }),
        (any::<f32>(), any::<u64>(), prop::collection::vec((0..fields).prop_map(FieldId), 0..3))
            .prop_map(|(rate, site, context)| Op::Dropout { rate, site, context }),
    ]
}

fn any_node(fields: u16, files: u32) -> impl Strategy<Value = Node> {
    let ids = move || prop::collection::vec((0..fields).prop_map(FieldId), 0..3);
    let loc = (0..files.max(1), any::<u32>(), any::<u32>(), any::<u32>(), any::<u32>())
        .prop_map(|(file, start, end, line, col)| Loc { file, start, end, line, col });
    (
        any_op(fields),
        prop::collection::vec(any_ty(), 0..4),
        prop::collection::vec(any_ty(), 0..4),
        (ids(), ids(), ids()),
        any::<String>(),
        prop::option::of(loc).prop_map(move |l| if files == 0 { None } else { l }),
        prop::option::of(any::<u32>()),
    )
        .prop_map(|(op, inputs, outputs, (reads, writes, key), label, loc, fusion)| Node {
            op,
            inputs,
            outputs,
            reads,
            writes,
            key,
            label,
            loc,
            fusion,
        })
}

/// Arbitrary graphs that the text form can represent: unique field names, at most one
/// edge per input port, edges between existing ports; holes removed in random order.
pub fn any_graph() -> impl Strategy<Value = Graph> {
    (
        any_name(),
        prop::collection::vec(any::<String>(), 0..3),
        prop::collection::vec((any_name(), 0usize..6), 1..6),
        prop::collection::vec((any_name(), prop::collection::vec(0u64..1000, 0..3)), 0..3),
        prop::collection::btree_map(any::<String>(), any::<String>(), 0..3),
    )
        .prop_flat_map(|(name, files, fields, params, meta)| {
            let roles = [
                FieldRole::Instance,
                FieldRole::Counter,
                FieldRole::Data,
                FieldRole::Element,
                FieldRole::TreeNode,
                FieldRole::Slot,
            ];
            let state: Vec<StateField> = fields
                .into_iter()
                .enumerate()
                .map(|(i, (name, role))| StateField { name: format!("{name}{i}"), role: roles[role] })
                .collect();
            let params: Vec<Param> =
                params.into_iter().map(|(name, shape)| Param { name, shape, init: ParamInit::Normal }).collect();
            let nfields = state.len() as u16;
            let nfiles = files.len() as u32;
            let base = Graph { name, files, state, params, meta, ..Graph::default() };
            (
                Just(base),
                prop::collection::vec(prop::option::weighted(0.8, any_node(nfields, nfiles)), 0..10),
                prop::collection::vec(any::<(u16, u16, u16)>(), 0..20),
                any::<u64>(),
            )
        })
        .prop_map(|(mut g, slots, wiring, order_seed)| {
            let mut holes = Vec::new();
            for slot in &slots {
                let index = g.nodes.add_node(slot.clone().unwrap_or_else(|| node(Op::Source, vec![], vec![], "hole")));
                if slot.is_none() {
                    holes.push(index);
                }
            }
            let real: Vec<NodeIndex> =
                slots.iter().enumerate().filter(|(_, s)| s.is_some()).map(|(i, _)| NodeIndex::new(i)).collect();
            let mut fed = BTreeMap::new();
            for (a, b, port) in wiring {
                if real.is_empty() {
                    break;
                }
                let (src, dst) = (real[a as usize % real.len()], real[b as usize % real.len()]);
                let (outs, ins) = (g.nodes[src].outputs.len(), g.nodes[dst].inputs.len());
                if outs == 0 || ins == 0 {
                    continue;
                }
                let to_port = (port as usize % ins) as u16;
                if fed.insert((dst, to_port), ()).is_none() {
                    let from_port = (port as usize % outs) as u16;
                    g.nodes.add_edge(src, dst, Edge { from_port, to_port });
                }
            }
            // Remove holes in a seed-dependent order: the text form must not care.
            let rotate = if holes.is_empty() { 0 } else { order_seed as usize % holes.len() };
            holes.rotate_left(rotate);
            for hole in holes {
                g.nodes.remove_node(hole);
            }
            g
        })
}
