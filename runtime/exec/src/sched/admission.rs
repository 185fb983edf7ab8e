//! Admission, update boundaries, credits and staleness bounds: the life of one instance
//! in a run, and the rules that keep training what it says (docs/ARCHITECTURE.md,
//! invariants 10, 12, 13, 17 and 21 point here).
//!
//! One instance, from admission to its end:
//!
//! 1. **Admission.** The run's instances are admitted in order, each once
//!    ([`Admission::take`]), at most `max_active_keys` in flight. An instance enters as one
//!    message for the source node ([`source_message`]), which starts its credit count
//!    at one. Who admits: without boundaries, the source's worker admits the first window when
//!    it starts; after that, the worker at which an instance ends admits the next one (one
//!    for each that ends keeps the count in flight), so no other thread's timing decides
//!    what a worker does, and one worker's runs are deterministic.
//!    With copies of the graph, an instance admitted at an end goes to that worker's copy,
//!    and a window admitted at once is shared among the copies by the instances' sizes
//!    ([`balanced`]).
//! 2. **Credits** ([`Credits`], [`CreditNetting`]). Every message in flight holds one
//!    credit of its instance, so the count is zero exactly when nothing of the instance is
//!    left: in training, when the source got the backward messages of all its consumers;
//!    in inference, when every forward message reached a sink, a loss or a dropped port.
//!    The count never reaches zero while a message is in flight: a message for another
//!    worker takes its credit before it is sent ([`Credits::take`]); the credits of
//!    messages a worker queues for itself are netted against those of the batch it
//!    consumed, and the net change is applied at once, before the worker takes its next
//!    batch ([`CreditNetting::settle`]): no other thread can see those messages before, so
//!    a node passing one message on costs no atomic operation.
//! 3. **The end** ([`Admission::instance_ended`], at the worker that gave back the last
//!    credit), in this order: the parameter groups' owners count the instance (the worker
//!    itself at once, others by an `InstanceDone` in their inbox); the next instance is
//!    admitted (below the limit, see 4); the end goes to the controller on the results
//!    channel, after the instance's losses and outputs (sent while the message that
//!    produced them still held a credit), and then it is counted
//!    ([`Admission::count_end`]): the end that completes a run, or a window the controller
//!    holds, wakes the controller. The controller drains the results channel after every
//!    report and at every watchdog tick, so once the last end woke it every instance's
//!    losses, outputs and end are in.
//! 4. **Update boundaries.** A group updates once it counted `min_update_frequency`
//!    finished instances since its last update, with the mean of the gradients
//!    accumulated meanwhile. An owner counts every instance it heard of in one drain of its
//!    inbox, or finished in one step of its own, before any of its groups updates:
//!    instances batched through the same nodes finish together, their gradients are in the
//!    accumulators together, and the update averages over all of them
//!    (`Worker::update_due`). Asynchronous training, evaluation, inference and gradients
//!    stop at no boundary ([`Boundaries::Free`]). Synchronous training
//!    ([`Boundaries::Held`]) admits in windows: instances below the limit only; once every
//!    instance below it ended and the updates owed there are applied, the holder moves the
//!    limit to the next boundary ([`room`]: as many as may finish before some group must
//!    update) and admits the window's first `max_active_keys` ([`Admission::open_window`]);
//!    each end below the limit admits one more, as without boundaries. So no instance runs
//!    on parameters older than the last boundary's update: training is minibatch SGD
//!    whatever the workers. The holder is the one thread that knows when the updates are
//!    applied ([`Holder`]): where one worker owns every group (every node on it, or copies
//!    of the graph in one process), that worker, right after its own updates, once it
//!    counted the end of every instance below the limit ([`Admission::open_held_window`]:
//!    no other thread wakes at the boundary but the workers it admits to); otherwise the
//!    controller ([`ControllerHold`]), which mirrors the groups' counts from the ends it
//!    reads, asks the owners of the groups that reached their update to confirm it (a `Confirm` that
//!    finds, ahead of it in each owner's inbox, the `InstanceDone` of every instance
//!    before the boundary, since the worker that finished an instance told the owners
//!    before the controller), and opens the next window when all answered.
//! 5. **Halting.** A training loss that is not finite halts admission ([`Admission::halt`])
//!    and wakes the controller, which reports the instance: the parameters are those of the
//!    last update.
//! 6. **Staleness** (DSP). A Ppt's forward notes, in its group, the version its instance
//!    read (the master's version a replica was last given); its backward notes that the
//!    gradient of that read is in the accumulators; the update that applies it measures
//!    the updates in between (`ops::train::Staleness`). Under a bound K
//!    (`ExecConfig::max_staleness`, per group `GroupInfo::max_staleness`), an owner
//!    defers an update due while a read still owed a gradient, by an instance in flight
//!    ([`Credits::live`]), of the group or of its replicas, is K updates old
//!    ([`update_within_bound`]): no gradient is applied more than K updates after the
//!    version it read. Deferring never blocks a message, so the read it waits for ends,
//!    and the owner tries again after each of its steps (`Worker::update_groups`). Split
//!    over processes, a process's credits say nothing of the others', so an owner takes an
//!    instance as in flight until it heard of its end (the `InstanceDone` every end sends
//!    it names the instance; `worker::remote`'s `Remote::in_flight`), and an owner outside
//!    process 0 holds and releases process 0's admissions by a word to it.
//!    While an owner defers, admission holds (DSP's FIFO between stages; asynchronous
//!    training only): an end admits no new instance, which would read the current
//!    versions and could defer the update again, but owes its admission
//!    ([`Admission::hold`]); the instances in flight drain, the update goes through, and
//!    the last owner to release makes the owed admissions ([`Admission::release`]). So
//!    every instance is still admitted once, in order, at most `max_active_keys` in
//!    flight, and a group updates about a window of instances after its interval (in the
//!    model the proptest runs, at most a window and a batch), not all at the end of the
//!    epoch (with K = 0 and many in flight some read is nearly
//!    always owed).

