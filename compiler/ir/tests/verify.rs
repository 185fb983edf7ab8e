//! The verifier: hand-built correct graphs are accepted; each hand-broken variant is
//! rejected with a specific message; random mutations never make it panic.
#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use amp_ir::verify::{verify, verify_report, VerifyErrorKind};
use amp_ir::{
    BinaryFn, ConstValue, DataStep, Edge, FieldId, FieldRole, Graph, IntOp, LossBase, LossKind, Node, Op, Param,
    ParamInit, PayloadInt, PayloadTy, ReduceFn, StateExpr, StateField, UnaryFn,
};
use petgraph::stable_graph::{EdgeIndex, NodeIndex};
use petgraph::visit::EdgeRef;
use petgraph::Direction;
use proptest::prelude::*;

// ------------------------------------------------------------------ building graphs

const INST: FieldId = FieldId(0);

fn f32(dims: &[u64]) -> PayloadTy {
    PayloadTy::F32(dims.to_vec())
}

fn batch(dims: &[u64]) -> PayloadTy {
    PayloadTy::Batch(dims.to_vec())
}

fn field(f: FieldId) -> StateExpr {
    StateExpr::Field(f)
}

fn int(c: i64) -> StateExpr {
    StateExpr::Const(c)
}

fn data(path: &[&str]) -> Vec<DataStep> {
    path.iter().map(|s| DataStep::Field(s.to_string())).collect()
}

/// Builds a graph node by node; `add` wires inputs from (node, output port) pairs and
/// fills `reads`/`writes` from the op's attributes, as the lowering does.
struct Builder {
    graph: Graph,
}

impl Builder {
    fn new(fields: &[(&str, FieldRole)]) -> Self {
        let state = fields.iter().map(|(name, role)| StateField { name: name.to_string(), role: *role }).collect();
        Builder { graph: Graph { name: "Test".into(), state, ..Graph::default() } }
    }

    fn linear_params(&mut self, name: &str, out: u64, inp: u64) {
        self.graph.params.push(Param {
            name: format!("{name}.weight"),
            shape: vec![out, inp],
            init: ParamInit::Uniform { fan_in: inp },
        });
        self.graph.params.push(Param {
            name: format!("{name}.bias"),
            shape: vec![out],
            init: ParamInit::Uniform { fan_in: inp },
        });
    }

    fn add(&mut self, op: Op, inputs: &[(NodeIndex, u16)], outputs: Vec<PayloadTy>, key: &[FieldId]) -> NodeIndex {
        let in_types = inputs.iter().map(|&(n, p)| self.graph.nodes[n].outputs[p as usize].clone()).collect();
        let (reads, writes) = op.state_fields();
        let label = op.keyword().to_string();
        let idx = self.graph.nodes.add_node(Node {
            op,
            inputs: in_types,
            outputs,
            reads,
            writes,
            key: key.to_vec(),
            label,
            loc: None,
            fusion: None,
        });
        for (port, &(from, from_port)) in inputs.iter().enumerate() {
            self.connect(from, from_port, idx, port as u16);
        }
        idx
    }

    fn connect(&mut self, from: NodeIndex, from_port: u16, to: NodeIndex, to_port: u16) -> EdgeIndex {
        self.graph.nodes.add_edge(from, to, Edge { from_port, to_port })
    }

    fn source(&mut self) -> NodeIndex {
        self.add(Op::Source, &[], vec![PayloadTy::Unit], &[])
    }
}

fn label() -> Op {
    Op::Loss(LossKind::CrossEntropy { label: StateExpr::Data(data(&["label"])) })
}

/// The nodes of the straight-line model, for tests that break one of them.
struct Straight {
    b: Builder,
    source: NodeIndex,
    read: NodeIndex,
    l1: NodeIndex,
    relu: NodeIndex,
    l2: NodeIndex,
    loss: NodeIndex,
}

/// source → read .x f32[8] → linear @l1 [16] → relu → linear @l2 [3] → cross-entropy
/// against `x.label`.
fn straight() -> Straight {
    let mut b = Builder::new(&[("inst", FieldRole::Instance)]);
    b.linear_params("l1", 16, 8);
    b.linear_params("l2", 3, 16);
    let source = b.source();
    let read = b.add(Op::Read { path: data(&["x"]) }, &[(source, 0)], vec![f32(&[8])], &[]);
    let l1 = b.add(Op::Linear { param: "l1".into() }, &[(read, 0)], vec![f32(&[16])], &[INST]);
    let relu = b.add(Op::Unary(UnaryFn::Relu), &[(l1, 0)], vec![f32(&[16])], &[INST]);
    let l2 = b.add(Op::Linear { param: "l2".into() }, &[(relu, 0)], vec![f32(&[3])], &[INST]);
    let loss = b.add(label(), &[(l2, 0)], vec![], &[INST]);
    Straight { b, source, read, l1, relu, l2, loss }
}

struct Looped {
    b: Builder,
    t: FieldId,
    entry: NodeIndex,
    phi: NodeIndex,
    cond: NodeIndex,
    cell: NodeIndex,
    step: NodeIndex,
}

/// `for t in 0..len(x.xs) { h = tanh(cell(h)) }; loss(out(h))` as the lowering builds it:
/// `isu t := 0` on entry, a header phi, `cond t < len(x.xs)`, the body keyed by
/// (inst, t), `isu t := t + 1` back to the phi, `isu t := -1` on exit.
fn looped() -> Looped {
    let mut b = Builder::new(&[("inst", FieldRole::Instance), ("t", FieldRole::Counter)]);
    let t = FieldId(1);
    b.linear_params("cell", 4, 4);
    b.linear_params("out", 3, 4);
    let bound = StateExpr::Len(data(&["xs"]));
    let source = b.source();
    let h0 = b.add(Op::Const { value: ConstValue::Zeros }, &[(source, 0)], vec![f32(&[4])], &[]);
    let entry = b.add(Op::Isu { field: t, value: int(0), inverse: Some(int(-1)) }, &[(h0, 0)], vec![f32(&[4])], &[]);
    let phi = b.graph.nodes.add_node(Node {
        op: Op::Phi { arms: 2 },
        inputs: vec![f32(&[4]), f32(&[4])],
        outputs: vec![f32(&[4])],
        reads: vec![],
        writes: vec![],
        key: vec![INST, t],
        label: "loop".into(),
        loc: None,
        fusion: None,
    });
    b.connect(entry, 0, phi, 0);
    let pred = StateExpr::bin(IntOp::Lt, field(t), bound.clone());
    let cond = b.add(Op::Cond { pred }, &[(phi, 0)], vec![f32(&[4]), f32(&[4])], &[]);
    let cell = b.add(Op::Linear { param: "cell".into() }, &[(cond, 0)], vec![f32(&[4])], &[INST, t]);
    let tanh = b.add(Op::Unary(UnaryFn::Tanh), &[(cell, 0)], vec![f32(&[4])], &[INST, t]);
    let step = StateExpr::bin(IntOp::Add, field(t), int(1));
    let back = StateExpr::bin(IntOp::Sub, field(t), int(1));
    let step = b.add(Op::Isu { field: t, value: step, inverse: Some(back) }, &[(tanh, 0)], vec![f32(&[4])], &[]);
    b.connect(step, 0, phi, 1);
    let exit = b.add(Op::Isu { field: t, value: int(-1), inverse: Some(bound) }, &[(cond, 1)], vec![f32(&[4])], &[]);
    let out = b.add(Op::Linear { param: "out".into() }, &[(exit, 0)], vec![f32(&[3])], &[INST]);
    b.add(label(), &[(out, 0)], vec![], &[INST]);
    Looped { b, t, entry, phi, cond, cell, step }
}

struct Nested {
    b: Builder,
    mid: NodeIndex,
}

