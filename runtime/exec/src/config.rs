//! How a run is set up: workers and placement, admission, update frequency, optimizer,
//! tracing and the watchdog.

use amp_params::OptimConfig;
use std::time::Duration;

/// A node named in the configuration: by its index (`%12`) or its label (`cell`; every
/// node with that label).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NodeSelector {
    Id(u32),
    Label(String),
}

impl NodeSelector {
    /// `%12` or `12` names an index, anything else a label.
    pub fn parse(text: &str) -> NodeSelector {
        let digits = text.strip_prefix('%').unwrap_or(text);
        match digits.parse::<u32>() {
            Ok(id) => NodeSelector::Id(id),
            Err(_) => NodeSelector::Label(text.to_string()),
        }
    }
}

/// Which worker runs which node.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub enum Placement {
    /// Contiguous ranges of nodes in index order (the lowering's order is topological but
    /// for back edges), balanced by an estimate of each node's work.
    #[default]
    Contiguous,
    /// Node `i` (counting existing nodes in index order) on worker `i % workers`.
    RoundRobin,
    /// The worker of every node index (holes included), e.g. from a partition plan.
    Explicit(Vec<usize>),
}

/// A fault to inject, to test that failures end runs with a clear error (never a hang).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Fault {
    /// Node `node` panics on its `after`-th message (counting from 0).
    PanicAt { node: u32, after: u64 },
    /// Node `node` sleeps this long before its `after`-th message (a straggler, or with a
    /// delay past `stall_timeout`, a stall).
    DelayAt { node: u32, after: u64, delay: Duration },
}

/// A worker made slower, to study stragglers (`amprun --slow-worker`): after each step
/// (a batch and the updates after it) it sleeps `factor - 1` times the step's measured
/// time, so its work stays real and takes `factor` times as long. `during` limits it to a
/// window of seconds since the executor was made (a straggler that comes and goes).
#[derive(Clone, Debug, PartialEq)]
pub struct SlowWorker {
    pub worker: usize,
    /// At least 1, at most [`MAX_SLOWDOWN`].
    pub factor: f64,
    /// `(start, end)` in seconds; `None`: always.
    pub during: Option<(f64, f64)>,
}

/// The largest slowdown a [`SlowWorker`] may have.
pub const MAX_SLOWDOWN: f64 = 1000.0;

impl SlowWorker {
    /// How long to sleep after a step of `step` at `since_start` (time since the executor
    /// was made).
    pub fn pause(&self, step: Duration, since_start: Duration) -> Duration {
        let now = since_start.as_secs_f64();
        let active = self.during.is_none_or(|(start, end)| (start..end).contains(&now));
        if !active {
            return Duration::ZERO;
        }
        step.mul_f64(self.factor - 1.0)
    }
}

/// The most replicas of one node.
pub const MAX_REPLICAS: usize = 64;

