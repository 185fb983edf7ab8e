//! The AMP executor: runs a verified IR graph on instances with asynchronous
//! model-parallel workers, AMPNet style: nodes exchange forward and backward messages
//! (payload + state), cache what their backward pass needs under their keys, and each Ppt
//! accumulates gradients and updates its own parameters locally.
//!
//! In: a verified graph (`amp_ir::verify::Verified`: only the verifier makes one), an
//! `amp_params::ParamSet` with its parameters, an [`ExecConfig`], and instances
//! ([`ExecInstance`], implemented by `amp_data::Instance`). Out: trained parameters and
//! optimizer state, [`EpochStats`] / [`EvalStats`] (loss per instance, accuracy,
//! throughput), inference outputs, single-instance gradients, trace events
//! ([`trace::write_chrome_trace`]), and [`ExecError`]s that name the node and worker.
//! Depends on `amp-ir`, `amp-jit` (fused kernels), `amp-params` (optimizers), `amp-data`, crossbeam-channel
//! (queues between workers), serde_json (trace output) and gemm (the Linear products;
//! chosen over matrixmultiply by `cargo bench -p amp-benches --bench gemm`).
//!
//! Layout, in three layers, none using one above it (`tests/layers.rs` checks): `load/`
//! (the program a verified graph becomes: nodes, parameter groups, placement, fusion
//! groups, routing chains, replicas), `ops/` (the forward and backward of each op family,
//! the `kernels`, and `train`: live parameter groups), `sched/` (`executor`: the API;
//! `controller`, `worker`, and `admission`: an instance's life from admission to its end,
//! update boundaries and credits). The leaves sit at the root, used by every layer:
//! [`config`], [`error`], [`message`], [`instance`], [`trace`], [`wire`] and `cluster`.
//!
//! Semantics worth knowing:
//! - An instance is finished when none of its messages is in flight (credit counting);
//!   in training that is when the source got the backward messages of all its consumers.
//! - Ppt updates count *finished instances*: a group updates once `min_update_frequency`
//!   instances finished since its last update, with the mean of the gradients
//!   accumulated meanwhile (instances that did not use the group count as zero). With
//!   `sync_updates`, admission never crosses an update boundary early, so training is
//!   minibatch SGD whatever the workers. The workers admit the instances (the one that
//!   finishes an instance starts the next and counts it for the owners; in synchronous
//!   training not past a boundary before the update: across workers the controller
//!   opens each window once every owner confirmed; see `sched::admission`), so training on
//!   one worker, synchronous or not, is bit-for-bit deterministic at any `max_active_keys`.
//! - Dynamic batching (`ExecConfig::max_batch`, 64 by default, 1 for none): a Linear
//!   node takes the messages waiting in its queue (of one direction and port) together,
//!   one product for all: through `gemm` (the only `unsafe`, in `kernels`) on padded
//!   weight copies where a weight serves many rows between updates, through
//!   `kernels::skinny` (safe `pulp` SIMD) on the weight in place where it does not (MoE
//!   experts). Each message's
//!   results are those of processing it alone to rounding (1e-5), so runs with and without
//!   batching agree to rounding, not bit for bit; a given setup stays deterministic with
//!   one worker and one instance in flight (a tree's leaves still batch together then).
//!   The weight-gradient products of a Linear group are batched too, across its backward
//!   batches (`ops::train::DeferredProducts`; `ExecConfig::defer_weight_grads` false adds each
//!   batch's at once, so that `max_batch` 1 batches nothing).
//! - Collections: a batch `f32[?, d]` is one message of `rows * d` values (a zero-row
//!   batch is an empty payload); `flatmap` and `ungroup` open an element context (one
//!   message per element) and collect its gradients under the enclosing context's key,
//!   `group` closes one. Routing, selection and ordering of ties match the reference
//!   evaluator (`amp-reference`), which the tests hold the executor's gradients to.
//! - JIT (`ExecConfig::jit`, on by default): each fusion group `amp-jit` compiles runs as
//!   one node calling its Cranelift kernel, batching like a Linear node; results equal
//!   node-by-node execution to rounding.
//! - Replicas (`ExecConfig::replicas`): see the `load::replicas` module.
//! - Several processes ([`Executor::in_cluster`], [`Cluster::start`]): each runs its block
//!   of the workers ([`amp_ir::placement::workers_of`]) and process 0 the controller; what crosses processes
//!   goes through one bridge thread per process over timely_communication, encoded by
//!   [`wire`] (docs/distributed.md).
//! - A non-finite loss sends no gradient back; the run stops with
//!   [`ExecError::NonFiniteLoss`] naming the instance, accumulators are cleared and the
//!   parameters are those of the last update.

mod cluster;
pub mod config;
pub mod error;
pub mod instance;
pub mod message;
pub mod protocol;
pub mod trace;
pub mod wire;

mod load;
mod ops;
mod sched;

pub use amp_net::Traffic;
pub use cluster::{Cluster, ClusterSpec};
pub use config::{ExecConfig, Fault, NodeSelector, Placement, SlowWorker};
pub use error::{ExecError, OpError, QueueReport};
pub use instance::ExecInstance;
pub use ops::kernels;
pub use ops::train::StalenessStats;
pub use sched::controller::{AllReduce, Judgement, Observer, Progress};
pub use sched::executor::{EpochStats, EvalStats, Executor, GroupStaleness};
pub use trace::{write_chrome_trace, write_merged_trace, TraceEvent, TraceKind};
