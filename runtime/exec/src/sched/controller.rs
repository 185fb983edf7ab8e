//! The controller: runs on the calling thread, starts the workers, collects losses,
//! outputs and the instances' ends, watches for stalls, and stops the workers at the end
//! or at the first failure. The workers admit the instances (at most `max_active_keys` in
//! flight) and tell the parameter owners of their ends themselves; in synchronous training
//! with groups owned by several workers, or over processes, the controller holds each
//! update boundary ([`ControllerHold`]). The protocol is `sched::admission`'s.

use crate::cluster::{cluster_error, Cluster, Peers, ReplicaShape, ReportTo, RingShape, RunPort, RunSink};
use crate::config::ExecConfig;
use crate::error::{ExecError, QueueReport};
use crate::load::program::Program;
use crate::message::UNSET;
use crate::ops::{self, RunMode, RunShared};
use crate::sched::admission::{balanced, source_message, Admission, Boundaries, ControllerHold, Credits};
use crate::sched::worker::{run_worker, Report, ToWorker, WorkerGauges, WorkerSetup};
use crate::trace::TraceEvent;
use crate::ExecInstance;
use crossbeam_channel::{unbounded, Receiver, RecvTimeoutError, Sender};
use std::collections::BTreeSet;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// One cross-entropy loss report of an evaluation: the state of the message it judged
/// (which frame, for a rolled-out network) and whether the logits' argmax hit the label.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Judgement {
    pub state: Box<[i64]>,
    pub correct: bool,
}

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
    /// Copies split over processes: this process's reductions and the bytes it sent.
    pub reduced: AllReduce,
}

/// The all-reduces of copies split over processes (`load::copies`,
/// `sched::worker::ring`) in a run, measured in one process: every process sends about as
/// much.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AllReduce {
    /// Updates: the most reductions of one parameter group (a group whose reduction is
    /// under way when another's is due skips that one, and updates over more instances
    /// next time).
    pub updates: u64,
    /// Bytes of gradients this process sent.
    pub bytes: u64,
    /// Bytes this process sent per reduction of every group.
    pub bytes_per_update: u64,
}

