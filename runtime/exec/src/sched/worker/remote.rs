//! A worker's dealings with other processes beyond messages and credits (a run split over
//! processes, `crate::cluster`): what the in-memory exchange between a master and its
//! replicas (`Worker::update`: `train::gather_grads`, `train::sync_values`) becomes across
//! the bridge, the service times of copies that run away from their router, and what a
//! staleness bound needs of the others.
//!
//! - **Gradients before the master's update.** When a master with replicas in other
//!   processes is due to update, its owner sends each of them a pull
//!   ([`RemoteWord::Pull`]) and defers the update (no message waits: the owner goes on
//!   working) until every one answered with the gradients it accumulated
//!   ([`RemoteWord::Grads`], with the versions their reads used, for the staleness);
//!   then the update runs as in one process, the remote gradients added to the master's
//!   as `gather_grads` adds a local replica's. An instance counted for the update ended,
//!   so every gradient of it reached its replica before the pull, which the replica's
//!   worker answers ahead of its queued messages.
//! - **Values after it.** After every `replica_sync`-th update the owner sends the
//!   values ([`RemoteWord::Values`]); the replica's worker takes them at once and
//!   acknowledges ([`RemoteWord::Synced`]). The owner confirms a synchronous boundary to
//!   the controller (`Report::Updated`) only once no update of its waits for gradients
//!   and every replica acknowledged its values, so no instance of the next window can
//!   reach a replica before its values, whatever path its messages take.
//! - **The end of a run.** A stop with a flush ends a training run: each worker first
//!   sends the gradients of its replicas whose masters are elsewhere, marked last, then an
//!   owner whose masters have replicas elsewhere waits for all their last gradients before
//!   its flush updates, and stops after. (A stop without a flush ends a failed run, whose
//!   gradients are dropped: nobody waits.) The values reach the replicas' processes
//!   between runs (`Executor::share_replica_values`).
//! - **Routing.** A replicated node's messages are routed by the processes of its
//!   producers and consumers, which must be one process (`Executor::new` refuses
//!   otherwise): it keeps the table that sends a key's backward messages to the copy that
//!   served its forward, and counts the messages it queued at each copy. A copy that runs
//!   in another process reports each batch it served there ([`RemoteWord::Served`]: the
//!   messages and the time, a straggler's sleep included), which that process's routes
//!   take as if the copy ran locally: the estimates travel, so the router compares a
//!   remote copy's measured service time with a local one's, and a remote copy counts as
//!   busy with what is in transit to it until its report is back.
//! - **Staleness bounds.** An owner forgets a read owed a gradient once its instance is
//!   no longer in flight; split over processes, its process's credit count cannot say
//!   that, so the owner keeps the ends it heard of ([`Remote::in_flight`]), and an owner
//!   outside process 0 holds and releases process 0's admissions ([`RemoteWord::Hold`]),
//!   where every instance is admitted.

use super::ring::Rings;
use super::{RemoteWord, ToWorker, Worker, WorkerSetup};
use crate::load::program::GroupInfo;
use crate::ops::train::{self, LiveGroup};
use crate::ops::RunMode;
use crate::sched::admission::{owned_masters, source_message, Courier, Credits};
use std::collections::HashMap;
use std::time::Duration;

/// A master's update and its replicas in other processes.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Pulled {
    /// Pulls sent, this many not answered yet.
    Awaiting(usize),
    /// Every replica answered: the update may run.
    Ready,
}

/// A worker's side of its replicas and masters in other processes.
#[derive(Default)]
pub(super) struct Remote {
    /// Per owned master (group index) whose update waits for, or has, its remote
    /// replicas' gradients.
    pulled: HashMap<usize, Pulled>,
    /// Values sent to replicas elsewhere, and updates after a reduction
    /// (`worker::ring`), not acknowledged yet.
    pub(super) unsynced: usize,
    /// Last gradients the run's end owes this worker's masters (one per remote replica),
    /// and those that came.
    lasts_owed: usize,
    lasts: usize,
    /// A stop with a flush came and waits for the last gradients.
    pub(super) stopping: bool,
    /// This worker sent its replicas' last gradients: later pulls get nothing.
    sent_last: bool,
    /// Per node this worker runs, the process to report its service to: a copy of a
    /// replicated node whose router is another process.
    report_to: HashMap<u32, usize>,
    /// A run split over processes whose groups here have a staleness bound: per instance,
    /// whether this worker heard of its end (see [`Remote::in_flight`]).
    ended: Option<Vec<bool>>,
    /// The masters this worker updates after an all-reduce (`worker::ring`).
    pub(super) rings: Rings,
}

