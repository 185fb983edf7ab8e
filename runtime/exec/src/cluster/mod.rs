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
//! receiver gives it back ([`ToWorker::Release`], as an [`Item::Process`]). The receiving bridge adds the
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
//! it back ([`Item::Receipt`], answered by a `Release`) once the report is in its
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
//! but every process must act on, process 0 sends as a [`Item::Decision`] between
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
use crate::protocol::{Item, Report, ToWorker};
use crate::trace::TraceEvent;
use crate::wire::{self, Limits, Packet};
use amp_ir::placement::{process_of, workers_of, MAX_RUN_PROCESSES};
mod bridge;
mod collectives;
mod inbound;
mod route;
#[cfg(test)]
mod tests;

use bridge::Bridge;
pub(crate) use inbound::{shift_events, ReplicaShape, RingShape, RunPort};
pub(crate) use route::{Peers, ReportTo, RunSink};

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
    pub(crate) fn gather(
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
    pub(crate) fn exchange(
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
        if let Item::Controller(Report::Trace(events) | Report::Stopped { trace: events, .. }) = &mut item {
            shift_events(events, self.trace_shift);
        }
        let _ = self.tx.send(Outgoing { process, run: self.run, item });
        self.bridge.unpark();
    }
}