/// Two nested loops: `for i in 0..3 { for j in 0..2 { h = cell(h) }; h = mid(h) }`.
/// `mid` runs once per outer iteration, so it is keyed (inst, i) without j.
fn nested() -> Nested {
    let mut b = Builder::new(&[("inst", FieldRole::Instance), ("i", FieldRole::Counter), ("j", FieldRole::Counter)]);
    let (i, j) = (FieldId(1), FieldId(2));
    b.linear_params("cell", 4, 4);
    b.linear_params("mid", 4, 4);
    b.linear_params("out", 3, 4);
    let ty = || vec![f32(&[4])];
    let phi = |b: &mut Builder, key: Vec<FieldId>| {
        b.graph.nodes.add_node(Node {
            op: Op::Phi { arms: 2 },
            inputs: vec![f32(&[4]), f32(&[4])],
            outputs: ty(),
            reads: vec![],
            writes: vec![],
            key,
            label: "loop".into(),
            loc: None,
            fusion: None,
        })
    };
    let isu = |f: FieldId, value: StateExpr, inverse: StateExpr| Op::Isu { field: f, value, inverse: Some(inverse) };
    let inc = |f: FieldId, d: i64| StateExpr::bin(IntOp::Add, field(f), int(d));
    let lt = |f: FieldId, n: i64| Op::Cond { pred: StateExpr::bin(IntOp::Lt, field(f), int(n)) };

    let source = b.source();
    let h0 = b.add(Op::Const { value: ConstValue::Zeros }, &[(source, 0)], ty(), &[]);
    let entry_i = b.add(isu(i, int(0), int(-1)), &[(h0, 0)], ty(), &[]);
    let phi_i = phi(&mut b, vec![INST, i]);
    b.connect(entry_i, 0, phi_i, 0);
    let cond_i = b.add(lt(i, 3), &[(phi_i, 0)], vec![f32(&[4]); 2], &[]);
    let entry_j = b.add(isu(j, int(0), int(-1)), &[(cond_i, 0)], ty(), &[]);
    let phi_j = phi(&mut b, vec![INST, i, j]);
    b.connect(entry_j, 0, phi_j, 0);
    let cond_j = b.add(lt(j, 2), &[(phi_j, 0)], vec![f32(&[4]); 2], &[]);
    let cell = b.add(Op::Linear { param: "cell".into() }, &[(cond_j, 0)], ty(), &[INST, i, j]);
    let step_j = b.add(isu(j, inc(j, 1), inc(j, -1)), &[(cell, 0)], ty(), &[]);
    b.connect(step_j, 0, phi_j, 1);
    let exit_j = b.add(isu(j, int(-1), int(2)), &[(cond_j, 1)], ty(), &[]);
    let mid = b.add(Op::Linear { param: "mid".into() }, &[(exit_j, 0)], ty(), &[INST, i]);
    let step_i = b.add(isu(i, inc(i, 1), inc(i, -1)), &[(mid, 0)], ty(), &[]);
    b.connect(step_i, 0, phi_i, 1);
    let exit_i = b.add(isu(i, int(-1), int(3)), &[(cond_i, 1)], ty(), &[]);
    let out = b.add(Op::Linear { param: "out".into() }, &[(exit_i, 0)], vec![f32(&[3])], &[INST]);
    b.add(label(), &[(out, 0)], vec![], &[INST]);
    Nested { b, mid }
}

struct Mapped {
    b: Builder,
    e: FieldId,
    source: NodeIndex,
    flatmap: NodeIndex,
    group: NodeIndex,
}

fn len(seq: &str) -> StateExpr {
    StateExpr::Len(data(&[seq]))
}

/// `$.seq[index]`, or `$.seq[index].field`.
fn element(seq: &str, index: StateExpr, field: Option<&str>) -> StateExpr {
    let mut path = vec![DataStep::Field(seq.into()), DataStep::Index(Box::new(index))];
    path.extend(field.map(|f| DataStep::Field(f.into())));
    StateExpr::Data(path)
}

/// `x.tokens.map(|t| emb[t])` as the lowering builds it: `flatmap %e [len($.tokens)]` of
/// the instance's control message, one embedding row per element (it caches nothing, so it
/// has no key), and `group %e` gated by the instance's control, so that an empty sequence
/// still gives a (zero-row) batch `f32[?, 8]`. Nothing consumes the batch yet.
fn mapped() -> Mapped {
    let mut b = Builder::new(&[("inst", FieldRole::Instance), ("e", FieldRole::Element)]);
    let e = FieldId(1);
    b.graph.params.push(Param { name: "emb.weight".into(), shape: vec![10, 8], init: ParamInit::Normal });
    let source = b.source();
    let flatmap = b.add(Op::Flatmap { field: e, count: len("tokens") }, &[(source, 0)], vec![PayloadTy::Unit], &[INST]);
    let row = element("tokens", field(e), None);
    let embed = b.add(Op::Embedding { param: "emb".into(), index: row }, &[(flatmap, 0)], vec![f32(&[8])], &[]);
    let inputs = [(embed, 0), (source, 0)];
    let group = b.add(Op::Group { field: e, count: len("tokens") }, &inputs, vec![batch(&[8])], &[INST]);
    Mapped { b, e, source, flatmap, group }
}

/// `loss(head(value))` for an `f32[8]` value.
fn head(b: &mut Builder, value: NodeIndex) {
    b.linear_params("head", 3, 8);
    let head = b.add(Op::Linear { param: "head".into() }, &[(value, 0)], vec![f32(&[3])], &[INST]);
    b.add(label(), &[(head, 0)], vec![], &[INST]);
}

/// `loss(head(sum(x.tokens.map(|t| emb[t]))))`; returns the `reduce sum` node too.
fn summed() -> (Mapped, NodeIndex) {
    let mut m = mapped();
    let sum = m.b.add(Op::Reduce(ReduceFn::Sum), &[(m.group, 0)], vec![f32(&[8])], &[INST]);
    head(&mut m.b, sum);
    (m, sum)
}

struct Routed {
    b: Builder,
    source: NodeIndex,
    pick: NodeIndex,
    route: NodeIndex,
}

/// `head(expert[argmax(gate(x))](x))`: `state_from_payload %c := argmax` of the gate's
/// logits passes `x` on with `%c` written, `switch [%c] 2` picks an expert, a `phi`
/// merges the arms. With `route_first`, the switch comes before the argmax instead
/// (reading `%c` before anything writes it).
fn routed(route_first: bool) -> Routed {
    let mut b = Builder::new(&[("inst", FieldRole::Instance), ("c", FieldRole::Slot)]);
    let c = FieldId(1);
    b.linear_params("gate", 2, 4);
    b.linear_params("x0", 4, 4);
    b.linear_params("x1", 4, 4);
    b.linear_params("out", 3, 4);
    let source = b.source();
    let read = b.add(Op::Read { path: data(&["x"]) }, &[(source, 0)], vec![f32(&[4])], &[INST]);
    let gate = b.add(Op::Linear { param: "gate".into() }, &[(read, 0)], vec![f32(&[2])], &[INST]);
    let argmax = Op::StateFromPayload { field: c, int: PayloadInt::Argmax };
    // `switch [%c] 2` to the two experts and a phi after them; returns (switch, phi).
    let experts = |b: &mut Builder, input: NodeIndex| {
        let route = b.add(Op::Switch { index: field(c), arms: 2 }, &[(input, 0)], vec![f32(&[4]); 2], &[]);
        let x0 = b.add(Op::Linear { param: "x0".into() }, &[(route, 0)], vec![f32(&[4])], &[INST]);
        let x1 = b.add(Op::Linear { param: "x1".into() }, &[(route, 1)], vec![f32(&[4])], &[INST]);
        (route, b.add(Op::Phi { arms: 2 }, &[(x0, 0), (x1, 0)], vec![f32(&[4])], &[INST]))
    };
    let (pick, route, merge) = if route_first {
        let (route, phi) = experts(&mut b, read);
        let pick = b.add(argmax, &[(gate, 0), (phi, 0)], vec![f32(&[4])], &[INST]);
        (pick, route, pick)
    } else {
        let pick = b.add(argmax, &[(gate, 0), (read, 0)], vec![f32(&[4])], &[INST]);
        let (route, phi) = experts(&mut b, pick);
        (pick, route, phi)
    };
    let out = b.add(Op::Linear { param: "out".into() }, &[(merge, 0)], vec![f32(&[3])], &[INST]);
    b.add(label(), &[(out, 0)], vec![], &[INST]);
    Routed { b, source, pick, route }
}

