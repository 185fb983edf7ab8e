//! Collections: `map` over data sequences, ranges and computed sequences opens an
//! *element context* (a new `element` field, one message per element); what comes out is
//! grouped back into a batch `f32[?, d]` (or, for ints, kept as an expression of the
//! element). `zip`, `sum`/`mean`, `len`, `scatter_sum`, gathers `xs[i]` and `top_k` work
//! on these values. See `docs/IR.md`.
//!
//! A `map` whose body is row-wise (no per-element control flow: see
//! [`Lowerer::row_wise_expr`]) is lowered *batched* instead: no element context opens, the
//! element is the whole collection as a batch `f32[?, d]` (one row per element), and the
//! body's nodes work on all rows at once in the enclosing context: `linear` on the batch,
//! elementwise ops on it, `xs[e.src]` a `gather_rows`, a parameter-array call one call per
//! arm on all rows kept by `mask_rows`. The attempt is undone, and the map lowered per
//! element, at the first construct that is not row-wise.

use super::{Lowerer, Unsupported, R};
use crate::value::{Port, Value};
use amp_diagnostics::Span;
use amp_ir::{DataStep, FieldId, FieldRole, IntOp, Op, PayloadInt, PayloadTy, ReduceFn, StateExpr};
use amp_sema::{Builtin, Expr, ExprKind, LocalId, Pattern, Ty};
use std::collections::BTreeSet;

/// Inside a batched `map` body: the field that names a row in per-row expressions
/// (`$.edges[%e].src`; no message carries it) and the collection's length.
#[derive(Clone)]
pub(crate) struct RowCtx {
    pub field: FieldId,
    pub count: StateExpr,
}

/// What a batched attempt must put back when it fails: it may have added nodes, fields,
/// files and diagnostics, bound locals, or sunk `forward`'s result. Branches, loops,
/// recursion and traversals record more, but the attempt refuses them before they start.
struct Snapshot {
    graph: amp_ir::Graph,
    diags: usize,
    files: std::collections::HashMap<amp_diagnostics::FileId, u32>,
    counters: (u32, u32, u32),
    locals: Vec<Option<Value>>,
    loops: u32,
    /// A `forward` called inside the body sinks its result once.
    forward: (bool, usize),
}

/// Where the elements of a mapped sequence come from, once the element field exists.
enum Elements {
    /// `path[%e]` of the instance's data, of the given element type.
    Data(Vec<DataStep>, Ty),
    /// `start + %e`.
    Range(StateExpr),
    /// The rows of a batch, one message each (the output of an `ungroup`).
    Rows(Port),
    /// Ints: `elem` with `field` = `%e`.
    Ints(FieldId, StateExpr),
    /// The parts of a `zip`.
    Zip(Vec<Elements>),
}

