//! Where messages come from and go: `source`, `read` (instance data), `const`, `forget`
//! (drops a payload, keeping the control) and `sink` (the inference output).

use super::{Emit, Intake, NodeCx, NodeOp, Stacked};
use crate::error::OpError;
use crate::load::program::NodeInfo;
use crate::message::{KeyMap, Msg, Payload};
use amp_ir::{resolve_path, ConstValue, DataStep, PayloadTy};

/// Emits the admitted instance's control message; its backward messages only count (the
/// run tracks when an instance is finished).
pub(crate) struct SourceOp;

impl NodeOp for SourceOp {
    fn forward(&mut self, cx: &mut NodeCx, _port: u16, msg: Msg) -> Result<(), OpError> {
        cx.forward(0, msg.with_payload(Payload::Unit));
        Ok(())
    }

    fn backward(&mut self, _cx: &mut NodeCx, _port: u16, _grad: Msg) -> Result<(), OpError> {
        Ok(())
    }
}

/// Loads an f32 leaf of the instance.
pub(crate) struct ReadOp {
    path: Vec<DataStep>,
    elements: usize,
}

impl ReadOp {
    pub fn new(path: Vec<DataStep>, node: &NodeInfo) -> ReadOp {
        let elements = node.outputs.first().map_or(0, |t| t.elements() as usize);
        ReadOp { path, elements }
    }

    fn describe(&self) -> String {
        let mut text = String::from("$");
        for step in &self.path {
            match step {
                DataStep::Field(name) => {
                    text.push('.');
                    text.push_str(name);
                }
                DataStep::Index(_) => text.push_str("[..]"),
                DataStep::Variant(k) => text.push_str(&format!("{{{k}}}")),
            }
        }
        text
    }

    /// The leaf that `msg`'s instance holds.
    fn leaf<'a>(&self, cx: &NodeCx<'_, 'a>, msg: &Msg) -> Result<&'a [f32], OpError> {
        let instance = cx.instance(&msg.state)?;
        let missing = || OpError::MissingData { path: self.describe() };
        let path = resolve_path(&self.path, &msg.state, instance).ok_or_else(missing)?;
        let values = instance.f32_at(&path).ok_or_else(missing)?;
        if values.len() != self.elements {
            return Err(OpError::PayloadSize { expected: self.elements, found: values.len() });
        }
        Ok(values)
    }
}

impl NodeOp for ReadOp {
    fn forward(&mut self, cx: &mut NodeCx, _port: u16, msg: Msg) -> Result<(), OpError> {
        let values = self.leaf(cx, &msg)?.to_vec();
        cx.forward(0, msg.with_payload(Payload::from_vec(values)));
        Ok(())
    }

    /// A read feeds a Linear layer or an expert's router (the MLP's pixels, MoE's `x`):
    /// its messages' rows written into one buffer are read in place by the next batch
    /// instead of being stacked again there.
    fn intake(&self) -> Intake {
        Intake::Stacked
    }

    fn forward_batch(&mut self, cx: &mut NodeCx, _port: u16, msgs: Vec<Msg>) -> Result<(), OpError> {
        // Every instance's leaf found first, then copied: the instances' data are apart in
        // memory and mostly out of the cache, and walks that do not wait on copies overlap.
        let leaves = msgs.iter().map(|msg| self.leaf(cx, msg)).collect::<Result<Vec<_>, _>>()?;
        let mut rows = Stacked::with_capacity(msgs.len() * self.elements);
        for leaf in leaves {
            rows.push(|values| values.extend_from_slice(leaf));
        }
        let mut rows = rows.payloads();
        for msg in msgs {
            cx.forward(0, msg.with_payload(rows.next().unwrap_or(Payload::Unit)));
        }
        Ok(())
    }

    fn backward(&mut self, cx: &mut NodeCx, _port: u16, grad: Msg) -> Result<(), OpError> {
        cx.backward(0, grad.with_payload(Payload::Unit));
        Ok(())
    }
}

