//! Node ops: the forward and backward semantics of every op of `docs/IR.md`, one type per
//! op family, behind one trait.
//!
//! A worker hands an op a message through [`NodeOp::forward`] (on an input
//! port) or [`NodeOp::backward`] (on an output port, with the gradients of all consumers
//! of that port already summed by the worker, under the node's key and the fields it
//! writes, so that the element messages of a `flatmap` stay apart); the op answers by emitting messages
//! through its [`NodeCx`]. What the worker does around it, so the ops need not: checks
//! every payload's size against the port's type before the op sees it; fans a forward
//! message out to every consumer of the port; answers a forward message on a port with no
//! consumer by an immediate zero gradient (training) or drops it (inference); routes
//! backward messages to the producer of the input port.
//!
//! Batches (`f32[?, d..]`) are plain row-major payloads whose length is a multiple of the
//! row size; a zero-row batch is an empty `F32` payload (never `Unit`). Ops that open or
//! close an element context (`flatmap`, `ungroup`, `group`) count the messages of one
//! context under the node's key, which excludes the element field. Families: `data`
//! (source, read, const, forget, sink), `ppt`, `nppt`, `shape` (concat, split), `route`
//! (cond, switch, phi, isu), `loss`, `elements` (flatmap, group, ungroup), `rows`
//! (gather, scatter_sum, gather_rows, mask_rows, partition_rows, merge_rows, reduce), `select` (top_k, state_from_payload), `dropout`.
//!
//! Adding an op: a type implementing [`NodeOp`] in the module of its family and an arm
//! in [`build`].
//!
//! Dynamic batching: an op whose [`NodeOp::batches`] is true gets, when several messages
//! of one direction and port wait in its node's queue, up to `ExecConfig::max_batch` of
//! them at once (a batch of messages, not to be confused with a batch payload above) through [`NodeOp::forward_batch`] / [`NodeOp::backward_batch`] (in queue
//! order, keys untouched). The defaults loop over `forward` / `backward`, so other ops
//! need not know; `linear` overrides them with one GEMM over the stacked rows, and
//! `fused` (a fusion group's kernel, in place of the group's nodes) with one kernel call.
//! Both write all their messages' results into one buffer and emit each message with its
//! range of it (`Payload::pieces`), and both read the rows of messages that are
//! consecutive ranges of one buffer in place (`Payload::contiguous`): a batch that goes on
//! to the next such node in the same order stays one buffer, without a copy per node.
//! The row ops of batched payloads between them do the same through [`Stacked`] where
//! a Linear reads what they write (a split of batches both ways, `partition_rows` and
//! `scatter_sum` forward, `merge_rows` backward), and so does a `unary` both ways: their
//! [`Intake::Stacked`] has the worker hand them the messages it takes together.

mod chain;
mod data;
mod dropout;
mod elements;
mod fused;
pub mod kernels;
mod loss;
mod nppt;
mod ppt;
pub(crate) mod replica_routes;
mod route;
mod rows;
mod select;
mod shape;
pub(crate) mod train;

use crate::error::OpError;
use crate::instance::ExecInstance;
use crate::load::program::{ExecOp, NodeInfo};
use crate::message::{key_of, Key, KeyMap, Msg, Payload};
use crate::ops::train::ParamAccess;
use amp_ir::{Op, PayloadTy, StateExpr};
use std::sync::Arc;

pub(crate) use dropout::DropoutPass;

/// What a run is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum RunMode {
    /// Forward and backward, gradients accumulated and applied.
    Train,
    /// Forward and backward, gradients accumulated but never applied.
    Grad,
    /// Forward only, losses (and accuracy) reported.
    Eval,
    /// Forward only, sink outputs reported; loss nodes do nothing (labels may be absent).
    Infer,
}

impl RunMode {
    pub fn backward(self) -> bool {
        matches!(self, RunMode::Train | RunMode::Grad)
    }
}

/// What an op produces while handling a message.
#[derive(Debug)]
pub(crate) enum Emit {
    Forward {
        port: u16,
        msg: Msg,
    },
    Backward {
        port: u16,
        msg: Msg,
    },
    /// A loss; `state` is the message's (evaluation only: per-frame accuracy reads it).
    Loss {
        instance: i64,
        value: f32,
        correct: Option<bool>,
        state: Option<Box<[i64]>>,
    },
    Output {
        instance: i64,
        values: Vec<f32>,
    },
}

