//! The controller: runs on the calling thread, starts the workers, collects losses,
//! outputs and the instances' ends, watches for stalls, and stops the workers at the end
//! or at the first failure. The workers admit the instances (at most `max_active_keys` in
//! flight) and tell the parameter owners of their ends themselves ([`Admission`]); in
//! synchronous training across workers the controller holds each update boundary: it lets
//! the workers admit up to it, and opens the next window once the instances before it
//! finished and every owner confirmed its update.

use crate::config::ExecConfig;
use crate::error::{ExecError, QueueReport};
use crate::load::program::Program;
use crate::message::{Dir, Envelope, Msg, Payload, UNSET};
use crate::ops::{self, RunMode, RunShared};
use crate::sched::executor::Judgement;
use crate::sched::worker::{run_worker, Report, ToWorker, WorkerGauges, WorkerSetup};
use crate::trace::TraceEvent;
use crossbeam_channel::{unbounded, Receiver, RecvTimeoutError, Sender};
use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// What a run produced, per instance.
pub(crate) struct RunOutput {
    /// The sum of the instance's loss reports; `None` when it had none.
    pub losses: Vec<Option<f32>>,
    /// Whether the argmax of the logits hit the cross-entropy label.
    pub correct: Vec<Option<bool>>,
    /// Evaluation: every cross-entropy report of the instance, with its state.
    pub judgements: Vec<Vec<Judgement>>,
    /// The main sink's output.
    pub outputs: Vec<Option<Vec<f32>>>,
    pub trace: Vec<TraceEvent>,
    /// Per worker, the time it waited for messages with nothing to do.
    pub waited: Vec<Duration>,
}

/// How far a run is: what [`crate::Executor::train_epoch_observed`] reports while it
/// trains.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Progress {
    /// Instances finished.
    pub done: usize,
    /// The sum of the finished instances' losses (the finite ones) and how many there are.
    pub loss_sum: f64,
    pub losses: usize,
    /// Finished instances whose logits' argmax hit the cross-entropy label, of those judged.
    pub correct: usize,
    pub judged: usize,
}

impl Progress {
    /// The mean loss of the finished instances so far (NaN before the first).
    pub fn loss(&self) -> f32 {
        if self.losses == 0 {
            f32::NAN
        } else {
            (self.loss_sum / self.losses as f64) as f32
        }
    }

    /// The share judged correct so far, when there is a cross-entropy loss.
    pub fn accuracy(&self) -> Option<f32> {
        (self.judged > 0).then(|| self.correct as f32 / self.judged as f32)
    }
}

/// What hears of a training run as it goes ([`crate::Executor::train_epoch_observed`]).
pub trait Observer {
    /// How far the run is: about every 100 ms, and once at its end.
    fn progress(&mut self, progress: &Progress);

    /// Whether [`Observer::trace`] takes the run's trace events (with
    /// [`ExecConfig::trace`]) instead of the executor keeping them for
    /// [`crate::Executor::take_trace`].
    fn takes_trace(&self) -> bool {
        false
    }

    /// Trace events as the workers hand them over: in pieces, each worker's in order, the
    /// workers' interleaved. A long run's events need not be held all at once.
    fn trace(&mut self, _events: &[TraceEvent]) {}
}

/// Who holds admissions back at update boundaries (synchronous training only).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Boundaries {
    /// None to hold (asynchronous training, inference, evaluation).
    None,
    /// Synchronous training with every node on one worker (`Program::on_one_worker`):
    /// that worker, which owns every group (`Worker::admit_held` in `crate::sched::worker`).
    Worker,
    /// Synchronous training across workers: the controller, which lets the workers admit
    /// up to the next boundary (`Admission::limit`), then waits for every owner's word
    /// that the update is applied before it opens the next window.
    Controller,
}

