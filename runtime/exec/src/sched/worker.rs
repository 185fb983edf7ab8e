//! A worker thread: owns a set of nodes, takes messages from its channel and from its
//! nodes' queues (messages between its own nodes), runs the ops, routes what they emit, sums
//! fanned-out gradients, counts finished instances for the parameter groups it owns and
//! applies their updates.
//!
//! An instance's life (admission, credits, its end, update boundaries) is
//! `sched::admission`'s: this worker keeps the credits of each batch it handles
//! (`CreditNetting`), delivers what an instance's end asks for (its [`Courier`]), counts
//! finished instances for the groups it owns and updates them ([`Worker::update_due`]),
//! and, holding the boundaries of a run kept on it alone, opens the next window after its
//! updates ([`Worker::admit_held`]).
//!
//! A failing or panicking op ends the worker's part of the run: it reports the node and
//! itself to the controller, which stops every worker.
//!
//! Scheduling and dynamic batching: each node has its own queue, and a ticket per queued
//! message records the arrival order; the worker serves the tickets in that order, each
//! taking the front of its node's queue. A node takes, with its front message, the
//! messages right behind it of the same direction and port, up to `max_batch` (an op
//! that batches, `linear` or a fused kernel, runs them as one; one that stacks, a row op
//! of batched payloads, writes their results into one buffer (`NodeOp::stacks`); any
//! other one by one in the same step), and their later tickets find the queue emptier (a
//! ticket for an empty queue is skipped); a node whose op batches (a fused kernel, a
//! split of batches) takes them from anywhere in its queue, so that the gradients of its
//! ports, which often arrive interleaved, each make one call. Nodes whose op waits for
//! batches (`linear`, not the fused kernels) take no tickets: their messages wait on the
//! [`Agenda`], served only when no other work is queued: the other nodes first carry
//! every instance as far as it goes, so that a Linear node then finds the messages of
//! all of them in one batch, where a GEMM costs much less per row than for one message.
//! The agenda then takes a lane (a node's messages of one direction and port, wherever
//! they are in its queue): forward before backward, and in each the node that nothing
//! still queued on the agenda would feed more rows (by the node's depth in the graph),
//! so that a node runs once on everything that reaches it; any lane passed over too
//! often goes first (`sched::agenda`: starvation-free, deterministic). With `max_batch`
//! 1 there is no agenda and this is exactly first-come first-served. When its queues run
//! dry the worker waits on its channel, then takes everything already there, so that the
//! messages of all instances in flight wait together.
//!
//! Admissions this worker makes for its own source join its queues when they run dry,
//! where the controller's admissions join them. Between one instance's end and the
//! next's admission no other thread needs to wake: a worker never waits for the
//! controller's thread to be scheduled, and what it does depends on nothing but its own
//! order of work.

mod remote;

use crate::cluster::{Peers, ReportTo, Wire};
use crate::config::{Fault, SlowWorker};
use crate::error::{ExecError, OpError};
use crate::load::program::{GroupInfo, NodeInfo, Program};
use crate::load::replicas::Routes;
use crate::message::{key_of, Dir, Envelope, Key, KeyMap, Msg, Payload};
use crate::ops::train::{self, LiveGroup};
use crate::ops::{payload_fits, Emit, Intake, NodeCx, NodeOp, RunMode, RunShared};
use crate::sched::admission::{self, owned_masters, source_message, Admission, Courier, CreditNetting, Credits};
use crate::sched::agenda::Agenda;
use crate::trace::{TraceEvent, TraceKind};
use crate::wire::Item;
use amp_params::OptimConfig;
use crossbeam_channel::Receiver;
pub(crate) use remote::RemoteWord;
use std::cell::RefCell;
use std::collections::VecDeque;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// What the controller and other workers send a worker.
pub(crate) enum ToWorker {
    Work(Envelope),
    /// An instance finished (its index; from the worker that finished it): each group the
    /// worker owns counts it, and updates when it reached its `min_update_frequency`.
    InstanceDone(usize),
    /// From the controller at a synchronous update boundary across workers (after every
    /// `InstanceDone` before it): answer `Updated` once the updates owed are applied.
    Confirm,
    /// Finish: with `flush`, update the owned groups with whatever accumulated.
    Stop {
        flush: bool,
    },
    /// A run split over processes: a credit of this instance that another process kept
    /// comes back (`crate::cluster`); netted like a consumed message.
    Release(usize),
    /// A run split over processes: a replica and its master in different processes, or
    /// a copy's service time for this process's routes (`worker::remote`).
    Remote(RemoteWord),
}

/// What workers tell the controller.
pub(crate) enum Report {
    Loss {
        instance: i64,
        node: u32,
        value: f32,
        correct: Option<bool>,
        state: Option<Box<[i64]>>,
    },
    Output {
        instance: i64,
        node: u32,
        values: Vec<f32>,
    },
    Done {
        instance: usize,
    },
    /// The updates a `Confirm` asked about are applied.
    Updated,
    /// Something for the controller to read on the results channel now (the run's last
    /// `Done`, or a loss that stops training).
    Wake,
    /// Trace events recorded so far (on the results channel, every [`TRACE_PIECE`]
    /// events), so that an observer can fold them as the run goes; `Stopped` brings the
    /// rest.
    Trace(Vec<TraceEvent>),
    Failed(ExecError),
    Stopped {
        worker: usize,
        trace: Vec<TraceEvent>,
        held: Vec<(u32, usize)>,
    },
}

impl Wire for ToWorker {
    fn into_item(self, worker: u32) -> Option<Item> {
        Some(match self {
            ToWorker::Work(Envelope { node, port, dir, msg }) => Item::Work { worker, node, port, dir, msg },
            ToWorker::InstanceDone(instance) => Item::InstanceDone { worker, instance: instance as u64 },
            ToWorker::Confirm => Item::Confirm { worker },
            ToWorker::Stop { flush } => Item::Stop { worker, flush },
            // Credits go back to processes, not workers (`Peers::release`).
            ToWorker::Release(_) => return None,
            ToWorker::Remote(word) => return word.into_item(worker),
        })
    }
}