impl AllReduce {
    pub(crate) fn of(gauges: &[crate::sched::worker::WorkerGauges]) -> Self {
        use std::sync::atomic::Ordering::Relaxed;
        AllReduce {
            updates: gauges.iter().map(|g| g.reductions.load(Relaxed)).max().unwrap_or(0),
            bytes: gauges.iter().map(|g| g.reduced_bytes.load(Relaxed)).sum(),
            bytes_per_update: gauges.iter().map(|g| g.reduced_bytes_per_update.load(Relaxed)).sum(),
        }
    }
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

/// The observer hears of a run's progress at most this often (and once at its end).
const PROGRESS_EVERY: Duration = Duration::from_millis(100);

/// Runs `n` instances (those of `shared`) through the program; `observer`, when given,
/// hears how far the run is (see [`PROGRESS_EVERY`]).
pub(crate) fn run(
    program: &Program,
    shared: &RunShared,
    config: &ExecConfig,
    cluster: Option<&Cluster>,
    pending: &[u64],
    origin: Instant,
    observer: Option<&mut dyn Observer>,
) -> Result<RunOutput, ExecError> {
    let n = shared.instances.len();
    let workers = program.workers;
    // Split over processes, this process runs its range of workers; the others run
    // theirs, and process 0 the controller (see `crate::cluster`).
    let local = match cluster {
        Some(c) => amp_ir::placement::workers_of(c.process(), c.processes(), workers),
        None => 0..workers,
    };
    let credits = Arc::new(match cluster {
        Some(_) => Credits::across_processes(n),
        None => Credits::new(n),
    });
    let gauges: Vec<WorkerGauges> = (0..workers).map(|_| WorkerGauges::default()).collect();
    let mut ops: Vec<Vec<(u32, Box<dyn ops::NodeOp>)>> = (0..workers).map(|_| Vec::new()).collect();
    for node in program.nodes.iter().flatten().filter(|node| local.contains(&node.worker)) {
        let op = ops::build(node, &shared.params).map_err(|error| ExecError::at_node(node, UNSET, error))?;
        if let Some(list) = ops.get_mut(node.worker) {
            list.push((node.index, op));
        }
    }
    let (senders, receivers): (Vec<Sender<ToWorker>>, Vec<Receiver<ToWorker>>) =
        local.clone().map(|_| unbounded()).unzip();
    let (report_tx, report_rx) = unbounded::<Report>();
    // Losses, outputs and the instances' ends travel apart, on a channel nobody waits on:
    // the controller reads them whenever a report (or its watchdog's tick) wakes it, so
    // sending one wakes no thread (the worker would pay for a wake-up per instance).
    let (result_tx, result_rx) = unbounded::<Report>();
    let synchronous = shared.mode == RunMode::Train && config.sync_updates;
    let boundaries = Boundaries::of_run(synchronous, program, cluster.is_some());
    let admission = Admission::new(n, boundaries, config.max_active_keys);
    let controls = cluster.is_none_or(|c| c.process() == 0);
    if !controls {
        // Every instance is admitted, and ends, on process 0.
        admission.halt();
    }
    let (peers, reports, results, run_id) = match cluster {
        None => (Peers::local(&senders), ReportTo::Local(report_tx.clone()), ReportTo::Local(result_tx.clone()), 0),
        Some(c) => {
            let run = c.next_run();
            // Trace events leave on process 0's clock and arrive there timed from its
            // executor's start, as its own workers' are (`crate::cluster`, Clocks).
            let outbox = c.run_outbox(run, origin);
            let sink = Delivery {
                senders: senders.clone(),
                credits: Arc::clone(&credits),
                reports: controls.then(|| report_tx.clone()),
                results: controls.then(|| result_tx.clone()),
            };
            c.begin(RunPort {
                run,
                local: local.clone(),
                sink: Box::new(sink),
                instances: n,
                nodes: program.nodes.len(),
                state_len: program.state_len.max(1),
                workers,
                trace_shift: c.clock_us(origin).saturating_neg(),
                replicas: replica_shapes(program, &shared.params),
                rings: ring_shapes(program, &shared.params),
                node_workers: program.nodes.iter().map(|n| n.as_ref().map_or(usize::MAX, |n| n.worker)).collect(),
            })?;
            let peers = Peers::split(&senders, local.clone(), workers, c, outbox.clone());
            let (reports, results) = if controls {
                (ReportTo::Local(report_tx.clone()), ReportTo::Local(result_tx.clone()))
            } else {
                (ReportTo::Remote(outbox.clone()), ReportTo::Remote(outbox))
            };
            (peers, reports, results, run)
        }
    };
    let output = std::thread::scope(|scope| {
        for ((id, inbox), ops) in local.clone().zip(receivers).zip(ops.into_iter().skip(local.start)) {
            let setup = WorkerSetup {
                id,
                program,
                shared,
                inbox,
                peers: peers.clone(),
                reports: reports.clone(),
                results: results.clone(),
                credits: &credits,
                admission: &admission,
                gauges: &gauges[id],
                optimizer: config.optimizer,
                origin,
                trace: config.trace,
                max_batch: config.max_batch,
                // Copies of the graph compute with the values of the last update (`load::copies`).
                replica_sync: if program.copies() > 1 { 1 } else { config.replica_sync },
                fault: config.fault.clone(),
                slow: config.slow_workers.iter().rev().find(|s| s.worker == id).cloned(),
            };
            std::thread::Builder::new()
                .name(format!("amp-worker-{id}"))
                .spawn_scoped(scope, move || run_worker(setup, ops))
                .map_err(|e| ExecError::Config { message: format!("cannot start worker {id}: {e}") })?;
        }
        drop(report_tx);
        drop(result_tx);
        drop(reports);
        drop(results);
        if !controls {
            // The workers here run until process 0's controller stops them (or the bridge
            // does, when the cluster failed); the scope waits for them.
            return Ok(None);
        }
        let mut control = Controller {
            program,
            config,
            cluster,
            mode: shared.mode,
            instances: &shared.instances,
            peers: &peers,
            reports: &report_rx,
            results: &result_rx,
            credits: &credits,
            admission: &admission,
            gauges: &gauges,
            hold: ControllerHold::new(pending),
            output: RunOutput {
                losses: vec![None; n],
                correct: vec![None; n],
                judgements: if shared.mode == RunMode::Eval { vec![Vec::new(); n] } else { Vec::new() },
                outputs: vec![None; n],
                trace: Vec::new(),
                waited: Vec::new(),
                reduced: AllReduce::default(),
            },
            stopped: 0,
            held: Vec::new(),
            observer,
            progress: Progress::default(),
            done: 0,
            in_flight: InFlight::default(),
            ended: Vec::new(),
            observed: Instant::now(),
        };
        // Across processes the controller admits the first window when the source's
        // worker runs elsewhere (where it would admit it itself).
        if !peers.is_local(program.source_worker()) {
            for (instance, at) in balanced(program, &shared.instances, admission.first_window()) {
                control.admit(instance, at);
            }
        }
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
        control.output.reduced = AllReduce::of(&gauges);
        Ok(Some(control.output))
    });
    if let Some(c) = cluster {
        c.end(run_id);
        // A process that lost its cluster says so, whatever its workers reported.
        if let Some(failure) = c.failure() {
            return Err(ExecError::Cluster { message: failure });
        }
    }
    Ok(output?.unwrap_or_else(|| RunOutput {
        losses: vec![None; n],
        correct: vec![None; n],
        judgements: Vec::new(),
        outputs: vec![None; n],
        trace: Vec::new(),
        waited: gauges.iter().map(|g| Duration::from_nanos(g.waited_ns.load(Ordering::Relaxed))).collect(),
        reduced: AllReduce::of(&gauges),
    }))
}

/// Per parameter group, a replica's shape for the bridge's checks (`cluster::RunPort`):
/// its worker, its master's owner, its tensors' lengths (of the run's live groups; none
/// in a run without gradients, where no replica's message may come).
fn replica_shapes(program: &Program, params: &ops::train::ParamAccess) -> Vec<Option<ReplicaShape>> {
    program
        .groups
        .iter()
        .enumerate()
        .map(|(g, info)| {
            let owner = program.groups.get(info.master?)?.owner;
            let lens = params.live(g)?.tensors.iter().map(|t| t.value.len()).collect();
            Some(ReplicaShape { worker: info.owner, owner, lens })
        })
        .collect()
}

/// Per parameter group, a master's ring for the bridge's checks (`cluster::RunPort`): its
/// updaters and its gradients' length (none in a run without gradients).
fn ring_shapes(program: &Program, params: &ops::train::ParamAccess) -> Vec<Option<RingShape>> {
    program
        .groups
        .iter()
        .enumerate()
        .map(|(g, info)| {
            let workers = Some(info.ring.clone()).filter(|r| !r.is_empty())?;
            let len = params.live(g)?.tensors.iter().map(|t| t.grad.len()).sum();
            Some(RingShape { workers, len })
        })
        .collect()
}

/// A run split over processes: where the bridge delivers what other processes send
/// (`crate::cluster`): this process's workers' channels and credits, and on process 0 the
/// controller's channels.
struct Delivery {
    senders: Vec<Sender<ToWorker>>,
    credits: Arc<Credits>,
    reports: Option<Sender<Report>>,
    results: Option<Sender<Report>>,
}

impl RunSink for Delivery {
    fn worker(&self, index: usize, word: ToWorker) {
        if let Some(tx) = self.senders.get(index) {
            let _ = tx.send(word);
        }
    }