use crate::load::program::{GroupInfo, Program};
use crate::message::{Dir, Envelope, Msg, Payload, UNSET};
use crate::ops::train::ParamAccess;
use crate::ExecInstance;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering};
use std::sync::Mutex;

/// Whether admissions stop at update boundaries, and who opens the next window.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Boundaries {
    /// No boundary: asynchronous training, evaluation, inference, gradients.
    Free,
    /// Synchronous training: admitted in windows between update boundaries.
    Held(Holder),
}

/// Who opens the next window at a synchronous update boundary: the one thread that knows
/// the updates owed there are applied.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Holder {
    /// One worker owns every group (`Program::sole_owner`: every node on it, or copies of
    /// the graph in one process): it hears of every instance's end, applies the updates
    /// itself, then opens the window, with no thread woken but the workers it admits to.
    Owner(usize),
    /// Groups owned by several workers, or a run over processes: the controller, once
    /// every owner confirmed.
    Controller,
}

impl Boundaries {
    /// The boundaries of a run: held only in synchronous training; by the controller
    /// when the run is split over processes (the instances end on process 0, where it
    /// runs) or its groups have several owners.
    pub fn of_run(synchronous_training: bool, program: &Program, across_processes: bool) -> Boundaries {
        match (synchronous_training, program.sole_owner().filter(|_| !across_processes)) {
            (false, _) => Boundaries::Free,
            (true, Some(owner)) => Boundaries::Held(Holder::Owner(owner)),
            (true, None) => Boundaries::Held(Holder::Controller),
        }
    }
}

/// Which instance is admitted next, and how many ended: shared by the controller and
/// every worker of a run.
pub(crate) struct Admission {
    next: AtomicUsize,
    n: usize,
    /// Instances below this may be admitted: `n` without boundaries, else the next update
    /// boundary (moved by the holder).
    limit: AtomicUsize,
    /// A training loss was not finite: nothing more is admitted while the controller stops
    /// the run.
    halted: AtomicBool,
    /// Instances ended (counted after their end was reported).
    ended: AtomicUsize,
    pub boundaries: Boundaries,
    /// The most instances in flight at once (`max_active_keys`).
    window: usize,
    /// Owners deferring an update for a staleness bound (see [`Admission::hold`]): while
    /// any does, an end admits no new instance.
    held: AtomicUsize,
    /// Admissions the ends made while held, still to make (see [`Admission::after_end`]).
    owed: AtomicUsize,
}

impl Admission {
    pub fn new(n: usize, boundaries: Boundaries, window: usize) -> Admission {
        // With boundaries held, nothing is admitted before the holder opens the first window.
        let limit = if boundaries == Boundaries::Free { n } else { 0 };
        Admission {
            next: AtomicUsize::new(0),
            n,
            limit: AtomicUsize::new(limit),
            halted: AtomicBool::new(false),
            ended: AtomicUsize::new(0),
            boundaries,
            window,
            held: AtomicUsize::new(0),
            owed: AtomicUsize::new(0),
        }
    }