impl Wire for Report {
    /// A report as it crosses to process 0's controller (an error as its message).
    fn into_item(self, _: u32) -> Option<Item> {
        Some(match self {
            Report::Loss { instance, node, value, correct, state } => {
                Item::Loss { instance, node, value, correct, state }
            }
            Report::Output { instance, node, values } => Item::Output { instance, node, values },
            Report::Done { instance } => Item::Done { instance: instance as u64 },
            Report::Updated => Item::Updated,
            Report::Wake => Item::Wake,
            Report::Trace(events) => Item::Trace(events),
            Report::Failed(error) => Item::Failed { message: error.to_string() },
            Report::Stopped { worker, trace, held } => Item::Stopped {
                worker: u32::try_from(worker).unwrap_or(u32::MAX),
                trace,
                held: held.into_iter().map(|(n, h)| (n, h as u64)).collect(),
            },
        })
    }
}

/// A worker hands its trace events over in pieces of this many (2 MiB).
const TRACE_PIECE: usize = 1 << 16;

/// Counters the watchdog reads, and the time the worker spent waiting for messages.
#[derive(Default)]
pub(crate) struct WorkerGauges {
    pub processed: AtomicU64,
    pub local: AtomicUsize,
    /// Nanoseconds blocked on the inbox with nothing queued (two clock reads per wait).
    pub waited_ns: AtomicU64,
}

/// A straggler sleeps what it owes once it owes this much (see `Worker::straggle`).
const STRAGGLE_SLICE: Duration = Duration::from_millis(1);

/// Everything a worker works with.
pub(crate) struct WorkerSetup<'s, 'a> {
    pub id: usize,
    pub program: &'s Program,
    pub shared: &'s RunShared<'a>,
    pub inbox: Receiver<ToWorker>,
    /// Every worker's inbox, in this process or through the bridge (`crate::cluster`).
    pub peers: Peers<ToWorker>,
    pub reports: ReportTo<Report>,
    /// Where losses, outputs and pieces of the trace go (`Report::Loss`, `Output`,
    /// `Trace`): read by the controller whenever it wakes, so sending them wakes nobody.
    pub results: ReportTo<Report>,
    pub credits: &'s Credits,
    /// Admits the next instance when this worker finishes one.
    pub admission: &'s Admission,
    pub gauges: &'s WorkerGauges,
    pub optimizer: OptimConfig,
    pub origin: Instant,
    pub trace: bool,
    /// At most this many messages per batch (at least 1).
    pub max_batch: usize,
    /// Replicas take their master's values after every this many of its updates.
    pub replica_sync: u64,
    pub fault: Option<Fault>,
    /// This worker is a straggler: it sleeps after each step (see `ExecConfig::slow_workers`).
    pub slow: Option<SlowWorker>,
}

/// A node on this worker: its op, its queue, and the gradients of fanned-out ports being
/// summed.
struct Slot {
    op: Box<dyn NodeOp>,
    /// The op's `intake()`, asked once (a virtual call per message otherwise).
    intake: Intake,
    /// The node's depth, which orders the agenda (see `sched::agenda`).
    depth: u64,
    queue: VecDeque<Envelope>,
    fan_in: KeyMap<(u16, Key), (Payload, usize)>,
    messages: u64,
}

/// Messages a node takes at once: one direction and port, in queue order.
struct Batch {
    node: u32,
    dir: Dir,
    port: u16,
    msgs: Vec<Msg>,
}

struct Worker<'s, 'a> {
    setup: WorkerSetup<'s, 'a>,
    slots: Vec<Option<Slot>>,
    /// The node of every message queued here, in arrival order (see the module doc).
    tickets: VecDeque<u32>,
    /// The messages of nodes whose op waits for batches, by lane, served once `tickets`
    /// is empty (see `sched::agenda`).
    agenda: Agenda,
    /// Messages in the nodes' queues.
    queued: usize,
    events: Vec<TraceEvent>,
    emitted: Vec<Emit>,
    /// The instances of the batch being handled (kept to reuse its allocation).
    instances: Vec<i64>,
    /// Scratch for counting a traced batch's distinct instances.
    distinct: Vec<i64>,
    /// An empty vector for the next batch's messages (see [`Worker::dispatch`]).
    spare: Vec<Msg>,
    /// The credits of the batch being handled (see `sched::admission`).
    credits: CreditNetting,
    /// Instances this worker admitted for its own source, queued when its queues run dry
    /// (where the controller's admissions would be taken), without a channel round trip.
    admitted: Vec<Envelope>,
    /// The workers that own parameter groups (told of every instance that finishes here,
    /// when workers admit).
    owners: Vec<usize>,
    /// Messages processed, published to the watchdog's gauge.
    processed: u64,
    /// Instances finished since their count was last added to the owned groups (see
    /// [`Worker::count_instance`]), and the controller's `Confirm`s to answer once the
    /// updates they owe are applied.
    finished: u64,
    /// A group this worker owns deferred an update for its staleness bound.
    bound_deferred: bool,
    /// This worker holds admissions for a deferred update (`Admission::hold`).
    holding: bool,
    /// Seconds a straggler still owes to sleep (negative: it overslept).
    owed_sleep: f64,
    acks: usize,
    /// Replicas and masters in other processes: the updates waiting for their gradients
    /// (see `worker::remote`).
    remote: RefCell<remote::Remote>,
}

