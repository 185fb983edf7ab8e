//! Scale-out: one program's workers in several processes, over a transport (`amp_net`).
//!
//! Workers are numbered globally; process `p` runs a contiguous range of them
//! ([`workers_of`]). Inside a process, workers exchange messages on their channels as in a
//! one-process run; each process runs one **bridge** thread, the process's only
//! user of the transport (`amp_net::Transport`). A worker hands
//! what is for a worker of another process to the bridge's outbox ([`Peers`]); the
//! bridge encodes it (`crate::wire`), sends one packet per peer per round, and delivers
//! what arrives into the local workers' channels, or, on process 0, into the
//! controller's report and result channels.
//!
//! **Credits across processes** (Dijkstra–Scholten): every process keeps its own counts
//! (`Credits`). A message for another process keeps the credit its sender took until the
//! receiver gives it back ([`wire::Item::Release`]). The receiving bridge adds the
//! message to its own count: if the instance had nothing there (the count was zero), the
//! sender becomes the instance's parent there, given its credit back when the count
//! returns to zero; otherwise the credit goes back at once. So process 0, where every
//! instance is admitted, sees an instance's count reach zero exactly when nothing of it
//! is left anywhere, and ends it there as in one process (`sched::admission`).
//!
//! **Reports before ends**: a loss or output computed on process `p` goes straight to
//! process 0, while the instance's end reaches process 0 through the credits `p` gives back
//! to its parent, which may be a third process. When `p`'s parent for the instance is
//! process 0, the credit goes back after the report on the same connection, in order.
//! Otherwise the report takes a credit of its own ([`ReportTo::receipt`]): process 0 gives
//! it back ([`wire::Item::Receipt`], answered by a `Release`) once the report is in its
//! controller's channel, so `p`'s count, and with it process 0's, cannot return to zero
//! before the report arrived, whatever the number of processes.
//!
//! **Transport**: the bridge is handed a link already connected and authenticated
//! (`amp_net`: the key's challenge–response, fingerprints, the clock probe, and the
//! frames over timely_communication or in memory). What is inside a frame is ours and
//! decoded as untrusted (`crate::wire`).
//!
//! **Clocks** (for the merged trace): each process measured, while connecting to process
//! 0, the offset between its clock and process 0's (`amp_net::Connected::offset_us`).
//! Trace events that cross to process 0 are moved onto its timeline as they leave
//! ([`Cluster::clock_us`]), so process 0 writes one trace in which every process's
//! workers share one time axis.
//!
//! **Decisions**: what only process 0 knows (its validation: improved, out of patience)
//! but every process must act on, process 0 sends as a [`wire::Item::Decision`] between
//! runs ([`Cluster::agree`]); it takes a run number, like a gather, so a process reads it
//! at the same point of its runs. A decision from any other process, or on process 0, is
//! a misbehaving peer.
//!
//! **Faults**: every bridge sends a heartbeat when it sent nothing else for
//! [`ClusterSpec::heartbeat`]; a peer heard from for none of [`ClusterSpec::timeout`],
//! whose connection broke, or that sent a packet that cannot be read is lost: the run ends
//! on this process with [`ExecError::Cluster`] naming it, and every later run refuses to
//! start.

use crate::error::ExecError;
use crate::trace::TraceEvent;
use crate::wire::{self, Item, Limits, Packet};
use amp_ir::placement::{process_of, workers_of, MAX_RUN_PROCESSES};
use amp_net::{Counters, Link, Traffic, Transport};
use crossbeam_channel::{unbounded, Receiver, Sender};
use std::collections::VecDeque;
use std::fmt;
use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::{JoinHandle, Thread};
use std::time::{Duration, Instant};

/// What the bridge of a process needs to know of the run's processes (the transport is
/// connected already: `amp_net`).
#[derive(Clone, Debug)]
pub struct ClusterSpec {
    /// This process's index.
    pub process: usize,
    /// `host:port` of every process, in process order (named in errors).
    pub addresses: Vec<String>,
    /// A bridge with nothing else to send sends a heartbeat this often.
    pub heartbeat: Duration,
    /// A peer heard from for none of this long is lost.
    pub timeout: Duration,
}

impl ClusterSpec {
    pub fn new(process: usize, addresses: Vec<String>) -> ClusterSpec {
        ClusterSpec { process, addresses, heartbeat: Duration::from_millis(200), timeout: Duration::from_secs(5) }
    }
}

/// A process's membership in a cluster: the bridge thread and what the runs use to reach
/// it. Cloned handles share it; [`Cluster::shutdown`] ends it.
#[derive(Clone)]
pub struct Cluster {
    inner: Arc<Inner>,
}

impl fmt::Debug for Cluster {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Cluster {{ process: {}, processes: {} }}", self.inner.process, self.inner.addresses.len())
    }
}

impl PartialEq for Cluster {
    fn eq(&self, other: &Cluster) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }
}

struct Inner {
    process: usize,
    addresses: Vec<String>,
    outbox: Sender<Outgoing>,
    control: Sender<Control>,
    bridge: Thread,
    runs: AtomicU64,
    failure: Arc<Mutex<Option<String>>>,
    join: Mutex<Option<JoinHandle<()>>>,
    /// Tensors other processes sent for a gather or an exchange (`Cluster::exchange`):
    /// sender, step of the runs, slot, values.
    tensors: Receiver<Tensor>,
    /// Tensors that arrived for a later exchange than the one reading (a peer ahead).
    later: Mutex<Vec<Tensor>>,
    /// Process 0's decisions with their run numbers (`Cluster::agree`).
    decisions: Receiver<(u64, Vec<u64>)>,
    /// This process's clock: the instant it began to connect.
    base: Instant,
    /// Process 0's clock when this one's reads 0, in microseconds (0 on process 0).
    offset_us: i64,
    traffic: Arc<Counters>,
}

/// A tensor from another process: its sender, the step of the runs it belongs to, its slot
/// and values (see [`Cluster::exchange`]).
type Tensor = (usize, u64, u32, Vec<f32>);

/// Something a local worker or controller sends another process.
pub(crate) struct Outgoing {
    pub process: usize,
    pub run: u64,
    pub item: Item,
}

enum Control {
    Begin(Box<RunPort>),
    End(u64),
    Shutdown,
}

/// What a process-local message becomes on the wire (the scheduler's `ToWorker` and
/// `Report` say, in `sched::worker`).
pub(crate) trait Wire {
    /// The item for worker `worker` (or the controller) of another process; `None` for
    /// what never crosses.
    fn into_item(self, worker: u32) -> Option<Item>;
}

/// Where the bridge delivers a run's items: the scheduler's channels and credits
/// (`sched::controller` implements it).
pub(crate) trait RunSink: Send {
    /// This process's `index`-th worker takes `item` (a message, an instance's end, a
    /// confirmation request, a stop, a credit given back).
    fn worker(&self, index: usize, item: Item);
    /// A report for the controller, from `from` (named in a failure); false when this
    /// process runs none.
    fn controller(&self, item: Item, from: &str) -> bool;
    /// A message of `instance` arrived from process `from`: true when this process keeps
    /// the sender's credit until its own count returns to zero (see the module doc).
    fn arrive(&self, instance: usize, from: usize) -> bool;
    /// The cluster failed: the controller hears why, every local worker stops.
    fn fail(&self, message: &str);
}