    /// The first window, for the source's worker to admit when it starts and no boundary
    /// holds admissions back (a holder opens its first window itself).
    pub fn first_window(&self) -> impl Iterator<Item = usize> + '_ {
        let count = if self.boundaries == Boundaries::Free { self.window } else { 0 };
        (0..count).map_while(|_| self.take())
    }

    /// The next instance, if any is left below the limit and admission is not halted.
    pub fn take(&self) -> Option<usize> {
        if self.halted.load(Ordering::Acquire) {
            return None;
        }
        let limit = self.limit.load(Ordering::Acquire);
        self.next.fetch_update(Ordering::AcqRel, Ordering::Acquire, |i| (i < limit).then_some(i + 1)).ok()
    }

    /// The limit below which instances may be admitted.
    pub fn limit(&self) -> usize {
        self.limit.load(Ordering::Acquire)
    }

    /// Instances admitted so far (`0..admitted()`).
    pub fn admitted(&self) -> usize {
        self.next.load(Ordering::Acquire)
    }

    /// Admits nothing more (a worker saw a training loss that is not finite).
    pub fn halt(&self) {
        self.halted.store(true, Ordering::Release);
    }

    /// The holder of the boundaries, once the `ended` instances are every one below the
    /// limit and the updates owed there are applied: moves the limit `room` instances
    /// further (never past the run) and admits the new window's first `max_active_keys`.
    pub fn open_window(&self, ended: usize, room: usize) -> impl Iterator<Item = usize> + '_ {
        self.limit.store(ended.saturating_add(room).min(self.n), Ordering::Release);
        (0..self.window).map_while(|_| self.take())
    }

    /// The worker holding the boundaries ([`Holder::Owner`]), after the updates of what
    /// it counted so far: when every instance below the limit ended (`heard`: the ends it
    /// counted, its own and those other workers told it of), the next window, up to the
    /// next boundary of the groups it owns (`finished`: instances ended and not yet added
    /// to those groups' counts). Nothing otherwise. Counting the ends it heard, not the
    /// shared count, it opens no window before it counted (and so updated for) them all.
    pub fn open_held_window<'s>(
        &'s self,
        worker: usize,
        program: &Program,
        params: &ParamAccess,
        (finished, heard): (u64, usize),
    ) -> impl Iterator<Item = usize> + 's {
        let holds = self.boundaries == Boundaries::Held(Holder::Owner(worker));
        let open = holds && heard >= self.limit();
        let room = if open {
            room(
                owned_masters(program, worker)
                    .filter_map(|(g, info)| Some((info.min_update_frequency, params.live(g)?.pending + finished))),
            )
        } else {
            0
        };
        open.then(|| self.open_window(heard, room)).into_iter().flatten()
    }

    /// Instance `instance` ended at a worker (its last credit came back there): the steps
    /// of its end, in their order (see the module doc, 3).
    pub fn instance_ended(&self, instance: usize, program: &Program, credits: &Credits, worker: &mut impl Courier) {
        worker.tell_owners(instance);
        if let Some(next) = self.after_end() {
            let (to, env) = source_message(program, credits, next, Some(worker.id()));
            worker.admit(to, env);
        }
        worker.report_done(instance);
        if self.count_end() {
            worker.wake_controller();
        }
    }

    /// The instance an end admits: the next one, unless an owner holds admissions for its
    /// staleness bound (asynchronous training only; synchronous windows hold by
    /// themselves), when the admission is owed instead and made by the last owner to
    /// release ([`Admission::release`]). The owed count is raised before the hold is read
    /// and the releaser drops the hold before it takes the count (all `SeqCst`), so an
    /// owed admission is made exactly once: here, or by a releaser that saw it.
    fn after_end(&self) -> Option<usize> {
        if self.boundaries != Boundaries::Free {
            return self.take();
        }
        self.owed.fetch_add(1, Ordering::SeqCst);
        if self.held.load(Ordering::SeqCst) > 0 {
            return None;
        }
        let claimed = self.owed.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |o| o.checked_sub(1)).is_ok();
        if claimed {
            self.take()
        } else {
            None
        }
    }

    /// An owner began deferring an update for a staleness bound (DSP's FIFO between
    /// stages): until it releases, ends admit nothing. An instance admitted now would read
    /// the current versions, and its reads, owed until its backward comes, could defer
    /// the update again; held, the instances in flight drain and the update goes through
    /// once the reads it waits for are in. Without the hold, with K = 0 and many
    /// instances in flight, some read is always owed and the updates bunch up at the end
    /// of the epoch. Each owner holds at most once at a time (`Worker::update_groups`
    /// tracks its own), and only in asynchronous training.
    pub fn hold(&self) {
        if self.boundaries == Boundaries::Free {
            self.held.fetch_add(1, Ordering::SeqCst);
        }
    }

    /// An owner that held ([`Admission::hold`]) applied its deferred update: when it was
    /// the last one holding, the admissions owed meanwhile, each made once (see
    /// [`Admission::after_end`]). Every hold is released: an owner defers only while an
    /// instance in flight owes a read, instances in flight never wait for an update, and
    /// each end tells the owners, who try their updates again; so nothing owed is left.
    pub fn release(&self) -> impl Iterator<Item = usize> + '_ {
        let last = self.boundaries == Boundaries::Free && self.held.fetch_sub(1, Ordering::SeqCst) == 1;
        let owed = if last { self.owed.swap(0, Ordering::SeqCst) } else { 0 };
        (0..owed).map_while(|_| self.take())
    }

    /// Counts an instance's end (reported on the results channel, before this call); true
    /// for the run's last and, when the controller holds the boundaries, for the last below
    /// the limit: the ends the controller must wake for. The limit moves only once the
    /// holder saw every end below it.
    pub fn count_end(&self) -> bool {
        let ended = self.ended.fetch_add(1, Ordering::AcqRel) + 1;
        ended == self.n
            || (self.boundaries == Boundaries::Held(Holder::Controller) && ended == self.limit.load(Ordering::Acquire))
    }
}

/// What a worker does for [`Admission::instance_ended`]: the admission decides, the worker
/// delivers.
pub(crate) trait Courier {
    /// The worker's index.
    fn id(&self) -> usize;
    /// Training: the owners of the parameter groups count one more finished instance (the
    /// worker itself at once, others by a word in their inbox).
    fn tell_owners(&mut self, instance: usize);
    /// An admission message for worker `to`'s source.
    fn admit(&mut self, to: usize, env: Envelope);
    /// The instance's end, on the results channel.
    fn report_done(&mut self, instance: usize);
    /// Wakes the controller to read the results channel.
    fn wake_controller(&mut self);
}

/// How many more instances may finish before one of the groups (each as its update
/// interval and the instances it counted since its last update) must update: the least
/// room left (at least 1), unbounded without groups. The one rule of a synchronous
/// boundary, whichever thread holds it.
pub(crate) fn room(groups: impl Iterator<Item = (u64, u64)>) -> usize {
    let room = groups.map(|(interval, pending)| interval.saturating_sub(pending).max(1)).min();
    room.map_or(usize::MAX, |r| usize::try_from(r).unwrap_or(usize::MAX))
}

