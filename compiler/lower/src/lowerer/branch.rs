//! Branches: `if`/`else`, `match` and calls into parameter arrays route the values an arm
//! uses into one arm per outcome (`cond` for a predicate, `switch` for an index) and merge
//! what comes out with one `phi` per tensor port. Ints merge into a select expression.

use super::{Lowerer, R};
use crate::value::{Port, Value};
use amp_diagnostics::Span;
use amp_ir::{IntOp, Op, PayloadTy, StateExpr};
use amp_sema::LocalId;

/// What picks the arm.
#[derive(Clone, Debug)]
pub(super) enum Selector {
    /// Arm 0 when the predicate holds, else arm 1.
    Cond(StateExpr),
    /// Arm `index`.
    Switch(StateExpr, usize),
}

impl Selector {
    fn arms(&self) -> usize {
        match self {
            Selector::Cond(_) => 2,
            Selector::Switch(_, n) => *n,
        }
    }

    fn op(&self) -> Op {
        match self {
            Selector::Cond(pred) => Op::Cond { pred: pred.clone() },
            Selector::Switch(index, n) => Op::Switch { index: index.clone(), arms: *n as u32 },
        }
    }

    /// `arm == i` as an int expression.
    fn is_arm(&self, i: usize) -> StateExpr {
        match self {
            Selector::Cond(pred) if i == 0 => pred.clone(),
            Selector::Cond(pred) => StateExpr::Not(Box::new(pred.clone())),
            Selector::Switch(index, _) => StateExpr::bin(IntOp::Eq, index.clone(), StateExpr::Const(i as i64)),
        }
    }
}

/// What flows into the arms besides the control: locals (rebound in each arm) and other
/// values (handed to the arm function).
pub(super) struct Routed<'a> {
    pub locals: &'a [LocalId],
    pub values: Vec<Value>,
    /// Locals an arm may assign: restored before each arm and merged after.
    pub writes: &'a [LocalId],
}

