//! Copies of the graph split over processes (`load::copies::split_over_processes`): each
//! process adds up its copies' gradients into the master group in memory, then the
//! processes' updaters of the master (`GroupInfo::ring`, one per process, in process
//! order) all-reduce those sums around a ring, and each applies the same update to its
//! own values and gives them to its copies. No process is a parameter server: each sends
//! and receives 2(P − 1)/P of the gradients per update.
//!
//! - **The ring.** The gradients, the master's tensors end to end, are cut into P chunks.
//!   At step `s` the updater at position `q` sends chunk `q − s` (mod P) to the next
//!   position and receives chunk `q − s − 1` from the previous one: for the first P − 1
//!   steps it adds what it receives into its own (reduce-scatter; after them it holds
//!   one chunk summed over every process), for the next P − 1 it takes the sums as they
//!   come round (all-gather). Every chunk is summed in one process and copied to the
//!   others, so every process holds the same bits and applies the same update: the
//!   values stay equal without being sent. Messages between two processes keep their
//!   order, so an updater receives one reduction's steps in order and all of them
//!   before the next reduction's.
//! - **Who starts.** Process 0's updater counts the instances, as a master's owner in one
//!   process does, and starts a reduction when an update is due; the others join when its
//!   first step reaches them, gathering their copies' gradients then. Every instance
//!   counted ended before, so its gradients are in its copy's accumulators by then. The
//!   count travels with every step and every process divides by it.
//! - **Boundaries.** Each process but 0 acknowledges the update once applied (a
//!   `RemoteWord::Synced`); process 0 confirms a synchronous boundary only after every
//!   acknowledgement, so that no instance of the next window reads old values anywhere.
//! - **A staleness bound.** Process 0's updater starts a reduction only when its own
//!   copies' reads allow it (`Worker::within_bound`, as an owner in one process does).
//!   Every other updater checks its own copies' reads when the first step reaches it:
//!   while one is owed a gradient and is as old as the bound, the step waits
//!   ([`Rings::waiting`]). This updater then holds the admissions, as a deferring owner
//!   does. It hears of its process's ends, and it joins once no such read is left. The
//!   ring cannot move on without it, so no process updates past the bound either. Every
//!   process applies the same updates in the same order, so a version means the same
//!   thing everywhere.
//! - **The end of a run.** A stop with a flush makes process 0 start a last reduction of
//!   every master (marked `flush`, whatever its count), and every updater stops once it
//!   applied its masters' last reductions.

use super::{RemoteWord, ToWorker, Worker, WorkerGauges};
use crate::load::program::GroupInfo;
use crate::ops::train::{self, LiveGroup};
use crate::protocol::ring::{chunk, received_part, steps};
use crate::trace::TraceKind;
use std::collections::HashMap;
use std::ops::Range;
use std::sync::atomic::Ordering;
use std::time::Instant;

/// One reduction under way at an updater.
struct Reduction {
    /// Steps received so far.
    received: usize,
    count: u64,
    flush: bool,
}

/// A reduction's first step, held back for the staleness bound.
struct Join {
    count: u64,
    flush: bool,
    values: Vec<f32>,
}

/// An updater's reductions.
#[derive(Default)]
pub(super) struct Rings {
    active: HashMap<usize, Reduction>,
    /// First steps that wait until this process's reads allow the update.
    waiting: HashMap<usize, Join>,
    /// The run ends: process 0's masters whose last reduction has not started yet.
    flush_owed: Vec<usize>,
    /// Last reductions applied.
    flushed: usize,
    /// The masters this worker updates after a reduction.
    masters: usize,
    /// Per master, the reductions applied and the bytes of gradients sent.
    sent: HashMap<usize, (u64, u64)>,
}

impl Rings {
    pub fn new(masters: usize) -> Rings {
        Rings { masters, ..Rings::default() }
    }

    /// No reduction is under way.
    pub fn idle(&self) -> bool {
        self.active.is_empty() && self.waiting.is_empty()
    }

    /// Every master this worker updates applied its last reduction (always, without any).
    pub fn flushed(&self) -> bool {
        self.idle() && self.flushed >= self.masters
    }

