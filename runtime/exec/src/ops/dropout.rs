//! `dropout`: inverted dropout whose mask is recomputed from the message's state in both
//! directions (`amp_ir::dropout`), so the node caches nothing and keys nothing, and any
//! worker, batch or order of messages gives the masks the reference evaluator replays.

use super::{NodeCx, NodeOp};
use crate::error::OpError;
use crate::message::{Msg, Payload};
use amp_ir::dropout::{mask, DropoutRun};
use amp_ir::FieldId;

/// Which masks a run applies: training's (and `grads`' when asked for), from the run's
/// seed and the epoch; with none, dropout is the identity.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct DropoutPass {
    pub seed: u64,
    pub epoch: u64,
}

pub(crate) struct DropoutOp {
    rate: f32,
    site: u64,
    context: Vec<FieldId>,
}

impl DropoutOp {
    pub fn new(rate: f32, site: u64, context: Vec<FieldId>) -> DropoutOp {
        DropoutOp { rate, site, context }
    }

    /// The message's mask: its instance's index in the data (its position in the run
    /// when the instance does not say), the site and the context fields' values.
    fn mask(&self, cx: &NodeCx, pass: DropoutPass, state: &[i64], len: usize) -> Result<Vec<f32>, OpError> {
        let position = state.first().copied().unwrap_or(-1);
        let instance = cx.instance(state)?.data_index().unwrap_or(position as u64);
        let words = self
            .context
            .iter()
            .map(|f| {
                let index = usize::from(f.0);
                state.get(index).copied().ok_or(OpError::OutOfRange {
                    what: "state field",
                    index: index as i64,
                    len: state.len(),
                })
            })
            .collect::<Result<Vec<i64>, OpError>>()?;
        let run = DropoutRun { seed: pass.seed, epoch: pass.epoch, instance };
        Ok(mask(&run, self.site, &words, self.rate, len))
    }

    /// `values` times the message's mask, or the payload as it is when the run applies none.
    fn apply(&self, cx: &NodeCx, msg: Msg) -> Result<Msg, OpError> {
        let Some(pass) = cx.shared.dropout else { return Ok(msg) };
        let m = self.mask(cx, pass, &msg.state, msg.payload.values().len())?;
        let out: Vec<f32> = msg.payload.values().iter().zip(&m).map(|(x, m)| x * m).collect();
        Ok(msg.with_payload(Payload::from_vec(out)))
    }
}

impl NodeOp for DropoutOp {
    fn forward(&mut self, cx: &mut NodeCx, _port: u16, msg: Msg) -> Result<(), OpError> {
        let out = self.apply(cx, msg)?;
        cx.forward(0, out);
        Ok(())
    }

    /// The gradient passes where the forward kept a unit, scaled alike: the same mask,
    /// recomputed from the gradient's state (the forward message's).
    fn backward(&mut self, cx: &mut NodeCx, _port: u16, grad: Msg) -> Result<(), OpError> {
        let out = self.apply(cx, grad)?;
        cx.backward(0, out);
        Ok(())
    }
}
