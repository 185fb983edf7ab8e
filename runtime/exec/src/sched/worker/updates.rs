//! A worker's update policy: counting finished instances for the groups it owns,
//! updating them when due (within a staleness bound, holding admissions while it defers),
//! and a master's update with its replicas.

use super::*;

/// The masters whose updates this worker counts instances for: those it owns, and of
/// those reduced over processes, only process 0's updater's. The others join the
/// reductions process 0 starts (`worker::ring`).
fn counting_masters(program: &Program, id: usize) -> impl Iterator<Item = (usize, &GroupInfo)> {
    owned_masters(program, id).filter(move |(_, info)| info.ring.first().is_none_or(|&w| w == id))
}

impl Worker<'_, '_> {
    /// One more instance finished: the groups this worker owns count it at the next
    /// [`Worker::update_due`], all the instances of a drained inbox at once (not a lock of
    /// every owned group per instance, which adds up on a model with many groups).
    pub(super) fn count_instance(&mut self, instance: usize) {
        self.finished += 1;
        self.heard += 1;
        self.remote.borrow_mut().ended(instance);
    }

    /// Adds the instances finished since the last count to the owned groups' counts.
    pub(super) fn add_finished(&mut self) {
        let finished = std::mem::take(&mut self.finished);
        if finished == 0 {
            return;
        }
        for (g, _) in counting_masters(self.setup.program, self.setup.id) {
            if let Some(mut group) = self.setup.shared.params.live(g) {
                group.pending += finished;
            }
        }
    }

    /// Updates the groups that counted their update interval's instances, over all the
    /// instances counted so far, then acknowledges the updates the controller waits for
    /// and admits what a boundary this worker holds lets in ([`Worker::admit_held`]).
    /// Counts are taken for everything that arrived before (the whole inbox), not one at
    /// a time: instances that finish together (batched through the same nodes, they often
    /// do) have their gradients in the accumulators together, and one update averaged over
    /// all of them is what those gradients are. Updating at the first `n` would apply the
    /// others' gradients scaled as if there were `n`, and leave the next update empty.
    pub(super) fn update_due(&mut self) {
        // A group that deferred an update for its staleness bound tries again after every
        // step: the gradient it waits for may have come.
        if self.finished > 0 || self.bound_deferred {
            self.update_groups(false);
        }
        // An update waiting for the gradients of a replica in another process, or for it
        // to take the values, is not applied yet (`worker::remote`).
        if self.remote.borrow().settled() {
            for _ in 0..std::mem::take(&mut self.acks) {
                self.setup.reports.send(Report::Updated);
            }
        }
        self.admit_held();
    }

    /// Synchronous training with every group on this worker, which then holds the
    /// boundaries: once every instance below the limit finished and the groups that
    /// completed their interval updated ([`Worker::update_due`] calls this after), the
    /// next window, each instance sent to its copy's source (see
    /// [`Admission::open_held_window`]).
    pub(super) fn admit_held(&mut self) {
        let setup = &self.setup;
        let counted = (self.finished, self.heard);
        let window = setup.admission.open_held_window(setup.id, setup.program, &setup.shared.params, counted);
        for (next, at) in admission::balanced(setup.program, &setup.shared.instances, window) {
            let (to, env) = source_message(self.setup.program, self.setup.credits, next, at);
            self.admit(to, env);
        }
    }

    /// Counts the instances finished since the last count, then updates every group this
    /// worker owns that has instances pending: those that reached their update interval,
    /// or all of them with `flush` (the end of a run).
    pub(super) fn update_groups(&mut self, flush: bool) {
        let finished = std::mem::take(&mut self.finished);
        self.bound_deferred = false;
        for (g, info) in counting_masters(self.setup.program, self.setup.id) {
            let start = self.setup.trace.then(Instant::now);
            let mut deferred = false;
            let updated = self.setup.shared.params.live(g).and_then(|mut group| {
                group.pending += finished;
                let due = flush || group.pending >= info.min_update_frequency;
                // At a flush every instance ended: no read is owed a gradient any more.
                deferred = due && !self.within_bound(info, &mut group) && !flush;
                (due && !deferred && self.update(g, info, &mut group, flush)).then_some(group.staleness.last)
            });
            self.bound_deferred |= deferred;
            if let (Some(staleness), Some(start)) = (updated, start) {
                self.record(info.nodes.first().copied().unwrap_or(0), TraceKind::Update, start, (0, 0), 0);
                if let Some(event) = self.events.last_mut() {
                    event.staleness = staleness;
                }
            }
        }
        self.bound_deferred |= self.join_waiting(flush);
        self.hold_admissions();
    }