/// Runs a worker until it is told to stop or fails; always ends with a `Stopped` report.
pub(crate) fn run_worker(setup: WorkerSetup, ops: Vec<(u32, Box<dyn NodeOp>)>) {
    let mut slots: Vec<Option<Slot>> = (0..setup.program.nodes.len()).map(|_| None).collect();
    let depths = depths(setup.program);
    for (index, op) in ops {
        if let Some(slot) = slots.get_mut(index as usize) {
            let intake = op.intake();
            let depth = depths.get(index as usize).copied().unwrap_or(u64::MAX);
            let (queue, fan_in) = (VecDeque::new(), KeyMap::default());
            *slot = Some(Slot { op, intake, depth, queue, fan_in, messages: 0 });
        }
    }
    let mut owners: Vec<usize> = setup.program.groups.iter().filter(|g| g.master.is_none()).map(|g| g.owner).collect();
    owners.sort_unstable();
    owners.dedup();
    let remote = RefCell::new(remote::Remote::new(&setup));
    let mut worker = Worker {
        setup,
        slots,
        tickets: VecDeque::new(),
        agenda: Agenda::default(),
        queued: 0,
        events: Vec::new(),
        emitted: Vec::new(),
        instances: Vec::new(),
        distinct: Vec::new(),
        spare: Vec::new(),
        credits: CreditNetting::default(),
        admitted: Vec::new(),
        owners,
        processed: 0,
        finished: 0,
        bound_deferred: false,
        holding: false,
        owed_sleep: 0.0,
        acks: 0,
        remote,
    };
    // Node work is caught per message (naming the node); this catches the rest (updates),
    // so that the controller always hears from every worker.
    if let Err(panic) = catch_unwind(AssertUnwindSafe(|| worker.run())) {
        let error = ExecError::WorkerPanic {
            worker: worker.setup.id,
            node: u32::MAX,
            label: "(parameter update)".to_string(),
            message: panic_message(panic.as_ref()),
        };
        worker.setup.reports.send(Report::Failed(error));
    }
    // Instances counted and not yet added (a stop without flush): the groups keep them
    // for the next run.
    worker.add_finished();
    let held = worker
        .slots
        .iter()
        .enumerate()
        .filter_map(|(i, s)| s.as_ref().map(|s| (i as u32, s.op.held() + s.fan_in.len())))
        .filter(|(_, held)| *held > 0)
        .collect();
    let stopped = Report::Stopped { worker: worker.setup.id, trace: std::mem::take(&mut worker.events), held };
    worker.setup.reports.send(stopped);
}

impl Worker<'_, '_> {
    fn run(&mut self) {
        let program = self.setup.program;
        if program.source_worker() == self.setup.id {
            for instance in self.setup.admission.first_window() {
                let (_, env) = source_message(program, self.setup.credits, instance);
                self.enqueue(env);
            }
            self.admit_held();
        }
        loop {
            if let Some(batch) = self.next_batch() {
                // Only a straggler's sleep reads the step's time (a clock read per step
                // otherwise).
                let step = self.setup.slow.is_some().then(Instant::now);
                if !self.process(batch) {
                    return;
                }
                // The instances this batch finished are counted already: the groups whose
                // interval they completed update now, over all of them.
                self.update_due();
                if let Some(step) = step {
                    self.straggle(step);
                }
                continue;
            }
            if self.admitted.is_empty() {
                let idle = Instant::now();
                let received = self.setup.inbox.recv();
                let waited = u64::try_from(idle.elapsed().as_nanos()).unwrap_or(u64::MAX);
                self.setup.gauges.waited_ns.fetch_add(waited, Ordering::Relaxed);
                let Ok(item) = received else { return };
                if !self.take(item) {
                    return;
                }
            } else {
                let mut admitted = std::mem::take(&mut self.admitted);
                admitted.drain(..).for_each(|env| self.enqueue(env));
                self.admitted = admitted;
            }
            // Whatever else already arrived joins the queues now, so that the messages of
            // every instance in flight can meet in batches; the instances it reports
            // finished count together (see `Worker::update_due`).
            while let Ok(item) = self.setup.inbox.try_recv() {
                if !self.take(item) {
                    return;
                }
            }
            self.update_due();
        }
    }

    /// A straggler owes a sleep after a step begun at `step`, so that the step takes
    /// `factor` times its measured time; the sleep counts as busy time (a slow device
    /// works). Steps take microseconds and a sleep overshoots by tens of them, so the
    /// owed time is summed and slept once it reaches [`STRAGGLE_SLICE`], with what the
    /// sleep overshot taken off the next.
    fn straggle(&mut self, step: Instant) {
        let Some(slow) = &self.setup.slow else { return };
        let pause = slow.pause(step.elapsed(), step.saturating_duration_since(self.setup.origin));
        self.owed_sleep += pause.as_secs_f64();
        if self.owed_sleep >= STRAGGLE_SLICE.as_secs_f64() {
            let start = Instant::now();
            std::thread::sleep(Duration::from_secs_f64(self.owed_sleep));
            self.owed_sleep -= start.elapsed().as_secs_f64();
        }
    }

    /// Queues a message or acts on a control item; false when the worker must stop.
    /// Control items take effect at once, ahead of queued messages: an instance that
    /// finished has none left, and with synchronous updates no other instance is in
    /// flight when an update boundary is reached.
    fn take(&mut self, item: ToWorker) -> bool {
        match item {
            ToWorker::Work(env) => {
                self.enqueue(env);
                true
            }
            ToWorker::InstanceDone(instance) => {
                self.count_instance(instance);
                true
            }
            ToWorker::Confirm => {
                self.acks += 1;
                true
            }
            ToWorker::Release(instance) => {
                self.credits.add(instance, -1);
                self.settle_credits();
                true
            }
            ToWorker::Stop { flush } => self.stop(flush),
            ToWorker::Remote(word) => self.on_remote(word),
        }
    }

