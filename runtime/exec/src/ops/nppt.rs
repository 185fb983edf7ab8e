//! Non-parameterized payload transforms: elementwise `unary` functions (and the row-wise
//! softmaxes) and `binary` arithmetic with scalar broadcast, which joins its two inputs.

use super::{Join, Keyed, NodeCx, NodeOp};
use crate::error::OpError;
use crate::kernels;
use crate::message::{Msg, Payload};
use crate::program::NodeInfo;
use amp_ir::{BinaryFn, PayloadTy, UnaryFn};

/// `f(x)`, caching input and output (shared, not copied) for the backward.
pub(crate) struct UnaryOp {
    f: UnaryFn,
    /// Width of a row for the softmaxes (the last dimension).
    width: usize,
    cache: Keyed<(Payload, Payload)>,
}

impl UnaryOp {
    pub fn new(f: UnaryFn, node: &NodeInfo) -> UnaryOp {
        let width = match node.inputs.first() {
            Some(PayloadTy::F32(dims) | PayloadTy::Batch(dims)) => dims.last().copied().unwrap_or(1) as usize,
            _ => 1,
        };
        UnaryOp { f, width, cache: Keyed::new() }
    }

    fn apply(&self, x: &[f32]) -> Vec<f32> {
        match self.f {
            // As PyTorch: NaN stays NaN (so a bad value reaches the loss and is reported).
            UnaryFn::Relu => x.iter().map(|&v| if v < 0.0 { 0.0 } else { v }).collect(),
            UnaryFn::Sigmoid => x.iter().map(|&v| 1.0 / (1.0 + (-v).exp())).collect(),
            UnaryFn::Tanh => x.iter().map(|v| v.tanh()).collect(),
            UnaryFn::Exp => x.iter().map(|v| v.exp()).collect(),
            UnaryFn::Log => x.iter().map(|v| v.ln()).collect(),
            UnaryFn::Neg => x.iter().map(|v| -v).collect(),
            UnaryFn::Softmax => kernels::softmax_rows(x, self.width),
            UnaryFn::LogSoftmax => kernels::log_softmax_rows(x, self.width),
        }
    }

    fn gradient(&self, x: &[f32], y: &[f32], dy: &[f32]) -> Vec<f32> {
        let each = |f: &dyn Fn(f32, f32, f32) -> f32| -> Vec<f32> {
            x.iter().zip(y).zip(dy).map(|((&x, &y), &g)| f(x, y, g)).collect()
        };
        match self.f {
            UnaryFn::Relu => each(&|x, _, g| if x > 0.0 { g } else { 0.0 }),
            UnaryFn::Sigmoid => each(&|_, y, g| g * y * (1.0 - y)),
            UnaryFn::Tanh => each(&|_, y, g| g * (1.0 - y * y)),
            UnaryFn::Exp => each(&|_, y, g| g * y),
            UnaryFn::Log => each(&|x, _, g| g / x),
            UnaryFn::Neg => each(&|_, _, g| -g),
            UnaryFn::Softmax => {
                // dx = y * (dy - <dy, y>) per row.
                let mut dx = Vec::with_capacity(y.len());
                for (yr, gr) in y.chunks(self.width.max(1)).zip(dy.chunks(self.width.max(1))) {
                    let inner = kernels::dot(yr, gr);
                    dx.extend(yr.iter().zip(gr).map(|(y, g)| y * (g - inner)));
                }
                dx
            }
            UnaryFn::LogSoftmax => {
                // dx = dy - softmax(x) * sum(dy) per row, softmax(x) = exp(y).
                let mut dx = Vec::with_capacity(y.len());
                for (yr, gr) in y.chunks(self.width.max(1)).zip(dy.chunks(self.width.max(1))) {
                    let total: f32 = gr.iter().sum();
                    dx.extend(yr.iter().zip(gr).map(|(y, g)| g - y.exp() * total));
                }
                dx
            }
        }
    }
}

impl NodeOp for UnaryOp {
    fn forward(&mut self, cx: &mut NodeCx, _port: u16, msg: Msg) -> Result<(), OpError> {
        let y = Payload::from_vec(self.apply(msg.payload.values()));
        if cx.training() {
            self.cache.put(cx.key(&msg.state), (msg.payload.clone(), y.clone()))?;
        }
        cx.forward(0, msg.with_payload(y));
        Ok(())
    }

