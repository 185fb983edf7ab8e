//! What arrives from another process, checked before anything of it is used: every
//! item of a packet against the run it names (workers, nodes, instances, replica groups,
//! trace events), then delivered into the scheduler's channels (`RunSink`).

use super::bridge::Bridge;
use super::*;
use crate::protocol::{RemoteWord, ReplicaGrads};

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
    /// Per parameter group, for a master reduced over processes: its ring.
    pub rings: Vec<Option<RingShape>>,
    /// Per node, the worker that runs it (`usize::MAX` for holes).
    pub node_workers: Vec<usize>,
}

/// A replica group as the bridge checks the messages about it (`RemoteWord::Pull`
/// and the others): the worker that runs it, the worker that owns its master, and the
/// length of each of its tensors.
#[derive(Clone, Debug)]
pub(crate) struct ReplicaShape {
    pub worker: usize,
    pub owner: usize,
    pub lens: Vec<usize>,
}

/// A master reduced over processes as the bridge checks its reductions' steps
/// (`RemoteWord::Reduce`): its updaters (`GroupInfo::ring`) and the length of its
/// gradients, end to end.
#[derive(Clone, Debug)]
pub(crate) struct RingShape {
    pub workers: Vec<usize>,
    pub len: usize,
}

impl Bridge {
    /// Delivers a packet of the current run into its workers' and controller's channels,
    /// each item checked against the run first.
    pub(super) fn deliver(&mut self, packet: Packet) -> Result<(), String> {
        let from = packet.from as usize;
        let who = self.peer(from);
        let processes = self.addresses.len();
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
            let known = |instance: usize| instance < port.instances;
            let runs = |w: usize| workers_of(from, processes, port.workers).contains(&w);
            for item in packet.items {
                match item {
                    Item::Worker { worker, word } => {
                        match &word {
                            ToWorker::Work(env) => {
                                local(worker, "a message")?;
                                let msg = &env.msg;
                                if env.node as usize >= port.nodes || msg.state.len() != port.state_len {
                                    return Err(bad(format!(
                                        "a message for node {} with {} state fields",
                                        env.node,
                                        msg.state.len()
                                    )));
                                }
                                let instance = usize::try_from(msg.instance()).ok().filter(|&i| known(i));
                                let instance =
                                    instance.ok_or_else(|| bad(format!("a message of instance {}", msg.instance())))?;
                                if !port.sink.arrive(instance, from) {
                                    releases.push(instance);
                                }
                            }
                            ToWorker::InstanceDone(instance) => {
                                local(worker, "a control word")?;
                                if !known(*instance) {
                                    return Err(bad(format!("the end of instance {instance}")));
                                }
                            }
                            ToWorker::Confirm | ToWorker::Stop { .. } => {
                                local(worker, "a control word")?;
                            }
                            ToWorker::Remote(
                                remote @ (RemoteWord::Pull { group }
                                | RemoteWord::Grads { group, .. }
                                | RemoteWord::Values { group, .. }
                                | RemoteWord::Synced { group }),
                            ) => {
                                local(worker, "a replica's message")?;
                                check_replica_word(worker as usize, remote, port, from, processes)
                                    .map_err(|what| bad(format!("{what} for replica group {group}")))?;
                            }
                            ToWorker::Remote(RemoteWord::Reduce { group, step, values, .. }) => {
                                local(worker, "a reduction's step")?;
                                check_reduction(worker as usize, *step, values.len(), port.rings.get(*group), &runs)
                                    .map_err(|what| bad(format!("{what} of the reduction of group {group}")))?;
                            }
                            ToWorker::Release(_)
                            | ToWorker::Remote(RemoteWord::Served { .. } | RemoteWord::Hold(_)) => {
                                return Err(bad(format!("a word for a process addressed to worker {worker}")));
                            }
                        }
                        let index = local(worker, "a message")?;
                        port.sink.worker(index, word);
                    }
                    Item::Process(word) => {
                        match &word {
                            ToWorker::Release(instance) if known(*instance) => {}
                            ToWorker::Release(_) => return Err(bad("a credit of an unknown instance".into())),
                            ToWorker::Remote(RemoteWord::Served { node, .. }) => {
                                let runs = port.node_workers.get(*node as usize).copied().unwrap_or(usize::MAX);
                                if !workers_of(from, processes, port.workers).contains(&runs) {
                                    return Err(bad(format!("the service time of node {node}, which it does not run")));
                                }
                            }
                            ToWorker::Remote(RemoteWord::Hold(_)) if self.process != 0 => {
                                return Err(bad("a hold of admissions, which only process 0 makes".into()));
                            }
                            ToWorker::Remote(RemoteWord::Hold(_)) => {}
                            _ => return Err(bad("a word for a worker addressed to a process".into())),
                        }
                        // A credit, a copy's service or a hold is the process's: any worker
                        // of it settles it (and ends the instance when that was its last
                        // credit), notes it in the routes, or holds admissions.
                        port.sink.worker(0, word);
                    }
                    Item::Controller(report) => {
                        let report = match report {
                            Report::Trace(mut events) => {
                                check_trace(&events, from, processes, port.workers).map_err(bad)?;
                                shift_events(&mut events, port.trace_shift);
                                Report::Trace(events)
                            }
                            Report::Stopped { worker, mut trace, held } => {
                                if !workers_of(from, processes, port.workers).contains(&worker) {
                                    return Err(bad(format!("the end of worker {worker}, not one of its own")));
                                }
                                check_trace(&trace, from, processes, port.workers).map_err(bad)?;
                                shift_events(&mut trace, port.trace_shift);
                                Report::Stopped { worker, trace, held }
                            }
                            Report::Failed(error) => Report::Failed(cluster_error(format!("{who}: {error}"))),
                            report => report,
                        };
                        if !port.sink.controller(report) {
                            return Err(bad("a report to a process without the controller".into()));
                        }
                    }
                    Item::Receipt { instance } => {
                        let known = usize::try_from(instance).ok().filter(|&i| known(i));
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
                    // A packet with a decision goes to `Bridge::decision`, never here.
                    Item::Decision { .. } => return Err(bad("a decision among a run's items".into())),
                }
            }
        }
        for instance in releases {
            self.queue(from, packet.run, Item::Process(ToWorker::Release(instance)));
        }
        Ok(())
    }
}