/// The parameter groups worker `id` counts instances for and updates: those it owns that
/// are no replica (a replica's group updates with its master).
pub(crate) fn owned_masters(program: &Program, id: usize) -> impl Iterator<Item = (usize, &GroupInfo)> {
    program
        .groups
        .iter()
        .enumerate()
        .filter(move |(_, info)| info.master.is_none() && (info.owner == id || info.ring.contains(&id)))
}

/// The admission message of `instance` for a source node, and the source's worker; the
/// instance's credit count starts at that one message. With copies of the graph, the
/// source of the copy of worker `at`, which admits it, or in turn when none does
/// (`Program::copy_source`).
pub(crate) fn source_message(
    program: &Program,
    credits: &Credits,
    instance: usize,
    at: Option<usize>,
) -> (usize, Envelope) {
    let mut state = vec![UNSET; program.state_len.max(1)];
    state[0] = instance as i64;
    credits.start(instance);
    let msg = Msg::new(Payload::Unit, state.into_boxed_slice());
    let (node, worker) = program.copy_source(instance, at);
    let env = Envelope { node, port: 0, dir: Dir::Forward, msg };
    (worker, env)
}

/// A window's instances admitted at once, each with the worker that admits it to its copy
/// of the graph (`None`: the one source, or copies by turns). With copies, the largest
/// first ([`ExecInstance::work`]), each to the copy with the least work so far, ties to the
/// lower copy (longest processing time first): a synchronous window ends when its last
/// copy does, and by turns one copy could draw the long lists or trees while the other
/// waits. In the instances' order, and the same for the same window (`--deterministic`).
pub(crate) fn balanced(
    program: &Program,
    instances: &[&(dyn ExecInstance + Sync)],
    window: impl IntoIterator<Item = usize>,
) -> Vec<(usize, Option<usize>)> {
    let copies = program.copies();
    let window = window.into_iter();
    if copies < 2 {
        return window.map(|i| (i, None)).collect();
    }
    let work = |i: usize| instances.get(i).map_or(1, |x| x.work().max(1));
    let mut largest: Vec<(usize, usize)> = window.map(|i| (work(i), i)).collect();
    largest.sort_unstable_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
    let mut load = vec![0usize; copies];
    let mut out: Vec<(usize, Option<usize>)> = largest
        .into_iter()
        .map(|(work, i)| {
            let copy = (0..copies).min_by_key(|&c| (load[c], c)).unwrap_or(0);
            load[copy] += work;
            (i, Some(program.copy_worker(copy)))
        })
        .collect();
    out.sort_unstable_by_key(|&(i, _)| i);
    out
}

/// The staleness bound (DSP; `ExecConfig::max_staleness`): a group at `version` may update
/// unless a read still owed a gradient used a version `bound` or more updates old
/// (`oldest_owed`), since that gradient would then be applied more than `bound` updates
/// after its version. The gradients already accumulated are applied at most `bound`
/// updates late: every update before let their reads through. So the bound holds by
/// deferring updates alone; a deferred group keeps accumulating and tries again after its
/// worker's next step, and the read it waits for ends (its gradient comes, or its
/// instance ends) whatever the updates do, since no message waits for an update.
pub(crate) fn update_within_bound(version: u64, oldest_owed: Option<u64>, bound: Option<u64>) -> bool {
    match (bound, oldest_owed) {
        (Some(k), Some(read)) => version.saturating_sub(read) < k,
        _ => true,
    }
}

/// Per instance of a run, the messages of it in flight (in this process).
pub(crate) struct Credits {
    counts: Vec<AtomicU32>,
    /// A run split over processes (`crate::cluster`): per instance, the processes whose
    /// credit this process keeps until its count returns to zero, oldest first (empty
    /// otherwise, and for a one-process run).
    parents: Vec<Mutex<VecDeque<u16>>>,
}

impl Credits {
    pub fn new(instances: usize) -> Credits {
        Credits { counts: (0..instances).map(|_| AtomicU32::new(0)).collect(), parents: Vec::new() }
    }

    /// Credits of a run split over processes.
    pub fn across_processes(instances: usize) -> Credits {
        let parents = (0..instances).map(|_| Mutex::new(VecDeque::new())).collect();
        Credits { counts: (0..instances).map(|_| AtomicU32::new(0)).collect(), parents }
    }

    /// A message of `instance` arrived from process `from`, holding a credit there: it
    /// takes one here. False when the sender's credit goes back at once (the instance had
    /// messages here already); true when this process keeps it until its count returns
    /// to zero ([`Credits::depart`]).
    pub fn arrive(&self, instance: usize, from: usize) -> bool {
        let (Some(count), Some(parents)) = (self.counts.get(instance), self.parents.get(instance)) else {
            return false;
        };
        // Under the instance's lock, so that the parents queue in the order of the
        // engagements they belong to; a count that returns to zero meanwhile pops the
        // older one.
        let Ok(mut parents) = parents.lock() else { return false };
        if count.fetch_add(1, Ordering::AcqRel) == 0 {
            parents.push_back(u16::try_from(from).unwrap_or(u16::MAX));
            true
        } else {
            false
        }
    }

    /// `instance`'s count returned to zero here: the process whose credit to give back
    /// now, or `None` where the instance was admitted (it ended).
    pub fn depart(&self, instance: usize) -> Option<usize> {
        let parents = self.parents.get(instance)?;
        parents.lock().ok()?.pop_front().map(usize::from)
    }

