//! Replicas of Ppt nodes (`ExecConfig::replicas`): a Linear or Embedding node run as R
//! nodes on different workers, each with its own copy of the parameters, so that a
//! bottleneck Ppt's work spreads over several workers (dynamic placement).
//!
//! - Placement (`replicate`, at load): replica `r` of a node on worker `w` runs on worker
//!   `(w + r) mod workers` (`amp_ir::placement::copy_workers`); replica 0 is the node itself. Each copy has its own lock, so the replicas' GEMMs run
//!   in parallel.
//! - Routing, during a run: `ops::replica_routes` (a forward message to the copy expected to
//!   finish it first, its backward messages to the copy that served it).
//! - Gradients: each replica accumulates into its own buffers. The node's parameter group
//!   (the master, updated by its owner as without replicas) adds every replica's gradient
//!   into its own before each update, so an update sees the gradients of all instances
//!   whatever replica served them (`ops::train::gather_grads`, called by the owner's
//!   worker).
//! - Synchronisation: after every `replica_sync`-th update of the master, and when a run
//!   starts, the replicas' values become the master's (`ops::train::sync_values`). Between synchronisations replicas
//!   compute with values up to `replica_sync - 1` updates old (bounded staleness, like
//!   asynchronous training). With `replica_sync` 1 training is exactly that of the graph
//!   without replicas: deterministic runs match the reference to rounding.

use super::program::{GroupInfo, NodeInfo};
use crate::config::{ExecConfig, NodeSelector};
use crate::error::ExecError;

/// Adds the replicas `config.replicas` asks for (see the module doc): per replicated
/// Ppt node, R - 1 copies with fresh indices, each with its own parameter group.
pub(super) fn replicate(
    nodes: &mut Vec<Option<NodeInfo>>,
    groups: &mut Vec<GroupInfo>,
    config: &ExecConfig,
) -> Result<(), ExecError> {
    for (selector, count) in &config.replicas {
        let chosen: Vec<u32> = nodes
            .iter()
            .flatten()
            .filter(|n| n.replica_of.is_none() && n.replicas.is_empty())
            .filter(|n| match selector {
                NodeSelector::Id(id) => *id == n.index,
                NodeSelector::Label(label) => *label == n.label,
            })
            .map(|n| n.index)
            .collect();
        if chosen.is_empty() {
            let message = format!("no node to replicate is `{}`", selector_text(selector));
            return Err(ExecError::Config { message });
        }
        for index in chosen {
            let Some(original) = nodes.get(index as usize).and_then(Option::clone) else { continue };
            let Some(master) = original.group else {
                let message = format!(
                    "%{index} ({}) has no parameters: only linear and embedding nodes have replicas",
                    original.op.keyword()
                );
                return Err(ExecError::Config { message });
            };
            if *count < 2 {
                continue;
            }
            let mut serving = vec![index];
            // Copy 0 is the node itself.
            for worker in amp_ir::placement::copy_workers(original.worker, *count, config.workers).into_iter().skip(1) {
                let replica = nodes.len() as u32;
                let group = groups.len();
                groups.push(GroupInfo {
                    prefix: groups[master].prefix.clone(),
                    tensors: groups[master].tensors.clone(),
                    nodes: vec![replica],
                    owner: worker,
                    min_update_frequency: groups[master].min_update_frequency,
                    max_staleness: groups[master].max_staleness,
                    master: Some(master),
                    replica_groups: Vec::new(),
                    frozen: groups[master].frozen,
                    ring: Vec::new(),
                });
                groups[master].replica_groups.push(group);
                nodes.push(Some(NodeInfo {
                    index: replica,
                    group: Some(group),
                    worker,
                    replicas: Vec::new(),
                    replica_of: Some(index),
                    ..original.clone()
                }));
                serving.push(replica);
            }
            if let Some(node) = nodes.get_mut(index as usize).and_then(Option::as_mut) {
                node.replicas = serving;
            }
        }
    }
    Ok(())
}

fn selector_text(selector: &NodeSelector) -> String {
    match selector {
        NodeSelector::Id(id) => format!("%{id}"),
        NodeSelector::Label(label) => label.clone(),
    }
}