    fn enqueue(&mut self, env: Envelope) {
        match self.slots.get_mut(env.node as usize).and_then(Option::as_mut) {
            Some(slot) => {
                if slot.intake == (Intake::Batches { waits: true }) && self.setup.max_batch > 1 {
                    self.agenda.push(env.node, slot.depth, env.dir, env.port);
                } else {
                    self.tickets.push_back(env.node);
                }
                slot.queue.push_back(env);
                self.queued += 1;
            }
            None => {
                let error = ExecError::Config {
                    message: format!("message for node %{}, which worker {} does not run", env.node, self.setup.id),
                };
                self.setup.reports.send(Report::Failed(error));
            }
        }
    }

    /// The next ticket's node takes its front message and the messages of the same
    /// direction and port right behind it, or, for an op that batches (a fused kernel),
    /// anywhere in its queue (see [`Worker::dispatch`]); with no ticket left, the agenda's
    /// lane, up to `max_batch` of its messages in queue order.
    fn next_batch(&mut self) -> Option<Batch> {
        let limit = self.setup.max_batch.max(1);
        while let Some(node) = self.tickets.pop_front() {
            let Some(slot) = self.slots.get_mut(node as usize).and_then(Option::as_mut) else { continue };
            let Some(first) = slot.queue.pop_front() else { continue };
            let (dir, port) = (first.dir, first.port);
            // The vector of the last lone message, emptied, when there is one.
            let mut msgs = std::mem::take(&mut self.spare);
            msgs.push(first.msg);
            if matches!(slot.intake, Intake::Batches { .. }) {
                // A kernel call over more rows: its lane from anywhere in the queue (a
                // fused backward's two ports' gradients often arrive interleaved).
                take_lane(&mut slot.queue, dir, port, limit, &mut msgs);
            } else {
                while msgs.len() < limit && slot.queue.front().is_some_and(|e| e.dir == dir && e.port == port) {
                    if let Some(env) = slot.queue.pop_front() {
                        msgs.push(env.msg);
                    }
                }
            }
            self.queued -= msgs.len();
            return Some(Batch { node, dir, port, msgs });
        }
        loop {
            let (node, dir, port, count) = self.agenda.choose()?;
            let mut msgs = std::mem::take(&mut self.spare);
            if let Some(slot) = self.slots.get_mut(node as usize).and_then(Option::as_mut) {
                take_lane(&mut slot.queue, dir, port, limit, &mut msgs);
            }
            if msgs.is_empty() {
                // Never (the agenda counts what the queues hold); dropping the lane keeps
                // a miscount from choosing it forever.
                self.agenda.taken(node, dir, port, count);
                self.spare = msgs;
                continue;
            }
            self.agenda.taken(node, dir, port, msgs.len());
            self.queued -= msgs.len();
            return Some(Batch { node, dir, port, msgs });
        }
    }

    /// Runs a batch and reports a failure; false when the worker must stop.
    fn process(&mut self, batch: Batch) -> bool {
        let (node, count) = (batch.node, batch.msgs.len());
        let outcome = catch_unwind(AssertUnwindSafe(|| self.handle(batch)));
        self.processed += count as u64;
        self.setup.gauges.processed.store(self.processed, Ordering::Relaxed);
        self.setup.gauges.local.store(self.queued, Ordering::Relaxed);
        let failure = match outcome {
            Ok(Ok(())) => None,
            Ok(Err(e)) => Some(e),
            Err(panic) => Some(ExecError::WorkerPanic {
                worker: self.setup.id,
                node,
                label: self.label(node),
                message: panic_message(panic.as_ref()),
            }),
        };
        match failure {
            Some(e) => {
                self.setup.reports.send(Report::Failed(e));
                false
            }
            None => true,
        }
    }

    fn label(&self, node: u32) -> String {
        self.setup.program.node(node).map(|n| n.label.clone()).unwrap_or_default()
    }

    /// Runs a batch of messages through its node and routes the results.
    fn handle(&mut self, batch: Batch) -> Result<(), ExecError> {
        let program = self.setup.program;
        let Some(node) = program.node(batch.node) else {
            return Err(ExecError::Config { message: format!("message for missing node %{}", batch.node) });
        };
        let mut instances = std::mem::take(&mut self.instances);
        instances.clear();
        instances.extend(batch.msgs.iter().map(Msg::instance));
        let ty = match batch.dir {
            Dir::Forward => node.inputs.get(usize::from(batch.port)),
            Dir::Backward => node.outputs.get(usize::from(batch.port)),
        };
        // The source's admission message arrives on a port it does not have.
        if !matches!(node.op, crate::load::program::ExecOp::Ir(amp_ir::Op::Source)) {
            for msg in &batch.msgs {
                let fits = ty.map_or(Err(OpError::Unsupported { op: "message on a missing port" }), |ty| {
                    payload_fits(ty, &msg.payload)
                });
                fits.map_err(|e| ExecError::at_node(node, msg.instance(), e))?;
            }
        }
        let start = self.setup.trace.then(Instant::now);
        let (dir, count) = (batch.dir, batch.msgs.len());
        let rows = if start.is_some() { rows_of(ty, &batch.msgs) } else { 0 };
        // A replica's service time steers the routing to its node (`load::replicas`).
        let served = self.setup.shared.routes.tracks(node.index).then(Instant::now);
        let result = self.dispatch(node, batch);
        let routes = &self.setup.shared.routes;
        routes.processed(node.index, count);
        if let Some(served) = served {
            // A straggler's step takes its sleep too (`Worker::straggle`): a copy on a slow
            // worker is that much slower to serve.
            let took = served.elapsed();
            let at = served.saturating_duration_since(self.setup.origin);
            let pause = self.setup.slow.as_ref().map_or(Duration::ZERO, |slow| slow.pause(took, at));
            routes.served(node.index, count, took + pause);
            self.report_served(node.index, count, took + pause);
        }
        if let Some(start) = start {
            let kind = if dir == Dir::Forward { TraceKind::Forward } else { TraceKind::Backward };
            self.distinct.clear();
            self.distinct.extend_from_slice(&instances);
            self.distinct.sort_unstable();
            self.distinct.dedup();
            self.record(node.index, kind, start, (count, rows), self.distinct.len());
        }
        // An error names the instance of the message that failed (a batching op's, the
        // batch's first); the op's error names the key.
        result.map_err(|(instance, e)| ExecError::at_node(node, instance, e))?;
        // Taken and put back, to keep its allocation.
        let mut emitted = std::mem::take(&mut self.emitted);
        for emit in emitted.drain(..) {
            self.route(node, emit);
        }
        self.emitted = emitted;
        for &instance in &instances {
            if let Ok(i) = usize::try_from(instance) {
                self.credits.add(i, -1);
            }
        }
        self.settle_credits();
        self.instances = instances;
        Ok(())
    }

