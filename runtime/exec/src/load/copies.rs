//! Copies of the whole graph (`ExecConfig::copies`): data parallelism inside the AMP
//! model, for models whose busiest node keeps the rest of a plan's workers idle.
//!
//! - Placement (`copy_graph`, at load, after fusion, chains and parameter groups): copy
//!   `c` of node `i` takes index `i + c·n` (`n` the table's length before copying) and the
//!   worker `amp_ir::placement::graph_copy_worker` gives it; its producers and consumers
//!   are the same copy's, so an instance's messages never leave its copy. Copy 0 is the
//!   program as it was.
//! - Admission: each copy has its source. An instance goes to the copy of the worker that
//!   admits it (the one where an instance just ended: a copy that finishes takes the next
//!   instance, so a copy given larger instances is not sent more), the first window and
//!   admissions made elsewhere in turn (`Program::copy_source`).
//! - Parameters: a copy's Ppt node reads a group of its own, a replica group of copy 0's
//!   (`GroupInfo::master`), owned by the copy's worker. The master's owner adds every
//!   copy's accumulated gradients into its own before each update and gives every copy
//!   the new values right after it (`sched::worker::updates`, with a sync after every
//!   update), so synchronous training with `k` copies is minibatch SGD over all the
//!   copies' instances, and asynchronous training keeps the staleness the master counts
//!   and bounds for its copies' reads as for a replica's.

use super::program::{GroupInfo, NodeInfo};

/// Adds copies `1..copies` of every node and parameter group (see the module doc) and
/// returns each copy's source, copy 0's first.
pub(super) fn copy_graph(
    nodes: &mut Vec<Option<NodeInfo>>,
    groups: &mut Vec<GroupInfo>,
    source: u32,
    copies: usize,
    stage_workers: usize,
) -> Vec<u32> {
    let n = nodes.len();
    let masters = groups.len();
    let mut sources = vec![source];
    for copy in 1..copies {
        let offset = (copy * n) as u32;
        let moved = |i: u32| if i == u32::MAX { i } else { i + offset };
        let worker = |w: usize| amp_ir::placement::graph_copy_worker(w, copy, stage_workers);
        let first_group = groups.len();
        for g in 0..masters {
            let master = &groups[g];
            let replica = GroupInfo {
                nodes: master.nodes.iter().map(|&i| moved(i)).collect(),
                owner: worker(master.owner),
                master: Some(g),
                replica_groups: Vec::new(),
                ..master.clone()
            };
            groups.push(replica);
            groups[g].replica_groups.push(first_group + g);
        }
        for i in 0..n {
            let copied = nodes[i].as_ref().map(|node| NodeInfo {
                index: moved(node.index),
                consumers: node
                    .consumers
                    .iter()
                    .map(|c| c.iter().map(|&(to, port)| (moved(to), port)).collect())
                    .collect(),
                producers: node.producers.iter().map(|&(from, port)| (moved(from), port)).collect(),
                group: node.group.map(|g| first_group + g),
                worker: worker(node.worker),
                replicas: Vec::new(),
                replica_of: Some(node.index),
                ..node.clone()
            });
            nodes.push(copied);
        }
        sources.push(moved(source));
    }
    sources
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::load::program::ExecOp;
    use amp_ir::{Op, PayloadTy};

    fn node(
        index: u32,
        worker: usize,
        producers: &[(u32, u16)],
        consumers: &[(u32, u16)],
        group: Option<usize>,
    ) -> Option<NodeInfo> {
        Some(NodeInfo {
            index,
            op: ExecOp::Ir(Op::Forget),
            label: String::new(),
            inputs: vec![PayloadTy::Unit; producers.len()],
            outputs: vec![PayloadTy::Unit],
            key: Vec::new(),
            fan_in_key: Vec::new(),
            consumers: vec![consumers.to_vec()],
            producers: producers.to_vec(),
            grad_inputs: Vec::new(),
            source: String::new(),
            group,
            trip_limit: None,
            worker,
            replicas: Vec::new(),
            replica_of: None,
            forward_only: false,
        })
    }

    /// Copy 1 of a two-stage program over four workers: its nodes on workers 2 and 3,
    /// wired to each other only (a hole stays a hole), its group a replica of copy 0's,
    /// owned by the copy of the owner.
    #[test]
    fn a_copy_is_wired_to_itself_and_its_groups_are_replicas() {
        let mut nodes = vec![node(0, 0, &[], &[(2, 0)], None), None, node(2, 1, &[(0, 0)], &[], Some(0))];
        let mut groups = vec![GroupInfo {
            prefix: "w".into(),
            tensors: vec![0],
            nodes: vec![2],
            owner: 1,
            min_update_frequency: 1,
            max_staleness: None,
            master: None,
            replica_groups: Vec::new(),
            frozen: false,
        }];
        let sources = copy_graph(&mut nodes, &mut groups, 0, 2, 2);
        assert_eq!(sources, [0, 3]);
        assert_eq!(nodes.len(), 6);
        assert!(nodes[4].is_none());
        let (src, ppt) = (nodes[3].as_ref().unwrap(), nodes[5].as_ref().unwrap());
        assert_eq!((src.worker, ppt.worker), (2, 3));
        assert_eq!(src.consumers, [vec![(5, 0)]]);
        assert_eq!(ppt.producers, [(3, 0)]);
        assert_eq!((ppt.replica_of, ppt.group), (Some(2), Some(1)));
        assert_eq!(groups[0].replica_groups, [1]);
        assert_eq!((groups[1].master, groups[1].owner, groups[1].nodes.clone()), (Some(0), 3, vec![5]));
    }
}