    /// The run's reductions into the worker's gauges, at its end.
    pub fn publish(&self, gauges: &WorkerGauges) {
        for &(reductions, bytes) in self.sent.values() {
            gauges.reductions.fetch_max(reductions, Ordering::Relaxed);
            gauges.reduced_bytes.fetch_add(bytes, Ordering::Relaxed);
            gauges.reduced_bytes_per_update.fetch_add(bytes.checked_div(reductions).unwrap_or(0), Ordering::Relaxed);
        }
    }
}

/// The gradients of a group's tensors, end to end, at `range`.
fn segments<'g>(master: &'g mut LiveGroup, range: Range<usize>) -> Vec<&'g mut [f32]> {
    let mut offset = 0;
    let mut segments = Vec::new();
    for t in master.tensors.iter_mut() {
        let (start, len) = (offset, t.grad.len());
        offset += len;
        let (from, to) = (range.start.max(start), range.end.min(start + len));
        if from < to {
            segments.push(&mut t.grad[from - start..to - start]);
        }
    }
    segments
}

fn grad_len(master: &LiveGroup) -> usize {
    master.tensors.iter().map(|t| t.grad.len()).sum()
}

impl Worker<'_, '_> {
    /// Instance `i` ended or left this process here: the updaters that wait for this
    /// process's reads before joining a reduction hear of it (an instance that left can
    /// send no gradient here any more).
    pub(super) fn tell_joiners(&self, i: usize) {
        for &joiner in &self.joiners {
            if joiner == self.setup.id {
                self.remote.borrow_mut().ended(i);
            } else {
                self.setup.peers.send(joiner, ToWorker::InstanceDone(i));
            }
        }
    }

    /// This worker's position in `info`'s ring.
    fn position(&self, info: &GroupInfo) -> usize {
        info.ring.iter().position(|&w| w == self.setup.id).unwrap_or(0)
    }

    /// `Worker::update` of a master split over processes: process 0 starts a reduction
    /// when none is under way (at a flush, the last one); the update is applied when it
    /// completes ([`Worker::on_reduce`]). Never updates now.
    pub(super) fn ring_update(&self, g: usize, info: &GroupInfo, master: &mut LiveGroup, flush: bool) -> bool {
        if self.position(info) != 0 {
            return false;
        }
        let mut remote = self.remote.borrow_mut();
        if remote.rings.active.contains_key(&g) {
            // The last reduction starts once this one is applied (`apply_reduced`).
            if flush && !remote.rings.flush_owed.contains(&g) {
                remote.rings.flush_owed.push(g);
            }
            return false;
        }
        drop(remote);
        self.start_counted(g, info, master, flush);
        false
    }

    /// Process 0 starts a reduction of `master` over the instances it counted (`last`, or
    /// owed at the run's end: the last one); every other process will acknowledge it.
    fn start_counted(&self, g: usize, info: &GroupInfo, master: &mut LiveGroup, last: bool) {
        let mut remote = self.remote.borrow_mut();
        let owed = remote.rings.flush_owed.contains(&g);
        remote.rings.flush_owed.retain(|&x| x != g);
        remote.unsynced += info.ring.len() - 1;
        drop(remote);
        let count = master.pending;
        self.start_reduction(g, info, master, count, last || owed);
    }

    /// Gathers this process's copies' gradients into `master` and sends the first step.
    fn start_reduction(&self, g: usize, info: &GroupInfo, master: &mut LiveGroup, count: u64, flush: bool) {
        let params = &self.setup.shared.params;
        for r in self.local_replicas(info) {
            if let Some(mut replica) = params.live(r) {
                train::gather_grads(master, &mut replica);
            }
        }
        master.settle();
        self.remote.borrow_mut().rings.active.insert(g, Reduction { received: 0, count, flush });
        let at = self.position(info);
        self.send_step(g, info, master, 0, chunk(grad_len(master), info.ring.len(), at));
    }

    fn send_step(&self, g: usize, info: &GroupInfo, master: &mut LiveGroup, step: usize, range: Range<usize>) {
        let (count, flush) = match self.remote.borrow().rings.active.get(&g) {
            Some(r) => (r.count, r.flush),
            None => return,
        };
        let values: Vec<f32> = segments(master, range).into_iter().flat_map(|s| s.iter().copied()).collect();
        self.remote.borrow_mut().rings.sent.entry(g).or_default().1 += 4 * values.len() as u64;
        let next = info.ring[(self.position(info) + 1) % info.ring.len()];
        let step = u32::try_from(step).unwrap_or(u32::MAX);
        let word = RemoteWord::Reduce { group: g, step, count, flush, values };
        self.setup.peers.send(next, ToWorker::Remote(word));
    }