fn node(g: &mut Graph, n: NodeIndex) -> &mut Node {
    &mut g.nodes[n]
}

fn edge_into(g: &Graph, n: NodeIndex, port: u16) -> EdgeIndex {
    g.nodes.edges_directed(n, Direction::Incoming).find(|e| e.weight().to_port == port).map(|e| e.id()).unwrap()
}

/// Asserts the graph is rejected with an error whose text contains every `parts`.
#[track_caller]
fn rejects(graph: &Graph, parts: &[&str]) {
    let errors = verify(graph).expect_err("the graph should be rejected");
    let texts: Vec<String> = errors.iter().map(|e| e.to_string()).collect();
    assert!(
        texts.iter().any(|t| parts.iter().all(|p| t.contains(p))),
        "no error contains all of {parts:?}; errors:\n{}",
        texts.join("\n")
    );
}

#[track_caller]
fn accepts(graph: &Graph) {
    if let Err(errors) = verify(graph) {
        let texts: Vec<String> = errors.iter().map(|e| e.to_string()).collect();
        panic!("the graph should be accepted; errors:\n{}", texts.join("\n"));
    }
}

// ------------------------------------------------------------------ accepted

#[test]
fn straight_line_model_is_accepted() {
    accepts(&straight().b.graph);
    assert_eq!(verify_report(&straight().b.graph), "ok\n");
}

#[test]
fn loop_is_accepted() {
    accepts(&looped().b.graph);
}

#[test]
fn nested_loops_keyed_by_their_own_counters_are_accepted() {
    accepts(&nested().b.graph);
}

#[test]
fn binary_with_scalar_operand_is_accepted() {
    let mut s = straight();
    let scale = s.b.add(Op::Const { value: ConstValue::Scalar(0.5) }, &[(s.source, 0)], vec![f32(&[])], &[]);
    let mul = s.b.add(Op::Binary(BinaryFn::Mul), &[(s.relu, 0), (scale, 0)], vec![f32(&[16])], &[INST]);
    let e = edge_into(&s.b.graph, s.l2, 0);
    s.b.graph.nodes.remove_edge(e);
    s.b.connect(mul, 0, s.l2, 0);
    accepts(&s.b.graph);
}

#[test]
fn map_then_sum_is_accepted() {
    accepts(&summed().0.b.graph);
}

#[test]
fn ungroup_then_regroup_is_accepted() {
    let mut m = mapped();
    let rows = m.b.add(Op::Ungroup { field: m.e }, &[(m.group, 0)], vec![f32(&[8])], &[INST]);
    let tanh = m.b.add(Op::Unary(UnaryFn::Tanh), &[(rows, 0)], vec![f32(&[8])], &[INST, m.e]);
    let inputs = [(tanh, 0), (m.source, 0)];
    let regroup = m.b.add(Op::Group { field: m.e, count: len("tokens") }, &inputs, vec![batch(&[8])], &[INST]);
    let mean = m.b.add(Op::Reduce(ReduceFn::Mean), &[(regroup, 0)], vec![f32(&[8])], &[INST]);
    head(&mut m.b, mean);
    accepts(&m.b.graph);
    node(&mut m.b.graph, rows).key.clear();
    rejects(
        &m.b.graph,
        &[&format!(
            "node %{} `ungroup` (ungroup %e): joins its outputs' gradients by key, but its key () lacks the instance \
             field %inst",
            rows.index()
        )],
    );
}

/// GGSNN's message step: per edge (a flatmap over `$.edges` sharing the nodes' batch), the
/// row `$.edges[%f].src` of the batch, grouped per edge and summed.
#[test]
fn gather_of_a_batch_row_per_edge_is_accepted() {
    let mut m = mapped();
    m.b.graph.state.push(StateField { name: "f".into(), role: FieldRole::Element });
    let f = FieldId(2);
    let per_edge = m.b.add(Op::Flatmap { field: f, count: len("edges") }, &[(m.group, 0)], vec![batch(&[8])], &[INST]);
    let src = element("edges", field(f), Some("src"));
    let row = m.b.add(Op::Gather { index: src }, &[(per_edge, 0)], vec![f32(&[8])], &[INST, f]);
    let inputs = [(row, 0), (m.source, 0)];
    let messages = m.b.add(Op::Group { field: f, count: len("edges") }, &inputs, vec![batch(&[8])], &[INST]);
    let sum = m.b.add(Op::Reduce(ReduceFn::Sum), &[(messages, 0)], vec![f32(&[8])], &[INST]);
    head(&mut m.b, sum);
    accepts(&m.b.graph);
    node(&mut m.b.graph, row).reads.clear();
    rejects(
        &m.b.graph,
        &[&format!(
            "node %{} `gather` (gather): the row index reads %f, but the node's `reads` does not list it",
            row.index()
        )],
    );
}

/// `scatter_sum(h, x.tokens.map(..), len(x.slots))` adds row `%r` of the batch into row
/// `$.dst[%r]`. The op binds `%r` while it evaluates the index: nothing else writes `%r`,
/// and `reads` does not list it, yet the graph is valid.
#[test]
fn scatter_sum_binding_its_own_row_field_is_accepted() {
    let mut m = mapped();
    m.b.graph.state.push(StateField { name: "r".into(), role: FieldRole::Element });
    let r = FieldId(2);
    let op = Op::ScatterSum { field: r, index: element("dst", field(r), None), count: len("slots") };
    let scatter = m.b.add(op, &[(m.group, 0)], vec![batch(&[8])], &[INST]);
    assert!(m.b.graph.nodes[scatter].reads.is_empty(), "the bound row field is not a read");
    let sum = m.b.add(Op::Reduce(ReduceFn::Sum), &[(scatter, 0)], vec![f32(&[8])], &[INST]);
    head(&mut m.b, sum);
    accepts(&m.b.graph);
    // Its output is the same batch type as its input.
    node(&mut m.b.graph, scatter).outputs[0] = f32(&[8]);
    rejects(
        &m.b.graph,
        &[&format!(
            "node %{} `scatter_sum` (scatter_sum): output 0 has type f32[8], expected f32[?, 8]",
            scatter.index()
        )],
    );
}

/// A batched map's body (`x.edges.map(|e| tanh(lin(h[e.src])))` with `h` the tokens'
/// batch, then masked by the edge's destination): `gather_rows` and `mask_rows` bind their
/// row field like `scatter_sum`; `linear`, `unary`, `binary` and `split` take the rows of a
/// batch and give a batch.
#[test]
fn batched_row_ops_are_accepted() {
    let mut m = mapped();
    m.b.graph.state.push(StateField { name: "r".into(), role: FieldRole::Element });
    let r = FieldId(2);
    let op = Op::GatherRows { field: r, index: element("edges", field(r), Some("src")), count: len("edges") };
    let rows = m.b.add(op, &[(m.group, 0)], vec![batch(&[8])], &[INST]);
    assert!(m.b.graph.nodes[rows].reads.is_empty(), "the bound row field is not a read");
    m.b.linear_params("lin", 8, 8);
    let lin = m.b.add(Op::Linear { param: "lin".into() }, &[(rows, 0)], vec![batch(&[8])], &[INST]);
    let t = m.b.add(Op::Unary(UnaryFn::Tanh), &[(lin, 0)], vec![batch(&[8])], &[INST]);
    let parts = m.b.add(Op::Split { parts: 2 }, &[(t, 0)], vec![batch(&[4]), batch(&[4])], &[INST]);
    let product = m.b.add(Op::Binary(BinaryFn::Mul), &[(parts, 0), (parts, 1)], vec![batch(&[4])], &[INST]);
    let both = m.b.add(Op::Concat, &[(product, 0), (product, 0)], vec![batch(&[8])], &[INST]);
    let pred = StateExpr::Bin(IntOp::Eq, Box::new(element("edges", field(r), Some("dst"))), Box::new(int(1)));
    let mask = m.b.add(Op::MaskRows { field: r, pred }, &[(both, 0)], vec![batch(&[8])], &[]);
    assert!(m.b.graph.nodes[mask].reads.is_empty(), "the bound row field is not a read");
    let sum = m.b.add(Op::Reduce(ReduceFn::Sum), &[(mask, 0)], vec![f32(&[8])], &[INST]);
    head(&mut m.b, sum);
    accepts(&m.b.graph);
    // A mask gives its input's batch type; a batch and a vector do not combine.
    let mut broken = m.b.graph.clone();
    node(&mut broken, mask).outputs[0] = f32(&[8]);
    let at = format!("node %{}", mask.index());
    rejects(&broken, &[&at, "mask_rows", "output 0 has type f32[8], expected f32[?, 8]"]);
    let mut broken = m.b.graph.clone();
    node(&mut broken, lin).outputs[0] = f32(&[8]);
    rejects(&broken, &[&format!("node %{}", lin.index()), "(expects f32[?, 8])"]);
}

