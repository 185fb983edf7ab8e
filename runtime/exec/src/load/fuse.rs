//! Fusion at load (`ExecConfig::jit`): each fusion group that `amp_jit` compiles becomes
//! one node of the program, in the place of the group's nodes (which leave the table).
//!
//! The new node gets a fresh index past the graph's, the key of the group, one input port
//! per kernel input and one output port per kernel output, and the worker of the group's
//! first node (placement happens before fusion, on the graph's nodes). The neighbours are
//! rewired: a source port that fed the group through several edges now feeds it once (the
//! kernel's input gradient is already the sum over those edges, so the source counts the
//! group as one consumer when it sums gradients), and each consumer outside the group
//! reads the fused node's output port. Groups the JIT refuses, groups of batch payloads
//! with a scalar output (a batch of no rows would leave it undefined), and a group wired
//! directly to a group fused before it run node by node as without the JIT. A group of
//! batch payloads (a batched map's elementwise chain) runs each message's rows in one
//! kernel call.
//!
//! A `split` whose every output feeds only the group (Tree-LSTM's gates, a GRU's gates in
//! GGSNN's batched map) joins it too (which splits do is `amp_ir::units::fused_units`'s
//! decision, the planner's too): its kernel inputs become slices of one input port, the
//! split's own input, and the gradients of those slices go back as one message (zeros
//! where an output of the split is unused). In a group of batches a slice is a column
//! block of every row (`[offset, offset + width)` of rows as wide as the port), which the
//! fused node gathers for the kernel call. A split costs a message per part each way plus
//! a join of the gradients; in Tree-LSTM they were a sixth of every tree's messages.

use super::program::{ExecOp, FusedGroup, InputSlice, NodeInfo};
use amp_ir::units::{fused_units, FusedUnit};
use amp_ir::verify::Verified;
use amp_ir::{FieldId, PayloadTy};
use amp_jit::{compile_groups, FusionGroup, KernelCache};
use std::cell::RefCell;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;

thread_local! {
    /// Kernels compiled on this thread, shared by every program it loads (each distinct
    /// kernel is compiled once per thread; their code lives as long as the process).
    static CACHE: RefCell<Option<KernelCache>> = const { RefCell::new(None) };
}

/// Replaces every fusable group of `graph` in `nodes` by one fused node; returns how many.
pub(crate) fn fuse(nodes: &mut Vec<Option<NodeInfo>>, graph: &Verified) -> usize {
    let compiled = CACHE.with(|cache| {
        let mut cache = cache.borrow_mut();
        if cache.is_none() {
            // A host Cranelift cannot compile for runs everything node by node.
            *cache = KernelCache::new().ok();
        }
        cache.as_mut().map(|cache| compile_groups(graph, cache))
    });
    let Some(compiled) = compiled else { return 0 };
    let units: HashMap<u32, FusedUnit> = fused_units(graph).into_iter().map(|u| (u.group, u)).collect();
    let mut fused_members: HashSet<u32> = HashSet::new();
    let mut count = 0;
    for group_kernel in compiled.kernels {
        let kernel = group_kernel.kernel;
        let Some(unit) = units.get(&group_kernel.group.id) else { continue };
        if let Some(plan) = plan_group(nodes, &group_kernel.group, unit, &fused_members) {
            fused_members.extend(plan.members.iter().copied());
            apply(nodes, group_kernel.group, plan, kernel);
            count += 1;
        }
    }
    count
}

/// The fused node's wiring, worked out before anything changes.
struct GroupPlan {
    /// The graph nodes the fused node replaces: the group's, then the splits it absorbs.
    members: Vec<u32>,
    inputs: Vec<PayloadTy>,
    outputs: Vec<PayloadTy>,
    producers: Vec<(u32, u16)>,
    slices: Vec<InputSlice>,
    consumers: Vec<Vec<(u32, u16)>>,
    state_from: Vec<usize>,
    worker: usize,
    batch: bool,
}