/// Which instance is admitted next: the run's instances in order, each once, admitted by
/// the workers. The source's worker admits the first `window` when it starts (with
/// boundaries to hold, their holder admits each window), and the worker that finishes an
/// instance admits the next one (one for each finished keeps the count in flight) and
/// tells the groups' owners itself that an instance finished. No thread's timing then
/// decides what one worker does: training on one worker gives the same result at every
/// run, and one instance's end starts the next without waking another thread (the
/// controller hears of the ends with the losses, woken for the last of a run or of a
/// window).
pub(crate) struct Admission {
    next: AtomicUsize,
    n: usize,
    /// Instances below this may be admitted: `n`, or with `Boundaries::Controller` the
    /// next update boundary (set by the controller).
    limit: AtomicUsize,
    /// A training loss was not finite: nothing more is admitted while the controller stops
    /// the run (it reports the instance), so the parameters are those before it.
    halted: AtomicBool,
    /// Instances finished.
    ended: AtomicUsize,
    pub boundaries: Boundaries,
    window: usize,
}

impl Admission {
    fn new(n: usize, boundaries: Boundaries, window: usize) -> Admission {
        let limit = if boundaries == Boundaries::Controller { 0 } else { n };
        Admission {
            next: AtomicUsize::new(0),
            n,
            limit: AtomicUsize::new(limit),
            halted: AtomicBool::new(false),
            ended: AtomicUsize::new(0),
            boundaries,
            window,
        }
    }

    /// The most instances in flight at once (`max_active_keys`).
    pub fn window(&self) -> usize {
        self.window
    }

    /// The first window, for the source's worker to admit when it starts and no boundary
    /// holds admissions back.
    pub fn first_window(&self) -> impl Iterator<Item = usize> + '_ {
        let count = if self.boundaries == Boundaries::None { self.window } else { 0 };
        (0..count).map_while(|_| self.take())
    }

    /// The next instance, if any is left below the limit.
    pub fn take(&self) -> Option<usize> {
        if self.halted.load(Ordering::Acquire) {
            return None;
        }
        let limit = self.limit.load(Ordering::Acquire);
        self.next.fetch_update(Ordering::AcqRel, Ordering::Acquire, |i| (i < limit).then_some(i + 1)).ok()
    }

    /// The limit below which instances may be admitted.
    fn limit(&self) -> usize {
        self.limit.load(Ordering::Acquire)
    }

    /// Moves the limit (the controller, at an update boundary every instance before which
    /// finished).
    fn set_limit(&self, limit: usize) {
        self.limit.store(limit.min(self.n), Ordering::Release);
    }

    /// Admits nothing more (a worker saw a training loss that is not finite).
    pub fn halt(&self) {
        self.halted.store(true, Ordering::Release);
    }

    /// Instances admitted so far (`0..admitted()`).
    fn admitted(&self) -> usize {
        self.next.load(Ordering::Acquire)
    }

    /// Counts an instance's end (reported on the results channel, before this call); true
    /// for the run's last and for the last below the limit, whose worker then wakes the
    /// controller. The limit moves only once the controller read every end below it.
    pub fn ended(&self) -> bool {
        let ended = self.ended.fetch_add(1, Ordering::AcqRel) + 1;
        ended == self.n || ended == self.limit.load(Ordering::Acquire)
    }
}

/// How many more instances may finish before one of the groups (each as its update
/// interval and the instances it counted since its last update) must update: the least
/// room left (at least 1), unbounded without groups. The one rule of a synchronous
/// boundary, whether the controller or a worker holds it.
pub(crate) fn room(groups: impl Iterator<Item = (u64, u64)>) -> usize {
    let room = groups.map(|(interval, pending)| interval.saturating_sub(pending).max(1)).min();
    room.map_or(usize::MAX, |r| usize::try_from(r).unwrap_or(usize::MAX))
}