impl Remote {
    pub fn new(setup: &WorkerSetup) -> Remote {
        let (program, peers) = (setup.program, &setup.peers);
        let mut remote = Remote::default();
        if peers.this_process().is_none() {
            return remote;
        }
        let (mut bounded, mut reduced) = (false, 0);
        for (_, info) in owned_masters(program, setup.id) {
            bounded |= info.max_staleness.is_some();
            if !info.ring.is_empty() {
                // Its copies elsewhere are reduced with, not gathered from.
                reduced += 1;
                continue;
            }
            remote.lasts_owed += info.replica_groups.iter().filter(|&&r| !is_local(setup, r)).count();
        }
        remote.rings = Rings::new(reduced);
        if bounded && setup.shared.mode == RunMode::Train {
            remote.ended = Some(vec![false; setup.shared.instances.len()]);
        }
        let here = peers.this_process();
        for node in program.nodes.iter().flatten().filter(|n| n.worker == setup.id) {
            let original = node.replica_of.unwrap_or(node.index);
            let Some(original) = program.node(original).filter(|o| o.replicas.len() > 1) else { continue };
            let router = original.producers.first().and_then(|&(p, _)| program.node(p)).map(|p| p.worker);
            if let Some(process) = router.and_then(|w| peers.process_of(w)).filter(|&p| Some(p) != here) {
                remote.report_to.insert(node.index, process);
            }
        }
        remote
    }

    /// This worker heard that `instance` ended (it counts it for its groups).
    pub fn ended(&mut self, instance: usize) {
        if let Some(flag) = self.ended.as_mut().and_then(|e| e.get_mut(instance)) {
            *flag = true;
        }
    }

    /// Whether `instance` may still send a gradient to this worker's groups, for a
    /// staleness bound (`Worker::within_bound`): in one process, while its credit count
    /// is not zero; split over processes, where this process's count says nothing of the
    /// others', until this worker heard of its end. An owner hears of every end (its
    /// `InstanceDone`, or its own), after it happened: a read is forgotten only once its
    /// gradient can no longer come, and every read is forgotten or answered in the end.
    pub fn in_flight(&self, instance: usize, credits: &Credits) -> bool {
        match &self.ended {
            Some(ended) => !ended.get(instance).copied().unwrap_or(true),
            None => credits.live(instance),
        }
    }

    /// No update waits for remote gradients and every value sent was taken: the updates
    /// this worker applied are complete everywhere.
    pub fn settled(&self) -> bool {
        self.unsynced == 0 && self.pulled.is_empty() && self.rings.idle()
    }

    /// After a stop with a flush: every last gradient came, the flush updates ran, and
    /// every reduction they started is applied.
    pub fn may_stop(&self) -> bool {
        self.stopping && self.lasts >= self.lasts_owed && self.rings.flushed()
    }
}

/// Whether replica group `group` runs on a worker of this process.
fn is_local(setup: &WorkerSetup, group: usize) -> bool {
    setup.program.groups.get(group).is_some_and(|g| setup.peers.is_local(g.owner))
}

impl Worker<'_, '_> {
    /// The replicas of `info` that run in this process (gathered and synchronised in
    /// memory).
    pub(super) fn local_replicas(&self, info: &GroupInfo) -> Vec<usize> {
        info.replica_groups.iter().copied().filter(|&r| is_local(&self.setup, r)).collect()
    }

    /// Before `info`'s update: true while it must wait for the gradients of its replicas
    /// in other processes (pulls sent now, when none are out).
    pub(super) fn pull_remote(&self, info: &GroupInfo) -> bool {
        let remote: Vec<usize> = info.replica_groups.iter().copied().filter(|&r| !is_local(&self.setup, r)).collect();
        if remote.is_empty() || info.frozen {
            return false;
        }
        let Some(master) = info.replica_groups.first().and_then(|&r| self.setup.program.groups.get(r)?.master) else {
            return false;
        };
        let mut state = self.remote.borrow_mut();
        match state.pulled.get(&master).copied() {
            Some(Pulled::Ready) => {
                state.pulled.remove(&master);
                false
            }
            Some(Pulled::Awaiting(_)) => true,
            None => {
                for &r in &remote {
                    let owner = self.setup.program.groups[r].owner;
                    self.setup.peers.send(owner, ToWorker::Remote(RemoteWord::Pull { group: r }));
                }
                state.pulled.insert(master, Pulled::Awaiting(remote.len()));
                true
            }
        }
    }

    /// After an update of `master` that synchronises its replicas: the values to those in
    /// other processes.
    pub(super) fn push_values(&self, info: &GroupInfo, master: &LiveGroup) {
        for &r in info.replica_groups.iter().filter(|&&r| !is_local(&self.setup, r)) {
            let tensors = master.tensors.iter().map(|t| t.value.to_vec()).collect();
            let word = RemoteWord::Values { group: r, base: master.version, tensors };
            let owner = self.setup.program.groups[r].owner;
            if self.setup.peers.send(owner, ToWorker::Remote(word)) {
                self.remote.borrow_mut().unsynced += 1;
            }
        }
    }

    /// A stop (see the module doc): with a flush, this worker's replicas send their last
    /// gradients, and its masters wait for those of theirs before the flush updates.
    /// False when the worker stops now.
    pub(super) fn stop(&mut self, flush: bool) -> bool {
        if flush && self.setup.shared.mode == RunMode::Train && self.setup.peers.this_process().is_some() {
            self.send_last_grads();
            let mut remote = self.remote.borrow_mut();
            remote.stopping = true;
            // The last gradients bring whatever a pull still out would have.
            remote.pulled.clear();
            if remote.lasts < remote.lasts_owed {
                return true;
            }
        }
        if flush {
            self.update_groups(true);
            // A master reduced over processes updates once its last reduction is applied.
            let remote = self.remote.borrow();
            return remote.stopping && !remote.may_stop();
        }
        false
    }

