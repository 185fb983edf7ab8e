//! The executable form of a verified graph: nodes in a dense table with their consumers
//! and producers resolved, parameter groups (the tensors each Ppt owns), and the worker of
//! every node.

use crate::config::{ExecConfig, NodeSelector, Placement};
use crate::error::{ExecError, OpError};
use amp_ir::verify::Verified;
use amp_ir::{FieldId, Graph, Op, PayloadTy};
use amp_jit::Kernel;
use amp_params::ParamSet;
use petgraph::visit::{EdgeRef, NodeIndexable};
use std::collections::BTreeMap;
use std::sync::Arc;

/// What a node runs: an op of the graph, a fusion group's kernel in place of the
/// group's nodes, or a chain of routing nodes in place of them (see `crate::load::chain`).
#[derive(Clone, Debug)]
pub(crate) enum ExecOp {
    Ir(Op),
    Fused(Arc<FusedGroup>),
    Chain(Arc<ChainSpec>),
}

impl ExecOp {
    pub fn keyword(&self) -> &'static str {
        match self {
            ExecOp::Ir(op) => op.keyword(),
            ExecOp::Fused(_) => "fused",
            ExecOp::Chain(_) => "chain",
        }
    }
}

/// A fusion group as the executor runs it.
#[derive(Debug)]
pub(crate) struct FusedGroup {
    pub kernel: Arc<Kernel>,
    /// The graph nodes the group replaces: its ops in kernel order, then the splits it
    /// absorbed (see `crate::load::fuse`).
    pub members: Vec<u32>,
    /// Per kernel input, where its row lies in the input ports' payloads.
    pub slices: Vec<InputSlice>,
    /// f32s per row of each input port.
    pub port_widths: Vec<usize>,
    /// Per output, the input port whose state the output's messages carry: the one reached
    /// by following input port 0 back from the output node (the state a node-by-node run
    /// would give it: unary, binary and split ops pass on their first input's state).
    pub state_from: Vec<usize>,
    /// Whether the group's vectors are batches (a batched map's body): a message then
    /// holds any number of rows, all of one kernel call, a scalar input repeated per row.
    pub batch: bool,
}

/// Kernel input `i` reads its row at `offset` in input port `port`'s payload: the whole
/// payload, or one part of an absorbed split's input.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct InputSlice {
    pub port: usize,
    pub offset: usize,
}

/// Where a member's output port leads inside the chain.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Next {
    /// To the member with this index (on its input port 0).
    Member(usize),
    /// Out of the chain, on the chain's output port with this index.
    Exit(u16),
}

/// The members of a chain, the root first, and how they are wired.
#[derive(Debug)]
pub(crate) struct ChainSpec {
    /// The graph nodes, as they were before the composition.
    pub members: Vec<NodeInfo>,
    /// Per member, per output port: where a forward message leaving there goes.
    pub next: Vec<Vec<Next>>,
    /// Per member: the member feeding it and that member's output port (none for the
    /// root, whose input ports are the chain's).
    pub parent: Vec<Option<(usize, u16)>>,
    /// Per output port of the chain: the member and its output port.
    pub exits: Vec<(usize, u16)>,
}

impl ChainSpec {
    /// The graph nodes the chain runs, root first.
    pub fn member_indices(&self) -> Vec<u32> {
        self.members.iter().map(|m| m.index).collect()
    }
}

