//! Control: `cond` and `switch` route by an int of the state, `phi` merges and remembers
//! the way it came, `isu` updates a state field and undoes it backward.

use super::{Keyed, NodeCx, NodeOp};
use crate::error::OpError;
use crate::message::Msg;
use amp_ir::{FieldId, StateExpr};

/// What picks the output port.
pub(crate) enum Choice {
    /// Port 0 when the predicate holds (non-zero), else port 1.
    Pred(StateExpr),
    /// Port `index`, of `arms`.
    Index(StateExpr, usize),
}

/// `cond` and `switch`: forward to the chosen port; backward arrives on it and leaves on
/// the input with the same state, so nothing needs caching.
pub(crate) struct CondOp {
    choice: Choice,
}

impl CondOp {
    pub fn new(choice: Choice) -> CondOp {
        CondOp { choice }
    }
}

impl NodeOp for CondOp {
    fn forward(&mut self, cx: &mut NodeCx, _port: u16, msg: Msg) -> Result<(), OpError> {
        let port = match &self.choice {
            Choice::Pred(pred) => {
                if cx.eval(pred, &msg.state, "predicate")? != 0 {
                    0
                } else {
                    1
                }
            }
            Choice::Index(index, arms) => cx.eval_index(index, &msg.state, "switch index", *arms)? as u16,
        };
        cx.forward(port, msg);
        Ok(())
    }

    fn backward(&mut self, cx: &mut NodeCx, _port: u16, grad: Msg) -> Result<(), OpError> {
        cx.backward(0, grad);
        Ok(())
    }
}

/// `phi`: passes a message from any port; remembers the port under the key (training).
pub(crate) struct PhiOp {
    arms: usize,
    came_from: Keyed<u16>,
}

impl PhiOp {
    pub fn new(arms: usize) -> PhiOp {
        PhiOp { arms, came_from: Keyed::new() }
    }
}

impl NodeOp for PhiOp {
    fn forward(&mut self, cx: &mut NodeCx, port: u16, msg: Msg) -> Result<(), OpError> {
        if usize::from(port) >= self.arms {
            return Err(OpError::OutOfRange { what: "phi port", index: i64::from(port), len: self.arms });
        }
        if cx.training() {
            self.came_from.put(cx.key(&msg.state), port)?;
        }
        cx.forward(0, msg);
        Ok(())
    }

    fn backward(&mut self, cx: &mut NodeCx, _port: u16, grad: Msg) -> Result<(), OpError> {
        let port = self.came_from.take(&cx.key(&grad.state))?;
        cx.backward(port, grad);
        Ok(())
    }

    fn held(&self) -> usize {
        self.came_from.len()
    }
}

/// `isu field := value [inverse e]`. Backward, the field gets `inverse` evaluated on the
/// backward message's state, or (without an inverse) the old value cached under the key
/// of the *updated* state, which is the state the backward message arrives with.
pub(crate) struct IsuOp {
    field: usize,
    value: StateExpr,
    inverse: Option<StateExpr>,
    old: Keyed<i64>,
    /// A loop counter's bound (`NodeInfo::trip_limit`).
    trip_limit: Option<u64>,
}

impl IsuOp {
    pub fn new(field: FieldId, value: StateExpr, inverse: Option<StateExpr>, trip_limit: Option<u64>) -> IsuOp {
        IsuOp { field: usize::from(field.0), value, inverse, old: Keyed::new(), trip_limit }
    }
}

impl NodeOp for IsuOp {
    fn forward(&mut self, cx: &mut NodeCx, _port: u16, mut msg: Msg) -> Result<(), OpError> {
        let new = cx.eval(&self.value, &msg.state, "state update")?;
        if let Some(limit) = self.trip_limit.filter(|&l| u64::try_from(new).is_ok_and(|n| n > l)) {
            return Err(OpError::TooManyTrips { limit });
        }
        let Some(slot) = msg.state.get_mut(self.field) else {
            return Err(OpError::OutOfRange { what: "state field", index: self.field as i64, len: msg.state.len() });
        };
        let old = std::mem::replace(slot, new);
        if self.inverse.is_none() && cx.training() {
            self.old.put(cx.key(&msg.state), old)?;
        }
        cx.forward(0, msg);
        Ok(())
    }

    fn backward(&mut self, cx: &mut NodeCx, _port: u16, mut grad: Msg) -> Result<(), OpError> {
        let restored = match &self.inverse {
            Some(inverse) => cx.eval(inverse, &grad.state, "inverse state update")?,
            None => self.old.take(&cx.key(&grad.state))?,
        };
        let Some(slot) = grad.state.get_mut(self.field) else {
            return Err(OpError::OutOfRange { what: "state field", index: self.field as i64, len: grad.state.len() });
        };
        *slot = restored;
        cx.backward(0, grad);
        Ok(())
    }

    fn held(&self) -> usize {
        self.old.len()
    }
}