/// The admission message of `instance` for the source node, and the source's worker; the
/// instance's credit count starts at that one message.
pub(crate) fn admission(program: &Program, credits: &[AtomicU32], instance: usize) -> (usize, Envelope) {
    let mut state = vec![UNSET; program.state_len.max(1)];
    state[0] = instance as i64;
    if let Some(credit) = credits.get(instance) {
        credit.store(1, Ordering::Release);
    }
    let msg = Msg::new(Payload::Unit, state.into_boxed_slice());
    let env = Envelope { node: program.source, port: 0, dir: Dir::Forward, msg };
    (program.source_worker(), env)
}

/// The observer hears of a run's progress at most this often (and once at its end).
const PROGRESS_EVERY: Duration = Duration::from_millis(100);

/// Runs `n` instances (those of `shared`) through the program; `observer`, when given,
/// hears how far the run is (see [`PROGRESS_EVERY`]).
pub(crate) fn run(
    program: &Program,
    shared: &RunShared,
    config: &ExecConfig,
    pending: &[u64],
    origin: Instant,
    observer: Option<&mut dyn Observer>,
) -> Result<RunOutput, ExecError> {
    let n = shared.instances.len();
    let workers = program.workers;
    let credits: Vec<AtomicU32> = (0..n).map(|_| AtomicU32::new(0)).collect();
    let gauges: Vec<WorkerGauges> = (0..workers).map(|_| WorkerGauges::default()).collect();
    let mut ops: Vec<Vec<(u32, Box<dyn ops::NodeOp>)>> = (0..workers).map(|_| Vec::new()).collect();
    for node in program.nodes.iter().flatten() {
        let op = ops::build(node, &shared.params).map_err(|error| ExecError::at_node(node, UNSET, error))?;
        if let Some(list) = ops.get_mut(node.worker) {
            list.push((node.index, op));
        }
    }
    let (senders, receivers): (Vec<Sender<ToWorker>>, Vec<Receiver<ToWorker>>) =
        (0..workers).map(|_| unbounded()).unzip();
    let (report_tx, report_rx) = unbounded::<Report>();
    // Losses, outputs and the instances' ends travel apart, on a channel nobody waits on:
    // the controller reads them whenever a report (or its watchdog's tick) wakes it, so
    // sending one wakes no thread (two futex wakes per instance cost the worker 2% of its
    // time).
    let (result_tx, result_rx) = unbounded::<Report>();
    // Only synchronous training holds admissions at update boundaries: when the nodes are
    // all on one worker, that worker does; across several, the controller, which waits
    // for every owner's update.
    let boundaries = match (shared.mode == RunMode::Train && config.sync_updates, program.on_one_worker()) {
        (false, _) => Boundaries::None,
        (true, true) => Boundaries::Worker,
        (true, false) => Boundaries::Controller,
    };
    let admission = Admission::new(n, boundaries, config.max_active_keys);
    std::thread::scope(|scope| {
        for (id, (inbox, ops)) in receivers.into_iter().zip(ops).enumerate() {
            let setup = WorkerSetup {
                id,
                program,
                shared,
                inbox,
                peers: senders.clone(),
                reports: report_tx.clone(),
                results: result_tx.clone(),
                credits: &credits,
                admission: &admission,
                gauges: &gauges[id],
                optimizer: config.optimizer,
                origin,
                trace: config.trace,
                max_batch: config.max_batch,
                replica_sync: config.replica_sync,
                fault: config.fault.clone(),
            };
            std::thread::Builder::new()
                .name(format!("amp-worker-{id}"))
                .spawn_scoped(scope, move || run_worker(setup, ops))
                .map_err(|e| ExecError::Config { message: format!("cannot start worker {id}: {e}") })?;
        }
        drop(report_tx);
        drop(result_tx);
        let mut control = Controller {
            program,
            config,
            mode: shared.mode,
            senders: &senders,
            reports: &report_rx,
            results: &result_rx,
            credits: &credits,
            admission: &admission,
            gauges: &gauges,
            pending: pending.to_vec(),
            output: RunOutput {
                losses: vec![None; n],
                correct: vec![None; n],
                judgements: if shared.mode == RunMode::Eval { vec![Vec::new(); n] } else { Vec::new() },
                outputs: vec![None; n],
                trace: Vec::new(),
                waited: Vec::new(),
            },
            stopped: 0,
            held: Vec::new(),
            awaiting: 0,
            confirm: Vec::new(),
            observer,
            progress: Progress::default(),
            done: 0,
            in_flight: InFlight::default(),
            ended: Vec::new(),
            observed: Instant::now(),
        };
        let result = control.admit_all(n);
        let flush = result.is_ok() && shared.mode == RunMode::Train && config.flush_at_epoch_end;
        control.stop(flush);
        result?;
        if let Some(&(node, held)) = control.held.first() {
            let (worker, label) = program.node(node).map(|n| (n.worker, n.label.clone())).unwrap_or_default();
            return Err(ExecError::Leaked { worker, node, label, held });
        }
        // Every worker reported `Stopped`: its waits are all counted.
        control.output.waited =
            gauges.iter().map(|g| Duration::from_nanos(g.waited_ns.load(Ordering::Relaxed))).collect();
        Ok(control.output)
    })
}

