//! Non-parameterized payload transforms: elementwise `unary` functions (and the row-wise
//! softmaxes) and `binary` arithmetic with scalar broadcast, which joins its two inputs.

use super::{Intake, Join, Keyed, NodeCx, NodeOp, Stacked};
use crate::error::OpError;
use crate::load::program::NodeInfo;
use crate::message::{Msg, Payload};
use crate::ops::kernels;
use amp_ir::vocab::{BinaryKernel, UnaryKernel};
use amp_ir::{BinaryFn, PayloadTy, UnaryFn};

/// An elementwise function's values of `x`, appended to a buffer: the vocabulary's scalar
/// function, as every op that applies one computes it.
pub(crate) struct MapInto<'a>(pub &'a [f32], pub &'a mut Vec<f32>);

impl UnaryKernel for MapInto<'_> {
    type Output = ();
    fn run(self, forward: impl Fn(f32) -> f32 + Copy, _: impl Fn(f32, f32, f32) -> f32 + Copy) {
        let MapInto(x, out) = self;
        out.extend(x.iter().map(|&v| forward(v)));
    }
}

/// An elementwise function's input gradients from its input, output and `dy`, appended
/// to a buffer (the vocabulary's scalar gradient).
pub(crate) struct GradInto<'a>(pub &'a [f32], pub &'a [f32], pub &'a [f32], pub &'a mut Vec<f32>);

impl UnaryKernel for GradInto<'_> {
    type Output = ();
    fn run(self, _: impl Fn(f32) -> f32 + Copy, backward: impl Fn(f32, f32, f32) -> f32 + Copy) {
        let GradInto(x, y, dy, out) = self;
        out.extend(x.iter().zip(y).zip(dy).map(|((&x, &y), &g)| backward(x, y, g)));
    }
}

/// `f(x)`, caching input and output (shared, not copied) for the backward.
pub(crate) struct UnaryOp {
    f: UnaryFn,
    /// Width of a row for the softmaxes (the last dimension); `None` for a batch of
    /// scalars `f32[?]`, whose one row is the whole payload (a softmax across a sequence).
    width: Option<usize>,
    cache: Keyed<(Payload, Payload)>,
}

impl UnaryOp {
    pub fn new(f: UnaryFn, node: &NodeInfo) -> UnaryOp {
        let width = match node.inputs.first() {
            Some(PayloadTy::Batch(dims)) if dims.is_empty() => None,
            Some(PayloadTy::F32(dims) | PayloadTy::Batch(dims)) => Some(dims.last().copied().unwrap_or(1) as usize),
            _ => Some(1),
        };
        UnaryOp { f, width, cache: Keyed::new() }
    }

    /// The row width for a payload of `len` values (at least 1, for `chunks`).
    fn row(&self, len: usize) -> usize {
        self.width.unwrap_or(len).max(1)
    }

    fn apply(&self, x: &[f32]) -> Vec<f32> {
        match self.f {
            UnaryFn::Softmax => amp_ir::vocab::softmax_rows(x, self.row(x.len())),
            UnaryFn::LogSoftmax => amp_ir::vocab::log_softmax_rows(x, self.row(x.len())),
            // Every other row-wise function: the vocabulary's row function (elementwise ones
            // go through `MapInto`).
            f => f.forward_rows(x, self.row(x.len())).unwrap_or_default(),
        }
    }

    fn gradient(&self, x: &[f32], y: &[f32], dy: &[f32]) -> Vec<f32> {
        match self.f {
            UnaryFn::Softmax => {
                // dx = y * (dy - <dy, y>) per row.
                let (mut dx, row) = (Vec::with_capacity(y.len()), self.row(y.len()));
                for (yr, gr) in y.chunks(row).zip(dy.chunks(row)) {
                    let inner = kernels::dot(yr, gr);
                    dx.extend(yr.iter().zip(gr).map(|(y, g)| y * (g - inner)));
                }
                dx
            }
            UnaryFn::LogSoftmax => {
                // dx = dy - softmax(x) * sum(dy) per row, softmax(x) = exp(y).
                let (mut dx, row) = (Vec::with_capacity(y.len()), self.row(y.len()));
                for (yr, gr) in y.chunks(row).zip(dy.chunks(row)) {
                    let total: f32 = gr.iter().sum();
                    dx.extend(yr.iter().zip(gr).map(|(y, g)| g - y.exp() * total));
                }
                dx
            }
            // Elementwise functions go through `GradInto`.
            f => f.backward_rows(x, y, dy, self.row(x.len())).unwrap_or_default(),
        }
    }
}

