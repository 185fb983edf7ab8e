//! What arrives from another process, checked before anything of it is used: every
//! item of a packet against the run it names (workers, nodes, instances, replica groups,
//! trace events), then delivered into the scheduler's channels (`RunSink`).

use super::bridge::Bridge;
use super::*;

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

impl Bridge {
    /// Delivers a packet of the current run into its workers' and controller's channels.
    pub(super) fn deliver(&mut self, packet: Packet) -> Result<(), String> {
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
pub(super) fn check_replica_item(item: &Item, port: &RunPort, from: usize, processes: usize) -> Result<(), String> {
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