/// Everything a run shares between workers, read-only but for the parameters' locks.
pub(crate) struct RunShared<'a> {
    pub instances: Vec<&'a (dyn ExecInstance + Sync)>,
    pub params: ParamAccess<'a>,
    pub mode: RunMode,
    pub routes: replica_routes::Routes,
    /// The masks dropout applies in this run (training's); `None`: it is the identity.
    pub dropout: Option<DropoutPass>,
}

/// An op's view of the run while it handles one message.
pub(crate) struct NodeCx<'r, 'a> {
    pub node: &'r NodeInfo,
    pub shared: &'r RunShared<'a>,
    pub out: &'r mut Vec<Emit>,
    /// The run's mode as this node sees it: evaluation for a forward-only node in a run
    /// with backward passes (`NodeInfo::forward_only`), the run's otherwise.
    pub mode: RunMode,
}

impl<'r, 'a> NodeCx<'r, 'a> {
    /// The context of `node` in a run: its mode is the run's, or evaluation for a
    /// forward-only node of a training run (no cache kept, no gradient sent).
    pub fn new(node: &'r NodeInfo, shared: &'r RunShared<'a>, out: &'r mut Vec<Emit>) -> NodeCx<'r, 'a> {
        let mode = if node.forward_only && shared.mode.backward() { RunMode::Eval } else { shared.mode };
        NodeCx { node, shared, out, mode }
    }
}

impl<'a> NodeCx<'_, 'a> {
    pub fn forward(&mut self, port: u16, msg: Msg) {
        self.out.push(Emit::Forward { port, msg });
    }

    pub fn backward(&mut self, port: u16, msg: Msg) {
        self.out.push(Emit::Backward { port, msg });
    }

    /// Whether backward messages will come (so caches must be kept).
    pub fn training(&self) -> bool {
        self.mode.backward()
    }

    pub fn mode(&self) -> RunMode {
        self.mode
    }

    pub fn params(&self) -> &ParamAccess<'a> {
        &self.shared.params
    }

    /// The node's key in `state`.
    pub fn key(&self, state: &[i64]) -> Key {
        key_of(&self.node.key, state)
    }

    pub fn instance(&self, state: &[i64]) -> Result<&'a (dyn ExecInstance + Sync), OpError> {
        let id = state.first().copied().unwrap_or(-1);
        // A `match`, not `ok_or`: that builds and drops an error at every evaluation.
        match usize::try_from(id).ok().and_then(|i| self.shared.instances.get(i).copied()) {
            Some(instance) => Ok(instance),
            None => Err(OpError::UnknownInstance { instance: id }),
        }
    }

    /// Evaluates a state expression on `state` and the message's instance.
    pub fn eval(&self, expr: &StateExpr, state: &[i64], what: &'static str) -> Result<i64, OpError> {
        let instance = self.instance(state)?;
        expr.eval(state, instance).ok_or_else(|| OpError::Eval { what, why: expr.eval_failure(state, instance) })
    }

    /// Evaluates a count (of elements, of rows); a negative one is an error, and so is one
    /// over `limits::MAX_COLLECTION_ELEMENTS` (a count read from hostile data would
    /// otherwise fan out messages until memory runs out).
    pub fn eval_count(&self, expr: &StateExpr, state: &[i64], what: &'static str) -> Result<usize, OpError> {
        let count = self.eval(expr, state, what)?;
        let limit = amp_ir::limits::MAX_COLLECTION_ELEMENTS;
        if u64::try_from(count).is_ok_and(|c| c > limit) {
            return Err(OpError::CountTooLarge { what, count, limit });
        }
        usize::try_from(count).map_err(|_| OpError::NegativeCount { what, count })
    }

    /// Evaluates an index and checks it against `len`.
    pub fn eval_index(
        &self,
        expr: &StateExpr,
        state: &[i64],
        what: &'static str,
        len: usize,
    ) -> Result<usize, OpError> {
        let index = self.eval(expr, state, what)?;
        match usize::try_from(index).ok().filter(|&i| i < len) {
            Some(i) => Ok(i),
            None => Err(OpError::OutOfRange { what, index, len }),
        }
    }

    /// A zero gradient for input port `port` (unit for a unit port).
    pub fn zero_input_grad(&self, port: usize, like: &Payload) -> Payload {
        match self.node.inputs.get(port) {
            Some(PayloadTy::Unit) | None => Payload::Unit,
            Some(_) => Payload::from_vec(vec![0.0; like.values().len()]),
        }
    }
}