/// A parameter array's call in a batched body: the rows split by the edge's kind among
/// two layers (`partition_rows`, which joins its arms' gradients, so its key holds the
/// instance) and put back in order (`merge_rows`, which joins its inputs); both bind the
/// row field, and every part has the input's batch type.
#[test]
fn partitioned_rows_are_accepted() {
    let mut m = mapped();
    m.b.graph.state.push(StateField { name: "r".into(), role: FieldRole::Element });
    let r = FieldId(2);
    let kind = element("edges", field(r), Some("dst"));
    let op = Op::PartitionRows { field: r, index: kind.clone(), arms: 2 };
    let parts = m.b.add(op, &[(m.group, 0)], vec![batch(&[8]), batch(&[8])], &[INST]);
    assert!(m.b.graph.nodes[parts].reads.is_empty(), "the bound row field is not a read");
    m.b.linear_params("a", 8, 8);
    m.b.linear_params("b", 8, 8);
    let a = m.b.add(Op::Linear { param: "a".into() }, &[(parts, 0)], vec![batch(&[8])], &[INST]);
    let b = m.b.add(Op::Linear { param: "b".into() }, &[(parts, 1)], vec![batch(&[8])], &[INST]);
    let merged =
        m.b.add(Op::MergeRows { field: r, index: kind, arms: 2 }, &[(a, 0), (b, 0)], vec![batch(&[8])], &[INST]);
    let sum = m.b.add(Op::Reduce(ReduceFn::Sum), &[(merged, 0)], vec![f32(&[8])], &[INST]);
    head(&mut m.b, sum);
    accepts(&m.b.graph);
    let at = |n: petgraph::stable_graph::NodeIndex| format!("node %{}", n.index());
    // A part of another type, a merge of a vector, no key to join by, no arms.
    let mut broken = m.b.graph.clone();
    node(&mut broken, parts).outputs[1] = batch(&[4]);
    rejects(&broken, &[&at(parts), "output 1 has type f32[?, 4], expected f32[?, 8]"]);
    let mut broken = m.b.graph.clone();
    node(&mut broken, merged).outputs[0] = f32(&[8]);
    rejects(&broken, &[&at(merged), "output 0 has type f32[8], expected f32[?, 8]"]);
    for n in [parts, merged] {
        let mut broken = m.b.graph.clone();
        node(&mut broken, n).key.clear();
        rejects(&broken, &[&at(n), "instance"]);
    }
    let mut broken = m.b.graph.clone();
    node(&mut broken, parts).op = Op::PartitionRows { field: r, index: int(0), arms: 0 };
    rejects(&broken, &[&at(parts)]);
}

/// `x.tokens.map(|t| emb(t))` batched: one `embedding_rows` of the instance's control
/// gives the batch of rows (it caches nothing and needs no key; its row field is bound,
/// not read), as wide as the table's rows.
#[test]
fn embedding_rows_are_accepted() {
    let mut b = Builder::new(&[("inst", FieldRole::Instance), ("r", FieldRole::Element)]);
    let r = FieldId(1);
    b.graph.params.push(Param { name: "emb.weight".into(), shape: vec![10, 8], init: ParamInit::Normal });
    let source = b.source();
    let op = Op::EmbeddingRows {
        param: "emb".into(),
        field: r,
        index: element("tokens", field(r), None),
        count: len("tokens"),
    };
    let rows = b.add(op, &[(source, 0)], vec![batch(&[8])], &[]);
    assert!(b.graph.nodes[rows].reads.is_empty(), "the bound row field is not a read");
    let sum = b.add(Op::Reduce(ReduceFn::Sum), &[(rows, 0)], vec![f32(&[8])], &[INST]);
    head(&mut b, sum);
    accepts(&b.graph);
    // A batch as wide as the table's rows, not a vector, not another width.
    for wrong in [f32(&[8]), batch(&[4])] {
        let mut broken = b.graph.clone();
        node(&mut broken, rows).outputs[0] = wrong;
        rejects(&broken, &[&format!("node %{}", rows.index()), "emb.weight"]);
    }
}

#[test]
fn argmax_routing_is_accepted() {
    accepts(&routed(false).b.graph);
}

// ------------------------------------------------------------------ schema and ends

#[test]
fn missing_source() {
    let mut s = straight();
    s.b.graph.nodes.remove_node(s.source);
    rejects(&s.b.graph, &["the graph has no `source` node"]);
}

#[test]
fn two_sources() {
    let mut s = straight();
    s.b.source();
    rejects(&s.b.graph, &["node %6 `source` (source): is a second `source` (the first is %0)"]);
}

#[test]
fn no_loss_or_sink() {
    let mut s = straight();
    s.b.graph.nodes.remove_node(s.loss);
    rejects(&s.b.graph, &["no `loss` and no `sink`"]);
}

#[test]
fn state_field_zero_not_instance() {
    let mut s = straight();
    s.b.graph.state[0].role = FieldRole::Counter;
    rejects(&s.b.graph, &["state field 0 `inst` has role counter; field 0 must have role instance"]);
}

#[test]
fn duplicate_field_names() {
    let mut l = looped();
    l.b.graph.state[1].name = "inst".into();
    rejects(&l.b.graph, &["state fields 0 and 1 are both named `inst`"]);
}

#[test]
fn field_name_not_identifier() {
    let mut l = looped();
    l.b.graph.state[1].name = "t 1".into();
    rejects(&l.b.graph, &["state field 1 is named \"t 1\", which is not an identifier"]);
}

// ------------------------------------------------------------------ ports

#[test]
fn unconnected_input() {
    let mut s = straight();
    let e = edge_into(&s.b.graph, s.relu, 0);
    s.b.graph.nodes.remove_edge(e);
    rejects(&s.b.graph, &["node %3 `unary` (unary relu): input 0 has no incoming edge"]);
}

#[test]
fn two_edges_into_one_port() {
    let mut s = straight();
    s.b.connect(s.l1, 0, s.relu, 0);
    rejects(&s.b.graph, &["(unary relu): input 0 has 2 incoming edges"]);
}

#[test]
fn port_out_of_range() {
    let mut s = straight();
    let e = edge_into(&s.b.graph, s.relu, 0);
    s.b.graph.nodes[e].from_port = 3;
    rejects(&s.b.graph, &["node %2", "an edge to %3 leaves output port 3, but the node has 1 output"]);
    s.b.graph.nodes[e] = Edge { from_port: 0, to_port: 5 };
    rejects(&s.b.graph, &["node %3", "an edge from %2 enters input port 5, but the node has 1 input"]);
}

#[test]
fn edge_payload_type_mismatch() {
    let mut s = straight();
    node(&mut s.b.graph, s.relu).inputs[0] = f32(&[17]);
    rejects(&s.b.graph, &["input 0 has type f32[17] but its edge from %2#0 carries f32[16]"]);
}