    /// Whether a report of `instance` sent to process 0 from here must take a credit of
    /// its own (`crate::cluster`, Reports before ends): unless this process's one parent
    /// for the instance is process 0, its end reaches process 0 through another process
    /// and could overtake the report. Asked while a message of the instance holds a
    /// credit here, so the instance is engaged here and its parent is the queue's last;
    /// an older one still queued (its count just returned to zero) asks for a receipt too.
    pub fn report_needs_receipt(&self, instance: usize) -> bool {
        let Some(parents) = self.parents.get(instance) else { return false };
        parents.lock().map_or(true, |p| p.len() != 1 || p.front() != Some(&0))
    }

    /// The admission message's credit.
    fn start(&self, instance: usize) {
        if let Some(count) = self.counts.get(instance) {
            count.store(1, Ordering::Release);
        }
    }

    /// Whether `instance` was admitted and has not ended: some message of it is in flight.
    pub fn live(&self, instance: usize) -> bool {
        self.counts.get(instance).is_some_and(|c| c.load(Ordering::Acquire) > 0)
    }

    /// A message of `instance` leaves for another worker: its credit is taken before it is
    /// sent, so the count cannot reach zero while it travels.
    pub fn take(&self, instance: usize) {
        if let Some(count) = self.counts.get(instance) {
            count.fetch_add(1, Ordering::AcqRel);
        }
    }
}

/// One worker's credits of the batch it is handling: per instance, the messages it queued
/// for itself less those of the batch it consumed. The default nets no instance's credits
/// (a placeholder while a worker settles).
#[derive(Default)]
pub(crate) struct CreditNetting {
    /// Net change per instance, by instance ([`CreditNetting::UNNOTED`] where none is
    /// noted): a step notes a credit per message, and finding an instance's entry among
    /// the step's 64 by search or hashing was a visible share of the step. Grown on
    /// demand, up to the run's instances.
    deltas: Vec<i64>,
    /// The instances noted since the last settlement, in the order first noted.
    noted: Vec<usize>,
    /// The run's instances ([`Credits`]'); others have no credits to net.
    instances: usize,
}

impl CreditNetting {
    const UNNOTED: i64 = i64::MIN;

    pub fn new(credits: &Credits) -> CreditNetting {
        CreditNetting { deltas: Vec::new(), noted: Vec::new(), instances: credits.counts.len() }
    }

    /// Notes `delta` credits of `instance` (+1 per message queued here, -1 per message of
    /// the batch).
    pub fn add(&mut self, instance: usize, delta: i64) {
        if instance >= self.deltas.len() {
            if instance >= self.instances {
                return;
            }
            let len = (instance + 1).max(2 * self.deltas.len()).min(self.instances);
            self.deltas.resize(len, Self::UNNOTED);
        }
        let d = &mut self.deltas[instance];
        if *d == Self::UNNOTED {
            *d = 0;
            self.noted.push(instance);
        }
        *d += delta;
    }

    /// Applies each instance's net change at once (so its count passes through no value
    /// that adding first and releasing after would not), and calls `ended` for each
    /// instance whose last credit this gave back.
    pub fn settle(&mut self, credits: &Credits, mut ended: impl FnMut(usize)) {
        for i in self.noted.drain(..) {
            let delta = std::mem::replace(&mut self.deltas[i], Self::UNNOTED);
            let Some(count) = credits.counts.get(i) else { continue };
            let change = u32::try_from(delta.unsigned_abs()).unwrap_or(u32::MAX);
            if delta > 0 {
                count.fetch_add(change, Ordering::AcqRel);
            } else if delta < 0 && count.fetch_sub(change, Ordering::AcqRel) == change {
                ended(i);
            }
        }
    }
}

/// The controller's side of boundaries it holds ([`Holder::Controller`]): a mirror of the
/// groups' counts, kept from the ends it reads (the workers that finished the instances
/// told the owners themselves), and the owners' confirmations it waits for.
pub(crate) struct ControllerHold {
    /// Per group, instances counted since its last update (as its owner counts them).
    pending: Vec<u64>,
    /// Owners of the groups that reached their update in the current window.
    confirm: Vec<usize>,
    /// Owners asked to confirm that have not yet answered: nothing is admitted until they
    /// did, so that no node reads parameters (a replica's copy, a group shared with another
    /// worker's node) before the update.
    awaiting: usize,
}

impl ControllerHold {
    /// `pending`: the groups' counts carried over from the last run.
    pub fn new(pending: &[u64]) -> ControllerHold {
        ControllerHold { pending: pending.to_vec(), confirm: Vec::new(), awaiting: 0 }
    }

    /// The controller read the end of an instance, the `done`-th of the run: counts it in
    /// the mirror and, at the boundary, the owners to ask for a confirmation (each then
    /// passed to [`ControllerHold::asked`] once the question is sent).
    pub fn ended(&mut self, program: &Program, admission: &Admission, done: usize) -> Vec<usize> {
        if admission.boundaries != Boundaries::Held(Holder::Controller) {
            return Vec::new();
        }
        for (p, g) in self.pending.iter_mut().zip(&program.groups) {
            if g.master.is_some() {
                continue;
            }
            *p += 1;
            if *p >= g.min_update_frequency {
                *p = 0;
                if !self.confirm.contains(&g.owner) {
                    self.confirm.push(g.owner);
                }
            }
        }
        if done == admission.limit() {
            std::mem::take(&mut self.confirm)
        } else {
            Vec::new()
        }
    }

    /// An owner was asked to confirm its updates.
    pub fn asked(&mut self) {
        self.awaiting += 1;
    }