impl Lowerer<'_> {
    /// The length of a sequence value.
    pub(super) fn seq_len(&mut self, v: &Value, span: Span) -> R<StateExpr> {
        Ok(match v {
            Value::Data(path) => StateExpr::Len(path.clone()),
            Value::Range(a, b) if *a == StateExpr::Const(0) => b.clone(),
            Value::Range(a, b) => {
                // max(b - a, 0)
                let diff = StateExpr::bin(IntOp::Sub, b.clone(), a.clone());
                let positive = StateExpr::bin(IntOp::Gt, diff.clone(), StateExpr::Const(0));
                StateExpr::bin(IntOp::Mul, diff, positive)
            }
            Value::Batch { len, .. } | Value::IntSeq { len, .. } => len.clone(),
            Value::Subtrees { path, .. } => StateExpr::Len(path.clone()),
            Value::TopKIdx { k, .. } => StateExpr::Const(i64::from(*k)),
            Value::Zip(parts) => match parts.first() {
                Some(first) => self.seq_len(first, span)?,
                None => StateExpr::Const(0),
            },
            _ => return Err(self.unsupported(span, "the length of this value")),
        })
    }

    fn new_element_field(&mut self, span: Span) -> R<FieldId> {
        let k = self.counters.elements;
        self.counters.elements += 1;
        self.new_field(format!("e{k}"), FieldRole::Element, span)
    }

    /// `seq.map(|pattern| body)`.
    pub(super) fn map_expr(&mut self, seq: &Expr, pattern: &Pattern, body: &Expr, span: Span) -> R<Value> {
        let mut seq_value = self.expr(seq)?;
        let mut seq_ty = seq.ty.clone();
        let count = self.seq_len(&seq_value, span)?;
        // A map over a node's children maps over their results: the recursive call on an
        // element gives that element's row (see `Value::ChildResult`).
        let children = if let Value::Subtrees { site, path } = &seq_value {
            let (site, path) = (*site, path.clone());
            seq_value = self.collection_site(site, &path, span)?;
            seq_ty = Ty::Seq(Box::new(
                self.recursion_result().ok_or_else(|| self.unsupported(span, "recursion (internal)"))?,
            ));
            true
        } else {
            false
        };
        let wrap = |element: Value| if children { Value::ChildResult(Box::new(element)) } else { element };
        let mut reads = BTreeSet::new();
        let mut writes = BTreeSet::new();
        crate::uses::walk_expr(body, &mut reads, &mut writes);
        let mut bound = BTreeSet::new();
        pattern_locals(pattern, &mut bound);
        if !writes.is_empty() {
            return Err(self.unsupported(span, "a `map` closure that assigns variables"));
        }
        let carried = self.tensor_locals(&reads.difference(&bound).copied().collect());
        if self.rows.is_some() {
            // A map inside a batched body is per-element control flow.
            return Err(self.not_row_wise());
        }
        if !self.per_element_maps {
            if let Some(v) = self.batched_map(&seq_value, &seq_ty, pattern, body, &carried, &count, children, span) {
                return Ok(v);
            }
        }
        let e = self.new_element_field(span)?;
        let elements = self.prepare_elements(seq_value, &seq_ty, e, span)?;
        // Every tensor from outside that the body uses, and the control, enter the element
        // context through a flatmap (in the enclosing context).
        let outer_ctrl = self.ctrl.clone();
        let saved: Vec<(LocalId, Option<Value>)> = carried.iter().map(|&id| (id, self.local(id))).collect();
        for &id in &carried {
            let Some(v) = self.local(id) else { continue };
            let inside: Vec<Port> = v.ports().into_iter().map(|p| self.flatmap(p, e, &count, span)).collect();
            self.set_local(id, v.with_ports(&mut inside.into_iter()));
        }
        let ctrl = self.flatmap(outer_ctrl.clone(), e, &count, span);
        let first = self.node_bound();
        self.context.push(e);
        self.ctrl = ctrl;
        let result = self.element_value(elements, e, span).and_then(|element| {
            self.bind(pattern, wrap(element), span)?;
            self.expr(body)
        });
        self.context.pop();
        self.ctrl = outer_ctrl.clone();
        for (id, v) in saved {
            if let Some(v) = v {
                self.set_local(id, v);
            }
        }
        let group = |this: &mut Self, p: Port| {
            let PayloadTy::F32(dims) = p.ty.clone() else {
                return Err(this.unsupported(span, "a `map` producing this kind of value"));
            };
            let ty = PayloadTy::Batch(dims);
            let op = Op::Group { field: e, count: count.clone() };
            let n = this.node(op, &[p, outer_ctrl.clone()], vec![ty.clone()], "group", span);
            Ok(Value::Batch { port: Self::out(n, 0, ty), len: count.clone() })
        };
        match result? {
            Value::Tensor(p) => group(self, p),
            // A sequence of tuples of tensors is the zip of one batch per part.
            Value::Tuple(parts) if parts.iter().all(|v| matches!(v, Value::Tensor(_))) => {
                let parts = parts.into_iter().map(|v| match v {
                    Value::Tensor(p) => group(self, p),
                    _ => Err(self.unsupported(span, "a `map` producing this kind of value")),
                });
                Ok(Value::Zip(parts.collect::<R<Vec<_>>>()?))
            }
            Value::Int(elem) | Value::Bool(elem) => Ok(Value::IntSeq { len: count, field: e, elem }),
            Value::Loss(l) => self.loss_seq(l, count, first, span),
            _ => Err(self.unsupported(span, "a `map` producing this kind of value")),
        }
    }

    /// `seq.map(|pattern| body)` with every element a row of one batch, when the body is
    /// row-wise; `None` (and nothing changed) when it is not.
    #[allow(clippy::too_many_arguments)]
    fn batched_map(
        &mut self,
        seq: &Value,
        seq_ty: &Ty,
        pattern: &Pattern,
        body: &Expr,
        carried: &[LocalId],
        count: &StateExpr,
        children: bool,
        span: Span,
    ) -> Option<Value> {
        // Tensors from outside would have to be repeated per row; whole collections are
        // fine (the body can only gather their rows).
        if carried.iter().any(|&id| !matches!(self.local(id), Some(Value::Batch { .. }))) {
            return None;
        }
        let snapshot = Snapshot {
            graph: self.graph.clone(),
            diags: self.diags.len(),
            files: self.files.clone(),
            counters: (self.counters.elements, self.counters.trees, self.counters.slots),
            locals: self.frame().locals.clone(),
            loops: self.loops,
            forward: (self.forward_sunk, self.forward_ports.len()),
        };
        let result = self.new_element_field(span).and_then(|field| {
            self.rows = Some(RowCtx { field, count: count.clone() });
            let value = self.row_elements(seq.clone(), seq_ty, field, span).and_then(|element| {
                let element = if children { Value::ChildResult(Box::new(element)) } else { element };
                self.bind(pattern, element, span)?;
                self.expr(body)
            });
            self.rows = None;
            let batch = |v: Value| match v {
                Value::Tensor(port) if matches!(port.ty, PayloadTy::Batch(_)) => {
                    Some(Value::Batch { port, len: count.clone() })
                }
                _ => None,
            };
            match value? {
                v @ Value::Tensor(_) => batch(v).ok_or_else(|| self.not_row_wise()),
                Value::Tuple(parts) => match parts.into_iter().map(batch).collect::<Option<Vec<_>>>() {
                    Some(parts) => Ok(Value::Zip(parts)),
                    None => Err(self.not_row_wise()),
                },
                Value::Int(elem) | Value::Bool(elem) => Ok(Value::IntSeq { len: count.clone(), field, elem }),
                _ => Err(self.not_row_wise()),
            }
        });
        match result {
            Ok(v) => {
                self.frame_mut().locals = snapshot.locals;
                Some(v)
            }
            Err(_) => {
                self.graph = snapshot.graph;
                self.diags.truncate(snapshot.diags);
                self.files = snapshot.files;
                (self.counters.elements, self.counters.trees, self.counters.slots) = snapshot.counters;
                self.frame_mut().locals = snapshot.locals;
                self.loops = snapshot.loops;
                self.forward_sunk = snapshot.forward.0;
                self.forward_ports.truncate(snapshot.forward.1);
                None
            }
        }
    }

    /// The element of a batched map: a collection's rows are the batch itself; ints are
    /// expressions of the row field.
    fn row_elements(&mut self, v: Value, ty: &Ty, field: FieldId, span: Span) -> R<Value> {
        let row = StateExpr::Field(field);
        Ok(match (v, ty) {
            (Value::Data(mut path), Ty::Seq(elem)) => {
                path.push(DataStep::Index(Box::new(row)));
                self.data_leaf(path, elem, span)?
            }
            (Value::Range(StateExpr::Const(0), _), _) => Value::Int(row),
            (Value::Range(a, _), _) => Value::Int(StateExpr::bin(IntOp::Add, a, row)),
            (Value::Batch { port, .. }, _) => Value::Tensor(port),
            (Value::IntSeq { field: f, elem, .. }, _) => Value::Int(substitute(&elem, f, &row)),
            (Value::Zip(parts), Ty::Seq(elem)) => {
                let Ty::Tuple(tys) = &**elem else { return Err(self.not_row_wise()) };
                let mut out = Vec::with_capacity(parts.len());
                for (part, part_ty) in parts.into_iter().zip(tys) {
                    out.push(self.row_elements(part, &Ty::Seq(Box::new(part_ty.clone())), field, span)?);
                }
                Value::Tuple(out)
            }
            _ => return Err(self.not_row_wise()),
        })
    }

    /// A batched attempt met something that is not row-wise: it is undone (no diagnostic).
    pub(super) fn not_row_wise(&mut self) -> Unsupported {
        Unsupported
    }

    /// Whether `e` itself (not its operands, which are checked as they are lowered) has a
    /// row-wise form: arithmetic, elementwise and row-wise built-ins, `concat`/`split`,
    /// calls, Linear layers, indexing and data ints. Branches, loops, nested maps,
    /// reductions, losses and constants other than scalars do not.
    pub(super) fn row_wise_expr(&self, e: &Expr) -> bool {
        match &e.kind {
            ExprKind::Map { .. } | ExprKind::Match(..) | ExprKind::If(..) | ExprKind::List(_) | ExprKind::Error => {
                false
            }
            ExprKind::Builtin(b, _) => {
                matches!(b, Builtin::Unary(_) | Builtin::Concat | Builtin::Split | Builtin::Len | Builtin::Range)
            }
            _ => true,
        }
    }

    fn flatmap(&mut self, p: Port, e: FieldId, count: &StateExpr, span: Span) -> Port {
        let ty = p.ty.clone();
        let n = self.node(Op::Flatmap { field: e, count: count.clone() }, &[p], vec![ty.clone()], "flatmap", span);
        Self::out(n, 0, ty)
    }

    /// Creates what must exist in the enclosing context (an `ungroup` per batch).
    fn prepare_elements(&mut self, v: Value, ty: &Ty, e: FieldId, span: Span) -> R<Elements> {
        Ok(match (v, ty) {
            (Value::Data(path), Ty::Seq(elem)) => Elements::Data(path, (**elem).clone()),
            (Value::Range(a, _), _) => Elements::Range(a),
            (Value::Batch { port, .. }, _) => {
                let PayloadTy::Batch(dims) = port.ty.clone() else {
                    return Err(self.unsupported(span, "a batch of this type (internal)"));
                };
                let ty = PayloadTy::F32(dims);
                let n = self.node(Op::Ungroup { field: e }, &[port], vec![ty.clone()], "ungroup", span);
                Elements::Rows(Self::out(n, 0, ty))
            }
            (Value::IntSeq { field, elem, .. }, _) => Elements::Ints(field, elem),
            (Value::Zip(parts), Ty::Seq(elem)) => {
                let Ty::Tuple(tys) = &**elem else {
                    return Err(self.unsupported(span, "this `zip` (internal: element type)"));
                };
                let mut out = Vec::with_capacity(parts.len());
                for (part, part_ty) in parts.into_iter().zip(tys) {
                    out.push(self.prepare_elements(part, &Ty::Seq(Box::new(part_ty.clone())), e, span)?);
                }
                Elements::Zip(out)
            }
            _ => return Err(self.unsupported(span, "`map` over this kind of sequence")),
        })
    }

    /// The element value inside the element context.
    fn element_value(&mut self, elements: Elements, e: FieldId, span: Span) -> R<Value> {
        let index = StateExpr::Field(e);
        Ok(match elements {
            Elements::Data(mut path, ty) => {
                path.push(DataStep::Index(Box::new(index)));
                self.data_leaf(path, &ty, span)?
            }
            Elements::Range(StateExpr::Const(0)) => Value::Int(index),
            Elements::Range(start) => Value::Int(StateExpr::bin(IntOp::Add, start, index)),
            Elements::Rows(port) => Value::Tensor(port),
            Elements::Ints(field, elem) => Value::Int(substitute(&elem, field, &index)),
            Elements::Zip(parts) => {
                Value::Tuple(parts.into_iter().map(|p| self.element_value(p, e, span)).collect::<R<Vec<_>>>()?)
            }
        })
    }

    /// `xs[i]` on a computed value: a row of a batch or tensor, an element of an int
    /// sequence, the `i`-th index `top_k` chose.
    pub(super) fn index_value(&mut self, obj: Value, index: Value, span: Span) -> R<Value> {
        let i = match index {
            Value::Int(i) => i,
            _ => return Err(self.unsupported(span, "an index that is not an int of the state or data")),
        };
        if let (Some(rows), Value::Batch { port, .. }) = (self.rows.clone(), &obj) {
            // Row r of the result is row `i` (with the row field = r) of the collection.
            let ty = port.ty.clone();
            let op = Op::GatherRows { field: rows.field, index: i, count: rows.count };
            let n = self.node(op, std::slice::from_ref(port), vec![ty.clone()], "gather_rows", span);
            return Ok(Value::Tensor(Self::out(n, 0, ty)));
        }
        if self.rows.is_some() && !matches!(obj, Value::IntSeq { .. }) {
            return Err(self.not_row_wise());
        }
        match obj {
            Value::Batch { port, .. } => {
                let PayloadTy::Batch(dims) = port.ty.clone() else {
                    return Err(self.unsupported(span, "a batch of this type (internal)"));
                };
                Ok(Value::Tensor(self.gather(port, i, PayloadTy::F32(dims), span)))
            }
            Value::Tensor(port) => match port.ty.clone() {
                PayloadTy::F32(dims) if !dims.is_empty() => {
                    Ok(Value::Tensor(self.gather(port, i, PayloadTy::F32(dims[1..].to_vec()), span)))
                }
                _ => Err(self.unsupported(span, "indexing a scalar")),
            },
            Value::IntSeq { field, elem, .. } => Ok(Value::Int(substitute(&elem, field, &i))),
            Value::TopKIdx { source, k } => Ok(Value::PayloadInt { source, int: PayloadInt::TopK { k, slot: i } }),
            _ => Err(self.unsupported(span, "indexing this kind of value")),
        }
    }

    fn gather(&mut self, port: Port, index: StateExpr, ty: PayloadTy, span: Span) -> Port {
        let n = self.node(Op::Gather { index }, &[port], vec![ty.clone()], "gather", span);
        Self::out(n, 0, ty)
    }

    /// The built-ins over collections and payload ints; `None` when `b` is not one of them.
    pub(super) fn collection_builtin(&mut self, b: Builtin, args: &[Expr], e: &Expr) -> Option<R<Value>> {
        let span = e.span;
        Some(match b {
            Builtin::Zip => args.iter().map(|a| self.expr(a)).collect::<R<Vec<_>>>().map(Value::Zip),
            Builtin::Sum => self.reduce(ReduceFn::Sum, b, &args[0], span),
            Builtin::Mean => self.reduce(ReduceFn::Mean, b, &args[0], span),
            Builtin::ScatterSum => self.scatter_sum(args, span),
            Builtin::TopK => self.top_k(&args[0], &args[1], span),
            Builtin::Argmax => self
                .expr(&args[0])
                .and_then(|v| self.tensor(v, span))
                .map(|source| Value::PayloadInt { source, int: PayloadInt::Argmax }),
            _ => return None,
        })
    }

    /// `sum`/`mean` of a batch (over its rows) or of a tensor (over its elements).
    fn reduce(&mut self, f: ReduceFn, b: Builtin, arg: &Expr, span: Span) -> R<Value> {
        let (port, out) = match self.expr(arg)? {
            Value::Batch { port, .. } => match port.ty.clone() {
                PayloadTy::Batch(dims) => (port, PayloadTy::F32(dims)),
                _ => return Err(self.unsupported(span, "a batch of this type (internal)")),
            },
            Value::Tensor(port) => (port, PayloadTy::F32(Vec::new())),
            Value::LossSeq(l, count) => return Ok(self.reduce_losses(f == ReduceFn::Mean, l, count)),
            _ => return Err(self.unsupported(span, &format!("`{}` of this value", b.name()))),
        };
        let n = self.node(Op::Reduce(f), &[port], vec![out.clone()], b.name(), span);
        Ok(Value::Tensor(Self::out(n, 0, out)))
    }

    /// `scatter_sum(values, index, n)`: the index is an int sequence (computed, or data).
    fn scatter_sum(&mut self, args: &[Expr], span: Span) -> R<Value> {
        let values = self.expr(&args[0])?;
        let index = self.expr(&args[1])?;
        let Value::Int(count) = self.expr(&args[2])? else {
            return Err(self.unsupported(span, "this `scatter_sum` count"));
        };
        let Value::Batch { port, .. } = values else {
            return Err(self.unsupported(span, "`scatter_sum` of this value"));
        };
        let (field, index) = match index {
            Value::IntSeq { field, elem, .. } => (field, elem),
            Value::Data(mut path) => {
                let field = self.new_element_field(span)?;
                path.push(DataStep::Index(Box::new(StateExpr::Field(field))));
                (field, StateExpr::Data(path))
            }
            _ => return Err(self.unsupported(span, "this `scatter_sum` index")),
        };
        let ty = port.ty.clone();
        let op = Op::ScatterSum { field, index, count: count.clone() };
        let n = self.node(op, &[port], vec![ty.clone()], "scatter_sum", span);
        Ok(Value::Batch { port: Self::out(n, 0, ty), len: count })
    }

    /// `top_k(v, k)`: the indices (still in the payload) and the values.
    fn top_k(&mut self, v: &Expr, k: &Expr, span: Span) -> R<Value> {
        let v = self.expr(v)?;
        let source = self.tensor(v, span)?;
        let k = match self.expr(k)? {
            Value::Int(StateExpr::Const(k)) if k >= 0 && k <= i64::from(u32::MAX) => k as u32,
            _ => return Err(self.unsupported(span, "`top_k` with a k that is not a constant")),
        };
        let width = match &source.ty {
            PayloadTy::F32(dims) if dims.len() == 1 => dims[0],
            _ => return Err(self.unsupported(span, "`top_k` of this value")),
        };
        let ty = PayloadTy::F32(vec![u64::from(k).min(width)]);
        let n = self.node(Op::TopK { k }, std::slice::from_ref(&source), vec![ty.clone()], "top_k", span);
        Ok(Value::Tuple(vec![Value::TopKIdx { source, k }, Value::Tensor(Self::out(n, 0, ty))]))
    }
}