#[test]
fn self_loop() {
    let mut s = straight();
    s.b.connect(s.relu, 0, s.relu, 0);
    rejects(&s.b.graph, &["(unary relu): has an edge from its own output 0 to its own input 0 (a self loop)"]);
}

// ------------------------------------------------------------------ ops and types

#[test]
fn linear_input_width_does_not_match_its_weight() {
    let mut b = Builder::new(&[("inst", FieldRole::Instance)]);
    b.linear_params("cell", 128, 256);
    let source = b.source();
    let read = b.add(Op::Read { path: data(&["x"]) }, &[(source, 0)], vec![f32(&[200])], &[]);
    let cell = b.add(Op::Linear { param: "cell".into() }, &[(read, 0)], vec![f32(&[128])], &[INST]);
    node(&mut b.graph, cell).label = "cell".into();
    b.add(Op::Sink { name: "y".into() }, &[(cell, 0)], vec![], &[]);
    b.add(label(), &[(cell, 0)], vec![], &[INST]);
    let errors = verify(&b.graph).unwrap_err();
    let texts: Vec<String> = errors.iter().map(|e| e.to_string()).collect();
    assert!(
        texts.contains(
            &"node %2 `cell` (linear @cell): input f32[200] does not match cell.weight [128, 256] (expects f32[256])"
                .to_string()
        ),
        "{texts:#?}"
    );
}

#[test]
fn linear_output_and_leading_dims() {
    let mut s = straight();
    node(&mut s.b.graph, s.l2).outputs[0] = f32(&[4]);
    rejects(&s.b.graph, &["(linear @l2): output f32[4] does not match l2.weight [3, 16] (expects f32[3])"]);
}

#[test]
fn linear_missing_param() {
    let mut s = straight();
    s.b.graph.params.retain(|p| p.name != "l2.bias");
    rejects(&s.b.graph, &["node %4 `linear` (linear @l2): parameter `l2.bias` does not exist"]);
}

#[test]
fn linear_bias_of_wrong_shape() {
    let mut s = straight();
    s.b.graph.params.iter_mut().filter(|p| p.name == "l1.bias").for_each(|p| p.shape = vec![15]);
    rejects(&s.b.graph, &["parameter l1.bias has shape [15], expected [16]"]);
}

#[test]
fn bad_split() {
    let mut s = straight();
    let split = s.b.add(Op::Split { parts: 3 }, &[(s.relu, 0)], vec![f32(&[5]); 3], &[INST]);
    s.b.add(Op::Sink { name: "parts".into() }, &[(split, 0)], vec![], &[]);
    rejects(&s.b.graph, &["(split 3): input f32[16] cannot be split into 3 equal parts"]);
    node(&mut s.b.graph, split).op = Op::Split { parts: 2 };
    rejects(&s.b.graph, &["(split 2): has 3 outputs, expected 2"]);
}

#[test]
fn concat_of_a_matrix() {
    let mut s = straight();
    let wide = s.b.add(Op::Read { path: data(&["m"]) }, &[(s.source, 0)], vec![f32(&[2, 8])], &[]);
    let cat = s.b.add(Op::Concat, &[(s.read, 0), (wide, 0)], vec![f32(&[24])], &[INST]);
    s.b.add(Op::Sink { name: "cat".into() }, &[(cat, 0)], vec![], &[]);
    rejects(&s.b.graph, &["(concat): input 1 has type f32[2, 8], expected an f32 vector (rank 1)"]);
}

#[test]
fn binary_shape_mismatch() {
    let mut s = straight();
    let add = s.b.add(Op::Binary(BinaryFn::Add), &[(s.read, 0), (s.relu, 0)], vec![f32(&[16])], &[INST]);
    s.b.add(Op::Sink { name: "sum".into() }, &[(add, 0)], vec![], &[]);
    rejects(&s.b.graph, &["(binary add): inputs f32[8] and f32[16] differ in shape and neither is a scalar f32"]);
}

#[test]
fn cond_with_one_output() {
    let mut l = looped();
    let g = &mut l.b.graph;
    node(g, l.cond).outputs.pop();
    rejects(g, &["node %4 `cond` (cond): has 1 output, expected 2"]);
}

#[test]
fn phi_inputs_of_different_types() {
    let mut l = looped();
    node(&mut l.b.graph, l.phi).inputs[1] = f32(&[5]);
    rejects(&l.b.graph, &["node %3 `loop` (phi 2): input 1 has type f32[5], which differs from input 0's f32[4]"]);
}

#[test]
fn softmax_of_a_scalar() {
    let mut s = straight();
    let scalar = s.b.add(Op::Read { path: data(&["s"]) }, &[(s.source, 0)], vec![f32(&[])], &[]);
    let soft = s.b.add(Op::Unary(UnaryFn::Softmax), &[(scalar, 0)], vec![f32(&[])], &[INST]);
    s.b.add(Op::Sink { name: "p".into() }, &[(soft, 0)], vec![], &[]);
    rejects(
        &s.b.graph,
        &["(unary softmax): input 0 has type f32, expected a batch or an f32 tensor of rank at least 1"],
    );
}

#[test]
fn cross_entropy_of_a_matrix() {
    let mut s = straight();
    node(&mut s.b.graph, s.l2).outputs[0] = f32(&[1, 3]);
    node(&mut s.b.graph, s.loss).inputs[0] = f32(&[1, 3]);
    rejects(&s.b.graph, &["(loss cross_entropy): input 0 has type f32[1, 3], expected an f32 vector (rank 1)"]);
}

#[test]
fn group_gate_is_a_control_message() {
    let (mut m, _) = summed();
    let gate = m.b.add(Op::Read { path: data(&["g"]) }, &[(m.source, 0)], vec![f32(&[8])], &[]);
    let e = edge_into(&m.b.graph, m.group, 1);
    m.b.graph.nodes.remove_edge(e);
    m.b.connect(gate, 0, m.group, 1);
    node(&mut m.b.graph, m.group).inputs[1] = f32(&[8]);
    rejects(&m.b.graph, &["node %3 `group` (group %e): input 1 has type f32[8], expected unit"]);
}

#[test]
fn ungroup_of_a_tensor() {
    let (mut m, sum) = summed();
    let rows = m.b.add(Op::Ungroup { field: m.e }, &[(sum, 0)], vec![f32(&[8])], &[INST]);
    m.b.add(Op::Sink { name: "rows".into() }, &[(rows, 0)], vec![], &[]);
    rejects(&m.b.graph, &["`ungroup` (ungroup %e): input 0 has type f32[8], expected a batch `f32[?, ...]`"]);
}

#[test]
fn gather_of_a_scalar() {
    let mut s = straight();
    let scalar = s.b.add(Op::Read { path: data(&["s"]) }, &[(s.source, 0)], vec![f32(&[])], &[]);
    let row = s.b.add(Op::Gather { index: int(0) }, &[(scalar, 0)], vec![f32(&[])], &[INST]);
    s.b.add(Op::Sink { name: "row".into() }, &[(row, 0)], vec![], &[]);
    rejects(&s.b.graph, &["(gather): input 0 has type f32, expected a batch or an f32 tensor of rank at least 1"]);
}

#[test]
fn top_k_output_has_k_elements() {
    let mut s = straight();
    let top = s.b.add(Op::TopK { k: 2 }, &[(s.l2, 0)], vec![f32(&[2])], &[INST]);
    let sink = s.b.add(Op::Sink { name: "top".into() }, &[(top, 0)], vec![], &[]);
    accepts(&s.b.graph);
    node(&mut s.b.graph, top).outputs[0] = f32(&[3]);
    node(&mut s.b.graph, sink).inputs[0] = f32(&[3]);
    rejects(&s.b.graph, &["node %6 `top_k` (top_k): output 0 has type f32[3], expected f32[2]"]);
}

#[test]
fn reduce_of_a_batch_gives_one_row() {
    let (mut m, sum) = summed();
    node(&mut m.b.graph, sum).outputs[0] = f32(&[]);
    rejects(&m.b.graph, &["node %4 `reduce` (reduce): output 0 has type f32, expected f32[8]"]);
}