    /// A step of master `g`'s reduction from the previous process (checked by the bridge:
    /// its sender, its step and its length); joins the reduction at its first step, or
    /// holds that step back while this process's reads exceed the staleness bound, and
    /// applies the update after its last. False when the worker must stop (the run's last
    /// reductions are applied).
    pub(super) fn on_reduce(&mut self, g: usize, step: u32, count: u64, flush: bool, values: Vec<f32>) -> bool {
        let program = self.setup.program;
        let Some(info) = program.groups.get(g).filter(|i| !i.ring.is_empty()) else { return true };
        if self.remote.borrow().rings.waiting.contains_key(&g) {
            return self
                .out_of_step(format!("step {step} of the reduction of `{}` came before its first", info.prefix));
        }
        let joins = !self.remote.borrow().rings.active.contains_key(&g);
        if joins && !flush && !self.may_join(g, info) {
            self.remote.borrow_mut().rings.waiting.insert(g, Join { count, flush, values });
            self.bound_deferred = true;
            self.hold_admissions();
            return true;
        }
        self.reduce_step(g, info, step, count, flush, values)
    }

    /// Whether this process's reads of master `g` allow its update (`Worker::within_bound`).
    fn may_join(&self, g: usize, info: &GroupInfo) -> bool {
        self.setup.shared.params.live(g).is_some_and(|mut master| self.within_bound(info, &mut master))
    }

    /// A step that came out of its order fails the run (false: the worker stops).
    fn out_of_step(&self, message: String) -> bool {
        self.setup.reports.send(super::Report::Failed(crate::error::ExecError::Cluster { message }));
        false
    }

    /// Joins the reductions whose first step waits for the staleness bound, where the
    /// reads now allow it (at a flush, every instance ended: always). True while one
    /// still waits.
    pub(super) fn join_waiting(&mut self, flush: bool) -> bool {
        let program = self.setup.program;
        let waiting: Vec<usize> = self.remote.borrow().rings.waiting.keys().copied().collect();
        let mut deferred = false;
        for g in waiting {
            let Some(info) = program.groups.get(g) else { continue };
            if !flush && !self.may_join(g, info) {
                deferred = true;
                continue;
            }
            let Some(join) = self.remote.borrow_mut().rings.waiting.remove(&g) else { continue };
            // A first step never completes a reduction (two processes or more), so it
            // never ends the worker.
            self.reduce_step(g, info, 0, join.count, join.flush, join.values);
        }
        deferred
    }

    /// [`Worker::on_reduce`] once this updater may take the step.
    fn reduce_step(
        &mut self,
        g: usize,
        info: &GroupInfo,
        step: u32,
        count: u64,
        flush: bool,
        values: Vec<f32>,
    ) -> bool {
        let program = self.setup.program;
        let Some(mut master) = self.setup.shared.params.live(g) else { return true };
        if !self.remote.borrow().rings.active.contains_key(&g) {
            self.start_reduction(g, info, &mut master, count, flush);
        }
        let parts = info.ring.len();
        let received = self.remote.borrow().rings.active.get(&g).map_or(0, |r| r.received);
        if received != step as usize {
            let message =
                format!("step {step} of the reduction of `{}` came where step {received} was due", info.prefix);
            return self.out_of_step(message);
        }
        let range = chunk(grad_len(&master), parts, received_part(self.position(info), received, parts));
        let mut from = values.iter();
        for segment in segments(&mut master, range.clone()) {
            for (x, v) in segment.iter_mut().zip(from.by_ref()) {
                // Reduce-scatter adds; all-gather takes the sum.
                *x = if received + 1 < parts { *x + v } else { *v };
            }
        }
        if let Some(r) = self.remote.borrow_mut().rings.active.get_mut(&g) {
            r.received += 1;
        }
        if received + 1 < steps(parts) {
            self.send_step(g, info, &mut master, received + 1, range);
            return true;
        }
        let start = self.setup.trace.then(Instant::now);
        self.apply_reduced(g, info, &mut master);
        drop(master);
        if let Some(start) = start {
            // The master has no nodes here: the update is traced at copy 0's first.
            let copy0 = info.replica_groups.first().and_then(|&r| program.groups.get(r)?.nodes.first().copied());
            self.record(copy0.unwrap_or(0), TraceKind::Update, start, (0, 0), 0);
        }
        !self.remote.borrow().may_stop()
    }