impl NodeOp for UnaryOp {
    /// The messages standing together are mapped into one buffer, which the next node
    /// (a Linear's batch, most often) reads in place, and their gradients into another.
    fn intake(&self) -> Intake {
        Intake::Stacked
    }

    fn forward_batch(&mut self, cx: &mut NodeCx, _port: u16, msgs: Vec<Msg>) -> Result<(), OpError> {
        let mut ys = Stacked::with_capacity(msgs.iter().map(|m| m.payload.values().len()).sum());
        for msg in &msgs {
            let x = msg.payload.values();
            ys.push(|out| {
                if self.f.with_scalar(MapInto(x, out)).is_none() {
                    out.extend(self.apply(x));
                }
            });
        }
        for (msg, y) in msgs.into_iter().zip(ys.payloads()) {
            if cx.training() {
                self.cache.put(cx.key(&msg.state), (msg.payload.clone(), y.clone()))?;
            }
            cx.forward(0, msg.with_payload(y));
        }
        Ok(())
    }

    fn backward_batch(&mut self, cx: &mut NodeCx, _port: u16, grads: Vec<Msg>) -> Result<(), OpError> {
        let saved = grads.iter().map(|g| self.cache.take(&cx.key(&g.state))).collect::<Result<Vec<_>, _>>()?;
        let mut dxs = Stacked::with_capacity(grads.iter().map(|g| g.payload.values().len()).sum());
        for (grad, (x, y)) in grads.iter().zip(&saved) {
            if x.values().len() != grad.payload.values().len() {
                return Err(OpError::PayloadSize { expected: x.values().len(), found: grad.payload.values().len() });
            }
            let (x, y, dy) = (x.values(), y.values(), grad.payload.values());
            dxs.push(|out| {
                if self.f.with_scalar(GradInto(x, y, dy, out)).is_none() {
                    out.extend(self.gradient(x, y, dy));
                }
            });
        }
        for (grad, dx) in grads.into_iter().zip(dxs.payloads()) {
            cx.backward(0, grad.with_payload(dx));
        }
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

    /// `a op b` elementwise, a scalar operand repeated.
    fn apply(&self, a: &[f32], b: &[f32]) -> Vec<f32> {
        self.f.with_scalar(Apply { broadcast: self.broadcast, a, b })
    }

    /// The gradients of both operands from `dy`; a scalar operand's is the sum over the
    /// elements it was repeated for.
    fn gradients(&self, a: &[f32], b: &[f32], dy: &[f32]) -> (Vec<f32>, Vec<f32>) {
        self.f.with_scalar(Gradients { broadcast: self.broadcast, a, b, dy })
    }
}

/// [`map2`] with a binary function of the vocabulary (one loop per function).
struct Apply<'a> {
    broadcast: Broadcast,
    a: &'a [f32],
    b: &'a [f32],
}

impl BinaryKernel for Apply<'_> {
    type Output = Vec<f32>;
    fn run(self, forward: impl Fn(f32, f32) -> f32 + Copy, _: impl Fn(f32, f32, f32) -> (f32, f32) + Copy) -> Vec<f32> {
        map2(self.broadcast, self.a, self.b, forward)
    }
}

/// [`partials`] with a binary function of the vocabulary.
struct Gradients<'a> {
    broadcast: Broadcast,
    a: &'a [f32],
    b: &'a [f32],
    dy: &'a [f32],
}

impl BinaryKernel for Gradients<'_> {
    type Output = (Vec<f32>, Vec<f32>);
    fn run(
        self,
        _: impl Fn(f32, f32) -> f32 + Copy,
        backward: impl Fn(f32, f32, f32) -> (f32, f32) + Copy,
    ) -> (Vec<f32>, Vec<f32>) {
        partials(self.broadcast, self.a, self.b, self.dy, backward)
    }
}