#[test]
fn state_from_payload_selector_is_a_vector() {
    let mut r = routed(false);
    let matrix = r.b.add(Op::Read { path: data(&["m"]) }, &[(r.source, 0)], vec![f32(&[2, 2])], &[]);
    let e = edge_into(&r.b.graph, r.pick, 0);
    r.b.graph.nodes.remove_edge(e);
    r.b.connect(matrix, 0, r.pick, 0);
    node(&mut r.b.graph, r.pick).inputs[0] = f32(&[2, 2]);
    rejects(
        &r.b.graph,
        &["node %3 `state_from_payload` (state_from_payload %c): input 0 has type f32[2, 2], expected an f32 vector \
           (rank 1)"],
    );
}

// ------------------------------------------------------------------ fields

#[test]
fn field_id_out_of_range() {
    let mut l = looped();
    node(&mut l.b.graph, l.cell).key = vec![INST, FieldId(9)];
    rejects(&l.b.graph, &["(linear @cell): the key names field #9, but the state has 2 fields"]);
    let mut l = looped();
    node(&mut l.b.graph, l.step).op = Op::Isu { field: FieldId(7), value: int(0), inverse: None };
    rejects(&l.b.graph, &["the isu target names field #7, but the state has 2 fields"]);
}

#[test]
fn reads_missing_the_predicate_field() {
    let mut l = looped();
    node(&mut l.b.graph, l.cond).reads.clear();
    rejects(&l.b.graph, &["node %4 `cond` (cond): the predicate reads %t, but the node's `reads` does not list it"]);
}

#[test]
fn writes_missing_the_isu_target() {
    let mut l = looped();
    node(&mut l.b.graph, l.step).writes.clear();
    rejects(&l.b.graph, &["(isu %t): the isu target writes %t, but the node's `writes` does not list it"]);
}

#[test]
fn writes_a_field_the_op_does_not_write() {
    let mut l = looped();
    node(&mut l.b.graph, l.cell).writes.push(l.t);
    rejects(&l.b.graph, &["(linear @cell): `writes` lists %t, which this op does not write"]);
}

// ------------------------------------------------------------------ keys

#[test]
fn key_without_instance() {
    let mut s = straight();
    node(&mut s.b.graph, s.l1).key.clear();
    rejects(
        &s.b.graph,
        &["node %2 `linear` (linear @l1): caches for its backward pass, but its key () lacks the instance field %inst"],
    );
}

#[test]
fn fan_out_needs_a_key() {
    let mut s = straight();
    s.b.add(Op::Sink { name: "x".into() }, &[(s.read, 0)], vec![], &[]);
    rejects(&s.b.graph, &["(read .x): fans out, so it sums its consumers' gradients by key, but its key ()"]);
}

#[test]
fn loop_node_whose_key_misses_the_loop_counter() {
    let mut l = looped();
    node(&mut l.b.graph, l.cell).key = vec![INST];
    rejects(
        &l.b.graph,
        &["node %5 `linear` (linear @cell): caches for its backward pass inside the loop counted by %t (stepped by \
           %7), but its key (%inst) lacks %t"],
    );
}

#[test]
fn inner_loop_node_needs_both_counters() {
    let mut n = nested();
    let cell = n.b.graph.nodes.node_indices().find(|&i| n.b.graph.nodes[i].op == Op::Linear { param: "cell".into() });
    node(&mut n.b.graph, cell.unwrap()).key = vec![INST, FieldId(2)];
    rejects(&n.b.graph, &["(linear @cell): caches for its backward pass inside the loop counted by %i"]);
}

#[test]
fn outer_loop_node_needs_the_outer_counter() {
    let mut n = nested();
    node(&mut n.b.graph, n.mid).key = vec![INST, FieldId(2)];
    rejects(&n.b.graph, &["(linear @mid): caches for its backward pass inside the loop counted by %i", "lacks %i"]);
}

#[test]
fn flatmap_key_needs_the_instance() {
    let (mut m, _) = summed();
    node(&mut m.b.graph, m.flatmap).key.clear();
    rejects(
        &m.b.graph,
        &["node %1 `flatmap` (flatmap %e): joins its outputs' gradients by key, but its key () lacks the instance \
           field %inst"],
    );
}

/// A row of a table picked by the loop counter: each iteration caches its own row index.
#[test]
fn gather_in_a_loop_is_keyed_by_the_counter() {
    let mut l = looped();
    let e = edge_into(&l.b.graph, l.cell, 0);
    l.b.graph.nodes.remove_edge(e);
    let control = l.b.add(Op::Forget, &[(l.cond, 0)], vec![PayloadTy::Unit], &[]);
    let table = l.b.add(Op::Read { path: data(&["table"]) }, &[(control, 0)], vec![f32(&[6, 4])], &[]);
    let row = l.b.add(Op::Gather { index: field(l.t) }, &[(table, 0)], vec![f32(&[4])], &[INST, l.t]);
    l.b.connect(row, 0, l.cell, 0);
    accepts(&l.b.graph);
    node(&mut l.b.graph, row).key = vec![INST];
    rejects(
        &l.b.graph,
        &[&format!(
            "node %{} `gather` (gather): caches for its backward pass inside the loop counted by %t (stepped by %{}), \
             but its key (%inst) lacks %t",
            row.index(),
            l.step.index()
        )],
    );
}

// ------------------------------------------------------------------ cycles

#[test]
fn cycle_without_phi_cond_or_isu() {
    let mut s = straight();
    // relu feeds back into a second linear that feeds relu's… own consumer chain: l1 ← l2.
    let e = edge_into(&s.b.graph, s.l1, 0);
    s.b.graph.nodes.remove_edge(e);
    node(&mut s.b.graph, s.l1).inputs[0] = f32(&[16]);
    s.b.graph.params.iter_mut().filter(|p| p.name == "l1.weight").for_each(|p| p.shape = vec![16, 16]);
    let add = s.b.add(Op::Binary(BinaryFn::Add), &[(s.relu, 0), (s.relu, 0)], vec![f32(&[16])], &[INST]);
    s.b.connect(add, 0, s.l1, 0);
    rejects(
        &s.b.graph,
        &["node %2", "is in a cycle of 3 nodes (%2, %3, %6) without a phi or a gated group (the loop header)"],
    );
    rejects(&s.b.graph, &["without a cond or switch (the loop exit)"]);
    rejects(&s.b.graph, &["without an isu (the loop step)"]);
}

#[test]
fn loop_without_step() {
    let mut l = looped();
    node(&mut l.b.graph, l.step).op = Op::Forget;
    node(&mut l.b.graph, l.step).outputs[0] = PayloadTy::Unit;
    rejects(&l.b.graph, &["is in a cycle of 5 nodes", "without an isu (the loop step)"]);
}

// ------------------------------------------------------------------ reachability

#[test]
fn node_unreachable_from_source() {
    let mut s = straight();
    let orphan = s.b.add(Op::Const { value: ConstValue::Ones }, &[], vec![f32(&[16])], &[]);
    node(&mut s.b.graph, orphan).inputs = vec![PayloadTy::Unit];
    let add = s.b.add(Op::Binary(BinaryFn::Add), &[(s.relu, 0), (orphan, 0)], vec![f32(&[16])], &[INST]);
    let e = edge_into(&s.b.graph, s.l2, 0);
    s.b.graph.nodes.remove_edge(e);
    s.b.connect(add, 0, s.l2, 0);
    rejects(&s.b.graph, &["node %6 `const` (const ones): is not reachable from the source"]);
}

/// A Linear whose output feeds only a sink (a prediction the loss does not use) is
/// accepted: it is forward-only, which the executor runs without a cache or a backward
/// pass (issue 43); everything on the loss's path reaches the loss.
#[test]
fn a_linear_that_feeds_only_a_sink_is_forward_only() {
    let mut s = straight();
    s.b.linear_params("aux", 2, 16);
    let aux = s.b.add(Op::Linear { param: "aux".into() }, &[(s.relu, 0)], vec![f32(&[2])], &[INST]);
    node(&mut s.b.graph, s.relu).key = vec![INST];
    let sink = s.b.add(Op::Sink { name: "aux".into() }, &[(aux, 0)], vec![], &[]);
    accepts(&s.b.graph);
    let reaches = s.b.graph.reaches_loss();
    assert!(!reaches[aux.index()] && !reaches[sink.index()]);
    assert!([s.source, s.read, s.l1, s.relu, s.l2, s.loss].iter().all(|n| reaches[n.index()]));
}

