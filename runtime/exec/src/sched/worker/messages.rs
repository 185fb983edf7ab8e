//! What a worker is told and what it reports: the scheduler's messages, in memory, and
//! what each becomes on the wire (`Wire`).

use super::*;

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
