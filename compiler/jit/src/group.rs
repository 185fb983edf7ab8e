//! From a verified graph's fusion groups to kernel specs.
//!
//! A fusion group is the set of nodes that `amp_lower::passes::group_fusable_nppts` marked
//! with the same `fusion` id. Its kernel's inputs are the distinct output ports outside the
//! group that feed it (one kernel input however many group ports it feeds), its outputs
//! the group's values that some node outside the group consumes. Nothing else is saved
//! for the backward pass: the backward function recomputes from the inputs.
//!
//! Extraction trusts nothing it reads: every type, port and edge it relies on is checked
//! again (a group is refused with a [`GroupError`], never a panic), although a
//! [`Verified`] graph already passed the verifier. Memory safety does not depend
//! on any of it (see [`crate::Kernel::run`]); these checks keep the kernel's buffer
//! layout equal to the payload types the executor sees.

use crate::spec::{Elementwise, KernelSpec, SpecError, SpecOp, ValueId, Width};
use amp_ir::verify::Verified;
use amp_ir::{FieldId, Graph, Node, PayloadTy};
use petgraph::stable_graph::NodeIndex;
use petgraph::visit::EdgeRef;
use petgraph::Direction::{Incoming, Outgoing};
use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, HashMap};
use std::fmt;

/// An output port of a node.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PortRef {
    pub node: NodeIndex,
    pub port: u16,
}

/// One fusion group, ready to run as one kernel call per message (or batch of messages).
#[derive(Clone, Debug)]
pub struct FusionGroup {
    /// The `fusion` id in the graph.
    pub id: u32,
    /// The group's nodes in the kernel's op order: op `i` is `nodes[i]`.
    pub nodes: Vec<NodeIndex>,
    /// Kernel input `i` is the payload of the output port `inputs[i]` (a node outside the
    /// group)...
    pub inputs: Vec<PortRef>,
    /// ...which reaches the group through these edges: `(group node, its input port)`.
    /// Its gradient (the kernel's input gradient `i`) is the sum over all of them.
    pub input_edges: Vec<Vec<(NodeIndex, u16)>>,
    /// Kernel output `j` is the payload of output port 0 of the group node `outputs[j]`,
    /// sent along every edge of that port that leaves the group.
    pub outputs: Vec<NodeIndex>,
    /// The key the group joins its inputs by (its nodes' common non-empty key).
    pub key: Vec<FieldId>,
    /// The payload type of the group's vector values; `None` when every value is a
    /// scalar. Per message: a vector port carries the payload (`n` elements), a scalar
    /// port (`f32`) one value. For a batch type `f32[?, d..]` (not produced by lowering
    /// today) one message is `rows` rows of `n`: repeat its scalar inputs once per row,
    /// and a scalar output then comes back once per row (all equal).
    pub vector_type: Option<PayloadTy>,
    pub spec: KernelSpec,
}

/// A fusion group the JIT refuses; it runs op by op instead.
#[derive(Clone, Debug, PartialEq)]
pub struct GroupError {
    pub group: u32,
    pub kind: GroupErrorKind,
}

#[derive(Clone, Debug, PartialEq)]
pub enum GroupErrorKind {
    /// The node's op is not elementwise (`softmax`, `log_softmax`, or not `unary`/`binary`).
    NotElementwise {
        node: NodeIndex,
        op: &'static str,
    },
    /// The node's port counts do not fit its op.
    PortCount {
        node: NodeIndex,
        inputs: usize,
        outputs: usize,
    },
    /// Input port `port` has `edges` incoming edges instead of one.
    InputEdges {
        node: NodeIndex,
        port: u16,
        edges: usize,
    },
    /// An edge into a port the node lacks, or out of an output port other than 0.
    StrayEdge {
        node: NodeIndex,
    },
    /// A port whose payload is not an f32 tensor, or whose element count overflows.
    NotF32 {
        node: NodeIndex,
        ty: PayloadTy,
    },
    /// A port whose type is not what its edge or its op's shape rule says.
    TypeMismatch {
        node: NodeIndex,
        expected: PayloadTy,
        found: PayloadTy,
    },
    /// Two different non-scalar types in one group (joined through scalars).
    MixedShapes {
        first: PayloadTy,
        second: PayloadTy,
    },
    /// Two different non-empty keys in one group.
    MixedKeys {
        node: NodeIndex,
    },
    /// The group's edges form a cycle.
    Cycle,
    Spec(SpecError),
    /// The kernel did not compile.
    Kernel(crate::KernelError),
}