#[test]
fn dead_node() {
    let mut s = straight();
    s.b.add(Op::Unary(UnaryFn::Exp), &[(s.l2, 0)], vec![f32(&[3])], &[INST]);
    rejects(
        &s.b.graph,
        &["node %6 `unary` (unary exp): reaches no loss or sink: dead node (run dead-node elimination)"],
    );
}

// ------------------------------------------------------------------ defined before use

#[test]
fn field_read_before_any_write() {
    let mut l = looped();
    // Feed the phi's entry from the const directly: nothing writes %t before the loop.
    let e = edge_into(&l.b.graph, l.phi, 0);
    let h0 = l.b.graph.nodes.edge_endpoints(edge_into(&l.b.graph, l.entry, 0)).unwrap().0;
    l.b.graph.nodes.remove_edge(e);
    l.b.connect(h0, 0, l.phi, 0);
    l.b.graph.nodes.remove_node(l.entry);
    rejects(
        &l.b.graph,
        &["node %4 `cond` (cond): reads %t, which is not written on every path from the source (not on the path through \
           %3)"],
    );
}

#[test]
fn field_written_on_one_branch_only() {
    // source → cond on a data field → (true: isu t := 0) / (false: nothing) → phi → cond t.
    let mut b = Builder::new(&[("inst", FieldRole::Instance), ("t", FieldRole::Counter)]);
    let t = FieldId(1);
    let source = b.source();
    let pick = b.add(
        Op::Cond { pred: StateExpr::bin(IntOp::Gt, StateExpr::Len(data(&["xs"])), int(0)) },
        &[(source, 0)],
        vec![PayloadTy::Unit; 2],
        &[],
    );
    let set =
        b.add(Op::Isu { field: t, value: int(0), inverse: Some(int(-1)) }, &[(pick, 0)], vec![PayloadTy::Unit], &[]);
    let join = b.add(Op::Phi { arms: 2 }, &[(set, 0), (pick, 1)], vec![PayloadTy::Unit], &[INST]);
    let test = b.add(
        Op::Cond { pred: StateExpr::bin(IntOp::Eq, field(t), int(0)) },
        &[(join, 0)],
        vec![PayloadTy::Unit; 2],
        &[INST],
    );
    b.add(Op::Sink { name: "a".into() }, &[(test, 0)], vec![], &[]);
    b.add(Op::Sink { name: "b".into() }, &[(test, 1)], vec![], &[]);
    rejects(&b.graph, &["node %4 `cond` (cond): reads %t, which is not written on every path from the source"]);
    // Writing %t on the other branch too makes it definite.
    let e = edge_into(&b.graph, join, 1);
    b.graph.nodes.remove_edge(e);
    let other =
        b.add(Op::Isu { field: t, value: int(1), inverse: Some(int(-1)) }, &[(pick, 1)], vec![PayloadTy::Unit], &[]);
    b.connect(other, 0, join, 1);
    accepts(&b.graph);
}

#[test]
fn field_read_before_the_state_from_payload_that_writes_it() {
    let r = routed(true);
    rejects(
        &r.b.graph,
        &[&format!(
            "node %{} `switch` (switch 2): reads %c, which is not written on every path from the source",
            r.route.index()
        )],
    );
}

/// Only the source writes the instance field (`isu %inst := ..` is rejected); an element
/// op or a `state_from_payload` that overwrote it would mix up instances just the same.
#[test]
fn element_ops_may_not_write_the_instance_field() {
    let (mut m, _) = summed();
    let flatmap = node(&mut m.b.graph, m.flatmap);
    flatmap.op = Op::Flatmap { field: INST, count: len("tokens") };
    flatmap.writes = vec![INST];
    rejects(&m.b.graph, &["node %1 `flatmap` (flatmap %inst): writes the instance field %inst"]);
    let mut r = routed(false);
    let pick = node(&mut r.b.graph, r.pick);
    pick.op = Op::StateFromPayload { field: INST, int: PayloadInt::Argmax };
    pick.writes = vec![INST];
    rejects(&r.b.graph, &["(state_from_payload %inst): writes the instance field %inst"]);
}

// ------------------------------------------------------------------ report and scale

#[test]
fn report_lists_errors_one_per_line() {
    let mut s = straight();
    node(&mut s.b.graph, s.l1).key.clear();
    node(&mut s.b.graph, s.l2).key.clear();
    let report = verify_report(&s.b.graph);
    assert_eq!(report.lines().count(), 2, "{report}");
    assert!(report.lines().all(|l| l.starts_with("error: node %")), "{report}");
}

#[test]
fn long_chain_verifies_without_deep_recursion() {
    let mut b = Builder::new(&[("inst", FieldRole::Instance)]);
    let mut prev = b.source();
    prev = b.add(Op::Read { path: data(&["x"]) }, &[(prev, 0)], vec![f32(&[4])], &[]);
    for _ in 0..200_000 {
        prev = b.add(Op::Unary(UnaryFn::Relu), &[(prev, 0)], vec![f32(&[4])], &[INST]);
    }
    b.add(Op::Sink { name: "y".into() }, &[(prev, 0)], vec![], &[]);
    accepts(&b.graph);
}

#[test]
fn deeply_nested_expression_does_not_overflow_the_stack() {
    let mut l = looped();
    let mut pred = field(l.t);
    for _ in 0..100_000 {
        pred = StateExpr::Not(Box::new(pred));
    }
    node(&mut l.b.graph, l.cond).op = Op::Cond { pred };
    // `reads` still lists %t; the only error is the depth (`limits::MAX_EXPR_DEPTH`).
    let result = verify(&l.b.graph).map(|_| ());
    // Dropping the expression recursively would overflow; leak it instead.
    std::mem::forget(l);
    let errors = result.unwrap_err();
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert_eq!(errors[0].kind, VerifyErrorKind::ExprTooDeep { limit: amp_ir::limits::MAX_EXPR_DEPTH });
}

// ------------------------------------------------------------------ random mutations

#[derive(Clone, Debug)]
enum Mutation {
    DeleteNode(usize),
    DeleteEdge(usize),
    AddEdge(usize, usize, u16, u16),
    RetargetEdge(usize, u16, u16),
    ClearKey(usize),
    /// `None` is unit; `(true, dims)` a batch of rows of `dims`.
    SetOutputType(usize, usize, Option<(bool, Vec<u64>)>),
    SetField(usize, usize, u16),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        any::<usize>().prop_map(Mutation::DeleteNode),
        any::<usize>().prop_map(Mutation::DeleteEdge),
        (any::<usize>(), any::<usize>(), 0u16..3, 0u16..3).prop_map(|(a, b, p, q)| Mutation::AddEdge(a, b, p, q)),
        (any::<usize>(), prop_oneof![0u16..4, any::<u16>()], prop_oneof![0u16..4, any::<u16>()])
            .prop_map(|(e, a, b)| Mutation::RetargetEdge(e, a, b)),
        any::<usize>().prop_map(Mutation::ClearKey),
        (
            any::<usize>(),
            any::<usize>(),
            proptest::option::of((any::<bool>(), proptest::collection::vec(0u64..300, 0..4)))
        )
            .prop_map(|(n, p, t)| Mutation::SetOutputType(n, p, t)),
        (any::<usize>(), any::<usize>(), prop_oneof![0u16..5, any::<u16>()])
            .prop_map(|(n, s, f)| Mutation::SetField(n, s, f)),
    ]
}

fn pick<T: Copy>(items: &[T], k: usize) -> Option<T> {
    if items.is_empty() {
        None
    } else {
        Some(items[k % items.len()])
    }
}