    /// The gradients of every replica this worker runs whose master is elsewhere, last.
    fn send_last_grads(&mut self) {
        let program = self.setup.program;
        for (r, info) in program.groups.iter().enumerate().filter(|(_, g)| g.owner == self.setup.id) {
            let Some(master) = info.master.and_then(|m| program.groups.get(m)) else { continue };
            // A copy whose master is reduced over processes is gathered in its own.
            if self.setup.peers.is_local(master.owner) || !master.ring.is_empty() {
                continue;
            }
            let grads = self.setup.shared.params.live(r).map(|mut g| train::take_replica_grads(&mut g));
            let word = RemoteWord::Grads { group: r, last: true, grads: grads.unwrap_or_default() };
            self.setup.peers.send(master.owner, ToWorker::Remote(word));
        }
        self.remote.borrow_mut().sent_last = true;
    }

    /// A replica's word from another process; false when the worker must stop.
    pub(super) fn on_remote(&mut self, word: RemoteWord) -> bool {
        let (program, params) = (self.setup.program, &self.setup.shared.params);
        match word {
            RemoteWord::Pull { group } => {
                let master = program.groups.get(group).and_then(|g| g.master).and_then(|m| program.groups.get(m));
                let Some(owner) = master.map(|m| m.owner) else { return true };
                if self.remote.borrow().sent_last {
                    return true;
                }
                let grads = params.live(group).map(|mut g| train::take_replica_grads(&mut g)).unwrap_or_default();
                self.setup.peers.send(owner, ToWorker::Remote(RemoteWord::Grads { group, last: false, grads }));
            }
            RemoteWord::Grads { group, last, grads } => {
                let Some(master) = program.groups.get(group).and_then(|g| g.master) else { return true };
                if let Some(mut g) = params.live(master) {
                    train::add_replica_grads(&mut g, grads);
                }
                let mut remote = self.remote.borrow_mut();
                if last {
                    remote.lasts += 1;
                    if remote.stopping && remote.lasts >= remote.lasts_owed {
                        drop(remote);
                        self.update_groups(true);
                        return !self.remote.borrow().may_stop();
                    }
                } else if let Some(Pulled::Awaiting(n)) = remote.pulled.get_mut(&master) {
                    *n = n.saturating_sub(1);
                    if *n == 0 {
                        remote.pulled.insert(master, Pulled::Ready);
                        drop(remote);
                        // The update that waited runs now, with whatever else is due.
                        self.update_groups(false);
                    }
                }
            }
            RemoteWord::Values { group, base, tensors } => {
                if let Some(mut replica) = params.live(group) {
                    let values: Vec<&[f32]> = tensors.iter().map(Vec::as_slice).collect();
                    train::set_replica_values(&mut replica, &values, base);
                }
                let master = program.groups.get(group).and_then(|g| g.master).and_then(|m| program.groups.get(m));
                if let Some(owner) = master.map(|m| m.owner) {
                    self.setup.peers.send(owner, ToWorker::Remote(RemoteWord::Synced { group }));
                }
            }
            RemoteWord::Synced { .. } => {
                let mut remote = self.remote.borrow_mut();
                remote.unsynced = remote.unsynced.saturating_sub(1);
            }
            RemoteWord::Served { node, count, elapsed } => {
                let routes = &self.setup.shared.routes;
                routes.processed(node, count);
                routes.served(node, count, elapsed);
            }
            RemoteWord::Reduce { group, step, count, flush, values } => {
                return self.on_reduce(group, step, count, flush, values);
            }
            RemoteWord::Hold(hold) => {
                let (admission, program, credits) = (self.setup.admission, program, self.setup.credits);
                if hold {
                    admission.hold();
                } else {
                    for next in admission.release() {
                        let (to, env) = source_message(program, credits, next, None);
                        self.admit(to, env);
                    }
                }
            }
        }
        true
    }

    /// An owner outside process 0 holds or releases admissions (see `Admission::hold`) on
    /// process 0, where every instance is admitted: true when it did (this is a follower).
    pub(super) fn hold_elsewhere(&self, hold: bool) -> bool {
        if !self.setup.reports.is_remote() {
            return false;
        }
        self.setup.peers.send_to_process(0, ToWorker::Remote(RemoteWord::Hold(hold)));
        true
    }

    /// A copy of a replicated node served `count` messages in `elapsed`: when its router
    /// is another process, that process hears of it (see the module doc).
    pub(super) fn report_served(&self, node: u32, count: usize, elapsed: Duration) {
        let Some(&process) = self.remote.borrow().report_to.get(&node) else { return };
        self.setup.peers.send_to_process(process, ToWorker::Remote(RemoteWord::Served { node, count, elapsed }));
    }
}