/// One node as the workers see it.
#[derive(Clone, Debug)]
pub(crate) struct NodeInfo {
    pub index: u32,
    pub op: ExecOp,
    pub label: String,
    pub inputs: Vec<PayloadTy>,
    pub outputs: Vec<PayloadTy>,
    pub key: Vec<FieldId>,
    /// What the gradients of a fanned-out port are summed under: the key and the fields
    /// the node writes (so the element messages of a `flatmap` or `ungroup`, which share
    /// the node's key, stay apart), or the instance when there are none.
    pub fan_in_key: Vec<FieldId>,
    /// Per output port, the `(node, input port)` of every consumer edge.
    pub consumers: Vec<Vec<(u32, u16)>>,
    /// Per input port, the `(node, output port)` feeding it.
    pub producers: Vec<(u32, u16)>,
    /// Per input port, whether a gradient sent back through it can reach a parameter (see
    /// `Graph::parameter_dependent`); a port past the end may. A Linear op skips the input
    /// gradient's product where none can (a data input's) and sends zeros.
    pub grad_inputs: Vec<bool>,
    /// Where the node's expression is in the model, `file:line:col` (empty when the graph
    /// does not say), for errors.
    pub source: String,
    /// The parameter group of a Ppt.
    pub group: Option<usize>,
    /// For the `isu` that steps a loop counter: the most trips one instance may make
    /// (`ExecConfig::max_trips`), so a `while` that never ends is an error, not a run that
    /// trains forever while its messages keep the stall watchdog quiet.
    pub trip_limit: Option<u64>,
    pub worker: usize,
    /// A node with replicas: the nodes that serve its messages, itself first (see
    /// `replicas`); empty otherwise.
    pub replicas: Vec<u32>,
    /// A replica: the node it copies.
    pub replica_of: Option<u32>,
    /// None of the graph nodes it runs reaches a loss (`Graph::reaches_loss`): a
    /// prediction training does not need, run forward only (`sched::worker`'s dispatch).
    pub forward_only: bool,
    /// A linear's epilogue: the activation it runs on its own output (`crate::load::epilogue`).
    pub epilogue: Option<Activation>,
}

/// An elementwise activation a linear runs on its output, and the graph node it was.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Activation {
    pub node: u32,
    pub f: amp_ir::UnaryFn,
}

/// The tensors a Ppt prefix names (`cell` → `cell.weight`, `cell.bias`), who updates them
/// and how often.
#[derive(Clone, Debug)]
pub(crate) struct GroupInfo {
    pub prefix: String,
    /// Indices into the parameter set: the weight, then the bias when there is one.
    pub tensors: Vec<usize>,
    /// The nodes using the group, in index order.
    pub nodes: Vec<u32>,
    /// The worker that counts finished instances for the group and applies its updates.
    pub owner: usize,
    pub min_update_frequency: u64,
    /// The most updates between the version a gradient's forward read and the one it is
    /// applied to (`None`: unbounded; see `ExecConfig::max_staleness`).
    pub max_staleness: Option<u64>,
    /// A replica's group: the group it copies (which gathers its gradients and gives it
    /// its values); the replica's node is its only node.
    pub master: Option<usize>,
    /// The groups of the replicas of this group's nodes.
    pub replica_groups: Vec<usize>,
    /// Never updated (`ExecConfig::frozen`; a replica's as its master's).
    pub frozen: bool,
    /// Copies of the graph split over processes (`load::copies::split_over_processes`),
    /// on a master: per process, the worker that updates it there, after an all-reduce of
    /// every process's gradients (`sched::worker::ring`); empty otherwise.
    pub ring: Vec<usize>,
}

#[derive(Clone, Debug)]
pub(crate) struct Program {
    pub nodes: Vec<Option<NodeInfo>>,
    /// Each copy's source (`ExecConfig::copies`; see `crate::load::copies`), copy 0's
    /// first: never empty.
    pub sources: Vec<u32>,
    /// The workers of one copy: `workers / copies`.
    pub stage_workers: usize,
    pub groups: Vec<GroupInfo>,
    pub workers: usize,
    pub state_len: usize,
    /// The sink whose output `infer` returns: the one named `forward`, else the first.
    pub main_sink: Option<u32>,
}

