//! Calls: a built-in function (a vocabulary function as one `unary` node, the others by
//! their own ops) and a parameter instance (`Linear`, `Embedding`, `LayerNorm`, or a
//! layer's function inlined).

use super::*;

impl Lowerer<'_> {
    pub(super) fn builtin(&mut self, b: Builtin, args: &[Expr], e: &Expr) -> R<Value> {
        let span = e.span;
        // A built-in named like a function of the IR's vocabulary is that `unary` node.
        if let Builtin::Unary(f) = b {
            let x = self.expr(&args[0])?;
            // A softmax across a computed sequence of scalars: one node on its batch.
            if let (Value::Batch { port, len }, false) = (&x, f.is_elementwise()) {
                let (port, len) = (port.clone(), len.clone());
                let ty = port.ty.clone();
                let n = self.node(Op::Unary(f), &[port], vec![ty.clone()], b.name(), span);
                return Ok(Value::Batch { port: Self::out(n, 0, ty), len });
            }
            let x = self.tensor(x, span)?;
            // A row-wise function of a batched map's scalar rows would read them all as one row.
            if !f.is_elementwise() && x.ty == PayloadTy::Batch(Vec::new()) {
                return Err(self.not_row_wise());
            }
            return Ok(self.unary(f, x, b.name(), span));
        }
        if let Some(result) = self.collection_builtin(b, args, e) {
            return result;
        }
        match b {
            Builtin::Concat => {
                let mut ports = Vec::new();
                let mut total = 0u64;
                let mut batches = 0;
                for a in args {
                    let v = self.expr(a)?;
                    let p = self.tensor(v, a.span)?;
                    if let PayloadTy::F32(d) | PayloadTy::Batch(d) = &p.ty {
                        total += d.first().copied().unwrap_or(0);
                    }
                    batches += usize::from(matches!(p.ty, PayloadTy::Batch(_)));
                    ports.push(p);
                }
                // Row by row when every part is rows (a batched map's body).
                let ty = match batches {
                    0 => PayloadTy::F32(vec![total]),
                    n if n == ports.len() => PayloadTy::Batch(vec![total]),
                    _ => return Err(self.not_row_wise()),
                };
                let n = self.node(Op::Concat, &ports, vec![ty.clone()], "concat", span);
                Ok(Value::Tensor(Self::out(n, 0, ty)))
            }
            Builtin::Split => {
                let v = self.expr(&args[0])?;
                let p = self.tensor(v, span)?;
                let shape = match &e.ty {
                    Ty::Tuple(parts) if !parts.is_empty() => self.shape_of(&parts[0], span)?,
                    _ => return Err(self.unsupported(span, "this `split`")),
                };
                let parts = match &e.ty {
                    Ty::Tuple(ps) => ps.len(),
                    _ => 0,
                };
                let ty = match &p.ty {
                    PayloadTy::Batch(_) => PayloadTy::Batch(shape),
                    _ => PayloadTy::F32(shape),
                };
                let n = self.node(Op::Split { parts: parts as u32 }, &[p], vec![ty.clone(); parts], "split", span);
                Ok(Value::Tuple((0..parts).map(|i| Value::Tensor(Self::out(n, i as u16, ty.clone()))).collect()))
            }
            Builtin::Dot => {
                // `sum(a * b)`: two ops every stage knows (the product fuses with its
                // neighbours; the sum is a `reduce`).
                let (a, bx) = (self.expr(&args[0])?, self.expr(&args[1])?);
                let Value::Tensor(product) = self.binary(BinOp::Mul, a, bx, span)? else {
                    return Err(self.unsupported(span, "`dot` of these values"));
                };
                let out = PayloadTy::F32(Vec::new());
                let n = self.node(Op::Reduce(ReduceFn::Sum), &[product], vec![out.clone()], "dot", span);
                Ok(Value::Tensor(Self::out(n, 0, out)))
            }
            Builtin::Dropout => {
                let x = self.expr(&args[0])?;
                let x = self.tensor(x, span)?;
                let rate = match args.get(1).map(|a| &a.kind) {
                    Some(ExprKind::Float(p)) => *p as f32,
                    _ => return Err(self.unsupported(span, "a dropout rate that is not a constant")),
                };
                // A rate of 0 keeps every unit as it is: no node.
                if rate == 0.0 {
                    return Ok(Value::Tensor(x));
                }
                // The mask hashes where the call is written and the context's fields
                // (without the instance, which the run names by its index in the data).
                let site = amp_ir::dropout::site(span.file.0, span.start);
                let context = self.context.get(1..).unwrap_or(&[]).to_vec();
                let ty = x.ty.clone();
                let n = self.node(Op::Dropout { rate, site, context }, &[x], vec![ty.clone()], "dropout", span);
                Ok(Value::Tensor(Self::out(n, 0, ty)))
            }
            Builtin::Zeros | Builtin::Ones => {
                let shape = self.shape_of(&e.ty, span)?;
                let value = if b == Builtin::Zeros { ConstValue::Zeros } else { ConstValue::Ones };
                Ok(self.constant(value, shape, span))
            }
            Builtin::CrossEntropy => {
                let logits = self.expr(&args[0])?;
                let logits = self.tensor(logits, span)?;
                let Value::Int(label) = self.expr(&args[1])? else {
                    return Err(self.unsupported(span, "this label"));
                };
                Ok(self.loss_node(LossBase::CrossEntropy { label }, &[logits], span))
            }
            Builtin::Mse => {
                let (a, c) = (self.expr(&args[0])?, self.expr(&args[1])?);
                let (a, c) = (self.tensor(a, span)?, self.tensor(c, span)?);
                Ok(self.loss_node(LossBase::Mse, &[a, c], span))
            }
            Builtin::Len => {
                let v = self.expr(&args[0])?;
                Ok(Value::Int(self.seq_len(&v, span)?))
            }
            Builtin::Range => match self.expr(&args[0])? {
                Value::Int(n) => Ok(Value::Range(StateExpr::Const(0), n)),
                _ => Err(self.unsupported(span, "this `range`")),
            },
            other => Err(self.unsupported(span, &format!("`{}`", other.name()))),
        }
    }

    pub(super) fn call_instance(
        &mut self,
        param: ParamRef,
        call: &InstanceCall,
        args: Vec<Value>,
        span: Span,
    ) -> R<Value> {
        // In a batched map's body only Linear layers (one GEMM over the rows), Embedding
        // lookups (one gather of table rows) and layers built of what the body may use
        // have a row-wise form; any other parameter kind sends the map back to the
        // per-element lowering.
        if self.rows.is_some()
            && !matches!(
                &*param.instance,
                Instance::Linear { .. } | Instance::Layer { .. } | Instance::Embedding { .. }
            )
        {
            return Err(self.not_row_wise());
        }
        match (&*param.instance, call) {
            (Instance::Linear { .. }, InstanceCall::Primitive) => {
                let x = args.into_iter().next().ok_or(Unsupported)?;
                let x = self.tensor(x, span)?;
                let out = self.param_shape(&format!("{}.weight", param.prefix), span)?.first().copied().unwrap_or(0);
                // A batched map's rows go through as one batch (one GEMM).
                let (mut dims, rows) = match &x.ty {
                    PayloadTy::F32(d) => (d.clone(), false),
                    PayloadTy::Batch(d) if self.rows.is_some() => (d.clone(), true),
                    PayloadTy::Unit | PayloadTy::Batch(_) => {
                        return Err(self.unsupported(span, "a batch into `Linear`"))
                    }
                };
                if let Some(last) = dims.last_mut() {
                    *last = out;
                }
                let ty = if rows { PayloadTy::Batch(dims) } else { PayloadTy::F32(dims) };
                let label = param.prefix.clone();
                let n = self.node(Op::Linear { param: param.prefix }, &[x], vec![ty.clone()], &label, span);
                Ok(Value::Tensor(Self::out(n, 0, ty)))
            }
            (Instance::LayerNorm { .. }, InstanceCall::Primitive) => {
                // `layer_norm(x)` (the vocabulary's row function), then the learned scale
                // and shift as one Ppt node that owns `NAME.weight` and `NAME.bias`.
                let x = args.into_iter().next().ok_or(Unsupported)?;
                let x = self.tensor(x, span)?;
                let ty = x.ty.clone();
                let normed = self.node(Op::Unary(UnaryFn::LayerNorm), &[x], vec![ty.clone()], "layer_norm", span);
                let label = param.prefix.clone();
                let n = self.node(
                    Op::Affine { param: param.prefix },
                    &[Self::out(normed, 0, ty.clone())],
                    vec![ty.clone()],
                    &label,
                    span,
                );
                Ok(Value::Tensor(Self::out(n, 0, ty)))
            }
            (Instance::Embedding { .. }, InstanceCall::Primitive) => {
                let Some(Value::Int(index)) = args.into_iter().next() else {
                    return Err(self.unsupported(span, "this embedding index"));
                };
                let d = self.param_shape(&format!("{}.weight", param.prefix), span)?.get(1).copied().unwrap_or(0);
                let ctrl = self.ctrl.clone();
                let label = param.prefix.clone();
                if let Some(rows) = self.rows.clone() {
                    // One lookup per row of the map: only an index that names the row has
                    // one value per row (a constant index would be one vector, not a batch).
                    let mut fields = Vec::new();
                    index.fields(&mut fields);
                    if !fields.contains(&rows.field) {
                        return Err(self.not_row_wise());
                    }
                    let ty = PayloadTy::Batch(vec![d]);
                    let op = Op::EmbeddingRows { param: param.prefix, field: rows.field, index, count: rows.count };
                    let n = self.node(op, &[ctrl], vec![ty.clone()], &label, span);
                    return Ok(Value::Tensor(Self::out(n, 0, ty)));
                }
                let ty = PayloadTy::F32(vec![d]);
                let n =
                    self.node(Op::Embedding { param: param.prefix, index }, &[ctrl], vec![ty.clone()], &label, span);
                Ok(Value::Tensor(Self::out(n, 0, ty)))
            }
            (Instance::Layer { layer, args: dims }, InstanceCall::LayerFn(fi)) => {
                let owner = &param.subst;
                let lookup = |s: &Symbol| owner.iter().find(|(x, _)| x == s).map(|(_, d)| d.clone());
                let hyper = &self.program.components[layer.0 as usize].hyperparams;
                let subst: Vec<(Symbol, Dim)> =
                    hyper.iter().zip(dims).map(|(h, d)| (h.symbol.clone(), d.substitute(&lookup))).collect();
                self.call_fn(FnId { component: *layer, index: *fi }, args, span, &param.prefix, &subst)
            }
            _ => Err(self.unsupported(span, "a call of this parameter")),
        }
    }

    // ------------------------------------------------------------ control flow
}