/// `op` over the pairs of `a` and `b` (as many as the shorter has, a scalar repeated): one
/// loop per operator and broadcast, which the compiler vectorises.
#[inline]
fn map2(broadcast: Broadcast, a: &[f32], b: &[f32], op: impl Fn(f32, f32) -> f32) -> Vec<f32> {
    match broadcast {
        Broadcast::Lhs => {
            let s = a.first().copied().unwrap_or(0.0);
            b.iter().map(|&y| op(s, y)).collect()
        }
        Broadcast::Rhs => {
            let s = b.first().copied().unwrap_or(0.0);
            a.iter().map(|&x| op(x, s)).collect()
        }
        Broadcast::None => a.iter().zip(b).map(|(&x, &y)| op(x, y)).collect(),
    }
}

/// `(da, db)` shaped like `a` and `b` from the partials `(∂/∂x, ∂/∂y) · g` of each pair of
/// [`map2`] and its `dy` (pairs past `dy` contribute nothing); a scalar operand sums its
/// partials in element order.
#[inline]
fn partials(
    broadcast: Broadcast,
    a: &[f32],
    b: &[f32],
    dy: &[f32],
    partial: impl Fn(f32, f32, f32) -> (f32, f32),
) -> (Vec<f32>, Vec<f32>) {
    let mut da = vec![0.0f32; a.len()];
    let mut db = vec![0.0f32; b.len()];
    match broadcast {
        Broadcast::Lhs => {
            let s = a.first().copied().unwrap_or(0.0);
            let mut sum = 0.0f32;
            for ((d, &y), &g) in db.iter_mut().zip(b).zip(dy) {
                let (ga, gb) = partial(s, y, g);
                sum += ga;
                *d = gb;
            }
            if let Some(d) = da.first_mut() {
                *d = sum;
            }
        }
        Broadcast::Rhs => {
            let s = b.first().copied().unwrap_or(0.0);
            let mut sum = 0.0f32;
            for ((d, &x), &g) in da.iter_mut().zip(a).zip(dy) {
                let (ga, gb) = partial(x, s, g);
                *d = ga;
                sum += gb;
            }
            if let Some(d) = db.first_mut() {
                *d = sum;
            }
        }
        Broadcast::None => {
            for (((da, db), (&x, &y)), &g) in da.iter_mut().zip(db.iter_mut()).zip(a.iter().zip(b)).zip(dy) {
                (*da, *db) = partial(x, y, g);
            }
        }
    }
    (da, db)
}

impl NodeOp for BinaryOp {
    fn forward(&mut self, cx: &mut NodeCx, port: u16, msg: Msg) -> Result<(), OpError> {
        let key = cx.key(&msg.state);
        let Some((key, mut both)) = self.join.offer(key, usize::from(port), msg)? else { return Ok(()) };
        let (Some(b), Some(a)) = (both.pop(), both.pop()) else { return Ok(()) };
        if self.broadcast == Broadcast::None && a.payload.values().len() != b.payload.values().len() {
            return Err(OpError::PayloadSize { expected: a.payload.values().len(), found: b.payload.values().len() });
        }
        let y = self.apply(a.payload.values(), b.payload.values());
        if cx.training() {
            self.cache.put(key, (a.payload.clone(), b.payload.clone()))?;
        }
        cx.forward(0, a.with_payload(Payload::from_vec(y)));
        Ok(())
    }

    fn backward(&mut self, cx: &mut NodeCx, _port: u16, grad: Msg) -> Result<(), OpError> {
        let (a, b) = self.cache.take(&cx.key(&grad.state))?;
        let (da, db) = self.gradients(a.values(), b.values(), grad.payload.values());
        cx.backward(0, grad.sibling(Payload::from_vec(da)));
        cx.backward(1, grad.with_payload(Payload::from_vec(db)));
        Ok(())
    }

    fn held(&self) -> usize {
        self.join.len() + self.cache.len()
    }
}