impl Program {
    /// Checks the parameters against the verified graph, and places its nodes.
    pub fn new(graph: &Verified, params: &ParamSet, config: &ExecConfig) -> Result<Program, ExecError> {
        config.check().map_err(|message| ExecError::Config { message })?;
        check_params(graph, params)?;
        let bound = graph.nodes.node_bound();
        let mut nodes: Vec<Option<NodeInfo>> = vec![None; bound];
        let mut source = None;
        let dependent = graph.parameter_dependent();
        for index in graph.nodes.node_indices() {
            let Some(node) = graph.nodes.node_weight(index) else { continue };
            let i = index.index();
            let mut consumers = vec![Vec::new(); node.outputs.len()];
            for edge in graph.nodes.edges_directed(index, petgraph::Direction::Outgoing) {
                if let Some(list) = consumers.get_mut(usize::from(edge.weight().from_port)) {
                    list.push((edge.target().index() as u32, edge.weight().to_port));
                }
            }
            consumers.iter_mut().for_each(|c| c.sort_unstable());
            let mut producers = vec![(u32::MAX, 0u16); node.inputs.len()];
            for edge in graph.nodes.edges_directed(index, petgraph::Direction::Incoming) {
                if let Some(slot) = producers.get_mut(usize::from(edge.weight().to_port)) {
                    *slot = (edge.source().index() as u32, edge.weight().from_port);
                }
            }
            if matches!(node.op, Op::Source) {
                source = Some(i as u32);
            }
            let grad_inputs =
                producers.iter().map(|&(p, _)| dependent.get(p as usize).copied().unwrap_or(true)).collect();
            let location = node.loc.map_or_else(String::new, |loc| {
                let file = graph.files.get(loc.file as usize).map_or("?", String::as_str);
                format!("{file}:{}:{}", loc.line, loc.col)
            });
            nodes[i] = Some(NodeInfo {
                index: i as u32,
                op: ExecOp::Ir(node.op.clone()),
                label: node.label.clone(),
                inputs: node.inputs.clone(),
                outputs: node.outputs.clone(),
                key: node.key.clone(),
                fan_in_key: node.fan_in_key(),
                consumers,
                producers,
                grad_inputs,
                source: location,
                group: None,
                trip_limit: match &node.op {
                    Op::Isu { field, .. }
                        if graph.field(*field).is_some_and(|f| f.role == amp_ir::FieldRole::Counter) =>
                    {
                        Some(config.max_trips)
                    }
                    _ => None,
                },
                worker: 0,
                replicas: Vec::new(),
                replica_of: None,
                forward_only: false,
                epilogue: None,
            });
        }
        // The verifier guarantees exactly one source.
        let source = source.ok_or_else(|| ExecError::Unverified { errors: vec!["no source".into()] })?;
        let stage_workers = config.workers / config.copies.max(1);
        place(&mut nodes, graph, config, stage_workers)?;
        if config.jit {
            crate::load::fuse::fuse(&mut nodes, graph);
        }
        if config.linear_epilogues {
            crate::load::epilogue::absorb(&mut nodes);
        }
        if config.chain_routes {
            crate::load::chain::compose(&mut nodes);
        }
        mark_forward_only(&mut nodes, &graph.reaches_loss());
        let mut groups = group_params(&mut nodes, graph, params, config);
        super::replicas::replicate(&mut nodes, &mut groups, config)?;
        check_replica_bounds(&groups, config)?;
        let sources = super::copies::copy_graph(&mut nodes, &mut groups, source, config.copies, stage_workers);
        // Sinks are neither fused nor chained: they keep their graph index.
        let main_sink = graph.main_sink().map(|i| i.index() as u32);
        Ok(Program {
            nodes,
            sources,
            stage_workers,
            groups,
            workers: config.workers,
            state_len: graph.state.len(),
            main_sink,
        })
    }

    pub fn node(&self, index: u32) -> Option<&NodeInfo> {
        self.nodes.get(index as usize).and_then(Option::as_ref)
    }

    /// Copy 0's source: the graph's.
    pub fn source(&self) -> u32 {
        self.sources.first().copied().unwrap_or(0)
    }

    /// The worker of copy 0's source node, which admits the first window.
    pub fn source_worker(&self) -> usize {
        self.copy_worker(0)
    }

    /// Copies of the whole graph (`ExecConfig::copies`).
    pub fn copies(&self) -> usize {
        self.sources.len()
    }

    /// The worker of copy `copy`'s source, which admits to that copy.
    pub fn copy_worker(&self, copy: usize) -> usize {
        self.source_of(copy).1
    }