/// The semantics of one op: what a node does with a forward message and with the
/// (summed) gradient of one of its outputs.
/// How a node takes the messages the worker has queued for it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Intake {
    /// One message at a time, through [`NodeOp::forward`] / [`NodeOp::backward`].
    One,
    /// The messages of one direction and port that stand together at the front of its
    /// queue, up to `max_batch`, through [`NodeOp::forward_batch`] /
    /// [`NodeOp::backward_batch`] (one alone through `forward`/`backward`): an op that
    /// writes a batch's results into one buffer (`Stacked`) for the next node to read in
    /// place. An error names the batch's first instance.
    Stacked,
    /// Up to `max_batch` messages of one direction and port from anywhere in its queue,
    /// always through the batch methods: an op whose work on several messages at once
    /// beats one by one (a matrix product with one row per message, a fused kernel).
    /// With `waits`, the worker holds its messages back until no other work is queued, so
    /// that batches grow (see `sched::agenda`): worth it where a batch is much cheaper per
    /// message than one message (a GEMM), not for elementwise kernels.
    Batches { waits: bool },
}

/// What a node does with a message. An op implements `forward`/`backward`, or the batch
/// pair, or both: each pair's defaults call the other, so an op that takes batches
/// implements only those.
pub(crate) trait NodeOp: Send {
    /// One forward message; by default a batch of one.
    fn forward(&mut self, cx: &mut NodeCx, port: u16, msg: Msg) -> Result<(), OpError> {
        self.forward_batch(cx, port, vec![msg])
    }
    /// One gradient; by default a batch of one.
    fn backward(&mut self, cx: &mut NodeCx, port: u16, grad: Msg) -> Result<(), OpError> {
        self.backward_batch(cx, port, vec![grad])
    }
    /// How the worker hands this op its messages, asked once when the worker starts.
    fn intake(&self) -> Intake {
        Intake::One
    }
    /// Several forward messages on one port, in queue order (dynamic batching). Each
    /// message's results, and what it caches, must be those of [`NodeOp::forward`] on it
    /// alone, emitted in the same order; the default does exactly that.
    fn forward_batch(&mut self, cx: &mut NodeCx, port: u16, msgs: Vec<Msg>) -> Result<(), OpError> {
        msgs.into_iter().try_for_each(|msg| self.forward(cx, port, msg))
    }
    /// Several (summed) gradients of one output port, in queue order; as `forward_batch`.
    fn backward_batch(&mut self, cx: &mut NodeCx, port: u16, grads: Vec<Msg>) -> Result<(), OpError> {
        grads.into_iter().try_for_each(|grad| self.backward(cx, port, grad))
    }
    /// Messages or activations held under keys (joins waiting, caches), for leak checks.
    fn held(&self) -> usize {
        0
    }
}

/// The results of several messages written one after the other into one buffer, then
/// handed out as each message's range of it (`Payload::pieces`), so that the next node
/// that takes those messages together reads their rows in place: what lets a batch
/// survive a node that runs its messages one by one (a split, the row ops).
pub(crate) struct Stacked {
    values: Vec<f32>,
    lens: Vec<usize>,
}

impl Stacked {
    /// Room for `values` values (all the messages' together), so that the buffer does
    /// not grow by copies.
    pub fn with_capacity(values: usize) -> Stacked {
        Stacked { values: Vec::with_capacity(values), lens: Vec::new() }
    }

    /// The next message's values: what `write` appends to the buffer.
    pub fn push(&mut self, write: impl FnOnce(&mut Vec<f32>)) {
        let before = self.values.len();
        write(&mut self.values);
        self.lens.push(self.values.len() - before);
    }

    /// One payload per message pushed, in order.
    pub fn payloads(self) -> std::vec::IntoIter<Payload> {
        Payload::pieces(self.values, &self.lens).into_iter()
    }
}

/// Values kept under keys until the backward pass (or a join) takes them.
pub(crate) struct Keyed<T> {
    map: KeyMap<Key, T>,
}

impl<T> Keyed<T> {
    pub fn new() -> Keyed<T> {
        Keyed { map: KeyMap::default() }
    }

