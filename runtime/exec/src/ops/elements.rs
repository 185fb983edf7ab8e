//! Element contexts: `flatmap` opens one (a message per element, `%e` = 0..COUNT),
//! `ungroup` opens one from the rows of a batch, `group` closes one into a batch. Each
//! counts the messages of one context under the node's key, which is the enclosing
//! context's (it excludes `%e`): the flatmap and the ungroup collect their elements'
//! gradients, the group its elements and its gate.

use super::{row_elements, set_field, Keyed, NodeCx, NodeOp};
use crate::error::OpError;
use crate::load::program::NodeInfo;
use crate::message::{Key, KeyMap, Msg, Payload, UNSET};
use amp_ir::{FieldId, StateExpr};

/// The key of an element message: the node's key of its state with `%e` unset, which is
/// what the enclosing context's messages carry.
fn context_key(cx: &NodeCx, state: &[i64], field: usize) -> Result<(Key, i64), OpError> {
    let mut outer = state.to_vec();
    let element = set_field(&mut outer, field, UNSET)?;
    Ok((cx.key(&outer), element))
}

/// `acc += x`, where `acc` starts as the first gradient (copied only when shared).
fn accumulate(acc: &mut Option<Vec<f32>>, x: Payload) {
    match acc {
        None => *acc = Some(x.into_vec()),
        Some(sum) => sum.iter_mut().zip(x.values()).for_each(|(s, v)| *s += v),
    }
}

/// Gradients of one context's elements being summed.
struct GradSum {
    expected: usize,
    received: usize,
    /// `None` until the first f32 gradient (and for unit payloads, which carry none).
    sum: Option<Vec<f32>>,
}

/// `flatmap %e [COUNT]`: COUNT copies of the message (the payload shared) with `%e` =
/// 0..COUNT; backward, the sum of their gradients with `%e` unset again.
pub(crate) struct FlatmapOp {
    field: usize,
    count: StateExpr,
    pending: Keyed<GradSum>,
}

impl FlatmapOp {
    pub fn new(field: FieldId, count: StateExpr) -> FlatmapOp {
        FlatmapOp { field: usize::from(field.0), count, pending: Keyed::new() }
    }
}

impl NodeOp for FlatmapOp {
    fn forward(&mut self, cx: &mut NodeCx, _port: u16, msg: Msg) -> Result<(), OpError> {
        let count = cx.eval_count(&self.count, &msg.state, "element count")?;
        if count == 0 {
            // No element will ever answer: the (zero) gradient goes back at once.
            if cx.training() {
                let zero = cx.zero_input_grad(0, &msg.payload);
                cx.backward(0, msg.with_payload(zero));
            }
            return Ok(());
        }
        if cx.training() {
            let (key, _) = context_key(cx, &msg.state, self.field)?;
            self.pending.put(key, GradSum { expected: count, received: 0, sum: None })?;
        }
        for e in 0..count {
            let mut state = msg.state.clone();
            set_field(&mut state, self.field, e as i64)?;
            cx.forward(0, Msg::new(msg.payload.clone(), state));
        }
        Ok(())
    }

    fn backward(&mut self, cx: &mut NodeCx, _port: u16, grad: Msg) -> Result<(), OpError> {
        let Msg { payload, mut state } = grad;
        set_field(&mut state, self.field, UNSET)?;
        let key = cx.key(&state);
        let entry = self.pending.get_mut(&key)?;
        if !payload.is_unit() {
            accumulate(&mut entry.sum, payload);
        }
        entry.received += 1;
        if entry.received < entry.expected {
            return Ok(());
        }
        let done = self.pending.take(&key)?;
        let payload = done.sum.map_or(Payload::Unit, Payload::from_vec);
        cx.backward(0, Msg::new(payload, state));
        Ok(())
    }

    fn held(&self) -> usize {
        self.pending.len()
    }
}

/// The element messages of one context and its gate, until all arrived.
#[derive(Default)]
struct Gathering {
    /// The gate's state and the count evaluated on it.
    gate: Option<(Box<[i64]>, usize)>,
    elements: KeyMap<usize, Msg>,
}

/// `group %e [COUNT]`: joins the gate (port 1) and the COUNT element messages (port 0)
/// of one context into a batch ordered by `%e`, with the gate's state. Training caches
/// the elements' states, so that each row's gradient goes back with its own.
pub(crate) struct GroupOp {
    field: usize,
    count: StateExpr,
    row: usize,
    gathering: KeyMap<Key, Gathering>,
    states: Keyed<Vec<Box<[i64]>>>,
}

impl GroupOp {
    pub fn new(field: FieldId, count: StateExpr, node: &NodeInfo) -> GroupOp {
        let row = node.inputs.first().map_or(0, |t| row_elements(t).0);
        GroupOp { field: usize::from(field.0), count, row, gathering: KeyMap::default(), states: Keyed::new() }
    }