impl fmt::Display for GroupError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "fusion group {}: ", self.group)?;
        match &self.kind {
            GroupErrorKind::NotElementwise { node, op } => write!(f, "%{} ({op}) is not elementwise", node.index()),
            GroupErrorKind::PortCount { node, inputs, outputs } => {
                write!(f, "%{} has {inputs} input and {outputs} output ports", node.index())
            }
            GroupErrorKind::InputEdges { node, port, edges } => {
                write!(f, "input {port} of %{} has {edges} edges", node.index())
            }
            GroupErrorKind::StrayEdge { node } => write!(f, "%{} has an edge on a port it lacks", node.index()),
            GroupErrorKind::NotF32 { node, ty } => write!(f, "%{} has a `{ty}` port", node.index()),
            GroupErrorKind::TypeMismatch { node, expected, found } => {
                write!(f, "%{}: expected `{expected}`, found `{found}`", node.index())
            }
            GroupErrorKind::MixedShapes { first, second } => write!(f, "mixes `{first}` and `{second}` values"),
            GroupErrorKind::MixedKeys { node } => write!(f, "%{} has another key than the group", node.index()),
            GroupErrorKind::Cycle => f.write_str("its edges form a cycle"),
            GroupErrorKind::Spec(e) => write!(f, "{e}"),
            GroupErrorKind::Kernel(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for GroupError {}

/// Every fusion group of the graph, by id: a kernel spec with its wiring, or why not.
pub fn fusion_groups(graph: &Verified) -> Vec<Result<FusionGroup, GroupError>> {
    extract_groups(graph)
}

/// [`fusion_groups`] without the verifier's guarantee (for the hostile-graph tests).
pub(crate) fn extract_groups(graph: &Graph) -> Vec<Result<FusionGroup, GroupError>> {
    let mut members: BTreeMap<u32, Vec<NodeIndex>> = BTreeMap::new();
    for index in graph.nodes.node_indices() {
        if let Some(id) = graph.nodes[index].fusion {
            members.entry(id).or_default().push(index);
        }
    }
    members
        .into_iter()
        .map(|(id, nodes)| extract_group(graph, id, &nodes).map_err(|kind| GroupError { group: id, kind }))
        .collect()
}

/// The checked facts about one group node.
struct Member<'g> {
    node: &'g Node,
    op: Elementwise,
    /// The source of each input port.
    sources: Vec<PortRef>,
}

/// `f32`: one value per message, broadcast by the ops that read it.
fn is_scalar(ty: &PayloadTy) -> bool {
    matches!(ty, PayloadTy::F32(dims) if dims.is_empty())
}

fn f32_elements(node: NodeIndex, ty: &PayloadTy) -> Result<(Width, u64), GroupErrorKind> {
    let not_f32 = || GroupErrorKind::NotF32 { node, ty: ty.clone() };
    match ty {
        PayloadTy::Unit => Err(not_f32()),
        PayloadTy::F32(dims) if dims.is_empty() => Ok((Width::Scalar, 1)),
        PayloadTy::F32(dims) | PayloadTy::Batch(dims) => {
            let count = dims.iter().try_fold(1u64, |acc, &d| acc.checked_mul(d)).ok_or_else(not_f32)?;
            Ok((Width::Vector, count))
        }
    }
}

fn check_member(graph: &Graph, index: NodeIndex) -> Result<Member<'_>, GroupErrorKind> {
    let node = &graph.nodes[index];
    let op =
        Elementwise::of_op(&node.op).ok_or(GroupErrorKind::NotElementwise { node: index, op: node.op.keyword() })?;
    if node.inputs.len() != op.arity() || node.outputs.len() != 1 {
        return Err(GroupErrorKind::PortCount { node: index, inputs: node.inputs.len(), outputs: node.outputs.len() });
    }
    let mut sources: Vec<Vec<PortRef>> = vec![Vec::new(); op.arity()];
    for edge in graph.nodes.edges_directed(index, Incoming) {
        let slot =
            sources.get_mut(usize::from(edge.weight().to_port)).ok_or(GroupErrorKind::StrayEdge { node: index })?;
        slot.push(PortRef { node: edge.source(), port: edge.weight().from_port });
    }
    if graph.nodes.edges_directed(index, Outgoing).any(|e| e.weight().from_port != 0) {
        return Err(GroupErrorKind::StrayEdge { node: index });
    }
    let mut single = Vec::with_capacity(op.arity());
    for (port, found) in sources.into_iter().enumerate() {
        let [source] = found[..] else {
            return Err(GroupErrorKind::InputEdges { node: index, port: port as u16, edges: found.len() });
        };
        let produced = graph.nodes[source.node].outputs.get(usize::from(source.port));
        if produced != Some(&node.inputs[port]) {
            let found = produced.cloned().unwrap_or(PayloadTy::Unit);
            return Err(GroupErrorKind::TypeMismatch { node: index, expected: node.inputs[port].clone(), found });
        }
        single.push(source);
    }
    for ty in node.inputs.iter().chain(&node.outputs) {
        f32_elements(index, ty)?;
    }
    // The output type the op's shape rule gives (the verifier's rule).
    let expected = match &node.inputs[..] {
        [a] => a,
        [a, b] if a == b || is_scalar(b) => a,
        [a, b] if is_scalar(a) => b,
        [a, b] => return Err(GroupErrorKind::TypeMismatch { node: index, expected: a.clone(), found: b.clone() }),
        _ => return Err(GroupErrorKind::PortCount { node: index, inputs: node.inputs.len(), outputs: 1 }),
    };
    if node.outputs[0] != *expected {
        return Err(GroupErrorKind::TypeMismatch {
            node: index,
            expected: expected.clone(),
            found: node.outputs[0].clone(),
        });
    }
    Ok(Member { node, op, sources: single })
}

