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
//! of batched payloads, writes their results into one buffer (`Intake::Stacked`)); any
//! other takes those of the same direction on any port and runs them one by one in the
//! same step (a routing chain's gradients come back through its exits interleaved); their
//! later tickets find the queue emptier (a ticket for an empty queue is skipped); a node
//! whose op batches (a fused kernel, a split of batches) takes them from anywhere in its
//! queue, so that the gradients of its ports, which often arrive interleaved, each make
//! one call (`worker/batch.rs`). Nodes whose op waits for
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

mod batch;
mod courier;
mod depths;
mod fan_in;
mod remote;
mod ring;
mod straggle;
mod updates;

use crate::cluster::{Peers, ReportTo};
use crate::config::{Fault, SlowWorker};
use crate::error::{ExecError, OpError};
use crate::load::program::{GroupInfo, NodeInfo, Program};
use crate::message::{key_of, Dir, Envelope, Key, KeyMap, Msg, Payload};
use crate::ops::replica_routes::Routes;
use crate::ops::train::{self, LiveGroup};
use crate::ops::{payload_fits, Emit, Intake, NodeCx, NodeOp, RunMode, RunShared};
pub(crate) use crate::protocol::{RemoteWord, Report, ToWorker};
use crate::sched::admission::{self, owned_masters, source_message, Admission, Courier, CreditNetting, Credits};
use crate::sched::agenda::Agenda;
use crate::trace::{TraceEvent, TraceKind};
use amp_params::OptimConfig;
use batch::{rows_of, take_lane, Batch};
use crossbeam_channel::Receiver;
use depths::depths;
use fan_in::sum_fan_in;
use std::cell::RefCell;
use std::collections::VecDeque;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// A worker hands its trace events over in pieces of this many (2 MiB).
const TRACE_PIECE: usize = 1 << 16;

/// Counters the watchdog reads, and the time the worker spent waiting for messages.
#[derive(Default)]
pub(crate) struct WorkerGauges {
    pub processed: AtomicU64,
    pub local: AtomicUsize,
    /// Nanoseconds blocked on the inbox with nothing queued (two clock reads per wait).
    pub waited_ns: AtomicU64,
    /// Copies split over processes (`worker::ring`), at the worker's end: the most
    /// reductions of a master it updates, the bytes of gradients it sent in them, and per
    /// reduction, summed over its masters.
    pub reductions: AtomicU64,
    pub reduced_bytes: AtomicU64,
    pub reduced_bytes_per_update: AtomicU64,
}