/// What the bridge needs of a run to deliver into it.
pub(crate) struct RunPort {
    pub run: u64,
    /// This process's workers.
    pub local: Range<usize>,
    pub sink: Box<dyn RunSink>,
    pub instances: usize,
    pub nodes: usize,
    pub state_len: usize,
    /// Workers in the run, in every process (a peer's trace names only its own).
    pub workers: usize,
    /// Microseconds added to the trace events that arrive (on process 0's clock) to time
    /// them from this process's executor start: minus [`Cluster::clock_us`] of it.
    pub trace_shift: i64,
    /// Per parameter group, for a replica's: what its messages must match.
    pub replicas: Vec<Option<ReplicaShape>>,
    /// Per node, the worker that runs it (`usize::MAX` for holes).
    pub node_workers: Vec<usize>,
}

/// A replica group as the bridge checks the messages about it (`wire::Item::ReplicaPull`
/// and the others): the worker that runs it, the worker that owns its master, and the
/// length of each of its tensors.
#[derive(Clone, Debug)]
pub(crate) struct ReplicaShape {
    pub worker: usize,
    pub owner: usize,
    pub lens: Vec<usize>,
}

impl Cluster {
    /// Starts the bridge thread on `link`, a transport connected to every other process of
    /// `spec.addresses` (`amp_net::connect`, `amp_net::timely::TimelyLink`, or
    /// `amp_net::memory::MemoryNet` in tests); `base` is this process's clock's zero and
    /// `offset_us` process 0's clock then (`amp_net::Connected`).
    pub fn start(link: Box<dyn Link>, spec: ClusterSpec, base: Instant, offset_us: i64) -> Result<Cluster, ExecError> {
        let processes = spec.addresses.len();
        if processes < 2 || spec.process >= processes {
            return Err(cluster_error(format!(
                "process {} of {processes}: a cluster has at least 2 processes, numbered from 0",
                spec.process
            )));
        }
        if processes > MAX_RUN_PROCESSES {
            return Err(cluster_error(format!(
                "{processes} processes: at most {MAX_RUN_PROCESSES} are supported (see `MAX_RUN_PROCESSES`)"
            )));
        }
        let (outbox, outgoing) = unbounded();
        let (control, controls) = unbounded();
        let (tensor_tx, tensors) = unbounded();
        let (decision_tx, decisions) = unbounded();
        let failure = Arc::new(Mutex::new(None));
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let bridge = Bridge {
            process: spec.process,
            addresses: spec.addresses.clone(),
            outgoing,
            controls,
            tensors: tensor_tx,
            decisions: decision_tx,
            failure: Arc::clone(&failure),
            heartbeat: spec.heartbeat,
            timeout: spec.timeout,
            limits: Limits::default(),
            run: None,
            ended: 0,
            early: VecDeque::new(),
            buffers: (0..processes).map(|_| (0, Vec::new())).collect(),
            last_heard: vec![Instant::now(); processes],
            last_sent: vec![Instant::now(); processes],
            shutdown_sent: false,
            shutdown_heard: vec![false; processes],
            pending_packets: Vec::new(),
            scratch: Vec::new(),
            traffic: Arc::default(),
        };
        let handle = std::thread::Builder::new()
            .name("amp-bridge".into())
            .spawn(move || bridge.run(link, ready_tx))
            .map_err(|e| cluster_error(format!("cannot start the bridge thread: {e}")))?;
        let thread = handle.thread().clone();
        // The bridge opens the transport first (timely wakes the thread that built it).
        let traffic = ready_rx.recv().map_err(|_| cluster_error("the bridge thread did not start".into()))?;
        Ok(Cluster {
            inner: Arc::new(Inner {
                process: spec.process,
                addresses: spec.addresses,
                outbox,
                control,
                bridge: thread,
                runs: AtomicU64::new(0),
                failure,
                join: Mutex::new(Some(handle)),
                tensors,
                later: Mutex::new(Vec::new()),
                decisions,
                base,
                offset_us,
                traffic,
            }),
        })
    }

    pub fn process(&self) -> usize {
        self.inner.process
    }

    pub fn processes(&self) -> usize {
        self.inner.addresses.len()
    }

    /// Why the cluster failed, once it did.
    pub fn failure(&self) -> Option<String> {
        self.inner.failure.lock().ok().and_then(|f| f.clone())
    }

    /// The next run's number: every process makes the same runs in the same order.
    pub(crate) fn next_run(&self) -> u64 {
        self.inner.runs.fetch_add(1, Ordering::AcqRel) + 1
    }

    /// Registers a run with the bridge; messages of it that arrived early are delivered.
    pub(crate) fn begin(&self, port: RunPort) -> Result<(), ExecError> {
        if let Some(failure) = self.failure() {
            return Err(cluster_error(failure));
        }
        self.control(Control::Begin(Box::new(port)));
        Ok(())
    }

    /// The run ended here: what still comes for it is dropped.
    pub(crate) fn end(&self, run: u64) {
        self.control(Control::End(run));
    }

    fn control(&self, control: Control) {
        let _ = self.inner.control.send(control);
        self.inner.bridge.unpark();
    }

    /// A handle the workers of run `run` send through.
    pub(crate) fn outbox(&self, run: u64) -> Outbox {
        Outbox { tx: self.inner.outbox.clone(), bridge: self.inner.bridge.clone(), run, trace_shift: 0 }
    }

    /// A run's handle whose trace events, timed from `origin` (the executor's start here),
    /// leave on process 0's clock ([`Cluster::clock_us`]).
    pub(crate) fn run_outbox(&self, run: u64, origin: Instant) -> Outbox {
        Outbox { trace_shift: self.clock_us(origin), ..self.outbox(run) }
    }

    /// `instant` of this process on process 0's clock: microseconds since process 0's
    /// base (see the module doc, Clocks). On process 0, its own time since its base.
    pub fn clock_us(&self, instant: Instant) -> i64 {
        let base = self.inner.base;
        let since = match instant.checked_duration_since(base) {
            Some(after) => i64::try_from(after.as_micros()).unwrap_or(i64::MAX),
            None => -i64::try_from(base.duration_since(instant).as_micros()).unwrap_or(i64::MAX),
        };
        since.saturating_add(self.inner.offset_us)
    }

    /// What this process sent and received so far (see [`Traffic`]).
    pub fn traffic(&self) -> Traffic {
        self.inner.traffic.read()
    }

    /// The `host:port` of process `process` (`?` for none).
    pub fn address_of(&self, process: usize) -> &str {
        self.address(process)
    }

    /// Gathers parameter tensors on process 0: each other process sends the values of the
    /// tensors it owns (`own`, by index into the parameter set), process 0 receives every
    /// tensor that `expected` lists as another process's and returns them. Every process
    /// calls it at the same point of its runs.
    pub fn gather(
        &self,
        own: Vec<(u32, Vec<f32>)>,
        expected: &[(u32, usize)],
    ) -> Result<Vec<(u32, Vec<f32>)>, ExecError> {
        if self.inner.process != 0 {
            let sends = own.into_iter().map(|(slot, values)| (0, slot, values)).collect();
            return self.exchange(sends, &[]);
        }
        self.exchange(Vec::new(), expected)
    }