    fn controller(&self, report: Report) -> bool {
        let (Some(reports), Some(results)) = (&self.reports, &self.results) else { return false };
        // Losses, outputs, ends and trace pieces on the results channel, the rest on the
        // reports channel, as a local worker sends them (invariant 17).
        let to_results =
            matches!(report, Report::Loss { .. } | Report::Output { .. } | Report::Done { .. } | Report::Trace(_));
        let _ = if to_results { results.send(report) } else { reports.send(report) };
        true
    }

    fn arrive(&self, instance: usize, from: usize) -> bool {
        self.credits.arrive(instance, from)
    }

    fn fail(&self, message: &str) {
        if let Some(reports) = &self.reports {
            let _ = reports.send(Report::Failed(cluster_error(message.to_string())));
        }
        for tx in &self.senders {
            let _ = tx.send(ToWorker::Stop { flush: false });
        }
    }
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
    cluster: Option<&'r Cluster>,
    mode: RunMode,
    /// The run's instances, whose work shares a window among copies of the graph.
    instances: &'r [&'r (dyn ExecInstance + Sync)],
    peers: &'r Peers,
    reports: &'r Receiver<Report>,
    /// Losses and outputs (see `run`).
    results: &'r Receiver<Report>,
    credits: &'r Credits,
    admission: &'r Admission,
    gauges: &'r [WorkerGauges],
    /// The boundaries of synchronous training across workers.
    hold: ControllerHold,
    output: RunOutput,
    stopped: usize,
    held: Vec<(u32, usize)>,
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
    /// Synchronous training held by the controller: opens the next window once every instance
    /// below the limit finished and every owner confirmed the update it owed there (the
    /// workers admit the rest of the window, one for each that finishes).
    fn open_window(&mut self) {
        let opened = balanced(self.program, self.instances, self.hold.open(self.program, self.admission, self.done));
        if opened.is_empty() {
            return;
        }
        for (instance, at) in opened {
            self.admit(instance, at);
        }
        self.in_flight.catch_up(self.admission);
    }