/// Everything a worker works with.
pub(crate) struct WorkerSetup<'s, 'a> {
    pub id: usize,
    pub program: &'s Program,
    pub shared: &'s RunShared<'a>,
    pub inbox: Receiver<ToWorker>,
    /// Every worker's inbox, in this process or through the bridge (`crate::cluster`).
    pub peers: Peers,
    pub reports: ReportTo,
    /// Where losses, outputs and pieces of the trace go (`Report::Loss`, `Output`,
    /// `Trace`): read by the controller whenever it wakes, so sending them wakes nobody.
    pub results: ReportTo,
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
    /// The same, for a batch's ports.
    spare_ports: Vec<u16>,
    /// The credits of the batch being handled (see `sched::admission`).
    credits: CreditNetting,
    /// Instances this worker admitted for its own source, queued when its queues run dry
    /// (where the controller's admissions would be taken), without a channel round trip.
    admitted: Vec<Envelope>,
    /// The workers that own parameter groups (told of every instance that finishes here,
    /// when workers admit).
    owners: Vec<usize>,
    /// This process's updaters of bounded reductions outside process 0, whose joins wait
    /// for its reads (`worker::ring`): told of every instance that leaves it here.
    joiners: Vec<usize>,
    /// Messages processed, published to the watchdog's gauge.
    processed: u64,
    /// Instances finished since their count was last added to the owned groups (see
    /// [`Worker::count_instance`]), and the controller's `Confirm`s to answer once the
    /// updates they owe are applied.
    finished: u64,
    /// Instances whose end this worker counted for its groups, over the run: the holder of
    /// synchronous boundaries opens a window once it counted every one below the limit.
    heard: usize,
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
    /// Replicas here whose masters another worker updates (see `Worker::take_values`).
    pulls: Vec<updates::Pull>,
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
    let bounded = setup.program.groups.iter().filter(|g| g.max_staleness.is_some());
    let mut joiners: Vec<usize> = bounded.flat_map(|g| g.ring.iter().skip(1)).copied().collect();
    joiners.retain(|&w| setup.peers.is_local(w));
    joiners.sort_unstable();
    joiners.dedup();
    owners.sort_unstable();
    owners.dedup();
    let remote = RefCell::new(remote::Remote::new(&setup));
    let credits = CreditNetting::new(setup.credits);
    let pulls = updates::pulls(&setup);
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
        spare_ports: Vec::new(),
        credits,
        admitted: Vec::new(),
        owners,
        joiners,
        processed: 0,
        finished: 0,
        heard: 0,
        bound_deferred: false,
        holding: false,
        owed_sleep: 0.0,
        acks: 0,
        remote,
        pulls,
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
    worker.remote.borrow().rings.publish(worker.setup.gauges);
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
            let window = self.setup.admission.first_window();
            for (instance, at) in admission::balanced(program, &self.setup.shared.instances, window) {
                match source_message(program, self.setup.credits, instance, at) {
                    (to, env) if to == self.setup.id => self.enqueue(env),
                    (to, env) => {
                        self.setup.peers.send(to, ToWorker::Work(env));
                    }
                }
            }
        }
        // The holder of synchronous boundaries opens the first window.
        self.admit_held();
        loop {
            if let Some(batch) = self.next_batch() {
                self.take_values();
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
                if self.setup.inbox.is_empty() {
                    self.hand_in_gradients();
                }
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
    /// `factor` times its measured time; the sleep counts essages: an instance that
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
            // The vectors of the last batch run one by one, emptied, when there is one.
            let (msgs, ports) = (std::mem::take(&mut self.spare), std::mem::take(&mut self.spare_ports));
            let batch = Batch::behind((node, first), &mut slot.queue, slot.intake, limit, msgs, ports);
            self.queued -= batch.msgs.len();
            return Some(batch);
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
            return Some(Batch { node, dir, port, msgs, ports: Vec::new() });
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
        let ty = |port: u16| match batch.dir {
            Dir::Forward => node.inputs.get(usize::from(port)),
            Dir::Backward => node.outputs.get(usize::from(port)),
        };
        // The source's admission message arrives on a port it does not have.
        if !matches!(node.op, crate::load::program::ExecOp::Ir(amp_ir::Op::Source)) {
            for (i, msg) in batch.msgs.iter().enumerate() {
                let fits = ty(batch.port_of(i))
                    .map_or(Err(OpError::Unsupported { op: "message on a missing port" }), |ty| {
                        payload_fits(ty, &msg.payload)
                    });
                fits.map_err(|e| ExecError::at_node(node, msg.instance(), e))?;
            }
        }
        let start = self.setup.trace.then(Instant::now);
        let (dir, count) = (batch.dir, batch.msgs.len());
        let rows = if start.is_some() {
            batch.msgs.iter().enumerate().map(|(i, msg)| rows_of(ty(batch.port_of(i)), msg)).sum()
        } else {
            0
        };
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
        let Batch { dir, port, mut msgs, mut ports, .. } = batch;
        let seen = slot.messages..slot.messages + msgs.len() as u64;
        match fault {
            // At the node that runs the graph node (a fused group, a chain, an epilogue).
            Some(Fault::PanicAt { node: target, after })
                if node.graph_nodes().contains(&target) && seen.contains(&after) =>
            {
                panic!("injected fault at node %{target}");
            }
            Some(Fault::DelayAt { node: target, after, delay })
                if node.graph_nodes().contains(&target) && seen.contains(&after) =>
            {
                std::thread::sleep(delay);
            }
            _ => {}
        }
        slot.messages = seen.end;
        // A prediction the loss does not use: its producers that reach a loss wait for a
        // gradient from it, which is zero (the op itself runs as in evaluation).
        let unused = node.forward_only && shared.mode.backward();
        if unused && dir == Dir::Backward {
            return Ok(());
        }
        let program = self.setup.program;
        let consumers = |port: u16| node.consumers.get(usize::from(port)).map_or(0, Vec::len);
        let fans_in = |port: u16| dir == Dir::Backward && consumers(port) >= 2;
        // What a message meets before the op: a fanned-out port's gradients are summed (only
        // the message that completes its sum goes on), an unused prediction answers its
        // producer with a zero gradient.
        let before = |slot: &mut Slot, cx: &mut NodeCx, port: u16, msg: Msg| -> Option<Msg> {
            let msg = if fans_in(port) { sum_fan_in(slot, node, port, consumers(port), msg)? } else { msg };
            let answered = node.producers.get(usize::from(port)).and_then(|&(p, _)| program.node(p));
            if unused && answered.is_some_and(|p| !p.forward_only) {
                let zero = cx.zero_input_grad(usize::from(port), &msg.payload);
                cx.backward(port, msg.clone().with_payload(zero));
            }
            Some(msg)
        };
        let mut cx = NodeCx::new(node, shared, &mut self.emitted);
        let mixed = !ports.is_empty();
        if !mixed {
            if fans_in(port) || unused {
                msgs = msgs.into_iter().filter_map(|msg| before(slot, &mut cx, port, msg)).collect();
            }
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
        }
        let mut result = Ok(());
        for (i, msg) in msgs.drain(..).enumerate() {
            let port = ports.get(i).copied().unwrap_or(port);
            let Some(msg) = (if mixed { before(slot, &mut cx, port, msg) } else { Some(msg) }) else { continue };
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
        ports.clear();
        self.spare_ports = ports;
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
        self.tell_joiners(i);
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
        let dur_ns = u64::try_from(start.elapsed().as_nanos()).unwrap_or(u64::MAX);
        let batch = u32::try_from(batch).unwrap_or(u32::MAX);
        let rows = u32::try_from(rows).unwrap_or(u32::MAX);
        let instances = u32::try_from(instances).unwrap_or(u32::MAX);
        let worker = self.setup.id as u32;
        self.events.push(TraceEvent { worker, node, kind, start_us, dur_ns, batch, rows, instances, staleness: None });
        if self.events.len() >= TRACE_PIECE {
            self.setup.results.send(Report::Trace(std::mem::take(&mut self.events)));
        }
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