/// The executor's settings. `Default` is the deterministic setup: one worker, one
/// instance in flight, synchronous updates after every instance.
#[derive(Clone, Debug, PartialEq)]
pub struct ExecConfig {
    /// Worker threads (at least 1). The controller runs on the calling thread.
    pub workers: usize,
    pub placement: Placement,
    /// At most this many instances in flight (at least 1).
    pub max_active_keys: usize,
    /// A Ppt updates its parameters once this many instances finished since its last
    /// update, with the mean of the gradients accumulated meanwhile (at least 1).
    pub min_update_frequency: u64,
    /// Per-node overrides of `min_update_frequency` (a parameter used by several nodes
    /// takes the smallest of theirs).
    pub update_overrides: Vec<(NodeSelector, u64)>,
    /// Synchronous updates: no instance is admitted past an update boundary until the
    /// instances before it finished, so every update sees exactly the gradients of its
    /// batch (minibatch SGD, whatever the workers and `max_active_keys`). When false,
    /// instances keep flowing and updates apply to whatever has accumulated (AMPNet's
    /// asynchronous mode). Either way, on one worker the worker admits the instances
    /// itself, and its runs are deterministic at any `max_active_keys`.
    pub sync_updates: bool,
    /// At the end of `train_epoch`, update with what accumulated since the last update
    /// (the last, smaller minibatch); otherwise it carries over to the next epoch.
    pub flush_at_epoch_end: bool,
    pub optimizer: OptimConfig,
    /// Parameter groups (Ppt prefixes: `emb` for `emb.weight`) that training leaves as
    /// they are (`amprun --freeze`): no gradient is accumulated for them, and their
    /// updates only reset the count of instances, moving neither values nor optimizer
    /// state. Gradients still flow through their nodes to the parameters before them.
    pub frozen: Vec<String>,
    /// Dynamic batching: a node takes up to this many of the messages waiting in its
    /// queue (consecutive, of one direction and port) in one step of its worker; an op
    /// that batches (`linear`, a fused kernel) runs them as one matrix, one GEMM or kernel
    /// call for all, the others one by one. Each message's result is that of processing
    /// it alone (to rounding). 1 turns batching off. Batches form when several messages
    /// wait at once: with several instances in flight (`max_active_keys`), or the element
    /// messages of one instance (a tree's leaves).
    pub max_batch: usize,
    /// A Linear group keeps the rows of its weight-gradient products and adds them as one
    /// GEMM (per 256 rows, and before anything reads the gradient): a batching of the
    /// messages' `dyᵀx` across batches. False adds each backward batch's product at once
    /// (a rank-one update per message when `max_batch` is 1), as an op-by-op framework
    /// does: `max_batch` 1 with this off batches nothing (`amprun --no-deferred-grads`).
    pub defer_weight_grads: bool,
    /// Run each fusion group of elementwise nodes (the graph's `fusion` ids) as one node
    /// calling the kernel `amp_jit` compiles for it with Cranelift; groups it refuses
    /// run node by node. False runs every node by itself (`amprun --no-jit`).
    pub jit: bool,
    /// Run each chain of routing nodes (`phi`, `cond`, `switch`, `isu` passing messages
    /// to one another) as one node, a worker step per message instead of one per node
    /// (see the `chain` module). False runs them node by node (`amprun --no-chains`).
    pub chain_routes: bool,
    /// Run an elementwise activation that alone reads a Linear's output on its worker
    /// inside the Linear's step (see the `epilogue` module). False runs it as its own node
    /// (`amprun --no-epilogues`); the results are the same bits.
    pub linear_epilogues: bool,
    /// Replicas (see the `replicas` module): each Linear or Embedding node a selector
    /// names runs as this many copies on consecutive workers, messages going to the least
    /// loaded. 1 is no replica.
    pub replicas: Vec<(NodeSelector, usize)>,
    /// Copies of the whole graph (data parallelism inside the AMP model; see the `copies`
    /// module): the placement is for `workers / copies` workers, and copy `c` runs it on
    /// the `c`-th block of that many (`amp_ir::placement::graph_copy_worker`). An instance
    /// runs on one copy from its admission to its end; each copy accumulates its own
    /// gradients, which its parameter groups' owners (copy 0's) add up before each
    /// update, then give every copy the new values. 1 is the graph alone. `workers` must
    /// be a multiple, and node replicas (`replicas`) cannot be combined with copies.
    pub copies: usize,
    /// Replicas take the values of their parameter group after every this many updates
    /// (and when a run starts); 1 keeps training exactly that without replicas.
    pub replica_sync: u64,
    /// Record a trace event per forward, backward and update (one per batch).
    pub trace: bool,
    /// The most trips one loop may make in one instance (`amprun --max-trips`); more is an
    /// error naming the loop.
    pub max_trips: u64,
    /// End the run with [`crate::ExecError::Stalled`] when no message was processed for
    /// this long while instances are in flight.
    pub stall_timeout: Duration,
    pub fault: Option<Fault>,
    /// Bounded staleness (DSP): no parameter group applies a gradient more than this many
    /// of its updates after the version the gradient's forward messages read; a group
    /// defers an update that would leave a read still in flight staler than that. `None`
    /// bounds nothing (asynchronous training as AMPNet's). 0 with one instance in flight
    /// is synchronous training.
    pub max_staleness: Option<u64>,
    /// Per-node bounds (a parameter used by several nodes takes the smallest of theirs),
    /// over `max_staleness` and the layer-wise schedule.
    pub staleness_overrides: Vec<(NodeSelector, u64)>,
    /// The DSP schedule: bounds that grow towards the input. The groups, ordered by their
    /// last node (the lowering's order is topological), get `max_staleness` (0 when unset)
    /// for the one nearest the loss, one more for each group before it.
    pub staleness_layerwise: bool,
    /// Stragglers: workers made slower (see [`SlowWorker`]); a worker named twice takes
    /// the last.
    pub slow_workers: Vec<SlowWorker>,
    /// The seed of dropout's masks (`amprun --seed`), hashed with the epoch, each
    /// instance's index in its data set and the call's site and context
    /// (`amp_ir::dropout`).
    pub dropout_seed: u64,
    /// Whether [`crate::Executor::grads`] applies dropout's masks as training does (to
    /// check its gradients against the reference's); evaluation and inference never do.
    pub dropout_in_grads: bool,
}