/// The instances in flight as the controller knows them: those admitted (by it or by the
/// workers) and not yet reported done.
#[derive(Default)]
struct InFlight {
    ids: BTreeSet<usize>,
    /// Admitted instances added to `ids` so far (`0..seen`).
    seen: usize,
}

impl InFlight {
    fn catch_up(&mut self, admission: &Admission) {
        let admitted = admission.admitted();
        self.ids.extend(self.seen..admitted);
        self.seen = self.seen.max(admitted);
    }
}

struct Controller<'r, 'o> {
    program: &'r Program,
    config: &'r ExecConfig,
    mode: RunMode,
    senders: &'r [Sender<ToWorker>],
    reports: &'r Receiver<Report>,
    /// Losses and outputs (see `run`).
    results: &'r Receiver<Report>,
    credits: &'r [AtomicU32],
    admission: &'r Admission,
    gauges: &'r [WorkerGauges],
    /// Instances each group counted since its last update (mirrors the owners' counts).
    pending: Vec<u64>,
    output: RunOutput,
    stopped: usize,
    held: Vec<(u32, usize)>,
    /// Owners yet to confirm the update of a synchronous boundary: nothing is admitted
    /// until they did, so that no node reads parameters (a replica's copy, a group shared
    /// with another worker's node) before the update. `confirm`: the owners of the groups
    /// that reached their update in the window.
    awaiting: usize,
    confirm: Vec<usize>,
    observer: Option<&'r mut (dyn Observer + 'o)>,
    progress: Progress,
    /// Instances finished, and those admitted and not yet finished as far as reports tell.
    done: usize,
    in_flight: InFlight,
    /// Instances finished since the observer last heard, and when that was.
    ended: Vec<usize>,
    observed: Instant,
}

impl Controller<'_, '_> {
    /// How many instances may have been admitted before the next update must happen (in
    /// synchronous training across workers, the only runs whose controller holds the
    /// boundaries).
    fn boundary(&self, done: usize) -> usize {
        // Replicas' groups update with their masters.
        let groups = self.program.groups.iter().zip(&self.pending).filter(|(g, _)| g.master.is_none());
        done.saturating_add(room(groups.map(|(g, &p)| (g.min_update_frequency, p))))
    }

    /// Synchronous training across workers: once every instance below the limit finished
    /// and every owner confirmed the update it owed there, moves the limit to the next
    /// update boundary and admits the window's first `max_active_keys` (the workers admit
    /// the rest, one for each that finishes).
    fn open_window(&mut self) {
        if self.admission.boundaries != Boundaries::Controller
            || self.awaiting > 0
            || self.done < self.admission.limit()
        {
            return;
        }
        self.admission.set_limit(self.boundary(self.done));
        for _ in 0..self.config.max_active_keys {
            let Some(instance) = self.admission.take() else { break };
            self.admit(instance);
        }
        self.in_flight.catch_up(self.admission);
    }