    /// Calls the op on a batch (after summing a fanned-out port's gradients: only the
    /// messages that complete their sum go on): an op that batches (`linear`, the fused
    /// kernels) takes them all at once, any other each in turn, so that a node with
    /// several messages waiting costs one step of the worker (one ticket, one routing of
    /// what it emitted, one settlement of credits) instead of one per message. On failure,
    /// the instance of the message that failed (a batching op's: the first).
    fn dispatch(&mut self, node: &NodeInfo, batch: Batch) -> Result<(), (i64, OpError)> {
        let shared = self.setup.shared;
        let fault = self.setup.fault.clone();
        let first = batch.msgs.first().map_or(-1, Msg::instance);
        let Some(slot) = self.slots.get_mut(node.index as usize).and_then(Option::as_mut) else {
            return Err((first, OpError::Unsupported { op: "message for a node of another worker" }));
        };
        let Batch { dir, port, mut msgs, .. } = batch;
        let seen = slot.messages..slot.messages + msgs.len() as u64;
        match fault {
            Some(Fault::PanicAt { node: target, after }) if target == node.index && seen.contains(&after) => {
                panic!("injected fault at node %{target}");
            }
            Some(Fault::DelayAt { node: target, after, delay }) if target == node.index && seen.contains(&after) => {
                std::thread::sleep(delay);
            }
            _ => {}
        }
        slot.messages = seen.end;
        let consumers = node.consumers.get(usize::from(port)).map_or(0, Vec::len);
        if dir == Dir::Backward && consumers >= 2 {
            msgs = msgs.into_iter().filter_map(|msg| sum_fan_in(slot, node, port, consumers, msg)).collect();
        }
        let mut cx = NodeCx { node, shared, out: &mut self.emitted };
        let together = match slot.intake {
            Intake::One => false,
            Intake::Stacked => msgs.len() > 1,
            Intake::Batches { .. } => true,
        };
        if together {
            return match dir {
                Dir::Forward => slot.op.forward_batch(&mut cx, port, msgs),
                Dir::Backward => slot.op.backward_batch(&mut cx, port, msgs),
            }
            .map_err(|e| (first, e));
        }
        let mut result = Ok(());
        for msg in msgs.drain(..) {
            let instance = msg.instance();
            let done = match dir {
                Dir::Forward => slot.op.forward(&mut cx, port, msg),
                Dir::Backward => slot.op.backward(&mut cx, port, msg),
            };
            if let Err(e) = done {
                result = Err((instance, e));
                break;
            }
        }
        // Kept for the next batch, emptied: a vector each cost an allocation per message.
        self.spare = msgs;
        result
    }

    fn route(&mut self, node: &NodeInfo, emit: Emit) {
        match emit {
            Emit::Forward { port, msg } => {
                let consumers = node.consumers.get(usize::from(port)).map(Vec::as_slice).unwrap_or(&[]);
                if consumers.is_empty() {
                    // A dropped port answers at once with a zero gradient.
                    if self.setup.shared.mode.backward() {
                        let zero = match &msg.payload {
                            Payload::Unit => Payload::Unit,
                            Payload::F32(v) => Payload::from_vec(vec![0.0; v.len()]),
                        };
                        let env = Envelope { node: node.index, port, dir: Dir::Backward, msg: msg.with_payload(zero) };
                        self.send(env);
                    }
                    return;
                }
                // The last consumer takes the message itself: most ports have one, and a
                // clone costs a state allocation and two atomic operations on the payload.
                if let Some((&(dest, to_port), others)) = consumers.split_last() {
                    for &(other, other_port) in others {
                        self.send(Envelope { node: other, port: other_port, dir: Dir::Forward, msg: msg.clone() });
                    }
                    self.send(Envelope { node: dest, port: to_port, dir: Dir::Forward, msg });
                }
            }
            Emit::Backward { port, msg } => {
                if let Some(&(src, from_port)) = node.producers.get(usize::from(port)) {
                    self.send(Envelope { node: src, port: from_port, dir: Dir::Backward, msg });
                }
            }
            Emit::Loss { instance, value, correct, state } => {
                self.report(instance, Report::Loss { instance, node: node.index, value, correct, state });
                // Training stops at a loss that is not finite: nothing more is admitted,
                // and the controller wakes to read the loss and stop the run.
                if !value.is_finite() && self.setup.shared.mode.backward() {
                    self.setup.admission.halt();
                    self.setup.reports.send(Report::Wake);
                }
            }
            Emit::Output { instance, values } => {
                self.report(instance, Report::Output { instance, node: node.index, values });
            }
        }
    }

    /// Sends a loss or output of `instance` to the controller. From a process whose parent
    /// for the instance is not process 0 it takes a credit, given back once the report
    /// reached process 0, so that the instance cannot end there first (`crate::cluster`).
    fn report(&self, instance: i64, report: Report) {
        let results = &self.setup.results;
        let credits = self.setup.credits;
        let receipt =
            usize::try_from(instance).ok().filter(|&i| results.is_remote() && credits.report_needs_receipt(i));
        if let Some(i) = receipt {
            credits.take(i);
        }
        results.send(report);
        if let Some(i) = receipt {
            results.receipt(i);
        }
    }