    /// An owner confirmed.
    pub fn confirmed(&mut self) {
        self.awaiting = self.awaiting.saturating_sub(1);
    }

    /// Once every instance below the limit ended (`done` of them read) and every owner
    /// confirmed, the next window (see [`Admission::open_window`]); nothing otherwise.
    pub fn open<'a>(
        &self,
        program: &Program,
        admission: &'a Admission,
        done: usize,
    ) -> impl Iterator<Item = usize> + 'a {
        let open = admission.boundaries == Boundaries::Held(Holder::Controller)
            && self.awaiting == 0
            && done >= admission.limit();
        // Replicas' groups update with their masters.
        let groups = program.groups.iter().zip(&self.pending).filter(|(g, _)| g.master.is_none());
        let room = if open { room(groups.map(|(g, &p)| (g.min_update_frequency, p))) } else { 0 };
        open.then(|| admission.open_window(done, room)).into_iter().flatten()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// A parameter group in the model of `held_admissions_keep_bounds_without_bunching_updates`.
    #[derive(Default)]
    struct ModelGroup {
        owner: usize,
        interval: u64,
        bound: Option<u64>,
        /// Replicated, its replicas synchronised after every this many updates.
        sync: Option<u64>,
        version: u64,
        /// The master's version the replicas hold.
        base: u64,
        pending: u64,
        /// Reads owed a gradient: the instance and the version it read.
        reads: Vec<(usize, u64)>,
        /// The versions read by the gradients in the accumulators.
        applied: Vec<u64>,
        measured: u64,
        ends_since_update: usize,
        most_ends_between_updates: usize,
    }

    proptest! {
        /// The boundary rule: at least 1 (a run always moves), no more than any group's
        /// room left, and exactly the least of them.
        #[test]
        fn room_is_the_least_room_left(groups in proptest::collection::vec((1u64..20, 0u64..25), 0..6)) {
            let r = room(groups.iter().copied());
            if groups.is_empty() {
                prop_assert_eq!(r, usize::MAX);
            } else {
                prop_assert!(r >= 1);
                let least = groups.iter().map(|&(k, p)| k.saturating_sub(p).max(1)).min().unwrap_or(1);
                prop_assert_eq!(r as u64, least);
            }
        }

        /// A run with boundaries held: instances are admitted in order, each once, never
        /// more than the window in flight, never one past a boundary before every instance
        /// before it ended; with the controller holding, `count_end` asks for a wake-up at
        /// each boundary and at the run's end, and only there.
        #[test]
        fn windows_never_cross_a_boundary(
            n in 0usize..40,
            window in 1usize..6,
            interval in 1u64..7,
            controller in any::<bool>(),
            picks in proptest::collection::vec(any::<prop::sample::Index>(), 0..200),
        ) {
            let holder = if controller { Holder::Controller } else { Holder::Owner(0) };
            let admission = Admission::new(n, Boundaries::Held(holder), window);
            prop_assert_eq!(admission.first_window().count(), 0);
            // One group of the given interval, counted as the holder counts it.
            let mut pending = 0u64;
            let mut in_flight: Vec<usize> = Vec::new();
            let mut admitted = Vec::new();
            let mut ended = 0usize;
            let mut boundary = 0usize;
            let mut picks = picks.into_iter();
            loop {
                if ended >= admission.limit() {
                    let r = room(std::iter::once((interval, pending)));
                    let before = admission.limit();
                    let opened: Vec<usize> = admission.open_window(ended, r).collect();
                    prop_assert!(admission.limit() > before || admission.limit() == n);
                    boundary = admission.limit();
                    for i in opened {
                        admitted.push(i);
                        in_flight.push(i);
                    }
                }
                if in_flight.is_empty() {
                    break;
                }
                prop_assert!(in_flight.len() <= window);
                prop_assert!(in_flight.iter().all(|&i| i < boundary));
                // Some instance in flight ends (any order), and admits the next.
                let at = picks.next().map_or(0, |p| p.index(in_flight.len()));
                in_flight.swap_remove(at);
                pending += 1;
                if pending >= interval {
                    pending = 0;
                }
                if let Some(next) = admission.take() {
                    prop_assert!(next < boundary);
                    admitted.push(next);
                    in_flight.push(next);
                }
                ended += 1;
                let wake = admission.count_end();
                let expected = ended == n || (controller && ended == admission.limit());
                prop_assert_eq!(wake, expected);
            }
            prop_assert_eq!(admitted, (0..n).collect::<Vec<_>>());
            prop_assert_eq!(ended, n);
        }

        /// The staleness bound: an update is let through exactly when every read still
        /// owed a gradient ends up at most `bound` updates old after it; no bound lets
        /// every update through, as does no read owed.
        #[test]
        fn an_update_never_makes_an_owed_read_staler_than_the_bound(
            version in 0u64..50,
            age in 0u64..50,
            bound in proptest::option::of(0u64..10),
        ) {
            let read = version.saturating_sub(age);
            let allowed = update_within_bound(version, Some(read), bound);
            match bound {
                None => prop_assert!(allowed),
                Some(k) => prop_assert_eq!(allowed, version + 1 - read <= k),
            }
            prop_assert!(update_within_bound(version, None, bound));
        }

        /// Admission held under staleness bounds, on a model of the protocol: instances
        /// read each group (a replicated group's master or a replica that holds the
        /// master's values of its last sync), then give its gradients back in reverse,
        /// advancing in random batches; owners (up to 3 workers) count every end, update a
        /// group that counted its interval unless [`update_within_bound`] defers it, and
        /// hold admissions while any of their groups defers. Every instance is admitted
        /// and ends exactly once, in order; no gradient is applied more than its group's
        /// bound late; the run never stalls with instances left; and updates are spread
        /// over the run, not bunched at its end: a group that counted its interval updates
        /// before the instances then in flight (at most the window) and one batch more
        /// ended. Without the hold, with K = 0 and a window of 8, some read is nearly
        /// always owed and that count grows to the run's length.
        #[test]
        fn held_admissions_keep_bounds_without_bunching_updates(
            n in 0usize..120,
            window in 1usize..=8,
            max_batch in 1usize..=4,
            workers in 1usize..=3,
            groups in proptest::collection::vec(
                (0usize..3, 1u64..=4, proptest::option::weighted(0.8, 0u64..=3), proptest::option::of(1u64..=3)),
                1..=4,
            ),
            seed in any::<u64>(),
        ) {
            let mut rng = seed | 1;
            let mut next_random = move |below: usize| {
                // xorshift64: the interleaving only needs to vary with the seed.
                rng ^= rng << 13;
                rng ^= rng >> 7;
                rng ^= rng << 17;
                (rng % below.max(1) as u64) as usize
            };
            let mut model: Vec<ModelGroup> = groups
                .iter()
                .map(|&(owner, interval, bound, sync)| ModelGroup {
                    owner: owner % workers,
                    interval,
                    // A replicated group's bound is at least its sync interval (the
                    // executor refuses less: its replicas read values up to that old).
                    bound: bound.map(|k| sync.map_or(k, |s| k.max(s))),
                    sync,
                    ..ModelGroup::default()
                })
                .collect();
            let admission = Admission::new(n, Boundaries::Free, window);
            let mut in_flight: Vec<(usize, usize)> = admission.first_window().map(|i| (i, 0)).collect();
            let mut admitted: Vec<usize> = in_flight.iter().map(|&(i, _)| i).collect();
            let mut holding = vec![false; workers];
            let mut ended = 0usize;
            let steps_per_instance = 2 * model.len();
            loop {
                // Each owner tries its due updates, then holds or releases admissions.
                let live: Vec<usize> = in_flight.iter().map(|&(i, _)| i).collect();
                let mut deferring = vec![false; workers];
                for g in &mut model {
                    if g.pending < g.interval {
                        continue;
                    }
                    let oldest = g.reads.iter().filter(|(i, _)| live.contains(i)).map(|&(_, v)| v).min();
                    if !update_within_bound(g.version, oldest, g.bound) {
                        deferring[g.owner] = true;
                        continue;
                    }
                    for read in g.applied.drain(..) {
                        let late = g.version - read;
                        prop_assert!(g.bound.is_none_or(|k| late <= k), "{} updates late, bound {:?}", late, g.bound);
                        g.measured += 1;
                    }
                    g.version += 1;
                    g.pending = 0;
                    g.most_ends_between_updates = g.most_ends_between_updates.max(g.ends_since_update);
                    g.ends_since_update = 0;
                    if g.sync.is_some_and(|s| g.version % s == 0) {
                        g.base = g.version;
                    }
                }
                for (w, held) in holding.iter_mut().enumerate() {
                    if deferring[w] && !*held {
                        admission.hold();
                    } else if !deferring[w] && *held {
                        for i in admission.release() {
                            admitted.push(i);
                            in_flight.push((i, 0));
                        }
                    }
                    *held = deferring[w];
                }
                if in_flight.is_empty() {
                    break;
                }
                prop_assert!(in_flight.len() <= window);
                // A batch of instances each takes its next step: a read of group s (the
                // master's current version, or a replica's last sync), or the gradient of
                // group 2G - 1 - s.
                let batch = 1 + next_random(max_batch.min(in_flight.len()));
                let mut ends = Vec::new();
                for _ in 0..batch {
                    let at = next_random(in_flight.len());
                    let (instance, step) = &mut in_flight[at];
                    let (instance, s) = (*instance, *step);
                    *step += 1;
                    if s < model.len() {
                        let g = &mut model[s];
                        let version = if g.sync.is_some() && next_random(2) == 1 { g.base } else { g.version };
                        g.reads.push((instance, version));
                    } else {
                        let g = &mut model[steps_per_instance - 1 - s];
                        let read = g.reads.iter().position(|&(i, _)| i == instance);
                        prop_assert!(read.is_some(), "a gradient without its read");
                        let (_, version) = g.reads.swap_remove(read.unwrap_or(0));
                        g.applied.push(version);
                    }
                    if s + 1 == steps_per_instance {
                        in_flight.swap_remove(at);
                        ends.push(instance);
                    }
                }
                for _ in ends {
                    ended += 1;
                    for g in &mut model {
                        g.pending += 1;
                        g.ends_since_update += 1;
                    }
                    if let Some(i) = admission.after_end() {
                        admitted.push(i);
                        in_flight.push((i, 0));
                    }
                }
            }
            prop_assert_eq!(&admitted, &(0..n).collect::<Vec<_>>(), "admitted once each, in order");
            prop_assert_eq!(ended, n);
            for g in &model {
                // The end of the run's flush applies what is left.
                prop_assert_eq!(g.measured + g.applied.len() as u64, n as u64);
                let most = g.interval as usize + window + max_batch;
                prop_assert!(
                    g.most_ends_between_updates <= most,
                    "{} ends between two updates, interval {}, window {}", g.most_ends_between_updates, g.interval, window
                );
            }
        }

        /// Credit netting: an instance's messages, handled in batches at one worker, some
        /// passing on messages it queues for itself and some sending to another worker
        /// (which returns them later); its count reaches zero once, exactly when the last
        /// message is consumed, never before.
        #[test]
        fn credits_reach_zero_once_at_the_last_message(
            steps in proptest::collection::vec((0usize..3, 0usize..3, 1usize..4), 1..60),
        ) {
            let credits = Credits::new(1);
            credits.start(0);
            let mut netting = CreditNetting::new(&credits);
            // Messages queued here, and sent away (in flight on the other worker).
            let (mut local, mut remote) = (1usize, 0usize);
            let mut ends = 0;
            for (queue_here, send_away, batch) in steps {
                if local == 0 && remote == 0 {
                    break;
                }
                if local == 0 {
                    // The other worker sends one back: its credit moves with it.
                    remote -= 1;
                    local += 1;
                    continue;
                }
                let consumed = batch.min(local);
                local -= consumed;
                for _ in 0..consumed {
                    netting.add(0, -1);
                }
                for _ in 0..queue_here {
                    netting.add(0, 1);
                    local += 1;
                }
                for _ in 0..send_away {
                    credits.take(0);
                    remote += 1;
                }
                netting.settle(&credits, |_| ends += 1);
                let live = local + remote;
                prop_assert_eq!(credits.counts[0].load(Ordering::Acquire) as usize, live);
                prop_assert_eq!(ends, usize::from(live == 0));
            }
        }
    }

    proptest! {
        /// A batch holds messages of several instances, interleaved: each instance's
        /// count is its messages still queued after the settlement, and the instances
        /// whose count reached zero end in the order the batch first noted them.
        #[test]
        fn interleaved_instances_net_apart(
            steps in proptest::collection::vec(proptest::collection::vec((0usize..5, -1i64..3), 0..40), 1..20),
        ) {
            let credits = Credits::new(5);
            let mut live = [1i64; 5];
            for i in 0..5 {
                credits.start(i);
            }
            let mut netting = CreditNetting::new(&credits);
            for step in steps {
                let mut noted = Vec::new();
                for (i, delta) in step {
                    // A message consumed must have been queued.
                    let delta = if live[i] == 0 { 0 } else { delta };
                    if delta == 0 {
                        continue;
                    }
                    live[i] += delta;
                    netting.add(i, delta);
                    if !noted.contains(&i) {
                        noted.push(i);
                    }
                }
                let mut ended = Vec::new();
                netting.settle(&credits, |i| ended.push(i));
                let expected: Vec<usize> = noted.into_iter().filter(|&i| live[i] == 0).collect();
                prop_assert_eq!(ended, expected);
                for (i, &n) in live.iter().enumerate() {
                    prop_assert_eq!(i64::from(credits.counts[i].load(Ordering::Acquire)), n);
                }
            }
        }
    }

    /// Across processes: the sender of the message that finds an instance absent here is
    /// its parent, given its credit back when the count returns to zero (oldest first);
    /// a message that finds the instance here gives its sender's credit back at once.
    #[test]
    fn a_process_keeps_the_credit_of_the_message_that_engaged_it() {
        let credits = Credits::across_processes(2);
        assert!(credits.arrive(1, 0), "the first message engages the process");
        assert!(!credits.arrive(1, 2), "an engaged process gives the credit back at once");
        let mut netting = CreditNetting::new(&credits);
        netting.add(1, -2);
        let mut ended = Vec::new();
        netting.settle(&credits, |i| ended.push(i));
        assert_eq!(ended, [1]);
        assert_eq!(credits.depart(1), Some(0));
        // Engaged again by process 2, then back to zero: 2 is the parent this time.
        assert!(credits.arrive(1, 2));
        assert_eq!(credits.depart(1), Some(2));
        assert_eq!(credits.depart(1), None, "where the instance was admitted it ends");
        // One process: no parents, an instance ends where its count reaches zero.
        assert_eq!(Credits::new(1).depart(0), None);
    }

    /// A report needs a receipt from process 0 exactly when the credit that ends its
    /// instance here would not go to process 0 on the report's own connection: the parent
    /// is another process, or an older engagement's parent is still queued.
    #[test]
    fn a_report_takes_a_credit_unless_its_end_follows_it_to_process_0() {
        let credits = Credits::across_processes(3);
        assert!(credits.arrive(0, 0));
        assert!(!credits.report_needs_receipt(0), "engaged by process 0: the end follows the report");
        assert!(!credits.arrive(0, 2));
        assert!(!credits.report_needs_receipt(0), "a message from a third process changes no parent");
        assert!(credits.arrive(1, 1));
        assert!(credits.report_needs_receipt(1), "engaged by process 1: the end goes through it");
        // The count returned to zero and a message re-engaged the process before the old
        // parent was popped: which one the report's credit will go to is not settled.
        assert!(credits.arrive(2, 0));
        let mut netting = CreditNetting::new(&credits);
        netting.add(2, -1);
        netting.settle(&credits, |_| {});
        assert!(credits.arrive(2, 0));
        assert!(credits.report_needs_receipt(2));
        assert_eq!(credits.depart(2), Some(0));
        assert!(!credits.report_needs_receipt(2));
        // One process: every report is local.
        assert!(!Credits::new(1).report_needs_receipt(0));
    }
}