    /// Moves tensors between any processes: this process sends each of `sends` (to
    /// process, slot, values) and returns the tensors `expected` lists (slot, sender),
    /// each once. Slots name what a tensor is to the caller, unique within one exchange.
    /// Every process calls it at the same point of its runs (it takes a step of the runs,
    /// so a tensor of a later exchange that arrives early waits for it).
    pub fn exchange(
        &self,
        sends: Vec<(usize, u32, Vec<f32>)>,
        expected: &[(u32, usize)],
    ) -> Result<Vec<(u32, Vec<f32>)>, ExecError> {
        let run = self.next_run();
        let outbox = self.outbox(run);
        for (process, tensor, values) in sends {
            outbox.send(process, Item::Tensor { tensor, values });
        }
        let mut got: Vec<(u32, Vec<f32>)> = Vec::new();
        let take = |(from, at, tensor, values): Tensor, got: &mut Vec<(u32, Vec<f32>)>| {
            let wanted = at == run && expected.iter().any(|&(t, p)| t == tensor && p == from);
            if !wanted || got.iter().any(|(t, _)| *t == tensor) {
                return Err(cluster_error(format!(
                    "process {from} ({}) sent tensor {tensor}, which is not its to send",
                    self.address(from)
                )));
            }
            got.push((tensor, values));
            Ok(())
        };
        let early: Vec<Tensor> = self.inner.later.lock().map(|mut l| std::mem::take(&mut *l)).unwrap_or_default();
        let (now, later): (Vec<Tensor>, Vec<Tensor>) = early.into_iter().partition(|t| t.1 <= run);
        if let Ok(mut l) = self.inner.later.lock() {
            l.extend(later);
        }
        for tensor in now {
            take(tensor, &mut got)?;
        }
        while got.len() < expected.len() {
            match self.inner.tensors.recv_timeout(Duration::from_millis(100)) {
                Ok(tensor) if tensor.1 > run => {
                    if let Ok(mut l) = self.inner.later.lock() {
                        l.push(tensor);
                    }
                }
                Ok(tensor) => take(tensor, &mut got)?,
                Err(_) => {
                    if let Some(failure) = self.failure() {
                        return Err(cluster_error(failure));
                    }
                }
            }
        }
        self.failure().map_or(Ok(got), |f| Err(cluster_error(f)))
    }

    /// Process 0's `decision` becomes every process's: process 0 sends it to the others
    /// and returns it; every other process waits for process 0's and returns that (its own
    /// `decision` says only how many words it expects). Every process calls it at the same
    /// point of its runs. A decision of another length or for another point of the runs
    /// ends the run with an error naming process 0; a lost process ends the wait as it
    /// ends a run. At most [`wire::MAX_DECISION_WORDS`] words.
    pub fn agree(&self, decision: &[u64]) -> Result<Vec<u64>, ExecError> {
        if decision.len() > wire::MAX_DECISION_WORDS {
            return Err(ExecError::Config {
                message: format!("a decision of {} words (at most {})", decision.len(), wire::MAX_DECISION_WORDS),
            });
        }
        let run = self.next_run();
        if let Some(failure) = self.failure() {
            return Err(cluster_error(failure));
        }
        if self.inner.process == 0 {
            let outbox = self.outbox(run);
            for peer in 1..self.processes() {
                outbox.send(peer, Item::Decision { words: decision.to_vec() });
            }
            return Ok(decision.to_vec());
        }
        loop {
            match self.inner.decisions.recv_timeout(Duration::from_millis(100)) {
                Ok((sent_at, words)) => {
                    let wrong = if sent_at != run {
                        Some(format!("a decision for step {sent_at} of its runs at step {run} of this one's"))
                    } else if words.len() != decision.len() {
                        Some(format!("a decision of {} words, not {}", words.len(), decision.len()))
                    } else {
                        None
                    };
                    return match wrong {
                        Some(what) => {
                            let message = format!("process 0 ({}) sent {what}", self.address(0));
                            self.fail(&message);
                            Err(cluster_error(message))
                        }
                        None => Ok(words),
                    };
                }
                Err(crossbeam_channel::RecvTimeoutError::Timeout) => {
                    if let Some(failure) = self.failure() {
                        return Err(cluster_error(failure));
                    }
                }
                // The bridge has stopped: nothing more can come.
                Err(crossbeam_channel::RecvTimeoutError::Disconnected) => {
                    let failure = self.failure().unwrap_or_else(|| "the cluster was shut down".into());
                    return Err(cluster_error(failure));
                }
            }
        }
    }

    /// Records this process's failure (the first one stands): every later run refuses to
    /// start.
    fn fail(&self, message: &str) {
        if let Ok(mut failure) = self.inner.failure.lock() {
            failure.get_or_insert_with(|| message.to_string());
        }
    }

    fn address(&self, process: usize) -> &str {
        self.inner.addresses.get(process).map_or("?", String::as_str)
    }

    /// Leaves the cluster: tells every peer, waits (a few heartbeat timeouts at most) for
    /// each to say the same, and stops the bridge. Every process calls it after its last
    /// run.
    pub fn shutdown(&self) -> Result<(), ExecError> {
        self.control(Control::Shutdown);
        let handle = self.inner.join.lock().ok().and_then(|mut j| j.take());
        if let Some(handle) = handle {
            let _ = handle.join();
        }
        self.failure().map_or(Ok(()), |f| Err(cluster_error(f)))
    }
}

pub(crate) fn cluster_error(message: String) -> ExecError {
    ExecError::Cluster { message }
}

/// Where a worker's messages for other processes go (the bridge's outbox for one run).
#[derive(Clone)]
pub(crate) struct Outbox {
    tx: Sender<Outgoing>,
    bridge: Thread,
    run: u64,
    /// Microseconds added to the start of every trace event sent (see `Cluster::run_outbox`).
    trace_shift: i64,
}

impl Outbox {
    pub fn send(&self, process: usize, mut item: Item) {
        match &mut item {
            Item::Trace(events) | Item::Stopped { trace: events, .. } => shift_events(events, self.trace_shift),
            _ => {}
        }
        let _ = self.tx.send(Outgoing { process, run: self.run, item });
        self.bridge.unpark();
    }
}

/// Trace events from process `from` name only its own workers.
fn check_trace(events: &[TraceEvent], from: usize, processes: usize, workers: usize) -> Result<(), String> {
    let theirs = workers_of(from, processes, workers);
    match events.iter().find(|e| !theirs.contains(&(e.worker as usize))) {
        Some(e) => Err(format!("a trace event of worker {}, not one of its own", e.worker)),
        None => Ok(()),
    }
}

/// Moves trace events `shift` microseconds later (earlier when negative), none before 0.
pub(crate) fn shift_events(events: &mut [TraceEvent], shift: i64) {
    if shift == 0 {
        return;
    }
    for e in events {
        let start = i128::from(e.start_us) + i128::from(shift);
        e.start_us = u64::try_from(start.max(0)).unwrap_or(u64::MAX);
    }
}

/// Where a worker's messages for another worker go: that worker's channel in this
/// process, or the bridge for a worker of another process. The one seam between the
/// scheduler and the cluster.
pub(crate) struct Peers<T> {
    /// Per worker (global index), its channel when it runs in this process.
    local: Vec<Option<Sender<T>>>,
    remote: Option<(Outbox, Vec<u16>)>,
}