/// Fills its output shape with a constant.
pub(crate) struct ConstOp {
    value: f32,
    elements: usize,
}

impl ConstOp {
    pub fn new(value: ConstValue, node: &NodeInfo) -> ConstOp {
        let value = match value {
            ConstValue::Zeros => 0.0,
            ConstValue::Ones => 1.0,
            ConstValue::Scalar(v) => v,
        };
        ConstOp { value, elements: node.outputs.first().map_or(0, |t| t.elements() as usize) }
    }
}

impl NodeOp for ConstOp {
    fn forward(&mut self, cx: &mut NodeCx, _port: u16, msg: Msg) -> Result<(), OpError> {
        cx.forward(0, msg.with_payload(Payload::from_vec(vec![self.value; self.elements])));
        Ok(())
    }

    fn backward(&mut self, cx: &mut NodeCx, _port: u16, grad: Msg) -> Result<(), OpError> {
        cx.backward(0, grad.with_payload(Payload::Unit));
        Ok(())
    }
}

/// Drops the payload; backward, a zero gradient of the input's type. A batch's row count
/// is known only at run time: training remembers it under the message's whole state (a
/// forget has no key; the whole state tells apart at least what a key would).
pub(crate) struct ForgetOp {
    input: ForgetInput,
    rows: KeyMap<Box<[i64]>, usize>,
}

enum ForgetInput {
    Unit,
    Tensor(usize),
    Batch(usize),
}

impl ForgetOp {
    pub fn new(node: &NodeInfo) -> ForgetOp {
        let input = match node.inputs.first() {
            Some(PayloadTy::F32(dims)) => ForgetInput::Tensor(dims.iter().product::<u64>() as usize),
            Some(PayloadTy::Batch(dims)) => ForgetInput::Batch(dims.iter().product::<u64>() as usize),
            _ => ForgetInput::Unit,
        };
        ForgetOp { input, rows: KeyMap::default() }
    }
}

impl NodeOp for ForgetOp {
    fn forward(&mut self, cx: &mut NodeCx, _port: u16, msg: Msg) -> Result<(), OpError> {
        if let (ForgetInput::Batch(row), true) = (&self.input, cx.training()) {
            let rows = msg.payload.values().len().checked_div(*row).unwrap_or(0);
            if self.rows.insert(msg.state.clone(), rows).is_some() {
                return Err(OpError::DuplicateKey { key: msg.state.to_vec() });
            }
        }
        cx.forward(0, msg.with_payload(Payload::Unit));
        Ok(())
    }

    fn backward(&mut self, cx: &mut NodeCx, _port: u16, grad: Msg) -> Result<(), OpError> {
        let payload = match self.input {
            ForgetInput::Unit => Payload::Unit,
            ForgetInput::Tensor(n) => Payload::from_vec(vec![0.0; n]),
            ForgetInput::Batch(row) => {
                let missing = || OpError::MissingCache { key: grad.state.to_vec() };
                let rows = self.rows.remove(&grad.state).ok_or_else(missing)?;
                Payload::from_vec(vec![0.0; rows * row])
            }
        };
        cx.backward(0, grad.with_payload(payload));
        Ok(())
    }

    fn held(&self) -> usize {
        self.rows.len()
    }
}

/// The inference output leaves the graph; training sends back a zero gradient at once.
pub(crate) struct SinkOp;

impl NodeOp for SinkOp {
    fn forward(&mut self, cx: &mut NodeCx, _port: u16, msg: Msg) -> Result<(), OpError> {
        // A sink reaches no loss: in training the worker answers its producer with a zero
        // gradient, as for every forward-only node.
        if cx.mode() == super::RunMode::Infer {
            cx.out.push(Emit::Output { instance: msg.instance(), values: msg.payload.values().to_vec() });
        }
        Ok(())
    }

    fn backward(&mut self, _cx: &mut NodeCx, _port: u16, _grad: Msg) -> Result<(), OpError> {
        Ok(())
    }
}
