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
//! under another key starts a chain of its own). The root may
//! have several inputs (a `phi`); they are the chain's. Every other output port of a
//! member is an output of the chain, in the order met walking the chain from the root,
//! and its consumer now reads the chain's port. The chain keeps the root's index (its
//! producers see no change); the other members leave the table.

use super::program::{ChainSpec, ExecOp, Next, NodeInfo};
use amp_ir::Op;
use std::collections::HashSet;
use std::sync::Arc;

/// Replaces every chain of two or more routing nodes in `nodes` by one node; returns how
/// many chains were made.
pub(crate) fn compose(nodes: &mut [Option<NodeInfo>]) -> usize {
    let mut roots: Vec<u32> =
        nodes.iter().flatten().filter(|n| routing(n) && !joins_producer(nodes, n)).map(|n| n.index).collect();
    let mut count = 0;
    while let Some(root) = roots.pop() {
        let (spec, kept_out) = plan_chain(nodes, root);
        // A node kept out of its producer's chain starts a chain of its own.
        roots.extend(kept_out);
        if let Some(spec) = spec {
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

/// The chain grown from `root` (none when nothing joins it), and the nodes that would
/// join it but for the key their fanned-out ports sum under.
fn plan_chain(nodes: &[Option<NodeInfo>], root: u32) -> (Option<ChainSpec>, Vec<u32>) {
    let mut kept_out = Vec::new();
    let spec = grow(nodes, root, &mut kept_out);
    (spec.filter(|spec| spec.members.len() >= 2), kept_out)
}

fn grow(nodes: &[Option<NodeInfo>], root: u32, kept_out: &mut Vec<u32>) -> Option<ChainSpec> {
    let node = |i: u32| nodes.get(i as usize).and_then(Option::as_ref);
    let mut members = vec![node(root)?.clone()];
    let mut seen = HashSet::from([root]);
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
                [(c, 0)] => node(*c).filter(|c| joins_producer(nodes, c)),
                _ => None,
            };
            // The chain's node sums a fanned-out port's gradients under the root's key: a
            // node summing under another is kept out (and starts a chain of its own).
            let joining = joining.filter(|c| {
                let fanned = c.consumers.iter().any(|list| list.len() > 1);
                let fits = !fanned || c.fan_in_key == members[0].fan_in_key;
                if !fits {
                    kept_out.push(c.index);
                }
                fits
            });
            match joining {
                // A node whose producer is a member is reached once, from that member.
                Some(c) if seen.insert(c.index) => {
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
    Some(ChainSpec { members, next, parent, exits })
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

#[cfg(test)]
mod tests {
    use super::*;
    use amp_ir::{FieldId, PayloadTy, StateExpr};

    fn isu() -> Op {
        Op::Isu { field: FieldId(1), value: StateExpr::Const(1), inverse: Some(StateExpr::Const(0)) }
    }

    /// Node `index` running `op`, fed by `producers`, feeding `consumers` (per port).
    fn node(index: u32, op: Op, producers: &[(u32, u16)], consumers: &[&[(u32, u16)]]) -> Option<NodeInfo> {
        let ty = PayloadTy::F32(vec![2]);
        Some(NodeInfo {
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
        })
    }

    fn members(nodes: &[Option<NodeInfo>], index: u32) -> Vec<u32> {
        match nodes.get(index as usize).and_then(Option::as_ref).map(|n| &n.op) {
            Some(ExecOp::Chain(spec)) => spec.member_indices(),
            _ => Vec::new(),
        }
    }

    /// %0 → %1 isu → %2 cond, whose port 0 fans out to sinks %3 and %4 and port 1 feeds
    /// %5 isu → %6 isu → sink %7. With %2 summing its fan-out under %1's key, one chain
    /// of five; under another key, %2 starts a chain of its own (%1 is left alone).
    #[test]
    fn a_fanned_out_port_joins_only_under_the_roots_key() {
        let graph = |cond_key: Vec<FieldId>| {
            let mut nodes = vec![
                node(0, Op::Source, &[], &[&[(1, 0)]]),
                node(1, isu(), &[(0, 0)], &[&[(2, 0)]]),
                node(2, Op::Cond { pred: StateExpr::Const(1) }, &[(1, 0)], &[&[(3, 0), (4, 0)], &[(5, 0)]]),
                node(3, Op::Sink { name: "a".into() }, &[(2, 0)], &[]),
                node(4, Op::Sink { name: "b".into() }, &[(2, 0)], &[]),
                node(5, isu(), &[(2, 1)], &[&[(6, 0)]]),
                node(6, isu(), &[(5, 0)], &[&[(7, 0)]]),
                node(7, Op::Sink { name: "c".into() }, &[(6, 0)], &[]),
            ];
            if let Some(cond) = nodes[2].as_mut() {
                cond.fan_in_key = cond_key;
            }
            nodes
        };
        let mut same = graph(vec![FieldId(0)]);
        assert_eq!(compose(&mut same), 1);
        assert_eq!(members(&same, 1), [1, 2, 5, 6]);
        let chain = same[1].as_ref().unwrap();
        assert_eq!(chain.consumers, [vec![(3, 0), (4, 0)], vec![(7, 0)]], "exits in the order met");
        assert_eq!(same[7].as_ref().unwrap().producers, [(1, 1)], "the consumer reads the chain's port");
        assert!(same[2].is_none() && same[5].is_none() && same[6].is_none());

        let mut other = graph(vec![FieldId(0), FieldId(1)]);
        assert_eq!(compose(&mut other), 1);
        assert!(matches!(other[1].as_ref().unwrap().op, ExecOp::Ir(Op::Isu { .. })), "%1 runs by itself");
        assert_eq!(members(&other, 2), [2, 5, 6]);
        assert_eq!(other[3].as_ref().unwrap().producers, [(2, 0)]);
    }

    /// A chain stops at a worker's border; a cycle of routing nodes with no way in from
    /// outside has no root and stays as it is.
    #[test]
    fn chains_stop_at_workers_and_rootless_cycles_stay() {
        let mut nodes = vec![
            node(0, Op::Source, &[], &[&[(1, 0)]]),
            node(1, isu(), &[(0, 0)], &[&[(2, 0)]]),
            node(2, isu(), &[(1, 0)], &[&[(3, 0)]]),
            node(3, isu(), &[(2, 0)], &[&[(4, 0)]]),
            node(4, isu(), &[(3, 0)], &[&[]]),
            node(5, isu(), &[(6, 0)], &[&[(6, 0)]]),
            node(6, isu(), &[(5, 0)], &[&[(5, 0)]]),
        ];
        for n in [3, 4] {
            nodes[n].as_mut().unwrap().worker = 1;
        }
        assert_eq!(compose(&mut nodes), 2);
        assert_eq!(members(&nodes, 1), [1, 2]);
        assert_eq!(members(&nodes, 3), [3, 4]);
        assert_eq!(nodes[3].as_ref().unwrap().producers, [(1, 0)]);
        assert!(nodes[5].is_some() && nodes[6].is_some() && members(&nodes, 5).is_empty());
    }
}