    /// Copy `copy`'s source node (copy 0's when there is no such copy) and its worker.
    fn source_of(&self, copy: usize) -> (u32, usize) {
        let source = self.sources.get(copy).copied().unwrap_or(self.source());
        (source, self.node(source).map_or(0, |n| n.worker))
    }

    /// The source an instance is admitted at, and its worker: with copies of the graph,
    /// that of the copy of worker `at`, which admits it (where an instance just ended),
    /// or without one, copy `instance mod copies` (see `crate::load::copies`).
    pub fn copy_source(&self, instance: usize, at: Option<usize>) -> (u32, usize) {
        let copy = match at {
            _ if self.sources.len() < 2 => 0,
            Some(worker) => amp_ir::placement::copy_of_worker(worker, self.stage_workers),
            None => instance % self.sources.len(),
        };
        self.source_of(copy)
    }

    /// The graph node a node runs: a replica's or a copy's original, else itself.
    pub fn original(&self, index: u32) -> u32 {
        self.node(index).and_then(|n| n.replica_of).unwrap_or(index)
    }

    /// The one worker that owns every parameter group but replicas, and so hears of every
    /// instance's end and applies every update: with every node on one worker, that
    /// worker; with copies of the graph in one process, copy 0's owner. `None` when the
    /// groups have several owners, or there are none on several workers.
    pub fn sole_owner(&self) -> Option<usize> {
        if self.on_one_worker() {
            return Some(self.source_worker());
        }
        let mut owners = self.groups.iter().filter(|g| g.master.is_none()).map(|g| g.owner);
        let first = owners.next()?;
        owners.all(|o| o == first).then_some(first)
    }

    /// Whether every node (replicas included) runs on one worker, which then also owns
    /// every parameter group: a plan that keeps a model on one of several workers.
    pub fn on_one_worker(&self) -> bool {
        let mut workers = self.nodes.iter().flatten().map(|n| n.worker);
        let first = workers.next();
        workers.all(|w| Some(w) == first)
    }

    /// `label (%N)`, for traces and messages.
    pub fn node_name(&self, index: u32) -> String {
        match self.node(index) {
            Some(n @ NodeInfo { replica_of: Some(of), .. }) => {
                format!("{} {} (%{index}, replica of %{of})", n.op.keyword(), n.label)
            }
            Some(n) if !n.label.is_empty() => format!("{} {} (%{index})", n.op.keyword(), n.label),
            Some(n) => format!("{} (%{index})", n.op.keyword()),
            None => format!("%{index}"),
        }
    }
}

impl NodeInfo {
    /// The graph nodes it runs: a fused group's or a chain's members, else itself and its
    /// epilogue's activation.
    pub fn graph_nodes(&self) -> Vec<u32> {
        match &self.op {
            ExecOp::Fused(group) => group.members.clone(),
            ExecOp::Chain(spec) => spec.member_indices(),
            ExecOp::Ir(_) => std::iter::once(self.index).chain(self.epilogue.map(|e| e.node)).collect(),
        }
    }
}

#[cfg(test)]
impl NodeInfo {
    /// Node `index` running `op` on worker 0 with `f32[2]` ports, fed by `producers`,
    /// feeding `consumers` (per output port), keyed by field 0: for the load passes' tests.
    pub fn for_test(index: u32, op: Op, producers: &[(u32, u16)], consumers: &[&[(u32, u16)]]) -> NodeInfo {
        let ty = PayloadTy::F32(vec![2]);
        NodeInfo {
            index,
            op: ExecOp::Ir(op),
            label: format!("n{index}"),
            inputs: vec![ty.clone(); producers.len()],
            outputs: vec![ty; consumers.len()],
            key: vec![FieldId(0)],
            fan_in_key: vec![FieldId(0)],
            consumers: consumers.iter().map(|c| c.to_vec()).collect(),
            producers: producers.to_vec(),
            grad_inputs: Vec::new(),
            source: String::new(),
            group: None,
            trip_limit: None,
            worker: 0,
            replicas: Vec::new(),
            replica_of: None,
            forward_only: false,
            epilogue: None,
        }
    }
}