impl<T> Clone for Peers<T> {
    fn clone(&self) -> Peers<T> {
        Peers { local: self.local.clone(), remote: self.remote.clone() }
    }
}

impl<T: Wire> Peers<T> {
    /// Every worker in this process.
    pub fn local(senders: &[Sender<T>]) -> Peers<T> {
        Peers { local: senders.iter().cloned().map(Some).collect(), remote: None }
    }

    /// This process's workers `range` (their channels in `senders`) out of `workers`, the
    /// others through `outbox`.
    pub fn split(
        senders: &[Sender<T>],
        range: Range<usize>,
        workers: usize,
        cluster: &Cluster,
        outbox: Outbox,
    ) -> Peers<T> {
        let mut local: Vec<Option<Sender<T>>> = (0..workers).map(|_| None).collect();
        for (slot, tx) in local.get_mut(range).into_iter().flatten().zip(senders) {
            *slot = Some(tx.clone());
        }
        let processes = cluster.processes();
        let owner = (0..workers).map(|w| u16::try_from(process_of(w, processes, workers)).unwrap_or(0)).collect();
        Peers { local, remote: Some((outbox, owner)) }
    }

    /// Whether worker `worker` runs in this process.
    pub fn is_local(&self, worker: usize) -> bool {
        self.local.get(worker).is_some_and(Option::is_some)
    }

    /// Sends `item` to worker `worker`, wherever it runs; false when it is gone.
    pub fn send(&self, worker: usize, item: T) -> bool {
        if let Some(Some(tx)) = self.local.get(worker) {
            return tx.send(item).is_ok();
        }
        let Some((outbox, owner)) = &self.remote else { return false };
        let Some(&process) = owner.get(worker) else { return false };
        let Some(item) = item.into_item(u32::try_from(worker).unwrap_or(u32::MAX)) else { return false };
        outbox.send(usize::from(process), item);
        true
    }

    /// This process's index, in a run split over processes.
    pub fn this_process(&self) -> Option<usize> {
        let (_, owner) = self.remote.as_ref()?;
        let local = self.local.iter().position(Option::is_some)?;
        owner.get(local).map(|&p| usize::from(p))
    }

    /// The process that runs worker `worker`, in a run split over processes.
    pub fn process_of(&self, worker: usize) -> Option<usize> {
        let (_, owner) = self.remote.as_ref()?;
        owner.get(worker).map(|&p| usize::from(p))
    }

    /// Sends `item` to process `process` (not to one of its workers); false when this
    /// run is not split.
    pub fn send_to_process(&self, process: usize, item: Item) -> bool {
        let Some((outbox, _)) = &self.remote else { return false };
        outbox.send(process, item);
        true
    }

    /// Gives a credit of `instance` back to process `process` (see the module doc).
    pub fn release(&self, process: usize, instance: usize) {
        if let Some((outbox, _)) = &self.remote {
            outbox.send(process, Item::Release { instance: instance as u64 });
        }
    }

    /// The length of a local worker's channel (for a stall report).
    pub fn queued(&self, worker: usize) -> usize {
        self.local.get(worker).and_then(Option::as_ref).map_or(0, Sender::len)
    }

    /// Workers in the run, in every process.
    pub fn len(&self) -> usize {
        self.local.len()
    }
}

/// Where a worker's reports go: the controller's channel in this process, or process 0's
/// controller through the bridge.
pub(crate) enum ReportTo<R> {
    Local(Sender<R>),
    Remote(Outbox),
}

impl<R> Clone for ReportTo<R> {
    fn clone(&self) -> ReportTo<R> {
        match self {
            ReportTo::Local(tx) => ReportTo::Local(tx.clone()),
            ReportTo::Remote(outbox) => ReportTo::Remote(outbox.clone()),
        }
    }
}

impl<R: Wire> ReportTo<R> {
    /// Whether reports cross to another process (this is not process 0).
    pub fn is_remote(&self) -> bool {
        matches!(self, ReportTo::Remote(_))
    }

    /// After a report of `instance` that took a credit here: asks process 0 to give the
    /// credit back once the report arrived (see the module doc). Nothing for a local
    /// controller.
    pub fn receipt(&self, instance: usize) {
        if let ReportTo::Remote(outbox) = self {
            outbox.send(0, Item::Receipt { instance: instance as u64 });
        }
    }

    pub fn send(&self, report: R) {
        match self {
            ReportTo::Local(tx) => {
                let _ = tx.send(report);
            }
            ReportTo::Remote(outbox) => {
                if let Some(item) = report.into_item(0) {
                    outbox.send(0, item);
                }
            }
        }
    }
}

struct Bridge {
    process: usize,
    addresses: Vec<String>,
    outgoing: Receiver<Outgoing>,
    controls: Receiver<Control>,
    tensors: Sender<Tensor>,
    decisions: Sender<(u64, Vec<u64>)>,
    failure: Arc<Mutex<Option<String>>>,
    heartbeat: Duration,
    timeout: Duration,
    limits: Limits,
    run: Option<Box<RunPort>>,
    /// The last run that ended here: packets of it or before are dropped.
    ended: u64,
    /// Packets of runs that have not begun here yet.
    early: VecDeque<Packet>,
    /// Per peer, items waiting to be sent, and their run.
    buffers: Vec<(u64, Vec<Item>)>,
    last_heard: Vec<Instant>,
    last_sent: Vec<Instant>,
    shutdown_sent: bool,
    shutdown_heard: Vec<bool>,
    /// Packets of an earlier run queued before the buffer moved to another run.
    pending_packets: Vec<(usize, u64, Vec<Item>)>,
    scratch: Vec<u8>,
    traffic: Arc<Counters>,
}

/// At most this many items of runs not begun are kept (a peer far ahead is a fault).
const MAX_EARLY_ITEMS: usize = 1 << 24;

/// The most decisions a process holds before it asks for them: process 0 runs ahead of
/// the others by a few runs at most (a run needs every process's workers, except one whose
/// plan uses only process 0's), so more is a misbehaving peer, not a slow one.
const MAX_PENDING_DECISIONS: usize = 1 << 10;

impl Bridge {
    fn run(mut self, link: Box<dyn Link>, ready: std::sync::mpsc::Sender<Arc<Counters>>) {
        let mut transport = link.open();
        self.traffic = transport.counters();
        let _ = ready.send(Arc::clone(&self.traffic));
        let mut shutting_down: Option<Instant> = None;
        loop {
            let mut busy = false;
            if !self.failed() {
                let received = transport.receive(&mut |bytes| {
                    busy = true;
                    if let Err(message) = self.on_frame(bytes) {
                        self.fail(message);
                    }
                });
                if let Err(e) = received {
                    self.network_failed(transport.as_mut(), e);
                }
            }
            while let Ok(control) = self.controls.try_recv() {
                busy = true;
                match control {
                    Control::Begin(port) => self.begin(port),
                    Control::End(run) => {
                        if self.run.as_ref().is_some_and(|r| r.run == run) {
                            self.run = None;
                        }
                        self.ended = self.ended.max(run);
                    }
                    Control::Shutdown => {
                        shutting_down.get_or_insert_with(Instant::now);
                    }
                }
            }
            while let Ok(out) = self.outgoing.try_recv() {
                busy = true;
                self.queue(out.process, out.run, out.item);
            }
            self.check_lost(transport.as_mut());
            let failed = self.failed();
            if shutting_down.is_some() && !self.shutdown_sent && !failed {
                for peer in 0..self.addresses.len() {
                    if peer != self.process {
                        self.queue(peer, 0, Item::Shutdown);
                    }
                }
                self.shutdown_sent = true;
            }
            if !failed {
                let sent = self.flush(transport.as_mut()).and_then(|()| self.beat(transport.as_mut()));
                if let Err(e) = sent.and_then(|()| transport.flush()) {
                    self.network_failed(transport.as_mut(), e);
                }
            }
            let everyone_left = (0..self.addresses.len()).all(|p| p == self.process || self.shutdown_heard[p]);
            if let Some(since) = shutting_down {
                if failed || everyone_left {
                    break;
                }
                if since.elapsed() > self.timeout * 2 {
                    let waiting: Vec<String> = (0..self.addresses.len())
                        .filter(|&p| p != self.process && !self.shutdown_heard[p])
                        .map(|p| self.peer(p))
                        .collect();
                    self.fail(format!("{} did not leave the cluster", waiting.join(", ")));
                    break;
                }
            }
            if !busy {
                transport.wait(self.heartbeat / 2);
            }
        }
        let failed = self.failed();
        transport.close(failed);
    }