/// The locals a pattern binds.
fn pattern_locals(p: &Pattern, out: &mut BTreeSet<LocalId>) {
    match p {
        Pattern::Bind(id) => {
            out.insert(*id);
        }
        Pattern::Wildcard => {}
        Pattern::Tuple(ps) => ps.iter().for_each(|p| pattern_locals(p, out)),
    }
}

/// `expr` with every use of `field` replaced by `value`.
pub(super) fn substitute(expr: &StateExpr, field: FieldId, value: &StateExpr) -> StateExpr {
    let step = |s: &DataStep| match s {
        DataStep::Field(name) => DataStep::Field(name.clone()),
        DataStep::Index(e) => DataStep::Index(Box::new(substitute(e, field, value))),
        DataStep::Variant(k) => DataStep::Variant(*k),
    };
    match expr {
        StateExpr::Field(f) if *f == field => value.clone(),
        StateExpr::Field(_) | StateExpr::Const(_) => expr.clone(),
        StateExpr::Data(path) => StateExpr::Data(path.iter().map(step).collect()),
        StateExpr::Len(path) => StateExpr::Len(path.iter().map(step).collect()),
        StateExpr::Not(e) => StateExpr::Not(Box::new(substitute(e, field, value))),
        StateExpr::Bin(op, a, b) => StateExpr::bin(*op, substitute(a, field, value), substitute(b, field, value)),
    }
}
