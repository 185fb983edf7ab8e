//! Routing chains at load (`ExecConfig::chain_routes`): connected `phi`, `cond`, `switch`
//! and `isu` nodes become one node of the program, which runs their ops in turn on each
//! message (`ops::chain`). These nodes only edit or read a message's state; each costs a
//! worker step per message (queueing, routing, credits), and a recursion passes every
//! value through several of them per tree node and again backward: Tree-LSTM's `(h, c)`
//! go through `phi`, `cond`, two `isu`, `switch` and an `isu` at the call site, two
//! thirds of a tree's messages.
//!
//! A chain grows from a root along edges that are the only consumer of their port: a
//! routing node joins the chain of its producer when it has one input, runs on the same
//! worker, and its fanned-out ports (if any) sum their gradients under the same key as
//! the root's (the worker sums a port's gradients under its node's key; a node that sums
//! under another key runs by itself). The root may
//! have several inputs (a `phi`); they are the chain's. Every other output port of a
//! member is an output of the chain, in the order met walking the chain from the root,
//! and its consumer now reads the chain's port. The chain keeps the root's index (its
//! producers see no change); the other members leave the table.

use crate::ops::{ChainSpec, Next};
use crate::program::{ExecOp, NodeInfo};
use amp_ir::Op;
use std::sync::Arc;

/// Replaces every chain of two or more routing nodes in `nodes` by one node; returns how
/// many chains were made.
pub(crate) fn compose(nodes: &mut [Option<NodeInfo>]) -> usize {
    let roots: Vec<u32> =
        nodes.iter().flatten().filter(|n| routing(n) && !joins_producer(nodes, n)).map(|n| n.index).collect();
    let mut count = 0;
    for root in roots {
        if let Some(spec) = plan_chain(nodes, root) {
            apply(nodes, spec);
            count += 1;
        }
    }
    count
}

/// A node a chain can hold: a routing op, no replica.
fn routing(node: &NodeInfo) -> bool {
    let op = matches!(node.op, ExecOp::Ir(Op::Phi { .. } | Op::Cond { .. } | Op::Switch { .. } | Op::Isu { .. }));
    op && node.replicas.is_empty() && node.replica_of.is_none()
}

/// Whether a routing node may join its producer's chain (see the module doc): it has one
/// input, and is the only consumer of a routing node's port on the same worker.
fn joins_producer(nodes: &[Option<NodeInfo>], node: &NodeInfo) -> bool {
    let [(producer, port)] = node.producers.as_slice() else { return false };
    let Some(p) = nodes.get(*producer as usize).and_then(Option::as_ref) else { return false };
    let only_consumer = p.consumers.get(usize::from(*port)).is_some_and(|c| c.len() == 1);
    *producer != node.index && routing(node) && routing(p) && p.worker == node.worker && only_consumer
}

/// The chain grown from `root`, or none when nothing joins it.
fn plan_chain(nodes: &[Option<NodeInfo>], root: u32) -> Option<ChainSpec> {
    let node = |i: u32| nodes.get(i as usize).and_then(Option::as_ref);
    let mut members = vec![node(root)?.clone()];
    let mut next: Vec<Vec<Next>> = Vec::new();
    let mut parent = vec![None];
    let mut exits = Vec::new();
    let mut at = 0;
    while at < members.len() {
        let mut ports = Vec::new();
        let outputs = members[at].consumers.clone();
        for (port, consumers) in outputs.iter().enumerate() {
            let port = u16::try_from(port).ok()?;
            let joining = match consumers.as_slice() {
                // The chain's node sums a fanned-out port's gradients under the root's
                // key: a node summing under another stays out (and runs by itself).
                [(c, 0)] => node(*c).filter(|c| {
                    let fanned = c.consumers.iter().any(|list| list.len() > 1);
                    joins_producer(nodes, c) && (!fanned || c.fan_in_key == members[0].fan_in_key)
                }),
                _ => None,
            };
            match joining {
                // A node whose producer is a member is reached once, from that member.
                Some(c) if !members.iter().any(|m| m.index == c.index) => {
                    ports.push(Next::Member(members.len()));
                    parent.push(Some((at, port)));
                    members.push(c.clone());
                }
                _ => {
                    ports.push(Next::Exit(u16::try_from(exits.len()).ok()?));
                    exits.push((at, port));
                }
            }
        }
        next.push(ports);
        at += 1;
    }
    (members.len() >= 2).then_some(ChainSpec { members, next, parent, exits })
}

fn apply(nodes: &mut [Option<NodeInfo>], spec: ChainSpec) {
    let Some(root) = spec.members.first().cloned() else { return };
    let mut outputs = Vec::new();
    let mut consumers = Vec::new();
    for &(member, port) in &spec.exits {
        let m = &spec.members[member];
        outputs.push(m.outputs.get(usize::from(port)).cloned().unwrap_or(amp_ir::PayloadTy::Unit));
        consumers.push(m.consumers.get(usize::from(port)).cloned().unwrap_or_default());
    }
    for (exit, list) in consumers.iter().enumerate() {
        for &(consumer, port) in list {
            if let Some(slot) = nodes
                .get_mut(consumer as usize)
                .and_then(Option::as_mut)
                .and_then(|n| n.producers.get_mut(usize::from(port)))
            {
                *slot = (root.index, exit as u16);
            }
        }
    }
    for m in &spec.members[1..] {
        if let Some(slot) = nodes.get_mut(m.index as usize) {
            *slot = None;
        }
    }
    let members_text: Vec<String> = spec.members.iter().map(|m| format!("%{}", m.index)).collect();
    let label = format!("{}: {}", root.label, members_text.join(" "));
    if let Some(slot) = nodes.get_mut(root.index as usize) {
        *slot = Some(NodeInfo { op: ExecOp::Chain(Arc::new(spec)), label, outputs, consumers, ..root });
    }
}