    fn admit(&self, instance: usize) {
        let (worker, env) = admission(self.program, self.credits, instance);
        if let Some(tx) = self.senders.get(worker) {
            let _ = tx.send(ToWorker::Work(env));
        }
    }

    fn admit_all(&mut self, n: usize) -> Result<(), ExecError> {
        let tick = self.config.stall_timeout.min(Duration::from_millis(100));
        let mut last_progress = Instant::now();
        let mut last_processed = 0u64;
        while self.done < n {
            self.open_window();
            match self.reports.recv_timeout(tick) {
                // The workers send these on the results channel; taken alike from either.
                Ok(result @ (Report::Done { .. } | Report::Loss { .. } | Report::Output { .. } | Report::Trace(_))) => {
                    last_progress = Instant::now();
                    self.take_result(n, result)?;
                }
                Ok(Report::Wake) => {}
                Ok(Report::Updated) => {
                    self.awaiting = self.awaiting.saturating_sub(1);
                }
                Ok(Report::Failed(error)) => return Err(error),
                Ok(Report::Stopped { worker, trace, held }) => {
                    // A worker only stops unasked when it failed, and it reports that first.
                    self.stopped += 1;
                    self.last_trace(trace);
                    self.held.extend(held);
                    let message = "the worker stopped unexpectedly".to_string();
                    return Err(ExecError::WorkerPanic { worker, node: u32::MAX, label: String::new(), message });
                }
                Err(RecvTimeoutError::Timeout) => {
                    let processed: u64 = self.gauges.iter().map(|g| g.processed.load(Ordering::Relaxed)).sum();
                    if processed != last_processed {
                        last_processed = processed;
                        last_progress = Instant::now();
                    } else {
                        self.in_flight.catch_up(self.admission);
                        if !self.in_flight.ids.is_empty() && last_progress.elapsed() >= self.config.stall_timeout {
                            return Err(self.stalled(last_progress.elapsed()));
                        }
                    }
                }
                Err(RecvTimeoutError::Disconnected) => {
                    let message = "every worker is gone".to_string();
                    return Err(ExecError::WorkerPanic { worker: 0, node: u32::MAX, label: String::new(), message });
                }
            }
            self.take_results(n, &mut last_progress)?;
            if self.observed.elapsed() >= PROGRESS_EVERY {
                self.observe();
            }
        }
        // An instance's losses and outputs were sent before its last credit was given
        // back, so before its `Done`: all of them are in.
        self.take_results(n, &mut last_progress)?;
        self.observe();
        Ok(())
    }

    /// Instance `instance` finished: one fewer in flight, and its owners hear of it.
    fn finished(&mut self, instance: usize) {
        // A worker admitted the instance (and counted it in `admitted`) before any of its
        // messages could run, so before its end was reported.
        self.in_flight.catch_up(self.admission);
        self.in_flight.ids.remove(&instance);
        self.done += 1;
        self.instance_done();
        if self.observer.is_some() {
            self.ended.push(instance);
        }
    }

    /// Tells the observer about the instances finished since it last heard: their losses
    /// are in, sent before their `Done` (see `admit_all`).
    fn observe(&mut self) {
        let Some(observer) = self.observer.as_mut() else { return };
        for i in self.ended.drain(..) {
            self.progress.done += 1;
            if let Some(loss) = self.output.losses.get(i).copied().flatten().filter(|l| l.is_finite()) {
                self.progress.loss_sum += f64::from(loss);
                self.progress.losses += 1;
            }
            if let Some(correct) = self.output.correct.get(i).copied().flatten() {
                self.progress.correct += usize::from(correct);
                self.progress.judged += 1;
            }
        }
        observer.progress(&self.progress);
        self.observed = Instant::now();
    }