impl Lowerer<'_> {
    /// Routes `routed` and the control into the arms of `sel`, lowers arm `i` with
    /// `arm(self, i, values routed into arm i)`, and merges the arms' results, the written
    /// locals and the control.
    pub(super) fn branch(
        &mut self,
        sel: &Selector,
        routed: Routed<'_>,
        span: Span,
        label: &str,
        mut arm: impl FnMut(&mut Self, usize, Vec<Value>) -> R<Value>,
    ) -> R<Value> {
        let arms = sel.arms();
        let before: Vec<(LocalId, Option<Value>)> =
            routed.writes.iter().chain(routed.locals).map(|&id| (id, self.local(id))).collect();
        let mut per_arm_locals: Vec<Vec<(LocalId, Value)>> = vec![Vec::new(); arms];
        for &id in routed.locals {
            let Some(v) = self.local(id) else { continue };
            let outs = self.route_ports(sel, &v, span, label);
            for (side, ports) in per_arm_locals.iter_mut().zip(outs) {
                side.push((id, v.with_ports(&mut ports.into_iter())));
            }
        }
        let mut per_arm_values: Vec<Vec<Value>> = vec![Vec::new(); arms];
        for v in &routed.values {
            let outs = self.route_ports(sel, v, span, label);
            for (side, ports) in per_arm_values.iter_mut().zip(outs) {
                side.push(v.with_ports(&mut ports.into_iter()));
            }
        }
        let ctrl_in = self.ctrl.clone();
        let ctrl_router = self.node(sel.op(), std::slice::from_ref(&ctrl_in), vec![PayloadTy::Unit; arms], label, span);
        let mut results = Vec::with_capacity(arms);
        let mut end_locals: Vec<Vec<Option<Value>>> = Vec::with_capacity(arms);
        let mut end_ctrls = Vec::with_capacity(arms);
        let mut ranges = Vec::with_capacity(arms);
        for (i, (locals, values)) in per_arm_locals.into_iter().zip(per_arm_values).enumerate() {
            for (id, v) in &before {
                if let Some(v) = v {
                    self.set_local(*id, v.clone());
                }
            }
            for (id, v) in locals {
                self.set_local(id, v);
            }
            self.ctrl = Self::out(ctrl_router, i as u16, PayloadTy::Unit);
            let first = self.node_bound();
            results.push(arm(self, i, values)?);
            ranges.push((first, self.node_bound()));
            end_locals.push(routed.writes.iter().map(|&id| self.local(id)).collect());
            end_ctrls.push(self.ctrl.clone());
        }
        for (id, v) in &before {
            if let Some(v) = v {
                self.set_local(*id, v.clone());
            }
        }
        // Which nodes each arm emitted, for merging losses.
        self.arm_ranges = ranges;
        for (w, &id) in routed.writes.iter().enumerate() {
            let values: Option<Vec<Value>> = end_locals.iter().map(|ends| ends.get(w).cloned().flatten()).collect();
            if let Some(values) = values {
                let merged = self.merge(sel, values, span)?;
                self.set_local(id, merged);
            }
        }
        let ctrl = self.node(Op::Phi { arms: arms as u32 }, &end_ctrls, vec![PayloadTy::Unit], label, span);
        self.ctrl = Self::out(ctrl, 0, PayloadTy::Unit);
        self.merge(sel, results, span)
    }

    /// One router node per port of `v`; returns the ports each arm gets.
    fn route_ports(&mut self, sel: &Selector, v: &Value, span: Span, label: &str) -> Vec<Vec<Port>> {
        let arms = sel.arms();
        let mut outs = vec![Vec::new(); arms];
        for p in v.ports() {
            let n = self.node(sel.op(), std::slice::from_ref(&p), vec![p.ty.clone(); arms], label, span);
            for (i, side) in outs.iter_mut().enumerate() {
                side.push(Self::out(n, i as u16, p.ty.clone()));
            }
        }
        outs
    }

    /// The value after a branch: a phi per tensor port, a select for ints.
    pub(super) fn merge(&mut self, sel: &Selector, values: Vec<Value>, span: Span) -> R<Value> {
        let Some(first) = values.first().cloned() else { return Ok(Value::Unit) };
        if values.iter().any(|v| matches!(v, Value::Loss(_))) {
            return self.merge_losses(values, span);
        }
        match first {
            Value::Tensor(_) | Value::Batch { .. } => {
                let mut ports = Vec::with_capacity(values.len());
                for v in &values {
                    match (v, &first) {
                        (Value::Tensor(p), Value::Tensor(_)) => ports.push(p.clone()),
                        (Value::Batch { port, len }, Value::Batch { len: first_len, .. }) if len == first_len => {
                            ports.push(port.clone())
                        }
                        _ => return Err(self.unsupported(span, "branches producing different kinds of values")),
                    }
                }
                let port = if ports.iter().all(|p| *p == ports[0]) {
                    ports[0].clone()
                } else {
                    let ty = ports[0].ty.clone();
                    let n = self.node(Op::Phi { arms: ports.len() as u32 }, &ports, vec![ty.clone()], "merge", span);
                    Self::out(n, 0, ty)
                };
                Ok(first.with_ports(&mut std::iter::once(port)))
            }
            Value::Int(_) | Value::Bool(_) => {
                let mut exprs = Vec::with_capacity(values.len());
                for v in &values {
                    match v {
                        Value::Int(e) | Value::Bool(e) => exprs.push(e.clone()),
                        _ => return Err(self.unsupported(span, "branches producing different kinds of values")),
                    }
                }
                let merged = select(sel, exprs);
                Ok(if matches!(first, Value::Int(_)) { Value::Int(merged) } else { Value::Bool(merged) })
            }
            Value::Tuple(parts) => {
                let mut columns: Vec<Vec<Value>> = vec![Vec::new(); parts.len()];
                for v in values {
                    match v {
                        Value::Tuple(vs) if vs.len() == parts.len() => {
                            for (column, x) in columns.iter_mut().zip(vs) {
                                column.push(x);
                            }
                        }
                        _ => return Err(self.unsupported(span, "branches producing different kinds of values")),
                    }
                }
                let merged = columns.into_iter().map(|c| self.merge(sel, c, span)).collect::<R<Vec<_>>>()?;
                Ok(Value::Tuple(merged))
            }
            Value::Unit => Ok(Value::Unit),
            Value::Data(_) | Value::Param(_) | Value::Range(..) => Ok(first),
            _ => Err(self.unsupported(span, "branches producing this kind of value")),
        }
    }
}

/// The int that arm `i`'s value `exprs[i]` gives when arm `i` runs.
fn select(sel: &Selector, exprs: Vec<StateExpr>) -> StateExpr {
    if exprs.iter().all(|e| *e == exprs[0]) {
        return exprs.into_iter().next().unwrap_or(StateExpr::Const(0));
    }
    exprs
        .into_iter()
        .enumerate()
        .map(|(i, e)| StateExpr::bin(IntOp::Mul, sel.is_arm(i), e))
        .reduce(|a, b| StateExpr::bin(IntOp::Add, a, b))
        .unwrap_or(StateExpr::Const(0))
}