    /// The transport failed: the peer it names is lost (or, if none is named, the
    /// transport's own error ends the run).
    fn network_failed(&mut self, transport: &mut dyn Transport, error: amp_net::NetError) {
        self.check_lost(transport);
        self.fail(error.0);
    }

    fn peer(&self, process: usize) -> String {
        format!("process {process} ({})", self.addresses.get(process).map_or("?", String::as_str))
    }

    fn failed(&self) -> bool {
        self.failure.lock().map_or(true, |f| f.is_some())
    }

    /// The first failure ends every run: the controller (process 0) hears of it, and this
    /// process's workers stop.
    fn fail(&mut self, message: String) {
        if let Ok(mut failure) = self.failure.lock() {
            if failure.is_some() {
                return;
            }
            *failure = Some(message.clone());
        }
        if let Some(run) = self.run.take() {
            run.sink.fail(&message);
        }
    }

    /// A peer whose connection broke, or that was silent for too long, is lost.
    fn check_lost(&mut self, transport: &mut dyn Transport) {
        for (peer, what) in transport.take_lost() {
            if !self.shutdown_heard.get(peer).copied().unwrap_or(true) {
                let message = format!("lost {}: its connection broke ({what})", self.peer(peer));
                self.fail(message);
            }
        }
        for peer in 0..self.addresses.len() {
            if peer != self.process && !self.shutdown_heard[peer] && self.last_heard[peer].elapsed() > self.timeout {
                let silent = self.last_heard[peer].elapsed().as_secs_f64();
                self.fail(format!("lost {}: nothing heard from it for {silent:.1}s", self.peer(peer)));
            }
        }
    }

    fn queue(&mut self, process: usize, run: u64, item: Item) {
        let Some((buffered_run, items)) = self.buffers.get_mut(process) else { return };
        if !items.is_empty() && *buffered_run != run {
            // One packet holds one run's items: what was queued for the last run goes first.
            let (old_run, old) = (*buffered_run, std::mem::take(items));
            self.pending_packets.push((process, old_run, old));
        }
        let (buffered_run, items) = &mut self.buffers[process];
        if items.is_empty() {
            *buffered_run = run;
        }
        items.push(item);
    }

    fn send_packet(
        &mut self,
        transport: &mut dyn Transport,
        process: usize,
        run: u64,
        items: &[Item],
    ) -> Result<(), amp_net::NetError> {
        self.scratch.clear();
        wire::encode(self.process as u32, run, items, &mut self.scratch);
        let messages = items.iter().filter(|i| matches!(i, Item::Work { .. })).count();
        self.traffic.messages(messages, 0);
        self.last_sent[process] = Instant::now();
        transport.send(process, std::mem::take(&mut self.scratch))
    }

    fn flush(&mut self, transport: &mut dyn Transport) -> Result<(), amp_net::NetError> {
        for (process, run, items) in std::mem::take(&mut self.pending_packets) {
            self.send_packet(transport, process, run, &items)?;
        }
        for process in 0..self.buffers.len() {
            if self.buffers[process].1.is_empty() {
                continue;
            }
            let (run, items) = std::mem::take(&mut self.buffers[process]);
            self.send_packet(transport, process, run, &items)?;
        }
        Ok(())
    }

    fn beat(&mut self, transport: &mut dyn Transport) -> Result<(), amp_net::NetError> {
        for process in 0..self.addresses.len() {
            if process != self.process && self.last_sent[process].elapsed() >= self.heartbeat {
                self.send_packet(transport, process, 0, &[Item::Heartbeat])?;
            }
        }
        Ok(())
    }

    fn begin(&mut self, port: Box<RunPort>) {
        if self.failed() {
            let failure = self.failure.lock().ok().and_then(|f| f.clone()).unwrap_or_default();
            port.sink.fail(&failure);
            return;
        }
        let run = port.run;
        self.run = Some(port);
        let early = std::mem::take(&mut self.early);
        for packet in early {
            if packet.run == run {
                if let Err(message) = self.deliver(packet) {
                    self.fail(message);
                }
            } else if packet.run > run {
                self.early.push_back(packet);
            }
        }
    }