/// Every `FieldId` of a node: its lists and its op's attributes.
fn field_slots(node: &mut Node) -> Vec<&mut FieldId> {
    fn expr<'a>(e: &'a mut StateExpr, out: &mut Vec<&'a mut FieldId>) {
        match e {
            StateExpr::Field(f) => out.push(f),
            StateExpr::Const(_) => {}
            StateExpr::Data(path) | StateExpr::Len(path) => steps(path, out),
            StateExpr::Not(e) => expr(e, out),
            StateExpr::Bin(_, a, b) => {
                expr(a, out);
                expr(b, out);
            }
        }
    }
    fn steps<'a>(path: &'a mut [DataStep], out: &mut Vec<&'a mut FieldId>) {
        for step in path {
            if let DataStep::Index(e) = step {
                expr(e, out);
            }
        }
    }
    let mut out: Vec<&mut FieldId> = Vec::new();
    out.extend(node.reads.iter_mut());
    out.extend(node.writes.iter_mut());
    out.extend(node.key.iter_mut());
    match &mut node.op {
        Op::Read { path } => steps(path, &mut out),
        Op::Embedding { index, .. } | Op::Switch { index, .. } => expr(index, &mut out),
        Op::Cond { pred } => expr(pred, &mut out),
        Op::Isu { field, value, inverse } => {
            out.push(field);
            expr(value, &mut out);
            if let Some(inverse) = inverse {
                expr(inverse, &mut out);
            }
        }
        Op::Loss(LossKind::CrossEntropy { label }) => expr(label, &mut out),
        Op::Loss(LossKind::CrossEntropyMean { label, count }) => {
            expr(label, &mut out);
            expr(count, &mut out);
        }
        Op::Flatmap { field, count } | Op::Group { field, count } => {
            out.push(field);
            expr(count, &mut out);
        }
        Op::Ungroup { field } => out.push(field),
        Op::Gather { index } => expr(index, &mut out),
        Op::ScatterSum { field, index, count } => {
            out.push(field);
            expr(index, &mut out);
            expr(count, &mut out);
        }
        Op::StateFromPayload { field, int } => {
            out.push(field);
            if let PayloadInt::TopK { slot, .. } = int {
                expr(slot, &mut out);
            }
        }
        _ => {}
    }
    out
}

fn apply(g: &mut Graph, m: &Mutation) {
    let nodes: Vec<NodeIndex> = g.nodes.node_indices().collect();
    let edges: Vec<EdgeIndex> = g.nodes.edge_indices().collect();
    match *m {
        Mutation::DeleteNode(k) => {
            if let Some(n) = pick(&nodes, k) {
                g.nodes.remove_node(n);
            }
        }
        Mutation::DeleteEdge(k) => {
            if let Some(e) = pick(&edges, k) {
                g.nodes.remove_edge(e);
            }
        }
        Mutation::AddEdge(a, b, from_port, to_port) => {
            if let (Some(a), Some(b)) = (pick(&nodes, a), pick(&nodes, b)) {
                g.nodes.add_edge(a, b, Edge { from_port, to_port });
            }
        }
        Mutation::RetargetEdge(k, from_port, to_port) => {
            if let Some(e) = pick(&edges, k) {
                g.nodes[e] = Edge { from_port, to_port };
            }
        }
        Mutation::ClearKey(k) => {
            if let Some(n) = pick(&nodes, k) {
                g.nodes[n].key.clear();
            }
        }
        Mutation::SetOutputType(k, port, ref ty) => {
            if let Some(n) = pick(&nodes, k) {
                let outputs = &mut g.nodes[n].outputs;
                if !outputs.is_empty() {
                    let len = outputs.len();
                    outputs[port % len] = match ty.clone() {
                        None => PayloadTy::Unit,
                        Some((true, dims)) => PayloadTy::Batch(dims),
                        Some((false, dims)) => PayloadTy::F32(dims),
                    };
                }
            }
        }
        Mutation::SetField(k, slot, value) => {
            if let Some(n) = pick(&nodes, k) {
                let mut slots = field_slots(&mut g.nodes[n]);
                if !slots.is_empty() {
                    let len = slots.len();
                    *slots[slot % len] = FieldId(value);
                }
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    #[test]
    fn mutations_never_panic(which in 0usize..5, mutations in proptest::collection::vec(mutation(), 1..6)) {
        let mut g = match which {
            0 => straight().b.graph,
            1 => looped().b.graph,
            2 => nested().b.graph,
            3 => summed().0.b.graph,
            _ => routed(false).b.graph,
        };
        for m in &mutations {
            apply(&mut g, m);
        }
        // Ok or Err are both fine; every error must print.
        if let Err(errors) = verify(&g) {
            prop_assert!(!errors.is_empty());
            for e in &errors {
                prop_assert!(!e.to_string().is_empty());
            }
        }
    }
}

/// A weighted loss term is accepted; a NaN or infinite weight is not, and a scalar term
/// takes only an `f32[]`.
#[test]
fn loss_terms_need_finite_weights_and_scalar_inputs() {
    let term = |weight: f32| {
        let base = LossBase::CrossEntropy { label: StateExpr::Data(data(&["label"])) };
        Op::Loss(LossKind::Term { base, weight, count: None, judge: Some(int(1)) })
    };
    let mut s = straight();
    node(&mut s.b.graph, s.loss).op = term(0.25);
    accepts(&s.b.graph);
    for weight in [f32::NAN, f32::INFINITY] {
        node(&mut s.b.graph, s.loss).op = term(weight);
        rejects(&s.b.graph, &["loss weight", "not finite"]);
    }
    node(&mut s.b.graph, s.loss).op =
        Op::Loss(LossKind::Term { base: LossBase::Scalar, weight: 1.0, count: None, judge: None });
    rejects(&s.b.graph, &["input 0 has type f32[3], expected f32"]);
}

/// A dropout in a loop's body, hashing the loop's counter: accepted with a rate in
/// [0, 1) and its context field declared as read; refused with a rate of 1 or NaN, with
/// the context field left out of `reads`, and on a unit payload.
#[test]
fn dropout_needs_a_rate_below_one_and_declared_context() {
    let with = |rate: f32, declare: bool, unit: bool| {
        let mut l = looped();
        let e = edge_into(&l.b.graph, l.step, 0);
        let tanh = l.b.graph.nodes.edge_endpoints(e).map(|(from, _)| from).unwrap();
        l.b.graph.nodes.remove_edge(e);
        let d = l.b.add(Op::Dropout { rate, site: 7, context: vec![l.t] }, &[(tanh, 0)], vec![f32(&[4])], &[]);
        if !declare {
            l.b.graph.nodes[d].reads.clear();
        }
        if unit {
            l.b.graph.nodes[d].inputs = vec![PayloadTy::Unit];
        }
        l.b.connect(d, 0, l.step, 0);
        l.b.graph
    };
    accepts(&with(0.5, true, false));
    accepts(&with(0.0, true, false));
    rejects(&with(1.0, true, false), &["dropout rate 1", "outside [0, 1)"]);
    rejects(&with(f32::NAN, true, false), &["dropout rate NaN"]);
    rejects(&with(0.5, false, false), &["the dropout context", "reads"]);
    rejects(&with(0.5, true, true), &["`dropout`", "an f32 tensor"]);
}

/// A type's element count saturates where its dimensions' product overflows (a hostile
/// graph's ports), so that the checks comparing it refuse the type instead of panicking;
/// a zero dimension makes it empty whatever the others.
#[test]
fn element_counts_saturate_instead_of_overflowing() {
    use amp_ir::PayloadTy;
    assert_eq!(PayloadTy::F32(vec![3, 4]).elements(), 12);
    assert_eq!(PayloadTy::Batch(vec![1 << 40, 1 << 40]).elements(), u64::MAX);
    assert_eq!(PayloadTy::F32(vec![1 << 40, 1 << 40, 0]).elements(), 0);
    assert_eq!(PayloadTy::F32(vec![]).elements(), 1);
    assert_eq!(PayloadTy::Unit.elements(), 0);
}