    /// Takes a credit for the message and delivers it locally or to its worker; a message
    /// for a node with replicas goes to one of them (see `crate::load::replicas`).
    fn send(&mut self, mut env: Envelope) {
        let instance = usize::try_from(env.msg.instance()).ok();
        let program = self.setup.program;
        let routes = &self.setup.shared.routes;
        let mut target = program.node(env.node);
        if let Some(node) = target.filter(|n| n.replicas.len() > 1) {
            let key = Routes::key(node, &env.msg.state);
            env.node = match env.dir {
                Dir::Forward => {
                    let backward =
                        if self.setup.shared.mode.backward() { node.consumers.first().map_or(0, Vec::len) } else { 0 };
                    routes.forward(node.index, &node.replicas, key, backward)
                }
                Dir::Backward => routes.backward(node.index, key).unwrap_or(node.index),
            };
            target = program.node(env.node);
        }
        routes.queued(env.node);
        let worker = target.map_or(self.setup.id, |n| n.worker);
        if worker == self.setup.id {
            if let Some(i) = instance {
                self.credits.add(i, 1);
            }
            self.enqueue(env);
        } else if worker < self.setup.peers.len() {
            if let Some(i) = instance {
                self.setup.credits.take(i);
            }
            // A peer that is gone has failed; the controller is already stopping the run.
            self.setup.peers.send(worker, ToWorker::Work(env));
        }
    }

    /// Applies the netted credits of the batch just handled (see `sched::admission`); the
    /// instances whose last credit that gave back end here.
    fn settle_credits(&mut self) {
        // Taken and put back, to keep its allocation.
        let mut credits = std::mem::take(&mut self.credits);
        credits.settle(self.setup.credits, |i| self.finished_here(i));
        self.credits = credits;
    }

    /// Instance `i` finished here: the steps of its end are admission's
    /// ([`Admission::instance_ended`]), this worker delivers them (its [`Courier`]).
    fn finished_here(&mut self, i: usize) {
        // Across processes, the count reached zero here while the instance lives on
        // elsewhere: the credit this process kept goes back (see `crate::cluster`).
        if let Some(parent) = self.setup.credits.depart(i) {
            self.setup.peers.release(parent, i);
            return;
        }
        let (admission, program, credits) = (self.setup.admission, self.setup.program, self.setup.credits);
        admission.instance_ended(i, program, credits, self);
    }

    /// A traced piece of work: `batch` messages carrying `rows` rows, of `instances`
    /// distinct instances.
    fn record(&mut self, node: u32, kind: TraceKind, start: Instant, (batch, rows): (usize, usize), instances: usize) {
        let start_us = start.saturating_duration_since(self.setup.origin).as_micros() as u64;
        let dur_us = start.elapsed().as_micros() as u64;
        let batch = u32::try_from(batch).unwrap_or(u32::MAX);
        let rows = u32::try_from(rows).unwrap_or(u32::MAX);
        let instances = u32::try_from(instances).unwrap_or(u32::MAX);
        let worker = self.setup.id as u32;
        self.events.push(TraceEvent { worker, node, kind, start_us, dur_us, batch, rows, instances, staleness: None });
        if self.events.len() >= TRACE_PIECE {
            self.setup.results.send(Report::Trace(std::mem::take(&mut self.events)));
        }
    }

    /// One more instance finished: the groups this worker owns count it at the next
    /// [`Worker::update_due`], all the instances of a drained inbox at once (not a lock of
    /// every owned group per instance, which adds up on a model with many groups).
    fn count_instance(&mut self, instance: usize) {
        self.finished += 1;
        self.remote.borrow_mut().ended(instance);
    }

