//! `loss`: cross-entropy of logits against a label expression (divided by a count
//! expression for one term of a mean), or the mean squared error of two inputs (joined
//! by key), or a weighted term of a loss that sums several (`LossKind::Term`: either of
//! those, or a scalar input, times a weight and over a count). Ends the forward pass, reports the value, and starts the
//! backward pass with gradient 1. A non-finite loss sends nothing back: the run stops
//! before any of its gradient reaches a parameter.

use super::{Emit, Join, NodeCx, NodeOp, RunMode};
use crate::error::OpError;
use crate::load::program::NodeInfo;
use crate::message::{Msg, Payload};
use amp_ir::{LossBase, LossKind};

pub(crate) struct LossOp {
    kind: LossKind,
    join: Join,
}

impl LossOp {
    pub fn new(kind: LossKind, node: &NodeInfo) -> LossOp {
        LossOp { kind, join: Join::new(node.inputs.len().max(1)) }
    }
}

impl NodeOp for LossOp {
    fn forward(&mut self, cx: &mut NodeCx, port: u16, msg: Msg) -> Result<(), OpError> {
        if cx.mode() == RunMode::Infer {
            return Ok(());
        }
        let key = cx.key(&msg.state);
        let Some((_, inputs)) = self.join.offer(key, usize::from(port), msg)? else { return Ok(()) };
        match &self.kind {
            LossKind::CrossEntropy { label } => {
                let Some(msg) = inputs.first() else { return Ok(()) };
                cross_entropy(cx, msg, label, 1.0)?;
            }
            LossKind::CrossEntropyMean { label, count } => {
                let Some(msg) = inputs.first() else { return Ok(()) };
                // A count of 0 cannot reach here (no term of an empty mean is computed);
                // refusing it keeps a malformed graph from dividing by zero.
                let n = cx.eval_count(count, &msg.state, "loss count")?;
                if n == 0 {
                    return Err(OpError::Empty { what: "mean of the loss terms" });
                }
                cross_entropy(cx, msg, label, 1.0 / n as f32)?;
            }
            LossKind::Mse => {
                let [a, b] = inputs.as_slice() else { return Ok(()) };
                mse(cx, a, b, 1.0);
            }
            LossKind::Term { base, weight, count, judge } => {
                let Some(first) = inputs.first() else { return Ok(()) };
                let mut scale = *weight;
                if let Some(count) = count {
                    // As for a mean above: no term of an empty mean is computed.
                    let n = cx.eval_count(count, &first.state, "loss count")?;
                    if n == 0 {
                        return Err(OpError::Empty { what: "mean of the loss terms" });
                    }
                    scale /= n as f32;
                }
                match base {
                    LossBase::CrossEntropy { label } => {
                        let judged = match judge {
                            Some(judge) => cx.eval(judge, &first.state, "loss judge")? != 0,
                            None => false,
                        };
                        let (label, msg) = (label.clone(), first);
                        cross_entropy_judged(cx, msg, &label, scale, judged)?;
                    }
                    LossBase::Mse => {
                        let [a, b] = inputs.as_slice() else { return Ok(()) };
                        mse(cx, a, b, scale);
                    }
                    LossBase::Scalar => {
                        // The term is its input: reported times the scale, whose gradient
                        // is the scale.
                        let values = first.payload.values();
                        let value = values.iter().sum::<f32>() * scale;
                        cx.out.push(Emit::Loss { instance: first.instance(), value, correct: None, state: None });
                        if cx.training() && value.is_finite() {
                            let grad = vec![scale; values.len()];
                            cx.backward(0, first.sibling(Payload::from_vec(grad)));
                        }
                    }
                }
            }
        }
        Ok(())
    }

    fn backward(&mut self, _cx: &mut NodeCx, _port: u16, _grad: Msg) -> Result<(), OpError> {
        Ok(())
    }

    fn held(&self) -> usize {
        self.join.len()
    }
}

/// Reports `scale` times the mean squared error of `a` and `b` and, when training, sends
/// back its gradients.
fn mse(cx: &mut NodeCx, a: &Msg, b: &Msg, scale: f32) {
    let (x, y) = (a.payload.values(), b.payload.values());
    let n = x.len().min(y.len()).max(1) as f32;
    let value = x.iter().zip(y).map(|(p, q)| (p - q) * (p - q)).sum::<f32>() / n * scale;
    cx.out.push(Emit::Loss { instance: a.instance(), value, correct: None, state: None });
    if cx.training() && value.is_finite() {
        let da: Vec<f32> = x.iter().zip(y).map(|(p, q)| 2.0 * (p - q) / n * scale).collect();
        let db: Vec<f32> = da.iter().map(|g| -g).collect();
        cx.backward(0, a.sibling(Payload::from_vec(da)));
        cx.backward(1, b.sibling(Payload::from_vec(db)));
    }
}

/// Reports `scale` times the cross-entropy of the logits `msg` against `label` and, when
/// training, sends back its gradient (`scale · (softmax − onehot)`).
fn cross_entropy(cx: &mut NodeCx, msg: &Msg, label: &amp_ir::StateExpr, scale: f32) -> Result<(), OpError> {
    cross_entropy_judged(cx, msg, label, scale, true)
}

/// As [`cross_entropy`]; the verdict (argmax = label) counts towards accuracy only when
/// `judged` (a term of a loss summed over a tree's nodes is judged at the root only).
fn cross_entropy_judged(
    cx: &mut NodeCx,
    msg: &Msg,
    label: &amp_ir::StateExpr,
    scale: f32,
    judged: bool,
) -> Result<(), OpError> {
    let logits = msg.payload.values();
    let class = cx.eval_index(label, &msg.state, "label", logits.len())?;
    let log_probs = amp_ir::vocab::log_softmax_rows(logits, logits.len());
    let value = -log_probs[class] * scale;
    // Logits that are all NaN judge nothing.
    let best = amp_ir::order::argmax(logits).filter(|&i| !logits[i].is_nan());
    let correct = best.map(|best| best == class).filter(|_| judged);
    let state = (cx.mode() == RunMode::Eval).then(|| msg.state.clone());
    cx.out.push(Emit::Loss { instance: msg.instance(), value, correct, state });
    if cx.training() && value.is_finite() {
        let mut grad: Vec<f32> = log_probs.iter().map(|l| l.exp()).collect();
        grad[class] -= 1.0;
        if scale != 1.0 {
            grad.iter_mut().for_each(|g| *g *= scale);
        }
        cx.backward(0, msg.sibling(Payload::from_vec(grad)));
    }
    Ok(())
}