    /// Emits the batch once the gate and every element are in.
    fn fire_if_complete(&mut self, cx: &mut NodeCx, key: Key) -> Result<(), OpError> {
        let complete = self
            .gathering
            .get(&key)
            .is_some_and(|g| g.gate.as_ref().is_some_and(|(_, count)| g.elements.len() == *count));
        if !complete {
            return Ok(());
        }
        let Some(Gathering { gate: Some((mut state, count)), mut elements }) = self.gathering.remove(&key) else {
            return Ok(());
        };
        let mut values = Vec::with_capacity(count * self.row);
        let mut states = Vec::with_capacity(if cx.training() { count } else { 0 });
        for e in 0..count {
            let msg = elements.remove(&e).ok_or(OpError::OutOfRange {
                what: "group element",
                index: e as i64,
                len: count,
            })?;
            values.extend_from_slice(msg.payload.values());
            if cx.training() {
                states.push(msg.state);
            }
        }
        set_field(&mut state, self.field, UNSET)?;
        if cx.training() {
            self.states.put(cx.key(&state), states)?;
        }
        cx.forward(0, Msg::new(Payload::from_vec(values), state));
        Ok(())
    }
}

impl NodeOp for GroupOp {
    fn forward(&mut self, cx: &mut NodeCx, port: u16, msg: Msg) -> Result<(), OpError> {
        let (key, element) = context_key(cx, &msg.state, self.field)?;
        if port == 1 {
            let count = cx.eval_count(&self.count, &msg.state, "element count")?;
            let gathering = self.gathering.entry(key.clone()).or_default();
            if gathering.gate.is_some() {
                return Err(OpError::DuplicateKey { key: key.to_vec() });
            }
            if let Some(&e) = gathering.elements.keys().find(|&&e| e >= count) {
                return Err(OpError::OutOfRange { what: "group element", index: e as i64, len: count });
            }
            gathering.gate = Some((msg.state, count));
        } else {
            let gathering = self.gathering.entry(key.clone()).or_default();
            let bound = gathering.gate.as_ref().map_or(usize::MAX, |(_, count)| *count);
            let index = usize::try_from(element).ok().filter(|&e| e < bound).ok_or(OpError::OutOfRange {
                what: "group element",
                index: element,
                len: bound,
            })?;
            if gathering.elements.insert(index, msg).is_some() {
                return Err(OpError::DuplicateElement { index: element });
            }
        }
        self.fire_if_complete(cx, key)
    }

    fn backward(&mut self, cx: &mut NodeCx, _port: u16, grad: Msg) -> Result<(), OpError> {
        let states = self.states.take(&cx.key(&grad.state))?;
        let dy = grad.payload.values();
        if dy.len() != states.len() * self.row {
            return Err(OpError::PayloadSize { expected: states.len() * self.row, found: dy.len() });
        }
        for (e, state) in states.into_iter().enumerate() {
            let row = dy[e * self.row..(e + 1) * self.row].to_vec();
            cx.backward(0, Msg::new(Payload::from_vec(row), state));
        }
        cx.backward(1, grad.with_payload(Payload::Unit));
        Ok(())
    }

    fn held(&self) -> usize {
        self.gathering.len() + self.states.len()
    }
}

/// Row gradients of one batch being stacked.
struct RowGrads {
    rows: usize,
    received: usize,
    seen: Vec<bool>,
    grads: Vec<f32>,
}

/// `ungroup %e`: one message per row of a batch, `%e` = the row; backward, the rows'
/// gradients stacked into one batch gradient with `%e` unset again.
pub(crate) struct UngroupOp {
    field: usize,
    row: usize,
    pending: Keyed<RowGrads>,
}

impl UngroupOp {
    pub fn new(field: FieldId, node: &NodeInfo) -> UngroupOp {
        let row = node.outputs.first().map_or(0, |t| row_elements(t).0);
        UngroupOp { field: usize::from(field.0), row, pending: Keyed::new() }
    }
}

impl NodeOp for UngroupOp {
    fn forward(&mut self, cx: &mut NodeCx, _port: u16, msg: Msg) -> Result<(), OpError> {
        let x = msg.payload.values();
        let rows = x.len().checked_div(self.row).unwrap_or(0);
        if rows == 0 {
            if cx.training() {
                cx.backward(0, msg.with_payload(Payload::from_vec(Vec::new())));
            }
            return Ok(());
        }
        if cx.training() {
            let (key, _) = context_key(cx, &msg.state, self.field)?;
            let grads = RowGrads { rows, received: 0, seen: vec![false; rows], grads: vec![0.0; x.len()] };
            self.pending.put(key, grads)?;
        }
        for (r, values) in x.chunks_exact(self.row).enumerate() {
            let mut state = msg.state.clone();
            set_field(&mut state, self.field, r as i64)?;
            cx.forward(0, Msg::new(Payload::from_vec(values.to_vec()), state));
        }
        Ok(())
    }

    fn backward(&mut self, cx: &mut NodeCx, _port: u16, grad: Msg) -> Result<(), OpError> {
        let Msg { payload, mut state } = grad;
        let element = set_field(&mut state, self.field, UNSET)?;
        let key = cx.key(&state);
        let entry = self.pending.get_mut(&key)?;
        let r = usize::try_from(element).ok().filter(|&r| r < entry.rows).ok_or(OpError::OutOfRange {
            what: "ungroup row",
            index: element,
            len: entry.rows,
        })?;
        if std::mem::replace(&mut entry.seen[r], true) {
            return Err(OpError::DuplicateElement { index: element });
        }
        entry.grads[r * self.row..(r + 1) * self.row].copy_from_slice(payload.values());
        entry.received += 1;
        if entry.received < entry.rows {
            return Ok(());
        }
        let done = self.pending.take(&key)?;
        cx.backward(0, Msg::new(Payload::from_vec(done.grads), state));
        Ok(())
    }

    fn held(&self) -> usize {
        self.pending.len()
    }
}
