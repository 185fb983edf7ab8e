//! Replicas of Ppt nodes (`ExecConfig::replicas`): a Linear or Embedding node run as R
//! nodes on different workers, each with its own copy of the parameters, so that a
//! bottleneck Ppt's work spreads over several workers (dynamic placement).
//!
//! - Placement (`replicate`, at load): replica `r` of a node on worker `w` runs on worker
//!   `(w + r) mod workers`; replica 0 is the node itself. Each copy has its own lock, so the replicas' GEMMs run
//!   in parallel.
//! - Routing (`Routes`): a forward message for the node goes to the replica with the
//!   fewest messages queued or running, ties broken in turn (so one worker with one
//!   instance in flight still alternates); the choice is remembered under the node's key,
//!   and the backward messages of that key go to the same replica (it holds the cache).
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

use super::program::{GroupInfo, NodeInfo, Program};
use crate::config::{ExecConfig, NodeSelector};
use crate::error::ExecError;
use crate::message::Key;
use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

/// Where the messages of replicated nodes go, during one run.
#[derive(Default)]
pub(crate) struct Routes {
    /// Messages queued or running at each node that serves a replicated node.
    load: Vec<AtomicUsize>,
    /// Whether each node serves a replicated node (its load is counted).
    tracked: Vec<bool>,
    /// Per node with replicas, the replica that wins the next tie.
    turn: Vec<AtomicUsize>,
    /// The replica serving `(node, key)`, and how many backward messages it still awaits.
    chosen: Mutex<HashMap<(u32, Key), (u32, usize)>>,
}

impl Routes {
    pub fn new(program: &Program) -> Routes {
        let n = program.nodes.len();
        let mut tracked = vec![false; n];
        for node in program.nodes.iter().flatten() {
            for &r in &node.replicas {
                if let Some(t) = tracked.get_mut(r as usize) {
                    *t = true;
                }
            }
        }
        Routes {
            tracked,
            load: (0..n).map(|_| AtomicUsize::new(0)).collect(),
            turn: (0..n).map(|_| AtomicUsize::new(0)).collect(),
            chosen: Mutex::new(HashMap::new()),
        }
    }

    /// The replica of `node` (a node with replicas) that serves a forward message under
    /// `key`; remembers it for `backward` backward messages (none in inference).
    pub fn forward(&self, node: u32, replicas: &[u32], key: Key, backward: usize) -> u32 {
        let loads: Vec<usize> = replicas.iter().map(|&r| self.load_of(r)).collect();
        let least = loads.iter().copied().min().unwrap_or(0);
        let start = self.turn.get(node as usize).map_or(0, |t| t.load(Ordering::Relaxed));
        let pick = (0..replicas.len()).map(|i| (start + i) % replicas.len()).find(|&i| loads[i] == least).unwrap_or(0);
        if let Some(turn) = self.turn.get(node as usize) {
            turn.store(pick + 1, Ordering::Relaxed);
        }
        let replica = replicas.get(pick).copied().unwrap_or(node);
        if backward > 0 {
            self.table().insert((node, key), (replica, backward));
        }
        replica
    }

    /// The replica that served the forward message of `key` at `node`; `None` when none
    /// is on record (the message then goes to `node` itself, which reports the missing
    /// cache).
    pub fn backward(&self, node: u32, key: Key) -> Option<u32> {
        let mut table = self.table();
        let entry = table.get_mut(&(node, key.clone()))?;
        let replica = entry.0;
        entry.1 = entry.1.saturating_sub(1);
        if entry.1 == 0 {
            table.remove(&(node, key));
        }
        Some(replica)
    }

    /// A message was queued for `node`.
    pub fn queued(&self, node: u32) {
        if !self.tracked.get(node as usize).copied().unwrap_or(false) {
            return;
        }
        if let Some(load) = self.load.get(node as usize) {
            load.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// `count` messages of `node` were processed.
    pub fn processed(&self, node: u32, count: usize) {
        if !self.tracked.get(node as usize).copied().unwrap_or(false) {
            return;
        }
        if let Some(load) = self.load.get(node as usize) {
            let _ = load.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |l| Some(l.saturating_sub(count)));
        }
    }

    fn load_of(&self, node: u32) -> usize {
        self.load.get(node as usize).map_or(0, |l| l.load(Ordering::Relaxed))
    }

    fn table(&self) -> std::sync::MutexGuard<'_, HashMap<(u32, Key), (u32, usize)>> {
        self.chosen.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

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
            for r in 1..*count {
                let replica = nodes.len() as u32;
                let group = groups.len();
                let worker = (original.worker + r) % config.workers;
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
