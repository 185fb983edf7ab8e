//! Linear epilogues at load (`ExecConfig::linear_epilogues`): an elementwise activation
//! that alone reads a linear's output, on its worker (`relu(l1(x))`), runs inside the
//! linear's step (`ops::ppt::LinearOp`): as a node of its own it costs a worker step each
//! way (the messages queued, routed and credited again), a cache entry per message and a
//! buffer per batch each way.
//!
//! Which pairs qualify is `amp_ir::units::linear_epilogues`'s decision (the planner's cost
//! model follows the same one), made here on the program's table with each node's worker,
//! after fusion (an activation a fused kernel runs is not one) and before replicas. The
//! linear keeps its index, label, inputs and key; it takes the activation's outputs, consumers
//! and fan-in key, and the activation leaves the table. It computes what the two nodes
//! compute, with the vocabulary's scalar functions, bit for bit.

use super::program::{Activation, ExecOp, NodeInfo};
use amp_ir::units::{epilogue_role, linear_epilogues, EpilogueNode, EpilogueRole};

/// Gives every linear its epilogue where the rule finds one; returns how many it gave.
pub(crate) fn absorb(nodes: &mut [Option<NodeInfo>]) -> usize {
    let table: Vec<Option<EpilogueNode>> = nodes
        .iter()
        .map(|n| {
            n.as_ref().map(|n| EpilogueNode {
                role: match &n.op {
                    ExecOp::Ir(op) if n.replicas.is_empty() && n.replica_of.is_none() => epilogue_role(op, None),
                    _ => EpilogueRole::Other,
                },
                worker: n.worker,
                consumers: n.consumers.clone(),
            })
        })
        .collect();
    let epilogues = linear_epilogues(&table);
    for e in &epilogues {
        let Some(activation) = nodes.get_mut(e.activation as usize).and_then(Option::take) else { continue };
        for &(consumer, port) in activation.consumers.iter().flatten() {
            if let Some(slot) = nodes
                .get_mut(consumer as usize)
                .and_then(Option::as_mut)
                .and_then(|n| n.producers.get_mut(usize::from(port)))
            {
                *slot = (e.linear, 0);
            }
        }
        if let Some(linear) = nodes.get_mut(e.linear as usize).and_then(Option::as_mut) {
            linear.outputs = activation.outputs;
            linear.consumers = activation.consumers;
            linear.fan_in_key = activation.fan_in_key;
            linear.epilogue = Some(Activation { node: e.activation, f: e.f });
        }
    }
    epilogues.len()
}

#[cfg(test)]
mod tests {
    use super::*;
    use amp_ir::{FieldId, Op, UnaryFn};

    /// `NodeInfo::for_test` with one output port and its own fan-in key.
    fn node(index: u32, op: Op, producers: &[(u32, u16)], consumers: &[(u32, u16)]) -> Option<NodeInfo> {
        let node = NodeInfo::for_test(index, op, producers, &[consumers]);
        Some(NodeInfo { fan_in_key: vec![FieldId(index as u16)], ..node })
    }

    /// %0 → linear %1 → relu %2 → sinks %3 and %4: the relu's consumers read the linear,
    /// which takes its outputs and fan-in key; a replicated linear keeps its activation.
    #[test]
    fn the_activation_leaves_and_its_consumers_read_the_linear() {
        let linear = || Op::Linear { param: "l".into() };
        let mut nodes = vec![
            node(0, Op::Source, &[], &[(1, 0)]),
            node(1, linear(), &[(0, 0)], &[(2, 0)]),
            node(2, Op::Unary(UnaryFn::Relu), &[(1, 0)], &[(3, 0), (4, 0)]),
            node(3, Op::Sink { name: "a".into() }, &[(2, 0)], &[]),
            node(4, Op::Sink { name: "b".into() }, &[(2, 0)], &[]),
        ];
        let mut replicated = nodes.clone();
        assert_eq!(absorb(&mut nodes), 1);
        assert!(nodes[2].is_none());
        let l = nodes[1].as_ref().unwrap();
        assert_eq!(l.epilogue, Some(Activation { node: 2, f: UnaryFn::Relu }));
        assert_eq!((l.consumers.clone(), l.fan_in_key.clone()), (vec![vec![(3, 0), (4, 0)]], vec![FieldId(2)]));
        assert_eq!(l.label, "n1", "the linear keeps its label: selectors name it");
        assert!(nodes[3..].iter().all(|n| n.as_ref().unwrap().producers == [(1, 0)]));

        replicated[1].as_mut().unwrap().replicas = vec![1, 5];
        assert_eq!(absorb(&mut replicated), 0);
        assert!(replicated[2].is_some());
    }
}