    /// The trace events a worker's `Stopped` brings, after the pieces it sent before (on
    /// the results channel: they are there by now), so that each worker's events come in
    /// order. Whatever else is left there has no instance waiting for it.
    fn last_trace(&mut self, events: Vec<TraceEvent>) {
        while let Ok(report) = self.results.try_recv() {
            if let Report::Trace(piece) = report {
                self.trace(piece);
            }
        }
        self.trace(events);
    }

    /// Trace events from a worker: to the observer that takes them, else kept.
    fn trace(&mut self, events: Vec<TraceEvent>) {
        match self.observer.as_mut().filter(|o| o.takes_trace()) {
            Some(observer) => observer.trace(&events),
            None => self.output.trace.extend(events),
        }
    }

    /// Takes the losses, outputs and pieces of the trace that arrived.
    fn take_results(&mut self, n: usize, last_progress: &mut Instant) -> Result<(), ExecError> {
        while let Ok(result) = self.results.try_recv() {
            *last_progress = Instant::now();
            self.take_result(n, result)?;
        }
        Ok(())
    }

    /// Takes one loss, output, instance's end or piece of the trace.
    fn take_result(&mut self, n: usize, result: Report) -> Result<(), ExecError> {
        match result {
            Report::Loss { instance, node, value, correct, state } => {
                let Some(slot) = usize::try_from(instance).ok().filter(|&i| i < n) else { return Ok(()) };
                if !value.is_finite() && self.mode.backward() {
                    return Err(ExecError::NonFiniteLoss { instance: slot, loss: value, node });
                }
                let total = self.output.losses[slot].unwrap_or(0.0) + value;
                self.output.losses[slot] = Some(total);
                if correct.is_some() {
                    self.output.correct[slot] = correct;
                }
                if let (Some(correct), Some(state), Some(list)) = (correct, state, self.output.judgements.get_mut(slot))
                {
                    list.push(Judgement { state, correct });
                }
            }
            Report::Output { instance, node, values } => {
                let slot = usize::try_from(instance).ok().filter(|&i| i < n);
                if let (Some(slot), true) = (slot, Some(node) == self.program.main_sink) {
                    self.output.outputs[slot] = Some(values);
                }
            }
            Report::Done { instance } => self.finished(instance),
            Report::Trace(events) => self.trace(events),
            _ => {}
        }
        Ok(())
    }

    /// Synchronous training across workers: counts a finished instance in the mirror of
    /// the groups' counts (the worker that finished it told the owners), and at the
    /// boundary asks the owners of the groups that update there to confirm when they did.
    fn instance_done(&mut self) {
        if self.admission.boundaries != Boundaries::Controller {
            return;
        }
        for (p, g) in self.pending.iter_mut().zip(&self.program.groups) {
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
        if self.done == self.admission.limit() {
            for owner in std::mem::take(&mut self.confirm) {
                if self.senders.get(owner).is_some_and(|tx| tx.send(ToWorker::Confirm).is_ok()) {
                    self.awaiting += 1;
                }
            }
        }
    }

    fn stalled(&self, idle: Duration) -> ExecError {
        let queues = self
            .senders
            .iter()
            .zip(self.gauges)
            .enumerate()
            .map(|(worker, (tx, g))| QueueReport {
                worker,
                inbox: tx.len(),
                local: g.local.load(Ordering::Relaxed),
                processed: g.processed.load(Ordering::Relaxed),
            })
            .collect();
        ExecError::Stalled { idle, in_flight: self.in_flight.ids.iter().copied().collect(), queues }
    }

    /// Stops every worker and waits for each to report.
    fn stop(&mut self, flush: bool) {
        for tx in self.senders {
            let _ = tx.send(ToWorker::Stop { flush });
        }
        while self.stopped < self.senders.len() {
            match self.reports.recv() {
                Ok(Report::Stopped { trace, held, .. }) => {
                    self.stopped += 1;
                    self.last_trace(trace);
                    self.held.extend(held);
                }
                Ok(_) => {}
                Err(_) => break,
            }
        }
        self.held.sort_unstable();
    }
}