    /// The reduction of master `g` completed: `master` holds every process's gradients.
    /// Applies the update over the reduction's count, gives the values to this
    /// process's copies, and acknowledges it to process 0; at the end of a run, process 0
    /// then starts the master's last reduction if it is owed.
    fn apply_reduced(&self, g: usize, info: &GroupInfo, master: &mut LiveGroup) {
        let Some(reduction) = self.remote.borrow_mut().rings.active.remove(&g) else { return };
        let counted = master.pending;
        // The same update in every process: over every row, from the reduced gradients
        // (the local row log and deferred products say nothing of the others').
        master.pending = reduction.count;
        master.touched = true;
        master.accumulated = true;
        master.rows = None;
        if !master.update(&self.setup.optimizer) {
            // Nothing counted: no instance's gradients are in the sum.
            master.tensors.iter_mut().for_each(|t| t.grad.iter_mut().for_each(|x| *x = 0.0));
        }
        master.pending = counted.saturating_sub(reduction.count);
        let params = &self.setup.shared.params;
        for r in self.local_replicas(info) {
            if let Some(mut replica) = params.live(r) {
                train::sync_values(master, &mut replica, None);
            }
        }
        let at = self.position(info);
        if at != 0 {
            // The copy group this process reports as: the first copy here.
            let here =
                info.replica_groups.iter().copied().find(|&r| self.setup.program.groups[r].owner == self.setup.id);
            if let Some(group) = here {
                self.setup.peers.send(info.ring[0], ToWorker::Remote(RemoteWord::Synced { group }));
            }
        }
        let mut remote = self.remote.borrow_mut();
        remote.rings.sent.entry(g).or_default().0 += 1;
        if reduction.flush {
            remote.rings.flushed += 1;
        }
        let owed = remote.stopping && remote.rings.flush_owed.contains(&g);
        drop(remote);
        if owed {
            self.start_counted(g, info, master, true);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ops::Range;

    /// The chunks cover the values once, in order, for lengths below, at and above the
    /// ring's size.
    #[test]
    fn chunks_cover_the_values_once() {
        for parts in 1..6 {
            for len in 0..13 {
                let ranges: Vec<Range<usize>> = (0..parts).map(|p| chunk(len, parts, p)).collect();
                assert_eq!(ranges[0].start, 0);
                assert_eq!(ranges[parts - 1].end, len);
                assert!(ranges.windows(2).all(|w| w[0].end == w[1].start));
            }
        }
    }

    /// A ring simulated step by step: after 2(P − 1) steps every position holds the sum of
    /// every position's values, the same bits everywhere.
    #[test]
    fn a_simulated_ring_gives_every_position_the_same_sum() {
        for parts in 2..6 {
            let len = 11;
            let mut held: Vec<Vec<f32>> = (0..parts)
                .map(|p| (0..len).map(|i| (p * 10 + i) as f32 * 0.1 + 1.0 / (p + 1) as f32).collect())
                .collect();
            let expected: Vec<f32> = (0..len).map(|i| (0..parts).map(|p| held[p][i]).sum()).collect();
            // Each position's send of step 0: its own chunk.
            let mut sent: Vec<Vec<f32>> = (0..parts).map(|at| held[at][chunk(len, parts, at)].to_vec()).collect();
            for step in 0..steps(parts) {
                let mut next = vec![Vec::new(); parts];
                for at in 0..parts {
                    let from = (at + parts - 1) % parts;
                    let range = chunk(len, parts, received_part(at, step, parts));
                    assert_eq!(range.len(), sent[from].len(), "P = {parts}, step {step}, at {at}");
                    for (x, v) in held[at][range.clone()].iter_mut().zip(&sent[from]) {
                        *x = if step + 1 < parts { *x + v } else { *v };
                    }
                    next[at] = held[at][range].to_vec();
                }
                sent = next;
            }
            for at in 0..parts {
                assert_eq!(held[at], held[0], "P = {parts}: position {at} differs");
                for (x, y) in held[at].iter().zip(&expected) {
                    assert!((x - y).abs() < 1e-4, "P = {parts}: {x} vs {y}");
                }
            }
        }
    }
}
