//! What a node takes from its queue in one step of the worker: a [`Batch`] (see the
//! worker's module documentation for which messages go together).

use crate::message::{Dir, Envelope, Msg};
use crate::ops::Intake;
use std::collections::VecDeque;

/// Messages a node takes at once: one direction, in queue order, and one port unless the
/// node takes its messages one by one (`Intake::One`).
pub(super) struct Batch {
    pub node: u32,
    pub dir: Dir,
    pub port: u16,
    pub msgs: Vec<Msg>,
    /// The port of each message, where they are not all on `port`; empty where they are.
    pub ports: Vec<u16>,
}

impl Batch {
    /// The front message `first` of `node`'s queue with the messages a node of `intake`
    /// takes with it from `queue`, up to `limit` in all, into `msgs` and `ports` (empty
    /// vectors, kept from an earlier batch for their allocations).
    pub fn behind(
        (node, first): (u32, Envelope),
        queue: &mut VecDeque<Envelope>,
        intake: Intake,
        limit: usize,
        mut msgs: Vec<Msg>,
        mut ports: Vec<u16>,
    ) -> Batch {
        let (dir, port) = (first.dir, first.port);
        msgs.push(first.msg);
        match intake {
            // A kernel call over more rows: its lane from anywhere in the queue (a fused
            // backward's two ports' gradients often arrive interleaved).
            Intake::Batches { .. } => take_lane(queue, dir, port, limit, &mut msgs),
            Intake::Stacked => {
                while msgs.len() < limit && queue.front().is_some_and(|e| e.dir == dir && e.port == port) {
                    if let Some(env) = queue.pop_front() {
                        msgs.push(env.msg);
                    }
                }
            }
            // Whatever their ports: the gradients of a routing chain's exits arrive
            // interleaved (a tree's left and right children), and with one port a step
            // Tree-LSTM's chains took a worker step for nearly every gradient.
            Intake::One => {
                while msgs.len() < limit && queue.front().is_some_and(|e| e.dir == dir) {
                    let Some(env) = queue.pop_front() else { break };
                    if env.port != port && ports.is_empty() {
                        ports.resize(msgs.len(), port);
                    }
                    if !ports.is_empty() {
                        ports.push(env.port);
                    }
                    msgs.push(env.msg);
                }
            }
        }
        Batch { node, dir, port, msgs, ports }
    }

    /// The port of message `i`.
    pub fn port_of(&self, i: usize) -> u16 {
        self.ports.get(i).copied().unwrap_or(self.port)
    }
}

/// The rows of a message on a port of type `ty`: a batched payload's (`f32[?, d]`: its
/// values over a row's), one for any other message.
pub(super) fn rows_of(ty: Option<&amp_ir::PayloadTy>, msg: &Msg) -> usize {
    match ty.map(crate::ops::row_elements) {
        Some((width, true)) => msg.payload.values().len() / width.max(1),
        _ => 1,
    }
}

/// Moves up to `limit` messages of direction `dir` on `port` from `queue` to `msgs`, in
/// queue order, keeping the others in theirs.
pub(super) fn take_lane(queue: &mut VecDeque<Envelope>, dir: Dir, port: u16, limit: usize, msgs: &mut Vec<Msg>) {
    let in_lane = |e: &Envelope| e.dir == dir && e.port == port;
    // Mostly the lane is the whole queue, or its front.
    while msgs.len() < limit && queue.front().is_some_and(in_lane) {
        if let Some(env) = queue.pop_front() {
            msgs.push(env.msg);
        }
    }
    if msgs.len() >= limit || !queue.iter().any(in_lane) {
        return;
    }
    let mut kept = VecDeque::with_capacity(queue.len());
    for env in queue.drain(..) {
        if msgs.len() < limit && in_lane(&env) {
            msgs.push(env.msg);
        } else {
            kept.push_back(env);
        }
    }
    *queue = kept;
}