    fn on_frame(&mut self, bytes: &[u8]) -> Result<(), String> {
        let packet = match wire::decode(bytes, &self.limits) {
            Ok(packet) => packet,
            // Which peer sent it is in the packet itself; a packet that cannot be read
            // names it when its header could be read.
            Err(error) => {
                let from = bytes.get(4..8).map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize);
                let who = from.filter(|&p| p < self.addresses.len()).map_or("a peer".to_string(), |p| self.peer(p));
                return Err(format!("{who} sent a packet that cannot be read: {error}"));
            }
        };
        let from = packet.from as usize;
        if from >= self.addresses.len() || from == self.process {
            return Err(format!("a packet names process {from} as its sender"));
        }
        let messages = packet.items.iter().filter(|i| matches!(i, Item::Work { .. })).count();
        self.traffic.messages(0, messages);
        self.last_heard[from] = Instant::now();
        if packet.items.iter().any(|i| matches!(i, Item::Decision { .. })) {
            return self.decision(packet);
        }
        let run = packet.run;
        if run == 0 || run <= self.ended {
            // Heartbeats and shutdowns (run 0), and what a finished run left behind.
            for item in &packet.items {
                match item {
                    Item::Shutdown => self.shutdown_heard[from] = true,
                    Item::Tensor { tensor, values } => {
                        let _ = self.tensors.send((from, run, *tensor, values.clone()));
                    }
                    _ => {}
                }
            }
            return Ok(());
        }
        if self.run.as_ref().is_some_and(|r| r.run == run) {
            return self.deliver(packet);
        }
        if packet.items.iter().all(|i| matches!(i, Item::Tensor { .. })) {
            for item in packet.items {
                if let Item::Tensor { tensor, values } = item {
                    let _ = self.tensors.send((from, run, tensor, values));
                }
            }
            return Ok(());
        }
        let early: usize = self.early.iter().map(|p| p.items.len()).sum();
        if early + packet.items.len() > MAX_EARLY_ITEMS {
            return Err(format!("{} sent more than {MAX_EARLY_ITEMS} items ahead of this process", self.peer(from)));
        }
        self.early.push_back(packet);
        Ok(())
    }

    /// A decision of process 0 (`Cluster::agree`) waits for the follower to ask for it.
    /// Only process 0 sends them, each alone in its packet, and never more than a run's
    /// worth ahead: a peer that does otherwise is misbehaving.
    fn decision(&mut self, packet: Packet) -> Result<(), String> {
        let who = self.peer(packet.from as usize);
        if packet.from != 0 || self.process == 0 {
            return Err(format!("{who} sent a decision; only process 0 sends them, to the others"));
        }
        let [Item::Decision { words }] = &packet.items[..] else {
            return Err(format!("{who} sent a decision among other items"));
        };
        if packet.run == 0 || self.decisions.len() >= MAX_PENDING_DECISIONS {
            return Err(format!(
                "{who} sent a decision for step {} of its runs, which this process cannot take",
                packet.run
            ));
        }
        let _ = self.decisions.send((packet.run, words.clone()));
        Ok(())
    }

    /// Delivers a packet of the current run into its workers' and controller's channels.
    fn deliver(&mut self, packet: Packet) -> Result<(), String> {
        let from = packet.from as usize;
        let who = self.peer(from);
        let mut releases = Vec::new();
        {
            let Some(port) = self.run.as_ref() else { return Ok(()) };
            let bad = |what: String| format!("{who} sent {what}");
            let local = |worker: u32, what: &str| {
                let w = worker as usize;
                if port.local.contains(&w) {
                    Ok(w - port.local.start)
                } else {
                    Err(bad(format!("{what} for worker {worker}, not one of this process's")))
                }
            };
            for item in packet.items {
                match item {
                    Item::Work { worker, node, port: p, dir, msg } => {
                        let index = local(worker, "a message")?;
                        if node as usize >= port.nodes || msg.state.len() != port.state_len {
                            return Err(bad(format!(
                                "a message for node {node} with {} state fields",
                                msg.state.len()
                            )));
                        }
                        let instance = usize::try_from(msg.instance()).ok().filter(|&i| i < port.instances);
                        let instance =
                            instance.ok_or_else(|| bad(format!("a message of instance {}", msg.instance())))?;
                        if !port.sink.arrive(instance, from) {
                            releases.push(instance);
                        }
                        port.sink.worker(index, Item::Work { worker, node, port: p, dir, msg });
                    }
                    Item::InstanceDone { worker, instance } => {
                        let index = local(worker, "a control word")?;
                        if usize::try_from(instance).ok().filter(|&i| i < port.instances).is_none() {
                            return Err(bad(format!("the end of instance {instance}")));
                        }
                        port.sink.worker(index, item);
                    }
                    Item::Confirm { worker } | Item::Stop { worker, .. } => {
                        let index = local(worker, "a control word")?;
                        port.sink.worker(index, item);
                    }
                    Item::Hold { .. } => {
                        if self.process != 0 {
                            return Err(bad("a hold of admissions, which only process 0 makes".into()));
                        }
                        // Process 0's admissions: any worker of it holds or releases them.
                        port.sink.worker(0, item);
                    }
                    Item::ReplicaPull { worker, group }
                    | Item::ReplicaGrads { worker, group, .. }
                    | Item::ReplicaValues { worker, group, .. }
                    | Item::ReplicaSynced { worker, group } => {
                        let index = local(worker, "a replica's message")?;
                        check_replica_item(&item, port, from, self.addresses.len())
                            .map_err(|what| bad(format!("{what} for replica group {group}")))?;
                        port.sink.worker(index, item);
                    }
                    Item::Served { node, .. } => {
                        let runs = port.node_workers.get(node as usize).copied().unwrap_or(usize::MAX);
                        if !workers_of(from, self.addresses.len(), port.workers).contains(&runs) {
                            return Err(bad(format!("the service time of node {node}, which it does not run")));
                        }
                        // The routes are the process's: any worker of it notes them.
                        port.sink.worker(0, item);
                    }
                    Item::Release { instance } => {
                        if usize::try_from(instance).ok().filter(|&i| i < port.instances).is_none() {
                            return Err(bad("a credit of an unknown instance".into()));
                        }
                        // Any worker of this process settles it (and ends the instance when
                        // that was its last credit).
                        port.sink.worker(0, item);
                    }
                    Item::Receipt { instance } => {
                        let known = usize::try_from(instance).ok().filter(|&i| i < port.instances);
                        match known {
                            // The reports before it are in the controller's channel: the
                            // credit they took goes back (see the module doc).
                            Some(i) if self.process == 0 => releases.push(i),
                            _ => return Err(bad(format!("a receipt of instance {instance}"))),
                        }
                    }
                    Item::Heartbeat => {}
                    Item::Shutdown => self.shutdown_heard[from] = true,
                    Item::Tensor { tensor, values } => {
                        let _ = self.tensors.send((from, packet.run, tensor, values));
                    }
                    Item::Trace(mut events) => {
                        check_trace(&events, from, self.addresses.len(), port.workers).map_err(bad)?;
                        shift_events(&mut events, port.trace_shift);
                        if !port.sink.controller(Item::Trace(events), &who) {
                            return Err(bad("a report to a process without the controller".into()));
                        }
                    }
                    Item::Stopped { worker, mut trace, held } => {
                        let theirs = workers_of(from, self.addresses.len(), port.workers);
                        if !theirs.contains(&(worker as usize)) {
                            return Err(bad(format!("the end of worker {worker}, not one of its own")));
                        }
                        check_trace(&trace, from, self.addresses.len(), port.workers).map_err(bad)?;
                        shift_events(&mut trace, port.trace_shift);
                        if !port.sink.controller(Item::Stopped { worker, trace, held }, &who) {
                            return Err(bad("a report to a process without the controller".into()));
                        }
                    }
                    report => {
                        if !port.sink.controller(report, &who) {
                            return Err(bad("a report to a process without the controller".into()));
                        }
                    }
                }
            }
        }
        for instance in releases {
            self.queue(from, packet.run, Item::Release { instance: instance as u64 });
        }
        Ok(())
    }
}

