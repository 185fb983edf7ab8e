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
//! - Split over processes (`split_over_processes`, when the executor joins a cluster):
//!   each copy runs in one process, and each process updates the parameters itself. Copy
//!   0 gets a replica group of its own like the others, so the master group has no nodes
//!   in any process: it is where each process's copies add up their gradients (in
//!   memory, as above), its updater there (`GroupInfo::ring`: copy 0's owner in process
//!   0, the first local copy's elsewhere) joins the other processes' in an all-reduce of
//!   those sums, and every process applies the same update to its own values
//!   (`sched::worker::ring`). A staleness bound holds there too: each process's updater
//!   checks its own copies' reads before it takes part in an update.

use super::program::{GroupInfo, NodeInfo, Program};
use amp_ir::placement::{graph_copy_worker, process_of};

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

/// Copies of the graph split over `processes` (see the module doc): checks that each
/// copy's workers are in one process, gives copy 0 a replica group of its own for every
/// trained master with a copy in another process, and sets the master's updater in each
/// process (`GroupInfo::ring`, in process order).
pub(crate) fn split_over_processes(program: &mut Program, processes: usize) -> Result<(), String> {
    let (copies, stage, workers) = (program.copies(), program.stage_workers, program.workers);
    if copies < 2 || processes < 2 {
        return Ok(());
    }
    let process = |w: usize| process_of(w, processes, workers);
    for copy in 0..copies {
        let first = process(graph_copy_worker(0, copy, stage));
        let last = process(graph_copy_worker(stage - 1, copy, stage));
        if first != last {
            return Err(format!(
                "copy {copy} of the graph runs on workers {}..={} of processes {first} and {last}: split over \
                 processes, each copy runs in one (make the copies a multiple of the processes)",
                graph_copy_worker(0, copy, stage),
                graph_copy_worker(stage - 1, copy, stage)
            ));
        }
    }
    let masters: Vec<usize> = (0..program.groups.len())
        .filter(|&g| {
            let group = &program.groups[g];
            let away = group.replica_groups.iter().any(|&r| process(program.groups[r].owner) != process(group.owner));
            group.master.is_none() && !group.frozen && away
        })
        .collect();
    for g in masters {
        if program.groups[g].max_staleness == Some(0) {
            // A read made while an all-reduce is under way (after this process's gradients
            // went into it) is applied by the next one: one update late at the least.
            return Err(format!(
                "parameter `{}` has a staleness bound of 0: copies of the graph split over processes apply a \
                 gradient read during an update's all-reduce at the next update, so their bound must be 1 or more",
                program.groups[g].prefix
            ));
        }
        let own = program.groups.len();
        let master = &program.groups[g];
        let mut ring = vec![master.owner];
        for &r in &master.replica_groups {
            let owner = program.groups[r].owner;
            if process(owner) == ring.len() {
                ring.push(owner);
            }
        }
        let copy0 = GroupInfo { master: Some(g), replica_groups: Vec::new(), ring: Vec::new(), ..master.clone() };
        for &i in &copy0.nodes {
            if let Some(node) = program.nodes.get_mut(i as usize).and_then(Option::as_mut) {
                node.group = Some(own);
            }
        }
        program.groups.push(copy0);
        let master = &mut program.groups[g];
        master.nodes.clear();
        master.replica_groups.insert(0, own);
        master.ring = ring;
    }
    Ok(())
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
            epilogue: None,
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
            ring: Vec::new(),
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