/// Whether a replica's word (`word`, for worker `worker`) from process `from` fits the
/// run: the group is a replica's, the sender runs the side that sends it (the replica's
/// worker its gradients and acknowledgements, the master's owner pulls and values), and
/// tensors, rows and instances are within the group's and run's sizes. `Err`: what is
/// wrong.
/// A reduction's step for `worker` (`RemoteWord::Reduce`, see `sched::worker::ring`):
/// to an updater of a master reduced over processes, from the updater before it in the
/// ring (`runs`: whether a worker runs in the sending process), within the steps, one
/// chunk long.
pub(super) fn check_reduction(
    worker: usize,
    step: u32,
    len: usize,
    shape: Option<&Option<RingShape>>,
    runs: &dyn Fn(usize) -> bool,
) -> Result<(), String> {
    use crate::protocol::ring::{chunk, received_part, steps};
    let shape = shape.and_then(Option::as_ref).ok_or("a step")?;
    let parts = shape.workers.len();
    let at = shape.workers.iter().position(|&w| w == worker).ok_or("a step to a worker outside the ring")?;
    if !runs(shape.workers[(at + parts - 1) % parts]) {
        return Err("a step not from the worker before it in the ring".into());
    }
    let step = step as usize;
    if step >= steps(parts) {
        return Err(format!("step {step}, past the last,"));
    }
    let expected = chunk(shape.len, parts, received_part(at, step, parts)).len();
    if len != expected {
        return Err(format!("step {step} with {len} values, not {expected},"));
    }
    Ok(())
}

pub(super) fn check_replica_word(
    worker: usize,
    word: &RemoteWord,
    port: &RunPort,
    from: usize,
    processes: usize,
) -> Result<(), String> {
    let group = match word {
        RemoteWord::Pull { group }
        | RemoteWord::Grads { group, .. }
        | RemoteWord::Values { group, .. }
        | RemoteWord::Synced { group } => *group,
        _ => return Err("not a replica's message".into()),
    };
    let shape = port.replicas.get(group).and_then(Option::as_ref).ok_or("a message")?;
    let runs = |w: usize| workers_of(from, processes, port.workers).contains(&w);
    let lens_fit = |tensors: &[Vec<f32>]| tensors.iter().map(Vec::len).eq(shape.lens.iter().copied());
    match word {
        RemoteWord::Pull { .. } | RemoteWord::Values { .. } if shape.worker != worker || !runs(shape.owner) => {
            Err("a master's message, not from its owner,".into())
        }
        RemoteWord::Grads { .. } | RemoteWord::Synced { .. } if shape.owner != worker || !runs(shape.worker) => {
            Err("a replica's message, not from its worker,".into())
        }
        RemoteWord::Values { tensors, .. } if !lens_fit(tensors) => Err("values of other sizes".into()),
        RemoteWord::Grads { grads, .. } => {
            let ReplicaGrads { tensors, rows, applied } = grads;
            // A table's rows only (`ReplicaGrads`): one tensor of a row's values per row
            // named.
            let table_rows = match (rows, tensors.as_slice(), shape.lens.len()) {
                (Some((width, rows)), [values], 1) => values.len() as u128 == rows.len() as u128 * *width as u128,
                _ => false,
            };
            if !tensors.is_empty() && !lens_fit(tensors) && !table_rows {
                return Err("gradients of other sizes".into());
            }
            if let Some((width, rows)) = rows {
                let len = shape.lens.first().copied().unwrap_or(0) as u128;
                let past = |&r: &usize| (r as u128 + 1) * *width as u128 > len;
                if *width == 0 || rows.iter().any(past) {
                    return Err("rows past its first tensor".into());
                }
            }
            if applied.iter().any(|&(i, _)| i >= port.instances) {
                return Err("a read of an unknown instance".into());
            }
            Ok(())
        }
        _ => Ok(()),
    }
}

/// Trace events from process `from` name only its own workers.
pub(super) fn check_trace(events: &[TraceEvent], from: usize, processes: usize, workers: usize) -> Result<(), String> {
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