    fn backward(&mut self, cx: &mut NodeCx, _port: u16, grad: Msg) -> Result<(), OpError> {
        let (x, y) = self.cache.take(&cx.key(&grad.state))?;
        if x.values().len() != grad.payload.values().len() {
            return Err(OpError::PayloadSize { expected: x.values().len(), found: grad.payload.values().len() });
        }
        let dx = self.gradient(x.values(), y.values(), grad.payload.values());
        cx.backward(0, grad.with_payload(Payload::from_vec(dx)));
        Ok(())
    }

    fn held(&self) -> usize {
        self.cache.len()
    }
}

/// Which operand, if any, is a scalar broadcast over the other.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Broadcast {
    None,
    Lhs,
    Rhs,
}

/// `a op b`, joining the two inputs by key; caches both for the backward.
pub(crate) struct BinaryOp {
    f: BinaryFn,
    broadcast: Broadcast,
    join: Join,
    cache: Keyed<(Payload, Payload)>,
}

impl BinaryOp {
    pub fn new(f: BinaryFn, node: &NodeInfo) -> BinaryOp {
        let scalar = PayloadTy::F32(Vec::new());
        let broadcast = match (node.inputs.first(), node.inputs.get(1)) {
            (Some(a), Some(b)) if a == b => Broadcast::None,
            (_, Some(b)) if *b == scalar => Broadcast::Rhs,
            (Some(a), _) if *a == scalar => Broadcast::Lhs,
            _ => Broadcast::None,
        };
        BinaryOp { f, broadcast, join: Join::new(2), cache: Keyed::new() }
    }

    /// The operands as two equally long iterations (a scalar repeated).
    fn pairs<'v>(&self, a: &'v [f32], b: &'v [f32]) -> Box<dyn Iterator<Item = (f32, f32)> + 'v> {
        match self.broadcast {
            Broadcast::Lhs => {
                let s = a.first().copied().unwrap_or(0.0);
                Box::new(b.iter().map(move |&y| (s, y)))
            }
            Broadcast::Rhs => {
                let s = b.first().copied().unwrap_or(0.0);
                Box::new(a.iter().map(move |&x| (x, s)))
            }
            Broadcast::None => Box::new(a.iter().copied().zip(b.iter().copied())),
        }
    }
}

impl NodeOp for BinaryOp {
    fn forward(&mut self, cx: &mut NodeCx, port: u16, msg: Msg) -> Result<(), OpError> {
        let key = cx.key(&msg.state);
        let Some(mut both) = self.join.offer(key.clone(), usize::from(port), msg)? else { return Ok(()) };
        let (Some(b), Some(a)) = (both.pop(), both.pop()) else { return Ok(()) };
        if self.broadcast == Broadcast::None && a.payload.values().len() != b.payload.values().len() {
            return Err(OpError::PayloadSize { expected: a.payload.values().len(), found: b.payload.values().len() });
        }
        let f = self.f;
        let y: Vec<f32> = self
            .pairs(a.payload.values(), b.payload.values())
            .map(|(x, y)| match f {
                BinaryFn::Add => x + y,
                BinaryFn::Sub => x - y,
                BinaryFn::Mul => x * y,
                BinaryFn::Div => x / y,
            })
            .collect();
        if cx.training() {
            self.cache.put(key, (a.payload.clone(), b.payload.clone()))?;
        }
        cx.forward(0, a.with_payload(Payload::from_vec(y)));
        Ok(())
    }

    fn backward(&mut self, cx: &mut NodeCx, _port: u16, grad: Msg) -> Result<(), OpError> {
        let (a, b) = self.cache.take(&cx.key(&grad.state))?;
        let dy = grad.payload.values();
        let n = dy.len();
        let mut da = vec![0.0f32; a.values().len()];
        let mut db = vec![0.0f32; b.values().len()];
        let f = self.f;
        for (i, ((x, y), g)) in self.pairs(a.values(), b.values()).zip(dy).enumerate().take(n) {
            let (ga, gb) = match f {
                BinaryFn::Add => (*g, *g),
                BinaryFn::Sub => (*g, -g),
                BinaryFn::Mul => (g * y, g * x),
                BinaryFn::Div => (g / y, -g * x / (y * y)),
            };
            let ia = if self.broadcast == Broadcast::Lhs { 0 } else { i };
            let ib = if self.broadcast == Broadcast::Rhs { 0 } else { i };
            if let Some(slot) = da.get_mut(ia) {
                *slot += ga;
            }
            if let Some(slot) = db.get_mut(ib) {
                *slot += gb;
            }
        }
        cx.backward(0, grad.with_payload(Payload::from_vec(da)));
        cx.backward(1, grad.with_payload(Payload::from_vec(db)));
        Ok(())
    }

    fn held(&self) -> usize {
        self.join.len() + self.cache.len()
    }
}