    /// While a group of this worker defers an update for its bound, admissions are held
    /// (see `Admission::hold`); once none does, this worker releases its hold and makes
    /// the admissions owed meanwhile, when its hold was the last.
    pub(super) fn hold_admissions(&mut self) {
        if self.bound_deferred == self.holding {
            return;
        }
        self.holding = self.bound_deferred;
        if self.hold_elsewhere(self.holding) {
            return;
        }
        let (admission, program, credits) = (self.setup.admission, self.setup.program, self.setup.credits);
        if self.holding {
            admission.hold();
            return;
        }
        for next in admission.release() {
            let (to, env) = source_message(program, credits, next, None);
            self.admit(to, env);
        }
    }

    /// Whether a master group may update under its staleness bound: no read of it or of
    /// its replicas still owed a gradient is as old as the bound (see
    /// [`admission::update_within_bound`]). Locks the replicas one at a time, as
    /// [`Worker::update`] does.
    /// The reads of instances that ended are forgotten here, bound or not (a read whose
    /// gradient never comes would otherwise stay for the rest of the run); split over
    /// processes, those whose end this worker heard of (`Remote::in_flight`).
    pub(super) fn within_bound(&self, info: &GroupInfo, master: &mut LiveGroup) -> bool {
        let (credits, remote) = (self.setup.credits, self.remote.borrow());
        let live = |i: usize| remote.in_flight(i, credits);
        let mut oldest = master.staleness.oldest_owed(live);
        for &r in &info.replica_groups {
            if let Some(mut replica) = self.setup.shared.params.live(r) {
                oldest = oldest.into_iter().chain(replica.staleness.oldest_owed(live)).min();
            }
        }
        admission::update_within_bound(master.version, oldest, info.max_staleness)
    }
}

/// A replica in this process that its master's updater does not run: it takes its master's
/// values on its own worker (`Worker::take_values`). Not for masters reduced over
/// processes, whose updaters give their copies the values (`worker::ring`), nor under a
/// staleness bound: a forward on the replica before it took the values would read a
/// version older than the master's, after the bound's check let the update through.
fn takes_values_itself(program: &Program, replica: usize) -> bool {
    let groups = &program.groups;
    let Some(info) = groups.get(replica) else { return false };
    let Some(master) = info.master.and_then(|m| groups.get(m)) else { return false };
    master.ring.is_empty() && master.max_staleness.is_none() && master.owner != info.owner
}

/// Gives `replica` its master's values unless it holds them already (whether it did):
/// only the rows of a table that the master's last update moved, when that update made the
/// version right after the replica's and replicas are synced after every update; all of
/// them otherwise (a replica that sat out updates, or synced every few).
fn catch_up(master: &LiveGroup, replica: &mut LiveGroup, sync_every: u64) -> bool {
    if replica.staleness.base == master.version {
        return false;
    }
    let next = sync_every == 1 && replica.staleness.base + 1 == master.version;
    train::sync_values(master, replica, master.moved_rows.as_ref().filter(|_| next));
    true
}

/// A replica on this worker that takes its master's values itself and hands in its
/// gradients when this worker runs out of work, and the master's versions it last did so at.
#[derive(Clone, Copy)]
pub(super) struct Pull {
    replica: usize,
    master: usize,
    taken: u64,
    /// The master's version when this replica last handed in its gradients
    /// (`Worker::hand_in_gradients`).
    handed: Option<u64>,
}

/// The replicas on worker `setup.id` that take their masters' values themselves.
pub(super) fn pulls(setup: &WorkerSetup) -> Vec<Pull> {
    let groups = &setup.program.groups;
    let ours = |r: usize, info: &GroupInfo, master: usize| {
        // A master in another process gives its values over the bridge (`worker::remote`).
        info.owner == setup.id && takes_values_itself(setup.program, r) && setup.peers.is_local(groups[master].owner)
    };
    let pull = |(r, info): (usize, &GroupInfo)| {
        let master = info.master?;
        ours(r, info, master).then_some(Pull { replica: r, master, taken: 0, handed: None })
    };
    groups.iter().enumerate().filter_map(pull).collect()
}