    /// Keeps `value` under `key`; a live entry with the same key is a keying error.
    pub fn put(&mut self, key: Key, value: T) -> Result<(), OpError> {
        match self.map.entry(key) {
            std::collections::hash_map::Entry::Occupied(e) => Err(OpError::DuplicateKey { key: e.key().to_vec() }),
            std::collections::hash_map::Entry::Vacant(e) => {
                e.insert(value);
                Ok(())
            }
        }
    }

    pub fn take(&mut self, key: &Key) -> Result<T, OpError> {
        self.map.remove(key).ok_or_else(|| OpError::MissingCache { key: key.to_vec() })
    }

    /// The live entry under `key`, left in place.
    pub fn get_mut(&mut self, key: &Key) -> Result<&mut T, OpError> {
        self.map.get_mut(key).ok_or_else(|| OpError::MissingCache { key: key.to_vec() })
    }

    pub fn len(&self) -> usize {
        self.map.len()
    }
}

/// Gathers one message per port under a key; yields them all, in port order, with the
/// key, once the last arrived. Inputs arrive in any order.
pub(crate) struct Join {
    arity: usize,
    pending: KeyMap<Key, (Vec<Option<Msg>>, usize)>,
}

impl Join {
    pub fn new(arity: usize) -> Join {
        Join { arity, pending: KeyMap::default() }
    }

    /// Offers each message under its key; the keys they complete, in order.
    pub fn complete(&mut self, cx: &NodeCx, port: u16, msgs: Vec<Msg>) -> Result<Vec<(Key, Vec<Msg>)>, OpError> {
        let mut ready = Vec::new();
        for msg in msgs {
            let key = cx.key(&msg.state);
            if let Some(done) = self.offer(key, usize::from(port), msg)? {
                ready.push(done);
            }
        }
        Ok(ready)
    }

    pub fn offer(&mut self, key: Key, port: usize, msg: Msg) -> Result<Option<(Key, Vec<Msg>)>, OpError> {
        if self.arity <= 1 {
            return Ok(Some((key, vec![msg])));
        }
        if port >= self.arity {
            return Err(OpError::OutOfRange { what: "port", index: port as i64, len: self.arity });
        }
        // The key moves into the map (no copy of it per message).
        let mut entry = match self.pending.entry(key) {
            std::collections::hash_map::Entry::Occupied(e) => e,
            std::collections::hash_map::Entry::Vacant(e) => {
                let mut slots = vec![None; self.arity];
                slots[port] = Some(msg);
                e.insert((slots, 1));
                return Ok(None);
            }
        };
        let (slots, arrived) = entry.get_mut();
        if slots[port].is_some() {
            return Err(OpError::DuplicateKey { key: entry.key().to_vec() });
        }
        slots[port] = Some(msg);
        *arrived += 1;
        if *arrived < self.arity {
            return Ok(None);
        }
        let (key, (msgs, _)) = entry.remove_entry();
        Ok(Some((key, msgs.into_iter().flatten().collect())))
    }

    pub fn len(&self) -> usize {
        self.pending.len()
    }
}

/// Writes `value` into field `field` of `state` and returns the old value.
pub(crate) fn set_field(state: &mut [i64], field: usize, value: i64) -> Result<i64, OpError> {
    match state.get_mut(field) {
        Some(slot) => Ok(std::mem::replace(slot, value)),
        None => Err(OpError::OutOfRange { what: "state field", index: field as i64, len: state.len() }),
    }
}

