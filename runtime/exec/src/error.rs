//! What can stop a run: a graph the verifier rejects, parameters that do not fit it, a
//! node that fails on an instance (bad data, an index out of range), a worker that
//! panics, a non-finite loss, a stall.

use std::fmt;
use std::time::Duration;

/// Why a node could not process a message.
#[derive(Clone, Debug, PartialEq)]
pub enum OpError {
    /// A state expression (predicate, index, label, count) could not be evaluated: a
    /// missing datum, an unset field, overflow or division by zero.
    Eval { what: &'static str, why: String },
    /// An int selected something that does not exist (embedding row, switch arm, class).
    OutOfRange { what: &'static str, index: i64, len: usize },
    /// A `read` path does not lead to an f32 leaf of the instance.
    MissingData { path: String },
    /// A payload has another number of values than the port's type says.
    PayloadSize { expected: usize, found: usize },
    /// Two live messages with the same key at a node that keys what it holds: the graph's
    /// keying function does not tell them apart.
    DuplicateKey { key: Vec<i64> },
    /// A backward message found nothing cached under its key.
    MissingCache { key: Vec<i64> },
    /// The message's instance (state field 0) is not one of the run's.
    UnknownInstance { instance: i64 },
    /// A count (of elements, of rows) evaluated to a negative number.
    NegativeCount { what: &'static str, count: i64 },
    /// A loop made more trips in one instance than `ExecConfig::max_trips`.
    TooManyTrips { limit: u64 },
    /// A count over `amp_ir::limits::MAX_COLLECTION_ELEMENTS`.
    CountTooLarge { what: &'static str, count: i64, limit: u64 },
    /// A reduction that needs at least one value got none: `mean` of an empty batch or
    /// tensor, `argmax` of an empty vector.
    Empty { what: &'static str },
    /// Two element messages with the same index reached a `group` for one context.
    DuplicateElement { index: i64 },
    /// The op exists in the IR but this executor cannot run it yet.
    Unsupported { op: &'static str },
    /// A fused kernel refused its buffers (a payload of the wrong size reached it).
    Kernel { message: String },
    /// Member `member` (an index into the chain's members) of a routing chain failed (see
    /// `crate::load::chain`): the run reports the member, as it would without the chain.
    InChain { member: usize, error: Box<OpError> },
}

impl fmt::Display for OpError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            OpError::Eval { what, why } => write!(f, "cannot evaluate the {what} on this instance: {why}"),
            OpError::OutOfRange { what, index, len } => write!(f, "{what} {index} is out of range 0..{len}"),
            OpError::MissingData { path } => write!(f, "the instance has no f32 value at `{path}`"),
            OpError::PayloadSize { expected, found } => {
                write!(f, "payload has {found} values where {expected} were expected")
            }
            OpError::DuplicateKey { key } => write!(f, "two live messages with the same key {key:?}"),
            OpError::MissingCache { key } => write!(f, "nothing cached under key {key:?} for the backward pass"),
            OpError::UnknownInstance { instance } => write!(f, "message of unknown instance {instance}"),
            OpError::NegativeCount { what, count } => write!(f, "the {what} is {count}, which is negative"),
            OpError::TooManyTrips { limit } => write!(
                f,
                "this loop made more than {limit} trips in one instance (a `while` that never ends?); \
                 `amprun --max-trips` raises the limit"
            ),
            OpError::CountTooLarge { what, count, limit } => {
                write!(f, "the {what} is {count}, over the limit of {limit} elements per collection")
            }
            OpError::Empty { what } => write!(f, "cannot take the {what} of an empty batch or tensor"),
            OpError::DuplicateElement { index } => write!(f, "element {index} arrived twice"),
            OpError::Unsupported { op } => write!(f, "op `{op}` is not supported by the executor yet"),
            OpError::Kernel { message } => write!(f, "fused kernel: {message}"),
            OpError::InChain { member, error } => write!(f, "chain member {member}: {error}"),
        }
    }
}

/// The queues of one worker when a stall was detected.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QueueReport {
    pub worker: usize,
    /// Messages waiting in the worker's channel.
    pub inbox: usize,
    /// Messages the worker produced for its own nodes and has not processed yet.
    pub local: usize,
    /// Messages processed so far in this run.
    pub processed: u64,
}

/// An error of the executor.
#[derive(Clone, Debug, PartialEq)]
pub enum ExecError {
    /// The verifier rejected the graph (its messages, one per error).
    Unverified { errors: Vec<String> },
    /// The parameter set does not match the graph's parameters.
    Params { message: String },
    /// A configuration value is out of range.
    Config { message: String },
    /// A node failed on a message. `source`: where the node's expression is in the model
    /// (`file:line:col`; empty when the graph does not say).
    Node { worker: usize, node: u32, label: String, op: &'static str, source: Box<str>, instance: i64, error: OpError },
    /// A node panicked; the run ended.
    WorkerPanic { worker: usize, node: u32, label: String, message: String },
    /// The loss of an instance is NaN or infinite; training stopped before applying any
    /// gradient of it. `instance` is the index in the slice given to the run.
    NonFiniteLoss { instance: usize, loss: f32, node: u32 },
    /// No message was processed for `idle` while instances were in flight.
    Stalled { idle: Duration, in_flight: Vec<usize>, queues: Vec<QueueReport> },
    /// A run finished with messages still held at a node (a join that never completed,
    /// a cache never released): the graph's keys or routing are wrong. `worker` runs the
    /// node.
    Leaked { worker: usize, node: u32, label: String, held: usize },
    /// A run split over processes failed between them: a process was lost or refused, or
    /// sent what could not be read (the message names the process and its address).
    Cluster { message: String },
}

impl ExecError {
    /// Whether the error is a non-finite loss (the CLI stops with a checkpoint).
    pub fn is_non_finite_loss(&self) -> bool {
        matches!(self, ExecError::NonFiniteLoss { .. })
    }

    /// For a node error, `node %N `label` (op) at file:line:col on worker W failed on
    /// {instance}: error`, with `instance` as the caller names it (amprun adds the data
    /// file and line); `None` for other errors.
    pub fn node_failure(&self, instance: &str) -> Option<String> {
        let ExecError::Node { worker, node, label, op, source, error, .. } = self else { return None };
        let at = if source.is_empty() { String::new() } else { format!(" at {source}") };
        Some(format!("node %{node} `{label}` ({op}){at} on worker {worker} failed on {instance}: {error}"))
    }
}

impl fmt::Display for ExecError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ExecError::Unverified { errors } => {
                write!(f, "the graph failed verification; the executor refuses it:")?;
                for e in errors {
                    write!(f, "\n  {e}")?;
                }
                Ok(())
            }
            ExecError::Params { message } => write!(f, "parameters do not fit the graph: {message}"),
            ExecError::Config { message } => write!(f, "bad executor configuration: {message}"),
            ExecError::Node { instance, .. } => {
                f.write_str(&self.node_failure(&format!("instance {instance}")).unwrap_or_default())
            }
            ExecError::WorkerPanic { worker, node, label, message } => {
                write!(f, "worker {worker} panicked in node %{node} `{label}`: {message}")
            }
            ExecError::NonFiniteLoss { instance, loss, node } => {
                write!(f, "loss of instance {instance} is {loss} (node %{node}); training stopped")
            }
            ExecError::Stalled { idle, in_flight, queues } => {
                write!(f, "no progress for {:.1}s with {} instance(s) in flight", idle.as_secs_f64(), in_flight.len())?;
                for q in queues {
                    write!(
                        f,
                        "; worker {}: {} queued, {} local, {} processed",
                        q.worker, q.inbox, q.local, q.processed
                    )?;
                }
                Ok(())
            }
            ExecError::Leaked { worker, node, label, held } => write!(
                f,
                "node %{node} `{label}` on worker {worker} still holds {held} message(s) after the run (bad keys or routing)"
            ),
            ExecError::Cluster { message } => f.write_str(message),
        }
    }
}

impl std::error::Error for ExecError {}
