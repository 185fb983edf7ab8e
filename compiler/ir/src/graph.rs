//! The graph: nodes with their source locations, edges, and the whole model.

use crate::{FieldId, Op, Param, PayloadTy, Schema, StateField};
use petgraph::stable_graph::{NodeIndex, StableGraph};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Where a node came from in the source: file index into `Graph::files`, byte range and
/// the 1-based line and column of its start.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Loc {
    pub file: u32,
    pub start: u32,
    pub end: u32,
    pub line: u32,
    pub col: u32,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Node {
    pub op: Op,
    /// Payload type of each input port.
    pub inputs: Vec<PayloadTy>,
    /// Payload type of each output port.
    pub outputs: Vec<PayloadTy>,
    /// State fields the node reads and writes.
    pub reads: Vec<FieldId>,
    pub writes: Vec<FieldId>,
    /// The keying function: the state fields under which the node caches what its
    /// backward pass needs. Empty when it caches nothing.
    pub key: Vec<FieldId>,
    /// A short human name (`cell`, `h`), not necessarily unique.
    pub label: String,
    pub loc: Option<Loc>,
    /// Fusion group assigned by the NPPT fusion pass (`None` when not fused).
    pub fusion: Option<u32>,
}

impl Node {
    /// The state fields under which the gradients that come back to one of its fanned-out
    /// output ports are summed (the executor's fan-in, whose grouping the planner's model
    /// of routing chains follows): its key and the fields it writes, sorted, without
    /// repeats; the instance field (0) alone when both are empty.
    pub fn fan_in_key(&self) -> Vec<FieldId> {
        let mut key: Vec<FieldId> = self.key.iter().chain(&self.writes).copied().collect();
        if key.is_empty() {
            key.push(FieldId(0));
        }
        key.sort_unstable();
        key.dedup();
        key
    }
}

/// An edge from output port `from_port` of its source to input port `to_port` of its
/// target.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Edge {
    pub from_port: u16,
    pub to_port: u16,
}

/// A whole model: state schema, parameters, and the node graph.
#[derive(Clone, Debug, Default)]
pub struct Graph {
    /// The model's name.
    pub name: String,
    /// Source file names that `Loc::file` indexes.
    pub files: Vec<String>,
    pub state: Vec<StateField>,
    /// The type of an instance (what data paths walk); `None` for hand-built graphs that
    /// read no data.
    pub input: Option<Schema>,
    pub params: Vec<Param>,
    pub nodes: StableGraph<Node, Edge>,
    /// Free-form facts: hyperparameter values, the input record's name.
    pub meta: BTreeMap<String, String>,
}

impl Graph {
    pub fn field(&self, id: FieldId) -> Option<&StateField> {
        self.state.get(id.0 as usize)
    }

    pub fn field_named(&self, name: &str) -> Option<FieldId> {
        self.state.iter().position(|f| f.name == name).map(|i| FieldId(i as u16))
    }

    pub fn param(&self, name: &str) -> Option<&Param> {
        self.params.iter().find(|p| p.name == name)
    }

    /// The inference output: the sink named `forward`, else the first sink (what `infer`
    /// returns and what the executor reports as an instance's output).
    pub fn main_sink(&self) -> Option<NodeIndex> {
        let sinks = || {
            self.nodes.node_indices().filter_map(|i| match &self.nodes[i].op {
                Op::Sink { name } => Some((i, name.as_str())),
                _ => None,
            })
        };
        sinks().find(|&(_, name)| name == "forward").or_else(|| sinks().next()).map(|(i, _)| i)
    }

    /// Per node index (holes `false`), whether the node's output depends on a parameter
    /// through inputs that carry gradients back: a Ppt's does, and so does that of any
    /// node reading such an output through a differentiable port (every port but the
    /// routing input of a `state_from_payload`, whose backward sends zeros there). A
    /// gradient sent back to an output that does not depend on one (a data read's, or
    /// what only data and routing decisions feed) reaches no parameter, whatever its
    /// values: the executor skips computing it, the planner's cost model its work.
    pub fn parameter_dependent(&self) -> Vec<bool> {
        use petgraph::visit::EdgeRef;
        use petgraph::visit::NodeIndexable;
        let mut dependent = vec![false; self.nodes.node_bound()];
        let mut work: Vec<NodeIndex> =
            self.nodes.node_indices().filter(|&i| self.nodes.node_weight(i).is_some_and(|n| n.op.is_ppt())).collect();
        work.iter().for_each(|i| dependent[i.index()] = true);
        while let Some(index) = work.pop() {
            for edge in self.nodes.edges_directed(index, petgraph::Direction::Outgoing) {
                let target = edge.target();
                let Some(node) = self.nodes.node_weight(target) else { continue };
                let routing_only = matches!(node.op, Op::StateFromPayload { .. }) && edge.weight().to_port == 0;
                // A function the vocabulary marks non-differentiable sends no gradient back.
                let opaque = matches!(node.op, Op::Unary(f) if !f.spec().differentiable);
                if !routing_only && !opaque && !dependent[target.index()] {
                    dependent[target.index()] = true;
                    work.push(target);
                }
            }
        }
        dependent
    }

    /// Per node index, whether the node's outputs reach a `loss` (the loss nodes included).
    /// The others reach only sinks: predictions the loss does not use, which training runs
    /// forward only (no cache, no backward pass; their loss-reaching producers are answered
    /// with a zero gradient).
    pub fn reaches_loss(&self) -> Vec<bool> {
        use petgraph::visit::NodeIndexable;
        let mut reaches = vec![false; self.nodes.node_bound()];
        let mut work: Vec<NodeIndex> = self
            .nodes
            .node_indices()
            .filter(|&i| self.nodes.node_weight(i).is_some_and(|n| matches!(n.op, Op::Loss(_))))
            .collect();
        work.iter().for_each(|i| reaches[i.index()] = true);
        while let Some(index) = work.pop() {
            for from in self.nodes.neighbors_directed(index, petgraph::Direction::Incoming) {
                if !reaches[from.index()] {
                    reaches[from.index()] = true;
                    work.push(from);
                }
            }
        }
        reaches
    }

    /// The edge feeding input port `port` of `node`, with its source node.
    /// The edge into each input port of `node` (`None` where unconnected), in one pass over
    /// its incoming edges: a `phi` with one port per expert would make `input_edge` per
    /// port quadratic.
    pub fn input_edges(&self, node: NodeIndex) -> Vec<Option<(NodeIndex, Edge)>> {
        use petgraph::visit::EdgeRef;
        let ports = self.nodes.node_weight(node).map_or(0, |n| n.inputs.len());
        let mut out = vec![None; ports];
        for e in self.nodes.edges_directed(node, petgraph::Direction::Incoming) {
            if let Some(slot) = out.get_mut(usize::from(e.weight().to_port)) {
                slot.get_or_insert((e.source(), *e.weight()));
            }
        }
        out
    }

    /// Whether some output port of `node` feeds two or more edges.
    pub fn fans_out(&self, node: NodeIndex) -> bool {
        let mut seen = std::collections::HashSet::new();
        self.nodes
            .edges_directed(node, petgraph::Direction::Outgoing)
            .any(|e| !seen.insert(petgraph::visit::EdgeRef::weight(&e).from_port))
    }

    pub fn input_edge(&self, node: NodeIndex, port: u16) -> Option<(NodeIndex, Edge)> {
        use petgraph::visit::EdgeRef;
        self.nodes
            .edges_directed(node, petgraph::Direction::Incoming)
            .find(|e| e.weight().to_port == port)
            .map(|e| (e.source(), *e.weight()))
    }
}