    /// Admits `instance` to the copy of worker `at`'s graph (`None`: by turns).
    fn admit(&self, instance: usize, at: Option<usize>) {
        let (worker, env) = source_message(self.program, self.credits, instance, at);
        self.peers.send(worker, ToWorker::Work(env));
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
                Ok(Report::Updated) => self.hold.confirmed(),
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
                if let (Some(slot), true) = (slot, Some(self.program.original(node)) == self.program.main_sink) {
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
        for owner in self.hold.ended(self.program, self.admission, self.done) {
            if self.peers.send(owner, ToWorker::Confirm) {
                self.hold.asked();
            }
        }
    }

    fn stalled(&self, idle: Duration) -> ExecError {
        let queues = self
            .gauges
            .iter()
            .enumerate()
            .map(|(worker, g)| QueueReport {
                worker,
                inbox: self.peers.queued(worker),
                local: g.local.load(Ordering::Relaxed),
                processed: g.processed.load(Ordering::Relaxed),
            })
            .collect();
        ExecError::Stalled { idle, in_flight: self.in_flight.ids.iter().copied().collect(), queues }
    }

    /// Stops every worker and waits for each to report.
    fn stop(&mut self, flush: bool) {
        for worker in 0..self.peers.len() {
            self.peers.send(worker, ToWorker::Stop { flush });
        }
        let cluster = self.cluster;
        while self.stopped < self.peers.len() {
            match self.reports.recv_timeout(Duration::from_millis(100)) {
                Ok(Report::Stopped { trace, held, .. }) => {
                    self.stopped += 1;
                    self.last_trace(trace);
                    self.held.extend(held);
                }
                Ok(_) => {}
                // The workers of a lost process never answer; this process's stopped
                // when the bridge told them.
                Err(RecvTimeoutError::Timeout) if cluster.is_some_and(|c| c.failure().is_some()) => break,
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => break,
            }
        }
        self.held.sort_unstable();
    }
}