/// The op of a node.
pub(crate) fn build(node: &NodeInfo, access: &ParamAccess) -> Result<Box<dyn NodeOp>, OpError> {
    // New ops land in amp-ir before the executor runs them: report them rather than fail
    // to build, hence the catch-all arm.
    let op = match &node.op {
        ExecOp::Ir(op) => op,
        ExecOp::Fused(group) => return Ok(Box::new(fused::FusedOp::new(Arc::clone(group)))),
        ExecOp::Chain(spec) => {
            let ops = spec.members.iter().map(|m| build(m, access)).collect::<Result<_, _>>()?;
            return Ok(Box::new(chain::ChainOp::new(Arc::clone(spec), ops)));
        }
    };
    #[allow(unreachable_patterns)]
    Ok(match op {
        Op::Source => Box::new(data::SourceOp),
        Op::Read { path } => Box::new(data::ReadOp::new(path.clone(), node)),
        Op::Const { value } => Box::new(data::ConstOp::new(*value, node)),
        Op::Forget => Box::new(data::ForgetOp::new(node)),
        Op::Sink { .. } => Box::new(data::SinkOp),
        Op::Linear { .. } => Box::new(ppt::LinearOp::new(node, access)?),
        Op::Embedding { index, .. } => Box::new(ppt::EmbeddingOp::new(node, index.clone(), access)?),
        Op::EmbeddingRows { field, index, count, .. } => {
            Box::new(ppt::EmbeddingRowsOp::new(node, *field, index.clone(), count.clone(), access)?)
        }
        Op::Affine { .. } => Box::new(ppt::AffineOp::new(node)?),
        Op::Unary(f) => Box::new(nppt::UnaryOp::new(*f, node)),
        Op::Binary(f) => Box::new(nppt::BinaryOp::new(*f, node)),
        Op::Concat => Box::new(shape::ConcatOp::new(node)),
        Op::Split { parts } => Box::new(shape::SplitOp::new(*parts as usize, node)),
        Op::Cond { pred } => Box::new(route::CondOp::new(route::Choice::Pred(pred.clone()))),
        Op::Switch { index, arms } => Box::new(route::CondOp::new(route::Choice::Index(index.clone(), *arms as usize))),
        Op::Phi { arms } => Box::new(route::PhiOp::new(*arms as usize)),
        Op::Isu { field, value, inverse } => {
            Box::new(route::IsuOp::new(*field, value.clone(), inverse.clone(), node.trip_limit))
        }
        Op::Loss(kind) => Box::new(loss::LossOp::new(kind.clone(), node)),
        Op::Flatmap { field, count } => Box::new(elements::FlatmapOp::new(*field, count.clone())),
        Op::Group { field, count } => Box::new(elements::GroupOp::new(*field, count.clone(), node)),
        Op::Ungroup { field } => Box::new(elements::UngroupOp::new(*field, node)),
        Op::Gather { index } => Box::new(rows::GatherOp::new(index.clone(), node)),
        Op::ScatterSum { field, index, count } => {
            Box::new(rows::ScatterSumOp::new(*field, index.clone(), count.clone(), node))
        }
        Op::GatherRows { field, index, count } => {
            Box::new(rows::GatherRowsOp::new(*field, index.clone(), count.clone(), node))
        }
        Op::MaskRows { field, pred } => Box::new(rows::MaskRowsOp::new(*field, pred.clone(), node)),
        Op::PartitionRows { field, index, arms } => {
            Box::new(rows::PartitionRowsOp::new(*field, index.clone(), *arms as usize, node))
        }
        Op::MergeRows { field, index, arms } => {
            Box::new(rows::MergeRowsOp::new(*field, index.clone(), *arms as usize, node))
        }
        Op::Reduce(f) => Box::new(rows::ReduceOp::new(*f, node)),
        Op::TopK { k } => Box::new(select::TopKOp::new(*k as usize, node)),
        Op::StateFromPayload { field, int } => Box::new(select::StateFromPayloadOp::new(*field, int.clone(), node)),
        Op::Dropout { rate, site, context } => Box::new(dropout::DropoutOp::new(*rate, *site, context.clone())),
        other => return Err(OpError::Unsupported { op: other.keyword() }),
    })
}

/// Elements per row of a port's type (the whole tensor for `f32[..]`, one row for a
/// batch), and whether its row count is dynamic.
pub(crate) fn row_elements(ty: &PayloadTy) -> (usize, bool) {
    match ty {
        PayloadTy::Unit => (0, false),
        PayloadTy::F32(dims) => (dims.iter().product::<u64>() as usize, false),
        PayloadTy::Batch(dims) => (dims.iter().product::<u64>() as usize, true),
    }
}

/// Whether a payload fits a port's type.
pub(crate) fn payload_fits(ty: &PayloadTy, payload: &Payload) -> Result<(), OpError> {
    let (row, dynamic) = row_elements(ty);
    match (ty, payload) {
        (PayloadTy::Unit, Payload::Unit) => Ok(()),
        (PayloadTy::Unit, p) => Err(OpError::PayloadSize { expected: 0, found: p.values().len() }),
        (_, Payload::Unit) => Err(OpError::PayloadSize { expected: row, found: 0 }),
        (_, Payload::F32(v)) => {
            let fits =
                if dynamic { (row == 0 && v.is_empty()) || (row > 0 && v.len() % row == 0) } else { v.len() == row };
            if fits {
                Ok(())
            } else {
                Err(OpError::PayloadSize { expected: row, found: v.len() })
            }
        }
    }
}