/// Marks the nodes none of whose graph nodes reaches a loss.
fn mark_forward_only(nodes: &mut [Option<NodeInfo>], reaches_loss: &[bool]) {
    for node in nodes.iter_mut().flatten() {
        let members = node.graph_nodes();
        node.forward_only = !members.iter().any(|&m| reaches_loss.get(m as usize).copied().unwrap_or(true));
    }
}

/// The graph's parameters and the set's must agree in names and shapes, in order.
fn check_params(graph: &Graph, params: &ParamSet) -> Result<(), ExecError> {
    let expected = amp_params::ParamSpec::of_graph(graph);
    if expected.len() != params.len() {
        let message = format!("the graph has {} parameter tensors, the set {}", expected.len(), params.len());
        return Err(ExecError::Params { message });
    }
    for (e, (found, _)) in expected.iter().zip(params.iter()) {
        if e.name != found.name || e.shape != found.shape {
            let message =
                format!("expected `{}` {:?} where the set has `{}` {:?}", e.name, e.shape, found.name, found.shape);
            return Err(ExecError::Params { message });
        }
    }
    Ok(())
}

/// Places the nodes on the `workers` of one copy of the graph (all of them without copies).
fn place(nodes: &mut [Option<NodeInfo>], graph: &Graph, config: &ExecConfig, workers: usize) -> Result<(), ExecError> {
    match &config.placement {
        Placement::Explicit(map) => {
            for node in nodes.iter_mut().flatten() {
                match map.get(node.index as usize) {
                    Some(&w) if w < workers => node.worker = w,
                    Some(&w) => {
                        let message = format!("node %{} is placed on worker {w} of {workers}", node.index);
                        return Err(ExecError::Config { message });
                    }
                    None => {
                        let message = format!("the placement has no worker for node %{}", node.index);
                        return Err(ExecError::Config { message });
                    }
                }
            }
        }
        // The rules are `amp_ir::placement`'s, which the planner follows too.
        Placement::RoundRobin => follow(nodes, &amp_ir::placement::round_robin(graph, workers)),
        Placement::Contiguous => follow(nodes, &amp_ir::placement::contiguous(graph, workers)),
    }
    Ok(())
}

/// Puts each node on the worker `placed` gives its index.
fn follow(nodes: &mut [Option<NodeInfo>], placed: &[Option<usize>]) {
    for node in nodes.iter_mut().flatten() {
        node.worker = placed.get(node.index as usize).copied().flatten().unwrap_or(0);
    }
}

/// One group per Ppt prefix, owned by the worker of its owning node
/// (`amp_ir::placement::group_owners`, as the planner predicts).
fn group_params(
    nodes: &mut [Option<NodeInfo>],
    graph: &Graph,
    params: &ParamSet,
    config: &ExecConfig,
) -> Vec<GroupInfo> {
    let owners: BTreeMap<&str, usize> = amp_ir::placement::group_owners(graph)
        .into_iter()
        .filter_map(|(prefix, i)| Some((prefix, nodes.get(i)?.as_ref()?.worker)))
        .collect();
    let mut groups: Vec<GroupInfo> = Vec::new();
    let mut overrides: Vec<Option<u64>> = Vec::new();
    for node in nodes.iter_mut().flatten() {
        let ExecOp::Ir(op) = &node.op else { continue };
        let Some(prefix) = op.param() else { continue };
        let overridden = config.update_overrides.iter().filter(|(sel, _)| match sel {
            NodeSelector::Id(id) => *id == node.index,
            NodeSelector::Label(label) => *label == node.label,
        });
        let k = overridden.map(|(_, k)| *k).min();
        let g = match groups.iter().position(|g| g.prefix == prefix) {
            Some(g) => g,
            None => {
                groups.push(GroupInfo {
                    prefix: prefix.to_string(),
                    tensors: Vec::new(),
                    nodes: Vec::new(),
                    owner: owners.get(prefix).copied().unwrap_or(node.worker),
                    min_update_frequency: config.min_update_frequency,
                    max_staleness: config.max_staleness,
                    master: None,
                    replica_groups: Vec::new(),
                    frozen: config.frozen.iter().any(|f| f == prefix),
                    ring: Vec::new(),
                });
                groups.len() - 1
            }
        };
        let group = &mut groups[g];
        for name in op.param_tensors() {
            if let Some(i) = params.index(&name) {
                if !group.tensors.contains(&i) {
                    group.tensors.push(i);
                }
            }
        }
        group.nodes.push(node.index);
        if let Some(k) = k {
            overrides.resize(groups.len(), None);
            overrides[g] = Some(overrides[g].map_or(k, |old: u64| old.min(k)));
        }
        node.group = Some(g);
    }
    for (group, k) in groups.iter_mut().zip(overrides) {
        if let Some(k) = k {
            group.min_update_frequency = k;
        }
    }
    staleness_bounds(&mut groups, nodes, config);
    groups
}