impl Worker<'_, '_> {
    /// Before a step: each replica here whose master published an update since this
    /// replica last took values takes them (only the rows the update moved, when it moved
    /// only rows and this is the version right after the replica's). In synchronous
    /// training no message of the next window reaches this worker before the update
    /// (its admissions follow the update), so no instance reads the old values.
    pub(super) fn take_values(&mut self) {
        for i in 0..self.pulls.len() {
            let Pull { replica, master, taken, .. } = self.pulls[i];
            let published = self.setup.shared.params.published(master);
            if published <= taken {
                continue;
            }
            self.pulls[i].taken = published;
            let start = self.setup.trace.then(Instant::now);
            if let (true, Some(start)) = (self.take_from(master, replica), start) {
                self.record_replica_update(replica, start);
            }
        }
    }

    /// Before this worker waits for work: each replica here with gradients adds them into
    /// its master's, on this worker, as the master's updater would at its next update
    /// (`train::gather_grads`), so that the updater gathers only what came since. At most
    /// once per master version, and only when the master is free: a replica that hands in
    /// early takes a pass off the updater's serial work; one that waited for the lock would
    /// only move it. The deferred weight-gradient products are settled first under the
    /// replica's lock alone, so the master's forwards do not wait for that GEMM.
    pub(super) fn hand_in_gradients(&mut self) {
        for i in 0..self.pulls.len() {
            let Pull { replica, master, handed, .. } = self.pulls[i];
            let params = &self.setup.shared.params;
            if params.try_live(master).is_none_or(|m| handed == Some(m.version)) {
                continue;
            }
            let start = self.setup.trace.then(Instant::now);
            let touched = params.live(replica).is_some_and(|mut group| {
                group.settle();
                group.touched
            });
            // The master's lock first, as its updater takes them.
            if let (true, Some(mut master)) = (touched, params.try_live(master)) {
                if let Some(mut group) = params.live(replica) {
                    self.pulls[i].handed = Some(master.version);
                    train::gather_grads(&mut master, &mut group);
                }
            }
            if let (true, Some(start)) = (touched, start) {
                self.record_replica_update(replica, start);
            }
        }
    }

    /// A replica's work on its own worker for its master's update (taking the values,
    /// handing in gradients), begun at `start`: traced as an update, at the replica's
    /// first node, so that `--profile` counts it in "updates".
    fn record_replica_update(&mut self, replica: usize, start: Instant) {
        let node = self.setup.program.groups.get(replica).and_then(|g| g.nodes.first().copied());
        self.record(node.unwrap_or(0), TraceKind::Update, start, (0, 0), 0);
    }

    /// Gives `replica` the values of `master` unless it holds them already; whether it did.
    fn take_from(&self, master: usize, replica: usize) -> bool {
        let params = &self.setup.shared.params;
        // The master's lock first, as its updater takes them.
        let Some(master) = params.live(master) else { return false };
        let Some(mut replica) = params.live(replica) else { return false };
        catch_up(&master, &mut replica, self.setup.replica_sync)
    }

    /// Updates a master group: first gathers its replicas' gradients, then, after every
    /// `replica_sync`-th update (and at a flush), gives them its values, or publishes them
    /// for those that take them on their own workers (`take_values`). The master is
    /// locked throughout and each replica in turn (ops hold one group lock at a time).
    /// With replicas in other processes, the update first waits for their gradients
    /// (false: not updated yet; `worker::remote`), and the values go to them too.
    /// A master split over processes with copies of the graph is updated after an
    /// all-reduce instead (`worker::ring`).
    pub(super) fn update(&self, g: usize, info: &GroupInfo, master: &mut LiveGroup, flush: bool) -> bool {
        if !info.ring.is_empty() {
            return self.ring_update(g, info, master, flush);
        }
        if !flush && self.pull_remote(info) {
            return false;
        }
        let params = &self.setup.shared.params;
        for r in self.local_replicas(info) {
            if let Some(mut replica) = params.live(r) {
                train::gather_grads(master, &mut replica);
            }
        }
        let updated = master.update(&self.setup.optimizer);
        if updated && (flush || master.updates.is_multiple_of(self.setup.replica_sync)) {
            let mut published = false;
            for r in self.local_replicas(info) {
                // A replica on another worker takes the values there (`take_values`), in
                // parallel with this one's work; at the end of a run, here.
                if !flush && takes_values_itself(self.setup.program, r) {
                    published = true;
                } else if let Some(mut replica) = params.live(r) {
                    catch_up(master, &mut replica, self.setup.replica_sync);
                }
            }
            if published {
                params.publish(g, master.version);
            }
            // After a flush the run ends: the replicas elsewhere get the values before the
            // next one (`Executor::share_replica_values`).
            if !flush {
                self.push_values(info, master);
            }
        }
        updated
    }
}