fn extract_group(graph: &Graph, id: u32, nodes: &[NodeIndex]) -> Result<FusionGroup, GroupErrorKind> {
    let mut checked: HashMap<NodeIndex, Member> = HashMap::new();
    for &index in nodes {
        checked.insert(index, check_member(graph, index)?);
    }
    // One non-empty key and one non-scalar type for the whole group.
    let mut key: Option<&Vec<FieldId>> = None;
    let mut vector_type: Option<&PayloadTy> = None;
    for &index in nodes {
        let member = &checked[&index];
        if !member.node.key.is_empty() {
            match key {
                Some(k) if *k != member.node.key => return Err(GroupErrorKind::MixedKeys { node: index }),
                _ => key = Some(&member.node.key),
            }
        }
        for ty in member.node.inputs.iter().chain(&member.node.outputs) {
            if f32_elements(index, ty)?.0 == Width::Vector {
                match vector_type {
                    Some(first) if first != ty => {
                        return Err(GroupErrorKind::MixedShapes { first: first.clone(), second: ty.clone() })
                    }
                    _ => vector_type = Some(ty),
                }
            }
        }
    }
    let n = match vector_type {
        Some(ty) => f32_elements(nodes[0], ty)?.1,
        None => 1,
    };
    let order = topological_order(nodes, &checked)?;
    // Values: inputs by first use, then one per op.
    let mut inputs: Vec<PortRef> = Vec::new();
    let mut input_edges: Vec<Vec<(NodeIndex, u16)>> = Vec::new();
    let mut input_of: HashMap<PortRef, usize> = HashMap::new();
    let mut widths = Vec::new();
    for &index in &order {
        let member = &checked[&index];
        for (port, source) in member.sources.iter().enumerate() {
            if checked.contains_key(&source.node) {
                continue;
            }
            let i = *input_of.entry(*source).or_insert_with(|| {
                inputs.push(*source);
                input_edges.push(Vec::new());
                widths.push(if is_scalar(&member.node.inputs[port]) { Width::Scalar } else { Width::Vector });
                inputs.len() - 1
            });
            input_edges[i].push((index, port as u16));
        }
    }
    let position: HashMap<NodeIndex, usize> = order.iter().enumerate().map(|(i, &n)| (n, i)).collect();
    let value_of = |source: &PortRef| match position.get(&source.node) {
        Some(&op) => ValueId((inputs.len() + op) as u32),
        None => ValueId(input_of.get(source).copied().unwrap_or(0) as u32),
    };
    let ops: Vec<SpecOp> = order
        .iter()
        .map(|index| {
            let member = &checked[index];
            SpecOp { op: member.op, args: member.sources.iter().map(value_of).collect() }
        })
        .collect();
    let mut outputs = Vec::new();
    let mut output_values = Vec::new();
    for (i, &index) in order.iter().enumerate() {
        if graph.nodes.edges_directed(index, Outgoing).any(|e| !checked.contains_key(&e.target())) {
            outputs.push(index);
            output_values.push(ValueId((inputs.len() + i) as u32));
        }
    }
    let spec = KernelSpec::new(n, widths, ops, output_values).map_err(GroupErrorKind::Spec)?;
    Ok(FusionGroup {
        id,
        nodes: order,
        inputs,
        input_edges,
        outputs,
        key: key.cloned().unwrap_or_default(),
        vector_type: vector_type.cloned(),
        spec,
    })
}

/// Kahn's algorithm over the group's internal edges, lowest node index first among the
/// ready ones (so equal groups get equal specs).
fn topological_order(
    nodes: &[NodeIndex],
    checked: &HashMap<NodeIndex, Member>,
) -> Result<Vec<NodeIndex>, GroupErrorKind> {
    let mut pending: HashMap<NodeIndex, usize> = HashMap::new();
    let mut readers: HashMap<NodeIndex, Vec<NodeIndex>> = HashMap::new();
    for &index in nodes {
        let mut count = 0;
        for source in &checked[&index].sources {
            if checked.contains_key(&source.node) {
                count += 1;
                readers.entry(source.node).or_default().push(index);
            }
        }
        pending.insert(index, count);
    }
    let mut ready: BinaryHeap<Reverse<NodeIndex>> =
        nodes.iter().filter(|n| pending[n] == 0).map(|&n| Reverse(n)).collect();
    let mut order = Vec::with_capacity(nodes.len());
    while let Some(Reverse(index)) = ready.pop() {
        order.push(index);
        for &reader in readers.get(&index).map(Vec::as_slice).unwrap_or(&[]) {
            if let Some(count) = pending.get_mut(&reader) {
                *count -= 1;
                if *count == 0 {
                    ready.push(Reverse(reader));
                }
            }
        }
    }
    if order.len() == nodes.len() {
        Ok(order)
    } else {
        Err(GroupErrorKind::Cycle)
    }
}
