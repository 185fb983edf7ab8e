//! Routing chains at load (`ExecConfig::chain_routes`): connected `phi`, `cond`, `switch`
//! and `isu` nodes become one node of the program, which runs their ops in turn on each
//! message (`ops::chain`). These nodes only edit or read a message's state; each costs a
//! worker step per message (queueing, routing, credits), and a recursion passes every
//! value through several of them per tree node and again backward: Tree-LSTM's `(h, c)`
//! go through `phi`, `cond`, two `isu`, `switch` and an `isu` at the call site, two
//! thirds of a tree's messages.
//!
//! Which nodes form a chain is `amp_ir::units::routing_chains`'s decision (the planner's
//! cost model follows the same one), made here on the program's table with each node's
//! worker: a chain grows from a root along edges that are the only consumer of their
//! port, through routing nodes with one input on the same worker whose fanned-out ports
//! sum their gradients under the root's key. The root may have several inputs (a `phi`);
//! they are the chain's. Every other output port of a member is an output of the chain,
//! in the order met walking the chain from the root, and its consumer now reads the
//! chain's port. The chain keeps the root's index (its producers see no change); the other
//! members leave the table.

use super::program::{ChainSpec, ExecOp, Next, NodeInfo};
use amp_ir::units::{routing_chains, ChainNode, ChainStep};
use std::sync::Arc;

/// Replaces every chain of two or more routing nodes in `nodes` by one node; returns how
/// many chains were made.
pub(crate) fn compose(nodes: &mut [Option<NodeInfo>]) -> usize {
    let table: Vec<Option<ChainNode>> = nodes
        .iter()
        .map(|n| {
            n.as_ref().map(|n| ChainNode {
                routing: routing(n),
                worker: n.worker,
                producers: n.producers.clone(),
                consumers: n.consumers.clone(),
                fan_in_key: n.fan_in_key.clone(),
            })
        })
        .collect();
    let mut count = 0;
    for chain in routing_chains(&table) {
        // The members as they are now: a root kept out of an earlier chain reads that
        // chain's port.
        let members: Option<Vec<NodeInfo>> =
            chain.members.iter().map(|&m| nodes.get(m as usize).and_then(Option::as_ref).cloned()).collect();
        let Some(members) = members else { continue };
        let next = chain
            .next
            .iter()
            .map(|ports| {
                ports
                    .iter()
                    .map(|step| match *step {
                        ChainStep::Member(m) => Next::Member(m),
                        ChainStep::Exit(e) => Next::Exit(e),
                    })
                    .collect()
            })
            .collect();
        apply(nodes, ChainSpec { members, next, parent: chain.parent, exits: chain.exits });
        count += 1;
    }
    count
}

/// A node a chain can hold: a routing op, no replica.
fn routing(node: &NodeInfo) -> bool {
    let op = matches!(&node.op, ExecOp::Ir(op) if amp_ir::units::is_routing(op));
    op && node.replicas.is_empty() && node.replica_of.is_none()
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
    use amp_ir::{FieldId, Op, StateExpr};

    fn isu() -> Op {
        Op::Isu { field: FieldId(1), value: StateExpr::Const(1), inverse: Some(StateExpr::Const(0)) }
    }

    fn node(index: u32, op: Op, producers: &[(u32, u16)], consumers: &[&[(u32, u16)]]) -> Option<NodeInfo> {
        Some(NodeInfo::for_test(index, op, producers, consumers))
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
