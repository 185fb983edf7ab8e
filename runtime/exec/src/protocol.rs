//! The messages of a run, one set of types in memory and on the wire: what a worker is
//! told ([`ToWorker`], with a replica's words [`RemoteWord`]), what the controller hears
//! ([`Report`]), and what crosses between processes ([`Item`]: one of those addressed to a
//! worker, a process or the controller, or a word of the bridges). `crate::wire` is their
//! codec and `crate::cluster`'s `inbound` checks what arrives; adding a message is a
//! variant here, its arm in the codec, its check there and its handler.

use crate::error::ExecError;
use crate::message::Envelope;
use crate::trace::TraceEvent;
use std::time::Duration;

/// What the controller and other workers send a worker.
#[derive(Clone, Debug, PartialEq)]
pub enum ToWorker {
    Work(Envelope),
    /// An instance finished (its index; from the worker that finished it): each group the
    /// worker owns counts it, and updates when it reached its `min_update_frequency`.
    /// Also to an updater that joins bounded reductions (`sched::worker::ring`), from a
    /// worker of its process where the instance left that process.
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
#[derive(Clone, Debug, PartialEq)]
pub enum Report {
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
    /// Trace events recorded so far (on the results channel, every `TRACE_PIECE`
    /// events, `sched::worker`), so that an observer can fold them as the run goes; `Stopped` brings the
    /// rest.
    Trace(Vec<TraceEvent>),
    Failed(ExecError),
    Stopped {
        worker: usize,
        trace: Vec<TraceEvent>,
        held: Vec<(u32, usize)>,
    },
}

/// What a master and its replica in another process tell each other (replica groups are
/// numbered as the program's parameter groups), a copy's service to its router, and an
/// owner's hold of process 0's admissions.
#[derive(Clone, Debug, PartialEq)]
pub enum RemoteWord {
    /// To a replica's worker: send what the replica accumulated.
    Pull { group: usize },
    /// To a master's owner: the replica `group`'s gradients (`last`: its final ones of
    /// the run).
    Grads { group: usize, last: bool, grads: ReplicaGrads },
    /// To a replica's worker: the master's values at its version `base`.
    Values { group: usize, base: u64, tensors: Vec<Vec<f32>> },
    /// To a master's owner: replica `group` took the values.
    Synced { group: usize },
    /// To any worker of the process that routes to `node` (a copy that runs elsewhere):
    /// it served `count` messages in `elapsed`.
    Served { node: u32, count: usize, elapsed: Duration },
    /// To any worker of process 0, from an owner elsewhere: hold admissions while it
    /// defers an update for a staleness bound (`true`), or release its hold.
    Hold(bool),
    /// To the next process's updater of master `group`, split with copies of the graph:
    /// step `step` of a ring all-reduce of the gradients (`sched::worker::ring`), one
    /// chunk of them; `count` is the instances process 0 counted for the update, and
    /// `flush` marks the run's last.
    Reduce { group: usize, step: u32, count: u64, flush: bool, values: Vec<f32> },
}

/// A ring all-reduce's arithmetic (`RemoteWord::Reduce`), which the updaters follow and
/// the bridge checks.
pub(crate) mod ring {
    use std::ops::Range;

    /// The values of chunk `part` of `len` values cut into `parts` near-equal chunks (the
    /// first `len % parts` one longer).
    pub fn chunk(len: usize, parts: usize, part: usize) -> Range<usize> {
        let parts = parts.max(1);
        let (base, extra) = (len / parts, len % parts);
        let start = part * base + part.min(extra);
        start..(start + base + usize::from(part < extra)).min(len)
    }

    /// The chunk that position `at` of a ring of `parts` receives at step `step` (and sends
    /// at step `step + 1`; it sends chunk `at` at step 0).
    pub fn received_part(at: usize, step: usize, parts: usize) -> usize {
        let parts = parts.max(1);
        (at + 2 * parts - step % parts - 1) % parts
    }

    /// The steps of one reduction: 2(P − 1).
    pub fn steps(parts: usize) -> usize {
        2 * parts.saturating_sub(1)
    }
}

/// A replica's gradients on their way to a master in another process (what
/// `ops::train::gather_grads` moves in memory): the tensors' accumulators (none when nothing was
/// accumulated), the rows of tensor 0 they reached when that is all they reached
/// (`(width, rows)`), and the versions their instances read. A one-tensor group whose
/// rows are known (an Embedding's table) sends those rows only: `tensors` is then one
/// vector of `rows.len() × width` values, row after row, the rows sorted and distinct.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ReplicaGrads {
    pub tensors: Vec<Vec<f32>>,
    pub rows: Option<(usize, Vec<usize>)>,
    pub applied: Vec<(usize, u64)>,
}

/// What one process sends another, in a packet of one run (`crate::wire::Packet`).
#[derive(Clone, Debug, PartialEq)]
pub enum Item {
    /// For worker `worker` (numbered over every process) of the receiving process.
    Worker {
        worker: u32,
        word: ToWorker,
    },
    /// For any worker of the receiving process: a credit given back
    /// ([`ToWorker::Release`]), a copy's service for its routes ([`RemoteWord::Served`]),
    /// a hold of process 0's admissions ([`RemoteWord::Hold`]).
    Process(ToWorker),
    /// For process 0's controller (an error crosses as its message).
    Controller(Report),
    /// To process 0, after a loss or output of `instance` that took a credit: give it back
    /// (a `Release`) now that the report before it arrived (`crate::cluster`).
    Receipt {
        instance: u64,
    },
    /// A tensor of a gather or an exchange (`Cluster::exchange`), by its slot.
    Tensor {
        tensor: u32,
        values: Vec<f32>,
    },
    /// Process 0's decision between runs (`Cluster::agree`).
    Decision {
        words: Vec<u64>,
    },
    Heartbeat,
    /// The sender leaves the cluster.
    Shutdown,
}