/// Whether a replica's message (`item`) from process `from` fits the run: the group is a
/// replica's, the sender runs the side that sends it (the replica's worker its gradients
/// and acknowledgements, the master's owner pulls and values), and tensors, rows and
/// instances are within the group's and run's sizes. `Err`: what is wrong.
fn check_replica_item(item: &Item, port: &RunPort, from: usize, processes: usize) -> Result<(), String> {
    let (worker, group) = match item {
        Item::ReplicaPull { worker, group }
        | Item::ReplicaGrads { worker, group, .. }
        | Item::ReplicaValues { worker, group, .. }
        | Item::ReplicaSynced { worker, group } => (*worker as usize, *group as usize),
        _ => return Err("not a replica's message".into()),
    };
    let shape = port.replicas.get(group).and_then(Option::as_ref).ok_or("a message")?;
    let runs = |w: usize| workers_of(from, processes, port.workers).contains(&w);
    let lens_fit = |tensors: &[Vec<f32>]| tensors.iter().map(Vec::len).eq(shape.lens.iter().copied());
    match item {
        Item::ReplicaPull { .. } | Item::ReplicaValues { .. } if shape.worker != worker || !runs(shape.owner) => {
            Err("a master's message, not from its owner,".into())
        }
        Item::ReplicaGrads { .. } | Item::ReplicaSynced { .. } if shape.owner != worker || !runs(shape.worker) => {
            Err("a replica's message, not from its worker,".into())
        }
        Item::ReplicaValues { tensors, .. } if !lens_fit(tensors) => Err("values of other sizes".into()),
        Item::ReplicaGrads { tensors, rows, applied, .. } => {
            // A table's rows only (`ops::train::ReplicaGrads`): one tensor of a row's
            // values per row named.
            let table_rows = match (rows, tensors.as_slice(), shape.lens.len()) {
                (Some((width, rows)), [values], 1) => values.len() as u64 == rows.len() as u64 * u64::from(*width),
                _ => false,
            };
            if !tensors.is_empty() && !lens_fit(tensors) && !table_rows {
                return Err("gradients of other sizes".into());
            }
            if let Some((width, rows)) = rows {
                let len = shape.lens.first().copied().unwrap_or(0) as u64;
                let past = |&r: &u32| (u64::from(r) + 1) * u64::from(*width) > len;
                if *width == 0 || rows.iter().any(past) {
                    return Err("rows past its first tensor".into());
                }
            }
            if applied.iter().any(|&(i, _)| i >= port.instances as u64) {
                return Err("a read of an unknown instance".into());
            }
            Ok(())
        }
        _ => Ok(()),
    }
}

/// The handshake's first words: "AMPH", the protocol's version.
#[cfg(test)]
mod tests {
    use super::*;
    use amp_net::connect::handshake;
    use amp_net::NetSpec;
    use std::io::{Read, Write};
    use std::net::{TcpListener, TcpStream};

    fn net_spec(process: usize, addresses: &[String], key: &[u8]) -> NetSpec {
        NetSpec {
            process,
            addresses: addresses.to_vec(),
            key: key.to_vec(),
            fingerprint: b"same".to_vec(),
            connect_timeout: Duration::from_secs(60),
        }
    }

    /// Process `process` of `addresses` over timely, as amprun joins one.
    fn connect(process: usize, addresses: &[String], key: &[u8]) -> Cluster {
        let connected = amp_net::connect(&net_spec(process, addresses, key), &mut |_| {}).unwrap();
        let link = amp_net::timely::TimelyLink::start(connected.sockets, process).unwrap();
        let spec = ClusterSpec::new(process, addresses.to_vec());
        Cluster::start(Box::new(link), spec, connected.base, connected.offset_us).unwrap()
    }

    /// The tests that connect clusters run one at a time: a connection that breaks is
    /// reported through a hook shared by the whole test binary (`amp_net::timely`).
    static NETWORK: Mutex<()> = Mutex::new(());