impl Default for ExecConfig {
    fn default() -> ExecConfig {
        ExecConfig {
            workers: 1,
            placement: Placement::Contiguous,
            max_active_keys: 1,
            min_update_frequency: 1,
            update_overrides: Vec::new(),
            sync_updates: true,
            flush_at_epoch_end: true,
            optimizer: OptimConfig::sgd(0.01),
            frozen: Vec::new(),
            max_batch: 64,
            defer_weight_grads: true,
            jit: true,
            chain_routes: true,
            linear_epilogues: true,
            replicas: Vec::new(),
            copies: 1,
            replica_sync: 1,
            trace: false,
            max_trips: amp_ir::limits::DEFAULT_MAX_TRIPS,
            stall_timeout: Duration::from_secs(60),
            fault: None,
            max_staleness: None,
            staleness_overrides: Vec::new(),
            staleness_layerwise: false,
            slow_workers: Vec::new(),
            dropout_seed: 0,
            dropout_in_grads: false,
        }
    }
}

impl ExecConfig {
    /// Deterministic minibatch SGD: one worker, one instance in flight, an update every
    /// `batch` instances with the mean gradient.
    pub fn deterministic(batch: u64, optimizer: OptimConfig) -> ExecConfig {
        ExecConfig { min_update_frequency: batch, optimizer, ..ExecConfig::default() }
    }

    pub(crate) fn check(&self) -> Result<(), String> {
        if self.workers == 0 {
            return Err("workers must be at least 1".into());
        }
        if self.workers > 1024 {
            return Err(format!("{} workers is more than the 1024 supported", self.workers));
        }
        if self.max_active_keys == 0 {
            return Err("max_active_keys must be at least 1".into());
        }
        if self.max_batch == 0 {
            return Err("max_batch must be at least 1".into());
        }
        if self.min_update_frequency == 0 || self.update_overrides.iter().any(|(_, k)| *k == 0) {
            return Err("min_update_frequency must be at least 1".into());
        }
        if !(self.optimizer.lr.is_finite()) {
            return Err("the learning rate must be finite".into());
        }
        if self.replicas.iter().any(|(_, r)| !(1..=MAX_REPLICAS).contains(r)) {
            return Err(format!("a node has 1 to {MAX_REPLICAS} replicas"));
        }
        if self.copies == 0 || !self.workers.is_multiple_of(self.copies) {
            return Err(format!("{} copies of the graph cannot share {} workers evenly", self.copies, self.workers));
        }
        if self.copies > 1 && self.replicas.iter().any(|(_, r)| *r > 1) {
            return Err("node replicas cannot be combined with copies of the whole graph".into());
        }
        if self.replica_sync == 0 {
            return Err("replica_sync must be at least 1".into());
        }
        if self.stall_timeout.is_zero() {
            return Err("stall_timeout must be positive".into());
        }
        for slow in &self.slow_workers {
            if slow.worker >= self.workers {
                return Err(format!("slow worker {} does not exist ({} workers)", slow.worker, self.workers));
            }
            if !(1.0..=MAX_SLOWDOWN).contains(&slow.factor) {
                return Err(format!("a slow worker's factor is 1 to {MAX_SLOWDOWN}, not {}", slow.factor));
            }
            if let Some((start, end)) = slow.during {
                if !(start.is_finite() && end.is_finite() && 0.0 <= start && start < end) {
                    return Err(format!("a slow worker's window {start}..{end} is not an interval of seconds"));
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A straggler sleeps `factor - 1` times the step, only inside its window.
    #[test]
    fn a_slow_worker_pauses_in_its_window_only() {
        let step = Duration::from_millis(10);
        let always = SlowWorker { worker: 0, factor: 4.0, during: None };
        assert_eq!(always.pause(step, Duration::from_secs(100)), Duration::from_millis(30));
        let window = SlowWorker { worker: 0, factor: 2.0, during: Some((1.0, 2.0)) };
        assert_eq!(window.pause(step, Duration::from_millis(500)), Duration::ZERO);
        assert_eq!(window.pause(step, Duration::from_millis(1500)), step);
        assert_eq!(window.pause(step, Duration::from_secs(2)), Duration::ZERO);
        let none = SlowWorker { worker: 0, factor: 1.0, during: None };
        assert_eq!(none.pause(step, Duration::ZERO), Duration::ZERO);
    }
}
