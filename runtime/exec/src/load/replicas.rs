//! Replicas of Ppt nodes (`ExecConfig::replicas`): a Linear or Embedding node run as R
//! nodes on different workers, each with its own copy of the parameters, so that a
//! bottleneck Ppt's work spreads over several workers (dynamic placement).
//!
//! - Placement: replica `r` of a node on worker `w` runs on worker `(w + r) mod workers`;
//!   replica 0 is the node itself. Each copy has its own lock, so the replicas' GEMMs run
//!   in parallel.
//! - Routing (`Routes`): a forward message for the node goes to the replica with the
//!   fewest messages queued or running, ties broken in turn (so one worker with one
//!   instance in flight still alternates); the choice is remembered under the node's key,
//!   and the backward messages of that key go to the same replica (it holds the cache).
//! - Gradients: each replica accumulates into its own buffers. The node's parameter group
//!   (the master, updated by its owner as without replicas) adds every replica's gradient
//!   into its own before each update, so an update sees the gradients of all instances
//!   whatever replica served them.
//! - Synchronisation: after every `replica_sync`-th update of the master, and when a run
//!   starts, the replicas' values become the master's. Between synchronisations replicas
//!   compute with values up to `replica_sync - 1` updates old (bounded staleness, like
//!   asynchronous training). With `replica_sync` 1 training is exactly that of the graph
//!   without replicas: deterministic runs match the reference to rounding.

use crate::load::program::Program;
use crate::message::Key;
use crate::ops::train::LiveGroup;
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

/// Adds a replica's accumulated gradients into the master's and clears them.
pub(crate) fn gather_grads(master: &mut LiveGroup, replica: &mut LiveGroup) {
    if !replica.touched {
        return;
    }
    replica.settle();
    for (m, r) in master.tensors.iter_mut().zip(replica.tensors.iter_mut()) {
        for (g, x) in m.grad.iter_mut().zip(r.grad.iter_mut()) {
            *g += *x;
            *x = 0.0;
        }
    }
    master.touched = true;
    master.accumulated = true;
    replica.touched = false;
    replica.accumulated = false;
    // The master's row log covers the replica's rows too, or neither is known.
    match (&mut master.rows, replica.rows.take()) {
        (Some(m), Some(r)) => {
            m.width = r.width;
            m.rows.extend(r.rows);
        }
        _ => master.rows = None,
    }
    replica.rows = Some(Default::default());
}

/// Gives a replica the master's values.
pub(crate) fn sync_values(master: &LiveGroup, replica: &mut LiveGroup) {
    for (m, r) in master.tensors.iter().zip(replica.tensors.iter_mut()) {
        r.value.copy_from_slice(m.value);
    }
    replica.version += 1;
}