    fn free_addresses(n: usize) -> Vec<String> {
        let ports: Vec<u16> = (0..n)
            .map(|_| TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).map(|a| a.port()).unwrap())
            .collect();
        ports.iter().map(|p| format!("127.0.0.1:{p}")).collect()
    }

    /// One timely frame holding `body`, from process `source` to process `target`.
    fn frame(source: u64, target: u64, sequence: u64, body: &[u8]) -> Vec<u8> {
        let mut frame = Vec::new();
        // timely's header: channel, source, target range, length, sequence number.
        for word in [0u64, source, target, target + 1, body.len() as u64, sequence] {
            frame.extend_from_slice(&word.to_be_bytes());
        }
        frame.extend_from_slice(body);
        frame
    }

    /// Process 0 runs for real; process 1, by hand, proves the key and sends one frame of
    /// `body`. What process 0's cluster failed with, and the addresses.
    fn failure_when_process_1_sends(body: Vec<u8>) -> (String, Vec<String>) {
        let addresses = free_addresses(2);
        let key = b"test key".to_vec();
        let peer_spec = net_spec(1, &addresses, &key);
        let first = addresses[0].clone();
        let peer = std::thread::spawn(move || {
            let stream = loop {
                match TcpStream::connect(&first) {
                    Ok(stream) => break stream,
                    Err(_) => std::thread::sleep(Duration::from_millis(20)),
                }
            };
            let Ok((_, mut stream, _)) = handshake(stream, &peer_spec, Some(0), Instant::now()) else {
                panic!("the handshake fails")
            };
            stream.write_all(&frame(1, 0, 0, &body)).unwrap();
            // Held open until the other side gave up on it.
            let mut rest = Vec::new();
            let _ = stream.read_to_end(&mut rest);
        });
        let cluster = connect(0, &addresses, &key);
        let mut failure = None;
        for _ in 0..500 {
            failure = cluster.failure();
            if failure.is_some() {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        drop(cluster);
        drop(peer);
        (failure.expect("the cluster failed"), addresses)
    }

    /// A sink that takes nothing (the replica checks run before any delivery).
    struct Nowhere;

    impl RunSink for Nowhere {
        fn worker(&self, _: usize, _: Item) {}
        fn controller(&self, _: Item, _: &str) -> bool {
            false
        }
        fn arrive(&self, _: usize, _: usize) -> bool {
            false
        }
        fn fail(&self, _: &str) {}
    }

    /// A replica's messages must fit the run: the group is a replica's, each side sends
    /// only its own words (the replica's worker gradients and acknowledgements, the
    /// master's owner pulls and values), and sizes, rows and instances are the run's.
    /// (The bridge names the sender in the error that ends the run.)
    #[test]
    fn a_replicas_message_must_fit_the_run() {
        // Two processes of one worker each; group 1 is a replica on worker 1 of a master
        // owned by worker 0, with tensors of 6 and 2 values; 4 instances.
        let port_of = |replicas: Vec<Option<ReplicaShape>>| RunPort {
            run: 1,
            local: 0..1,
            sink: Box::new(Nowhere),
            instances: 4,
            nodes: 3,
            state_len: 1,
            workers: 2,
            trace_shift: 0,
            replicas,
            node_workers: vec![0, 0, 1],
        };
        let port = port_of(vec![None, Some(ReplicaShape { worker: 1, owner: 0, lens: vec![6, 2] })]);
        let check = |item: Item, from: usize| check_replica_item(&item, &port, from, 2);
        let grads = |tensors: Vec<Vec<f32>>, rows: Option<(u32, Vec<u32>)>, applied: Vec<(u64, u64)>| {
            Item::ReplicaGrads { worker: 0, group: 1, last: false, tensors, rows, applied }
        };
        assert_eq!(check(grads(vec![vec![0.0; 6], vec![0.0; 2]], Some((3, vec![0, 1])), vec![(3, 0)]), 1), Ok(()));
        assert_eq!(check(grads(vec![], None, vec![]), 1), Ok(()));
        assert_eq!(check(Item::ReplicaPull { worker: 1, group: 1 }, 0), Ok(()));
        assert_eq!(check(Item::ReplicaSynced { worker: 0, group: 1 }, 1), Ok(()));
        let values = |lens: [usize; 2]| Item::ReplicaValues {
            worker: 1,
            group: 1,
            base: 3,
            tensors: lens.iter().map(|&n| vec![1.0; n]).collect(),
        };
        assert_eq!(check(values([6, 2]), 0), Ok(()));
        // A table of 4 rows of 3 (group 2): two rows' values, or rows past its end.
        let table = port_of(vec![None, None, Some(ReplicaShape { worker: 1, owner: 0, lens: vec![12] })]);
        let rows = |values: usize, rows: Vec<u32>| Item::ReplicaGrads {
            worker: 0,
            group: 2,
            last: true,
            tensors: vec![vec![0.5; values]],
            rows: Some((3, rows)),
            applied: vec![],
        };
        assert_eq!(check_replica_item(&rows(6, vec![1, 3]), &table, 1, 2), Ok(()));
        assert!(check_replica_item(&rows(9, vec![1, 3]), &table, 1, 2).is_err());
        assert!(check_replica_item(&rows(6, vec![1, 4]), &table, 1, 2).unwrap_err().contains("rows past"));
        let refused = |item: Item, from: usize, what: &str| {
            let error = check(item, from).expect_err("refused");
            assert!(error.contains(what), "{error}");
        };
        refused(grads(vec![vec![0.0; 5], vec![0.0; 2]], None, vec![]), 1, "gradients of other sizes");
        // A table's rows alone only for a group of one tensor.
        refused(grads(vec![vec![0.0; 6]], Some((3, vec![0, 1])), vec![]), 1, "gradients of other sizes");
        refused(grads(vec![vec![0.0; 6], vec![0.0; 2]], Some((3, vec![2])), vec![]), 1, "rows past");
        refused(grads(vec![vec![0.0; 6], vec![0.0; 2]], Some((0, vec![0])), vec![]), 1, "rows past");
        refused(grads(vec![], None, vec![(4, 0)]), 1, "unknown instance");
        refused(values([6, 3]), 0, "values of other sizes");
        // The wrong side: gradients from the master's process, a pull from the replica's.
        refused(grads(vec![], None, vec![]), 0, "not from its worker");
        refused(Item::ReplicaPull { worker: 1, group: 1 }, 1, "not from its owner");
        refused(Item::ReplicaSynced { worker: 1, group: 1 }, 1, "not from its worker");
        // No replica group 0, nor 7.
        refused(Item::ReplicaPull { worker: 1, group: 0 }, 0, "a message");
        refused(Item::ReplicaSynced { worker: 0, group: 7 }, 1, "a message");
    }

    /// A peer that proves the key and then sends bytes that are no packet ends the
    /// cluster with an error naming it, without a panic.
    #[test]
    fn a_malformed_packet_ends_the_cluster_naming_its_sender() {
        let _one = NETWORK.lock().unwrap_or_else(|e| e.into_inner());
        let mut body = Vec::new();
        body.extend_from_slice(&wire::MAGIC.to_le_bytes());
        body.extend_from_slice(&1u32.to_le_bytes());
        body.extend_from_slice(&1u64.to_le_bytes());
        body.extend_from_slice(&1000u32.to_le_bytes());
        let (failure, addresses) = failure_when_process_1_sends(body);
        assert!(failure.contains(&format!("process 1 ({})", addresses[1])), "{failure}");
        assert!(failure.contains("1000 items announced"), "{failure}");
    }

    /// Only process 0 decides: a decision from process 1 ends the cluster naming it.
    #[test]
    fn a_decision_from_another_process_than_0_ends_the_cluster() {
        let _one = NETWORK.lock().unwrap_or_else(|e| e.into_inner());
        let mut body = Vec::new();
        wire::encode(1, 1, &[Item::Decision { words: vec![1, 0] }], &mut body);
        let (failure, addresses) = failure_when_process_1_sends(body);
        assert!(failure.contains(&format!("process 1 ({})", addresses[1])), "{failure}");
        assert!(failure.contains("only process 0 sends them"), "{failure}");
    }

    /// Process 1 runs for real, process 0 by hand: a decision process 0 sent is what
    /// `agree` returns at that step; one of another length, or for another step, ends the
    /// cluster with an error naming process 0; so does one mixed with other items.
    #[test]
    fn a_follower_agrees_to_process_0s_decision_and_refuses_a_wrong_one() {
        let _one = NETWORK.lock().unwrap_or_else(|e| e.into_inner());
        let decision = |run: u64, items: &[Item]| {
            let mut body = Vec::new();
            wire::encode(0, run, items, &mut body);
            body
        };
        let two_words = |run| decision(run, &[Item::Decision { words: vec![7, 9] }]);
        let cases: Vec<(Vec<Vec<u8>>, Option<&str>)> = vec![
            (vec![two_words(1), two_words(2)], None),
            (vec![decision(1, &[Item::Decision { words: vec![7] }])], Some("a decision of 1 words, not 2")),
            (vec![two_words(2)], Some("a decision for step 2 of its runs at step 1 of this one's")),
            (vec![decision(1, &[Item::Decision { words: vec![7, 9] }, Item::Heartbeat])], Some("among other items")),
        ];
        for (packets, wrong) in cases {
            let addresses = free_addresses(2);
            let key = b"test key".to_vec();
            let zero = net_spec(0, &addresses, &key);
            let listener = TcpListener::bind(&addresses[0]).unwrap();
            let sent = packets.len();
            let peer = std::thread::spawn(move || {
                let (stream, _) = listener.accept().unwrap();
                let Ok((_, mut stream, _)) = handshake(stream, &zero, None, Instant::now()) else {
                    panic!("the handshake fails")
                };
                for (sequence, body) in packets.iter().enumerate() {
                    stream.write_all(&frame(0, 1, sequence as u64, body)).unwrap();
                }
                let mut rest = Vec::new();
                let _ = stream.read_to_end(&mut rest);
            });
            let cluster = connect(1, &addresses, &key);
            match wrong {
                None => {
                    for _ in 0..sent {
                        assert_eq!(cluster.agree(&[0, 0]).unwrap(), [7, 9]);
                    }
                }
                Some(what) => {
                    let error = cluster.agree(&[0, 0]).unwrap_err().to_string();
                    assert!(error.contains(&format!("process 0 ({})", addresses[0])), "{error}");
                    assert!(error.contains(what), "{error}");
                    // The cluster stays failed: the next step refuses at once.
                    assert!(cluster.agree(&[0, 0]).is_err());
                }
            }
            drop(cluster);
            drop(peer);
        }
    }

    /// A peer's trace names only its own workers (process 1 of 2 over 5 workers runs 3 and
    /// 4); its events move by the shift, none before 0.
    #[test]
    fn a_peer_trace_names_its_own_workers_and_moves_onto_the_clock() {
        let event = |worker, start_us| TraceEvent {
            worker,
            node: 0,
            kind: crate::trace::TraceKind::Forward,
            start_us,
            dur_us: 1,
            batch: 1,
            rows: 1,
            instances: 1,
            staleness: None,
        };
        assert!(check_trace(&[event(3, 0), event(4, 0)], 1, 2, 5).is_ok());
        let error = check_trace(&[event(3, 0), event(2, 0)], 1, 2, 5).unwrap_err();
        assert!(error.contains("worker 2, not one of its own"), "{error}");
        let mut events = vec![event(3, 10), event(3, 1_000)];
        shift_events(&mut events, -100);
        assert_eq!(events.iter().map(|e| e.start_us).collect::<Vec<_>>(), [0, 900]);
        shift_events(&mut events, 50);
        assert_eq!(events.iter().map(|e| e.start_us).collect::<Vec<_>>(), [50, 950]);
    }
}
