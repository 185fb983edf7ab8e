//! Routing into parameter arrays: `expert[i](x)` with `i` known only at run time becomes a
//! `switch` on `i` to one inlined call per element and a `phi` per result. When `i` is
//! computed from a payload (`top_k`, `argmax`), a `state_from_payload` node first writes it
//! into a `slot` field of every routed message, and an `isu` clears it after the merge.

use super::branch::{Routed, Selector};
use super::{Lowerer, R};
use crate::value::{ParamRef, Port, Value};
use amp_diagnostics::Span;
use amp_ir::{FieldRole, Op, StateExpr};
use amp_sema::{Instance, InstanceCall};

impl Lowerer<'_> {
    /// `array[index]` before the call: an element known now, or a run-time choice.
    pub(super) fn param_element(&mut self, array: ParamRef, index: Value, span: Span) -> R<Value> {
        let Instance::Array { len, .. } = &*array.instance else {
            return Err(self.unsupported(span, "indexing a parameter that is not an array"));
        };
        let n = self.array_len(&array, len, span)?;
        match index {
            Value::Int(StateExpr::Const(c)) if c >= 0 && (c as u64) < n => {
                Ok(Value::Param(self.element(&array, c as u64)))
            }
            Value::Int(_) | Value::PayloadInt { .. } => Ok(Value::ParamElem(array, Box::new(index))),
            _ => Err(self.unsupported(span, "this parameter array index")),
        }
    }

    fn array_len(&mut self, array: &ParamRef, len: &amp_sema::Dim, span: Span) -> R<u64> {
        let subst = &array.subst;
        match len.substitute(&|s| subst.iter().find(|(x, _)| x == s).map(|(_, d)| d.clone())).value {
            Some(v) if v > 0 => Ok(v as u64),
            _ => Err(self.unsupported(span, "a parameter array without a known positive length")),
        }
    }

    fn element(&self, array: &ParamRef, i: u64) -> ParamRef {
        let elem = match &*array.instance {
            Instance::Array { elem, .. } => elem.clone(),
            _ => array.instance.clone(),
        };
        ParamRef { prefix: format!("{}.{i}", array.prefix), instance: elem, subst: array.subst.clone() }
    }

    /// In a batched map whose call passes only batches: each argument's rows split by the
    /// index among the arms (`partition_rows`), each arm called on its own rows, and the
    /// results put back in row order (`merge_rows`), so the work is the rows' whatever the
    /// arm count. The arm's body sees fewer rows than the map has, which is sound because
    /// a layer reads nothing per row but its arguments (ints among them would index the
    /// map's rows: those calls take [`Self::masked_arms`] instead).
    #[allow(clippy::too_many_arguments)]
    fn partitioned_arms(
        &mut self,
        array: ParamRef,
        n: u64,
        index: StateExpr,
        rows: super::collections::RowCtx,
        call: &InstanceCall,
        args: Vec<Value>,
        span: Span,
    ) -> R<Value> {
        let arms = u32::try_from(n).map_err(|_| self.not_row_wise())?;
        let mut per_arm: Vec<Vec<Value>> = vec![Vec::with_capacity(args.len()); n as usize];
        for arg in args {
            let Value::Tensor(port) = arg else { return Err(self.not_row_wise()) };
            let ty = port.ty.clone();
            let op = Op::PartitionRows { field: rows.field, index: index.clone(), arms };
            let node = self.node(op, &[port], vec![ty.clone(); n as usize], "route", span);
            for (k, arm_args) in per_arm.iter_mut().enumerate() {
                arm_args.push(Value::Tensor(Self::out(node, k as u16, ty.clone())));
            }
        }
        let mut results = Vec::with_capacity(n as usize);
        for (i, arm_args) in per_arm.into_iter().enumerate() {
            let element = self.element(&array, i as u64);
            let Value::Tensor(y) = self.call_instance(element, call, arm_args, span)? else {
                return Err(self.not_row_wise());
            };
            if !matches!(y.ty, amp_ir::PayloadTy::Batch(_)) || results.first().is_some_and(|f: &Port| f.ty != y.ty) {
                return Err(self.not_row_wise());
            }
            results.push(y);
        }
        let Some(ty) = results.first().map(|p| p.ty.clone()) else { return Err(self.not_row_wise()) };
        let op = Op::MergeRows { field: rows.field, index, arms };
        let merged = self.node(op, &results, vec![ty.clone()], "end route", span);
        Ok(Value::Tensor(Self::out(merged, 0, ty)))
    }

    /// In a batched map: every arm called on all rows, each result's rows kept where the
    /// index picks that arm (`mask_rows`), summed. Each row is one arm's value plus zeros,
    /// so the values are the per-element lowering's; the work is `n` times the rows'. Used
    /// when the call passes ints, which [`Self::partitioned_arms`] cannot split.
    #[allow(clippy::too_many_arguments)]
    fn masked_arms(
        &mut self,
        array: ParamRef,
        n: u64,
        index: StateExpr,
        rows: super::collections::RowCtx,
        call: &InstanceCall,
        args: Vec<Value>,
        span: Span,
    ) -> R<Value> {
        let mut sum: Option<Port> = None;
        for i in 0..n {
            let element = self.element(&array, i);
            let Value::Tensor(y) = self.call_instance(element, call, args.clone(), span)? else {
                return Err(self.not_row_wise());
            };
            if !matches!(y.ty, amp_ir::PayloadTy::Batch(_)) {
                return Err(self.not_row_wise());
            }
            let pred = StateExpr::bin(amp_ir::IntOp::Eq, index.clone(), StateExpr::Const(i as i64));
            let ty = y.ty.clone();
            let mask = self.node(Op::MaskRows { field: rows.field, pred }, &[y], vec![ty.clone()], "route", span);
            let kept = Self::out(mask, 0, ty.clone());
            sum = Some(match sum {
                None => kept,
                Some(acc) => {
                    let add =
                        self.node(Op::Binary(amp_ir::BinaryFn::Add), &[acc, kept], vec![ty.clone()], "route", span);
                    Self::out(add, 0, ty)
                }
            });
        }
        sum.map(Value::Tensor).ok_or_else(|| self.not_row_wise())
    }

    /// Calls element `index` of `array` with `args`, routing by the index at run time.
    pub(super) fn call_element(
        &mut self,
        array: ParamRef,
        index: Value,
        call: &InstanceCall,
        args: Vec<Value>,
        span: Span,
    ) -> R<Value> {
        let Instance::Array { len, .. } = &*array.instance else {
            return Err(self.unsupported(span, "indexing a parameter that is not an array"));
        };
        let n = self.array_len(&array, len, span)?;
        if let (Some(rows), Value::Int(i)) = (self.rows.clone(), &index) {
            let batches = !args.is_empty()
                && args.iter().all(|a| matches!(a, Value::Tensor(p) if matches!(p.ty, amp_ir::PayloadTy::Batch(_))));
            if batches && !self.masked_arms_only {
                return self.partitioned_arms(array, n, i.clone(), rows, call, args, span);
            }
            return self.masked_arms(array, n, i.clone(), rows, call, args, span);
        }
        if self.rows.is_some() {
            return Err(self.not_row_wise());
        }
        let outer_ctrl = self.ctrl.clone();
        let (selector, args, slot) = match index {
            Value::Int(i) => (i, args, None),
            Value::PayloadInt { source, int } => {
                let k = self.counters.slots;
                self.counters.slots += 1;
                let slot = self.new_field(format!("slot{k}"), FieldRole::Slot, span)?;
                let op = Op::StateFromPayload { field: slot, int };
                let write = |this: &mut Self, p: Port| {
                    let ty = p.ty.clone();
                    let node = this.node(op.clone(), &[source.clone(), p], vec![ty.clone()], "slot", span);
                    Self::out(node, 0, ty)
                };
                let routed: Vec<Value> = args
                    .iter()
                    .map(|a| {
                        let ports: Vec<Port> = a.ports().into_iter().map(|p| write(self, p)).collect();
                        a.with_ports(&mut ports.into_iter())
                    })
                    .collect();
                self.ctrl = write(self, outer_ctrl.clone());
                (StateExpr::Field(slot), routed, Some(slot))
            }
            _ => return Err(self.unsupported(span, "this parameter array index")),
        };
        let sel = Selector::Switch(selector, n as usize);
        let routing = Routed { locals: &[], values: args, writes: &[] };
        let result = self.branch(&sel, routing, span, "route", |this, i, args| {
            let element = this.element(&array, i as u64);
            this.call_instance(element, call, args, span)
        });
        // The enclosing context's control is unchanged by the call.
        self.ctrl = outer_ctrl;
        let result = result?;
        let Some(slot) = slot else { return Ok(result) };
        // Clear the slot so the results carry the context's state again; the old value
        // comes back from the cache on the way back.
        let cleared: Vec<Port> = result
            .ports()
            .into_iter()
            .map(|p| {
                let ty = p.ty.clone();
                let op = Op::Isu { field: slot, value: StateExpr::Const(-1), inverse: None };
                let node = self.node(op, &[p], vec![ty.clone()], "end route", span);
                Self::out(node, 0, ty)
            })
            .collect();
        Ok(result.with_ports(&mut cleared.into_iter()))
    }
}