/// Replicas read their master's values as of the last sync, which comes every
/// `replica_sync` updates and just after the update that calls for it: a read can be
/// `replica_sync` updates old when it is made, so a smaller bound cannot hold (the group
/// would defer the very update whose sync refreshes the replicas, or apply a gradient
/// staler than the bound).
fn check_replica_bounds(groups: &[GroupInfo], config: &ExecConfig) -> Result<(), ExecError> {
    for group in groups.iter().filter(|g| g.master.is_none() && !g.replica_groups.is_empty()) {
        if let Some(k) = group.max_staleness.filter(|&k| k < config.replica_sync) {
            let message = format!(
                "`{}` has replicas synced every {} updates and a staleness bound of {k}: a replica's reads \
                 can be {} updates old; bound it at {} or more",
                group.prefix, config.replica_sync, config.replica_sync, config.replica_sync
            );
            return Err(ExecError::Config { message });
        }
    }
    Ok(())
}

/// Each group's staleness bound: the layer-wise schedule (when asked) over the global
/// bound, then the per-node overrides (the smallest of a group's nodes').
fn staleness_bounds(groups: &mut [GroupInfo], nodes: &[Option<NodeInfo>], config: &ExecConfig) {
    if config.staleness_layerwise {
        let base = config.max_staleness.unwrap_or(0);
        let mut order: Vec<usize> = (0..groups.len()).collect();
        // Nearest the loss first: the group whose last node comes latest.
        order.sort_by_key(|&g| std::cmp::Reverse(groups[g].nodes.last().copied().unwrap_or(0)));
        for (depth, g) in order.into_iter().enumerate() {
            groups[g].max_staleness = Some(base.saturating_add(depth as u64));
        }
    }
    for group in groups.iter_mut() {
        let named = config.staleness_overrides.iter().filter(|(sel, _)| {
            // A label names a node (a layer) or the group's parameter prefix (an array).
            group.nodes.iter().any(|&n| match sel {
                NodeSelector::Id(id) => *id == n,
                NodeSelector::Label(label) => {
                    *label == group.prefix
                        || nodes.get(n as usize).and_then(Option::as_ref).is_some_and(|node| node.label == *label)
                }
            })
        });
        if let Some(k) = named.map(|(_, k)| *k).min() {
            group.max_staleness = Some(k);
        }
    }
}

impl ExecError {
    /// `error` of `node` (of the member that failed, for a chain) on `instance`.
    pub(crate) fn at_node(node: &NodeInfo, instance: i64, error: OpError) -> ExecError {
        let (node, error) = match (error, &node.op) {
            (OpError::InChain { member, error }, ExecOp::Chain(spec)) => {
                (spec.members.get(member).unwrap_or(node), *error)
            }
            (error, _) => (node, error),
        };
        ExecError::Node {
            worker: node.worker,
            node: node.index,
            label: node.label.clone(),
            op: node.op.keyword(),
            source: node.source.as_str().into(),
            instance,
            error,
        }
    }
}