    /// Adds the instances finished since the last count to the owned groups' counts.
    fn add_finished(&mut self) {
        let finished = std::mem::take(&mut self.finished);
        if finished == 0 {
            return;
        }
        for (g, _) in owned_masters(self.setup.program, self.setup.id) {
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
    fn update_due(&mut self) {
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

    /// Synchronous training on one worker, which then holds the boundaries: once every
    /// instance below the limit finished and the groups that completed their interval
    /// updated ([`Worker::update_due`] calls this after), the next window, queued for this
    /// worker's source (see [`Admission::open_held_window`]).
    fn admit_held(&mut self) {
        let setup = &self.setup;
        let window = setup.admission.open_held_window(setup.id, setup.program, &setup.shared.params, self.finished);
        for next in window {
            let (_, env) = source_message(setup.program, setup.credits, next);
            self.admitted.push(env);
        }
    }

    /// Counts the instances finished since the last count, then updates every group this
    /// worker owns that has instances pending: those that reached their update interval,
    /// or all of them with `flush` (the end of a run).
    fn update_groups(&mut self, flush: bool) {
        let finished = std::mem::take(&mut self.finished);
        self.bound_deferred = false;
        for (g, info) in owned_masters(self.setup.program, self.setup.id) {
            let start = self.setup.trace.then(Instant::now);
            let mut deferred = false;
            let updated = self.setup.shared.params.live(g).and_then(|mut group| {
                group.pending += finished;
                let due = flush || group.pending >= info.min_update_frequency;
                // At a flush every instance ended: no read is owed a gradient any more.
                deferred = due && !self.within_bound(info, &mut group) && !flush;
                (due && !deferred && self.update(info, &mut group, flush)).then_some(group.staleness.last)
            });
            self.bound_deferred |= deferred;
            if let (Some(staleness), Some(start)) = (updated, start) {
                self.record(info.nodes.first().copied().unwrap_or(0), TraceKind::Update, start, (0, 0), 0);
                if let Some(event) = self.events.last_mut() {
                    event.staleness = staleness;
                }
            }
        }
        self.hold_admissions();
    }

    /// While a group of this worker defers an update for its bound, admissions are held
    /// (see `Admission::hold`); once none does, this worker releases its hold and makes
    /// the admissions owed meanwhile, when its hold was the last.
    fn hold_admissions(&mut self) {
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
            let (to, env) = source_message(program, credits, next);
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
    fn within_bound(&self, info: &GroupInfo, master: &mut LiveGroup) -> bool {
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

impl Worker<'_, '_> {
    /// Updates a master group: first gathers its replicas' gradients, then, after every
    /// `replica_sync`-th update (and at a flush), gives them its values. The master is
    /// locked throughout and each replica in turn (ops hold one group lock at a time).
    /// With replicas in other processes, the update first waits for their gradients
    /// (false: not updated yet; `worker::remote`), and the values go to them too.
    fn update(&self, info: &GroupInfo, master: &mut LiveGroup, flush: bool) -> bool {
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
        if updated && (flush || master.updates % self.setup.replica_sync == 0) {
            for r in self.local_replicas(info) {
                if let Some(mut replica) = params.live(r) {
                    train::sync_values(master, &mut replica);
                }
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

/// Each node's depth, which orders the agenda (see `sched::agenda`): first the place of
/// its strongly connected component in a topological order of the components (a loop or
/// a recursion is one component, before every node its exit feeds: a loop's cell before
/// the classifier after it), then, within a component, its place in the reverse
/// postorder of a depth-first search from the source (every node after the nodes that
/// feed it but for a cycle's edge back). `u64::MAX` for a node the program does not have;
/// a replica has its node's.
fn depths(program: &Program) -> Vec<u64> {
    let consumers = |i: usize| -> Vec<usize> {
        let node = program.nodes.get(i).and_then(Option::as_ref);
        node.map(|node| node.consumers.iter().flatten().map(|&(c, _)| c as usize).collect()).unwrap_or_default()
    };
    let components = components(program.nodes.len(), program.source as usize, &consumers);
    let order = reverse_postorder(program.nodes.len(), program.source as usize, &consumers);
    let mut depth: Vec<u64> = components
        .iter()
        .zip(&order)
        .map(|(&c, &o)| if c == u32::MAX { u64::MAX } else { (u64::from(c) << 32) | u64::from(o) })
        .collect();
    for (i, node) in program.nodes.iter().enumerate() {
        if let Some(master) = node.as_ref().and_then(|n| n.replica_of) {
            depth[i] = depth.get(master as usize).copied().unwrap_or(u64::MAX);
        }
    }
    depth
}

/// The place of each of `n` nodes' strongly connected component in a topological order of
/// the components (Tarjan's algorithm, iterative for graphs deeper than a thread's stack;
/// searched from `source` first, then from every node it does not reach).
fn components(n: usize, source: usize, consumers: &dyn Fn(usize) -> Vec<usize>) -> Vec<u32> {
    const NONE: u32 = u32::MAX;
    let (mut index, mut low, mut component) = (vec![NONE; n], vec![0u32; n], vec![NONE; n]);
    let (mut on_stack, mut stack) = (vec![false; n], Vec::new());
    let (mut next, mut found) = (0u32, 0u32);
    // Each entry: a node, its consumers and how many of them it has visited.
    let mut work: Vec<(usize, Vec<usize>, usize)> = Vec::new();
    for root in std::iter::once(source).chain(0..n).filter(|&r| r < n) {
        if index[root] != NONE {
            continue;
        }
        index[root] = next;
        low[root] = next;
        next += 1;
        stack.push(root);
        on_stack[root] = true;
        work.push((root, consumers(root), 0));
        while let Some(top) = work.last_mut() {
            let v = top.0;
            let w = top.1.get(top.2).copied();
            top.2 += 1;
            match w {
                Some(w) if w >= n => {}
                Some(w) if index[w] == NONE => {
                    index[w] = next;
                    low[w] = next;
                    next += 1;
                    stack.push(w);
                    on_stack[w] = true;
                    work.push((w, consumers(w), 0));
                }
                Some(w) => {
                    if on_stack[w] {
                        low[v] = low[v].min(index[w]);
                    }
                }
                None => {
                    work.pop();
                    if let Some(parent) = work.last() {
                        low[parent.0] = low[parent.0].min(low[v]);
                    }
                    if low[v] == index[v] {
                        while let Some(w) = stack.pop() {
                            on_stack[w] = false;
                            component[w] = found;
                            if w == v {
                                break;
                            }
                        }
                        found += 1;
                    }
                }
            }
        }
    }
    // Tarjan completes a component after every component it reaches: reversed, a
    // component comes before those it feeds.
    component.iter().map(|&c| if c == NONE { NONE } else { found - 1 - c }).collect()
}

/// Each of `n` nodes' place in the reverse postorder of a depth-first search from
/// `source` (then from every node it does not reach), iterative.
fn reverse_postorder(n: usize, source: usize, consumers: &dyn Fn(usize) -> Vec<usize>) -> Vec<u32> {
    let mut seen = vec![false; n];
    let mut postorder = Vec::with_capacity(n);
    let mut work: Vec<(usize, Vec<usize>, usize)> = Vec::new();
    for root in std::iter::once(source).chain(0..n).filter(|&r| r < n) {
        if seen[root] {
            continue;
        }
        seen[root] = true;
        work.push((root, consumers(root), 0));
        while let Some(top) = work.last_mut() {
            let w = top.1.get(top.2).copied();
            top.2 += 1;
            match w {
                Some(w) if w < n && !seen[w] => {
                    seen[w] = true;
                    work.push((w, consumers(w), 0));
                }
                Some(_) => {}
                None => {
                    postorder.push(top.0);
                    work.pop();
                }
            }
        }
    }
    let mut order = vec![u32::MAX; n];
    for (rank, &node) in postorder.iter().rev().enumerate() {
        order[node] = u32::try_from(rank).unwrap_or(u32::MAX);
    }
    order
}

/// The rows of a batch's messages on a port of type `ty`: a batched payload's
/// (`f32[?, d]`: its values over a row's), one for any other message.
fn rows_of(ty: Option<&amp_ir::PayloadTy>, msgs: &[Msg]) -> usize {
    match ty.map(crate::ops::row_elements) {
        Some((width, true)) => msgs.iter().map(|m| m.payload.values().len() / width.max(1)).sum(),
        _ => msgs.len(),
    }
}

/// Moves up to `limit` messages of direction `dir` on `port` from `queue` to `msgs`, in
/// queue order, keeping the others in theirs.
fn take_lane(queue: &mut VecDeque<Envelope>, dir: Dir, port: u16, limit: usize, msgs: &mut Vec<Msg>) {
    let in_lane = |e: &Envelope| e.dir == dir && e.port == port;
    // Mostly the lane is the whole queue, or its front.
    while msgs.len() < limit && queue.front().is_some_and(in_lane) {
        if let Some(env) = queue.pop_front() {
            msgs.push(env.msg);
        }
    }
    if msgs.len() >= limit || !queue.iter().any(in_lane) {
        return;
    }
    let mut kept = VecDeque::with_capacity(queue.len());
    for env in queue.drain(..) {
        if msgs.len() < limit && in_lane(&env) {
            msgs.push(env.msg);
        } else {
            kept.push_back(env);
        }
    }
    *queue = kept;
}

/// Adds a gradient of a port with `consumers` consumers to its sum under the node's
/// fan-in key; the message with the whole sum once the last one arrived.
fn sum_fan_in(slot: &mut Slot, node: &NodeInfo, port: u16, consumers: usize, msg: Msg) -> Option<Msg> {
    let Msg { payload, state } = msg;
    if consumers <= 1 {
        return Some(Msg::new(payload, state));
    }
    let key = key_of(&node.fan_in_key, &state);
    // The key moves into the map (no copy of it per message).
    let mut entry = match slot.fan_in.entry((port, key)) {
        std::collections::hash_map::Entry::Occupied(e) => e,
        std::collections::hash_map::Entry::Vacant(e) => {
            e.insert((payload, 1));
            return None;
        }
    };
    let (sum, count) = entry.get_mut();
    *sum = add_payloads(std::mem::replace(sum, Payload::Unit), payload);
    *count += 1;
    if *count < consumers {
        return None;
    }
    let (sum, _) = entry.remove();
    Some(Msg::new(sum, state))
}

/// `acc + x` (a unit payload stays unit).
fn add_payloads(acc: Payload, x: Payload) -> Payload {
    match (acc, x) {
        (mut sum @ Payload::F32(_), Payload::F32(x)) => {
            // In place, unless another message shares the values or they are a piece of
            // a batch (`values_mut` copies them then).
            for (s, v) in sum.values_mut().iter_mut().zip(x.iter()) {
                *s += v;
            }
            sum
        }
        (acc, _) => acc,
    }
}

fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = panic.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = panic.downcast_ref::<String>() {
        s.clone()
    } else {
        "panic with a non-string payload".to_string()
    }
}

impl Courier for Worker<'_, '_> {
    fn tell_owners(&mut self, instance: usize) {
        if self.setup.shared.mode != RunMode::Train {
            return;
        }
        for &owner in &self.owners {
            if owner == self.setup.id {
                // `count_instance`, on fields apart from `owners`.
                self.finished += 1;
                self.remote.borrow_mut().ended(instance);
            } else {
                self.setup.peers.send(owner, ToWorker::InstanceDone(instance));
            }
        }
    }

    fn admit(&mut self, to: usize, env: Envelope) {
        if to == self.setup.id {
            // Joins the queues when they run dry, where the controller's admissions would.
            self.admitted.push(env);
        } else {
            self.setup.peers.send(to, ToWorker::Work(env));
        }
    }

    fn report_done(&mut self, instance: usize) {
        // On the results channel, which wakes nobody: a wake-up of the controller's thread
        // per instance would cost a context switch per instance.
        self.setup.results.send(Report::Done { instance });
    }

    fn wake_controller(&mut self) {
        self.setup.reports.send(Report::Wake);
    }
}

#[cfg(test)]
mod tests {
    use super::{components, reverse_postorder};

    /// A loop (phi 1, cell 2 back to phi) whose exit (3) feeds a classifier (4), with the
    /// search visiting the exit before the loop's body or after it.
    #[test]
    fn a_loop_comes_before_what_its_exit_feeds() {
        for body_first in [false, true] {
            let edges = |i: usize| -> Vec<usize> {
                match i {
                    0 => vec![1],
                    1 if body_first => vec![2, 3],
                    1 => vec![3, 2],
                    2 => vec![1],
                    3 => vec![4],
                    _ => vec![],
                }
            };
            let c = components(5, 0, &edges);
            assert_eq!(c[1], c[2], "the loop is one component");
            assert!(c[0] < c[1] && c[2] < c[3] && c[3] < c[4], "{c:?}");
            let order = reverse_postorder(5, 0, &edges);
            assert!(order[1] < order[2] && order[1] < order[3] && order[3] < order[4], "{order:?}");
        }
    }

    /// Nodes the source does not reach still get a place, and a consumer past the
    /// graph is ignored.
    #[test]
    fn every_node_gets_a_place() {
        let edges = |i: usize| -> Vec<usize> {
            match i {
                0 => vec![1, 9],
                2 => vec![1],
                _ => vec![],
            }
        };
        let c = components(3, 0, &edges);
        assert!(c.iter().all(|&c| c < 3), "{c:?}");
        assert!(c[2] < c[1] && c[0] < c[1]);
        let order = reverse_postorder(3, 0, &edges);
        let mut sorted = order.clone();
        sorted.sort_unstable();
        assert_eq!(sorted, [0, 1, 2]);
    }
}