fn plan_group(
    nodes: &[Option<NodeInfo>],
    group: &FusionGroup,
    unit: &FusedUnit,
    fused: &HashSet<u32>,
) -> Option<GroupPlan> {
    let batch = matches!(group.vector_type, Some(PayloadTy::Batch(_)));
    let node = |i: u32| nodes.get(i as usize).and_then(Option::as_ref);
    if batch {
        let scalar_output = group.outputs.iter().any(|o| {
            node(o.index() as u32).and_then(|n| n.outputs.first()).is_some_and(|t| !matches!(t, PayloadTy::Batch(_)))
        });
        if scalar_output {
            return None;
        }
    }
    let mut members: Vec<u32> = group.nodes.iter().map(|n| n.index() as u32).collect();
    let mut absorbed: Vec<u32> = Vec::new();
    let worker = node(*members.first()?)?.worker;
    let kernel_inputs: Vec<(u32, u16)> = group.inputs.iter().map(|p| (p.node.index() as u32, p.port)).collect();
    let mut inputs = Vec::new();
    let mut producers = Vec::new();
    let mut slices = Vec::new();
    for &(source, out) in &kernel_inputs {
        if fused.contains(&source) {
            return None;
        }
        let ((from, from_port), offset) = match absorbable_split(nodes, source, unit, fused) {
            Some((producer, width)) => {
                if !absorbed.contains(&source) {
                    absorbed.push(source);
                }
                (producer, usize::from(out) * width)
            }
            None => ((source, out), 0),
        };
        let port = match producers.iter().position(|&p| p == (from, from_port)) {
            Some(port) => port,
            None => {
                inputs.push(node(from)?.outputs.get(usize::from(from_port))?.clone());
                producers.push((from, from_port));
                producers.len() - 1
            }
        };
        slices.push(InputSlice { port, offset });
    }
    let member = |i: u32| members.contains(&i);
    let mut outputs = Vec::new();
    let mut consumers = Vec::new();
    let mut state_from = Vec::new();
    for &out in &group.outputs {
        let out = out.index() as u32;
        let info = node(out)?;
        let outside: Vec<(u32, u16)> = info.consumers.first()?.iter().copied().filter(|(c, _)| !member(*c)).collect();
        if outside.iter().any(|(c, _)| fused.contains(c)) {
            return None;
        }
        outputs.push(info.outputs.first()?.clone());
        consumers.push(outside);
        // Follow input port 0 back to the group's edge (the group has no cycle); a split
        // passes its input's state on, so an absorbed one leads to its input's port.
        let mut at = out;
        let mut from = None;
        for _ in 0..=members.len() {
            let producer = *node(at)?.producers.first()?;
            if member(producer.0) {
                at = producer.0;
            } else {
                from = kernel_inputs.iter().position(|&p| p == producer).and_then(|i| slices.get(i)).map(|s| s.port);
                break;
            }
        }
        state_from.push(from?);
    }
    members.extend(absorbed);
    Some(GroupPlan { members, inputs, outputs, producers, slices, consumers, state_from, worker, batch })
}

/// When `source` is a split the unit absorbs, its input port and the width of its parts:
/// the group can read the parts as slices of that port. Not, by this executor's own
/// rewiring, when the split's producer is a member of a group fused before, or the split
/// has replicas.
fn absorbable_split(
    nodes: &[Option<NodeInfo>],
    source: u32,
    unit: &FusedUnit,
    fused: &HashSet<u32>,
) -> Option<((u32, u16), usize)> {
    let absorbed = unit.split(source)?;
    let split = nodes.get(source as usize)?.as_ref()?;
    let &[producer] = split.producers.as_slice() else { return None };
    if fused.contains(&producer.0) || !split.replicas.is_empty() || split.replica_of.is_some() {
        return None;
    }
    Some((producer, absorbed.width))
}

fn apply(nodes: &mut Vec<Option<NodeInfo>>, group: FusionGroup, plan: GroupPlan, kernel: Arc<amp_jit::Kernel>) {
    let index = nodes.len() as u32;
    for (i, &(source, port)) in plan.producers.iter().enumerate() {
        if let Some(list) =
            nodes.get_mut(source as usize).and_then(Option::as_mut).and_then(|n| n.consumers.get_mut(usize::from(port)))
        {
            list.retain(|(c, _)| !plan.members.contains(c));
            list.push((index, i as u16));
            list.sort_unstable();
        }
    }
    for (j, list) in plan.consumers.iter().enumerate() {
        for &(consumer, port) in list {
            if let Some(slot) = nodes
                .get_mut(consumer as usize)
                .and_then(Option::as_mut)
                .and_then(|n| n.producers.get_mut(usize::from(port)))
            {
                *slot = (index, j as u16);
            }
        }
    }
    // Errors of the fused node point at its first member's expression.
    let source = plan.members.first().and_then(|&m| nodes.get(m as usize)?.as_ref()).map(|n| n.source.clone());
    for &m in &plan.members {
        if let Some(slot) = nodes.get_mut(m as usize) {
            *slot = None;
        }
    }
    let mut fan_in_key: Vec<FieldId> = group.key.clone();
    fan_in_key.sort_unstable();
    fan_in_key.dedup();
    if fan_in_key.is_empty() {
        fan_in_key.push(FieldId(0));
    }
    let members_text: Vec<String> = plan.members.iter().map(|m| format!("%{m}")).collect();
    let port_widths = plan.inputs.iter().map(|t| usize::try_from(t.elements()).unwrap_or(0)).collect();
    let fused = FusedGroup {
        kernel,
        members: plan.members,
        slices: plan.slices,
        port_widths,
        state_from: plan.state_from,
        batch: plan.batch,
    };
    nodes.push(Some(NodeInfo {
        index,
        op: ExecOp::Fused(Arc::new(fused)),
        label: format!("group {}: {}", group.id, members_text.join(" ")),
        inputs: plan.inputs,
        outputs: plan.outputs,
        key: group.key,
        fan_in_key,
        consumers: plan.consumers,
        producers: plan.producers,
        // A kernel computes every input's gradient.
        grad_inputs: Vec::new(),
        source: source.unwrap_or_default(),
        group: None,
        trip_limit: None,
        worker: plan.worker,
        replicas: Vec::new(),
        replica_of: None,
        forward_only: false,
        epilogue: None,
    }));
}
