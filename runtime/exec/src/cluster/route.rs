//! The seam between the scheduler and the cluster: where a worker's messages and reports
//! go (a channel in this process, or the bridge's outbox, addressed as an [`Item`]), and
//! where the bridge delivers (`RunSink`, implemented in `sched/`).

use super::*;

/// Where the bridge delivers a run's items: the scheduler's channels and credits
/// (`sched::controller` implements it).
pub(crate) trait RunSink: Send {
    /// This process's `index`-th worker takes `word` (a message, an instance's end, a
    /// confirmation request, a stop, a credit given back, a replica's word).
    fn worker(&self, index: usize, word: ToWorker);
    /// A report for the controller; false when this process runs none.
    fn controller(&self, report: Report) -> bool;
    /// A message of `instance` arrived from process `from`: true when this process keeps
    /// the sender's credit until its own count returns to zero (see the module doc).
    fn arrive(&self, instance: usize, from: usize) -> bool;
    /// The cluster failed: the controller hears why, every local worker stops.
    fn fail(&self, message: &str);
}

/// Where a worker's messages for another worker go: that worker's channel in this
/// process, or the bridge for a worker of another process. The one seam between the
/// scheduler and the cluster.
pub(crate) struct Peers {
    /// Per worker (global index), its channel when it runs in this process.
    local: Vec<Option<Sender<ToWorker>>>,
    remote: Option<(Outbox, Vec<u16>)>,
}

impl Clone for Peers {
    fn clone(&self) -> Peers {
        Peers { local: self.local.clone(), remote: self.remote.clone() }
    }
}

impl Peers {
    /// Every worker in this process.
    pub fn local(senders: &[Sender<ToWorker>]) -> Peers {
        Peers { local: senders.iter().cloned().map(Some).collect(), remote: None }
    }

    /// This process's workers `range` (their channels in `senders`) out of `workers`, the
    /// others through `outbox`.
    pub fn split(
        senders: &[Sender<ToWorker>],
        range: Range<usize>,
        workers: usize,
        cluster: &Cluster,
        outbox: Outbox,
    ) -> Peers {
        let mut local: Vec<Option<Sender<ToWorker>>> = (0..workers).map(|_| None).collect();
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
    pub fn send(&self, worker: usize, word: ToWorker) -> bool {
        if let Some(Some(tx)) = self.local.get(worker) {
            return tx.send(word).is_ok();
        }
        let Some((outbox, owner)) = &self.remote else { return false };
        let Some(&process) = owner.get(worker) else { return false };
        let worker = u32::try_from(worker).unwrap_or(u32::MAX);
        outbox.send(usize::from(process), Item::Worker { worker, word });
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

    /// Sends `word` to any worker of process `process`; false when this run is not split.
    pub fn send_to_process(&self, process: usize, word: ToWorker) -> bool {
        let Some((outbox, _)) = &self.remote else { return false };
        outbox.send(process, Item::Process(word));
        true
    }

    /// Gives a credit of `instance` back to process `process` (see the module doc).
    pub fn release(&self, process: usize, instance: usize) {
        self.send_to_process(process, ToWorker::Release(instance));
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
pub(crate) enum ReportTo {
    Local(Sender<Report>),
    Remote(Outbox),
}

impl Clone for ReportTo {
    fn clone(&self) -> ReportTo {
        match self {
            ReportTo::Local(tx) => ReportTo::Local(tx.clone()),
            ReportTo::Remote(outbox) => ReportTo::Remote(outbox.clone()),
        }
    }
}

impl ReportTo {
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

    pub fn send(&self, report: Report) {
        match self {
            ReportTo::Local(tx) => {
                let _ = tx.send(report);
            }
            ReportTo::Remote(outbox) => outbox.send(0, Item::Controller(report)),
        }
    }
}
