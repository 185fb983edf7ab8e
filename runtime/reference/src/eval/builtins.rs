//! The built-in functions (`relu` ... `scatter_sum`): argument values in, a value out,
//! tensor work on the tape.

use super::expr::int_range;
use super::{unevaluable, At, Evaluator, Frame, MAX_SEQ_LEN, R};
use crate::error::{ErrorKind, RefError};
use crate::tape::{self, BinaryFn, NodeId, UnaryFn};
use crate::value::Val;
use amp_sema::{Builtin, Expr, Ty};

impl<'r> Evaluator<'r> {
    /// The value of argument `i` of a built-in call `e`.
    fn arg(&mut self, f: &mut Frame<'r>, args: &'r [Expr], i: usize, e: &'r Expr) -> R<Val<'r>> {
        match args.get(i) {
            Some(a) => self.expr(f, a),
            None => Err(unevaluable(e.span, "a built-in call with arguments missing")),
        }
    }

    fn tensor_arg(&mut self, f: &mut Frame<'r>, args: &'r [Expr], i: usize, e: &'r Expr) -> R<NodeId> {
        let v = self.arg(f, args, i, e)?;
        v.tensor().at(args.get(i).map_or(e.span, |a| a.span))
    }

    fn int_arg(&mut self, f: &mut Frame<'r>, args: &'r [Expr], i: usize, e: &'r Expr) -> R<i64> {
        let v = self.arg(f, args, i, e)?;
        v.int().at(args.get(i).map_or(e.span, |a| a.span))
    }

    /// Dispatches a built-in call; each group is its own function, so that this frame,
    /// which recursion through built-in arguments nests, stays small.
    pub(super) fn builtin(&mut self, f: &mut Frame<'r>, b: Builtin, args: &'r [Expr], e: &'r Expr) -> R<Val<'r>> {
        match b {
            // A built-in named like a function of the IR's vocabulary is that function.
            Builtin::Unary(func) => self.unary_fn(f, func, args, e),
            Builtin::CrossEntropy | Builtin::Mse => self.loss(f, b, args, e),
            Builtin::Concat | Builtin::Split => self.join_or_split(f, b, args, e),
            Builtin::Zeros | Builtin::Ones => {
                let shape = self.shape_of(f.ctx, &e.ty, e.span)?;
                let value = if b == Builtin::Zeros { 0.0 } else { 1.0 };
                Ok(Val::Tensor(self.tape.fill(shape, value).at(e.span)?))
            }
            Builtin::TopK | Builtin::Argmax => self.select(f, b, args, e),
            Builtin::Sum | Builtin::Mean => self.reduce(f, b, args, e),
            Builtin::Len | Builtin::Zip | Builtin::Range => self.sequence(f, b, args, e),
            Builtin::ScatterSum => self.scatter_sum(f, args, e),
            Builtin::Dropout => self.dropout(f, args, e),
            Builtin::Dot => {
                let a = self.tensor_arg(f, args, 0, e)?;
                let b = self.tensor_arg(f, args, 1, e)?;
                let product = self.tape.binary(BinaryFn::Mul, a, b).at(e.span)?;
                Ok(Val::Tensor(self.tape.sum_all(product)))
            }
        }
    }

    /// `dropout(x, p)`: with a run's masks, `x` times `amp_ir::dropout::mask` of this call's
    /// site and context (a constant on the tape: the gradient passes through the kept
    /// units, scaled); the identity without.
    fn dropout(&mut self, f: &mut Frame<'r>, args: &'r [Expr], e: &'r Expr) -> R<Val<'r>> {
        let x = self.tensor_arg(f, args, 0, e)?;
        let Some(run) = self.dropout else {
            return Ok(Val::Tensor(x));
        };
        let p = match args.get(1).map(|a| &a.kind) {
            Some(amp_sema::ExprKind::Float(p)) => *p as f32,
            _ => return Err(unevaluable(e.span, "a dropout rate that is not a constant")),
        };
        let site = amp_ir::dropout::site(e.span.file.0, e.span.start);
        let shape = self.tape.shape(x).to_vec();
        let mask = amp_ir::dropout::mask(&run, site, &self.context, p, self.tape.value(x).len());
        let mask = self.tape.leaf(shape, mask).at(e.span)?;
        Ok(Val::Tensor(self.tape.binary(BinaryFn::Mul, x, mask).at(e.span)?))
    }

    /// `relu sigmoid tanh exp log softmax log_softmax`: the vocabulary's unary functions.
    fn unary_fn(&mut self, f: &mut Frame<'r>, func: UnaryFn, args: &'r [Expr], e: &'r Expr) -> R<Val<'r>> {
        let x = match self.arg(f, args, 0, e)? {
            Val::Seq(xs) if matches!(func, UnaryFn::Softmax | UnaryFn::LogSoftmax) => {
                return self.softmax_across(&xs, func == UnaryFn::LogSoftmax, e)
            }
            other => other.tensor().at(args.first().map_or(e.span, |a| a.span))?,
        };
        Ok(Val::Tensor(self.tape.unary(func, x).at(e.span)?))
    }

    /// `softmax` (`log_softmax` with `log`) across a sequence of scalars, from the tape's
    /// elementwise ops: `exp(x_i - m) / sum_j exp(x_j - m)` with `m` the largest element, a
    /// constant (the result does not depend on it, so neither does the gradient).
    fn softmax_across(&mut self, xs: &[Val<'r>], log: bool, e: &'r Expr) -> R<Val<'r>> {
        let ids: Vec<NodeId> = xs.iter().map(|x| x.tensor().at(e.span)).collect::<R<_>>()?;
        let max = ids.iter().flat_map(|&id| self.tape.value(id).iter().copied()).fold(f32::NEG_INFINITY, f32::max);
        let m = self.tape.scalar(if max.is_finite() { max } else { 0.0 });
        let mut shifted = Vec::with_capacity(ids.len());
        let mut exps = Vec::with_capacity(ids.len());
        for &x in &ids {
            let s = self.tape.binary(BinaryFn::Sub, x, m).at(e.span)?;
            shifted.push(s);
            exps.push(self.tape.unary(UnaryFn::Exp, s).at(e.span)?);
        }
        let total = self.tape.add_n(&exps, Vec::new()).at(e.span)?;
        let out: Vec<Val<'r>> = if log {
            let log_total = self.tape.unary(UnaryFn::Log, total).at(e.span)?;
            shifted
                .iter()
                .map(|&s| self.tape.binary(BinaryFn::Sub, s, log_total).map(Val::Tensor))
                .collect::<Result<_, _>>()
                .at(e.span)?
        } else {
            exps.iter()
                .map(|&x| self.tape.binary(BinaryFn::Div, x, total).map(Val::Tensor))
                .collect::<Result<_, _>>()
                .at(e.span)?
        };
        Ok(Val::Seq(out.into()))
    }

    /// `cross_entropy mse`.
    fn loss(&mut self, f: &mut Frame<'r>, b: Builtin, args: &'r [Expr], e: &'r Expr) -> R<Val<'r>> {
        let x = self.tensor_arg(f, args, 0, e)?;
        let out = match b {
            Builtin::CrossEntropy => {
                let label = self.int_arg(f, args, 1, e)?;
                self.tape.cross_entropy(x, label)
            }
            Builtin::Mse => {
                let target = self.tensor_arg(f, args, 1, e)?;
                self.tape.mse(x, target)
            }
            _ => return Err(unevaluable(e.span, "a built-in that is not a loss")),
        };
        Ok(Val::Tensor(out.at(e.span)?))
    }

    /// `concat(a, b, ...)` and `split(v, parts)`.
    fn join_or_split(&mut self, f: &mut Frame<'r>, b: Builtin, args: &'r [Expr], e: &'r Expr) -> R<Val<'r>> {
        let span = e.span;
        if b == Builtin::Concat {
            let parts = (0..args.len()).map(|i| self.tensor_arg(f, args, i, e)).collect::<R<Vec<NodeId>>>()?;
            return Ok(Val::Tensor(self.tape.concat(&parts).at(span)?));
        }
        let x = self.tensor_arg(f, args, 0, e)?;
        let parts = self.int_arg(f, args, 1, e)?;
        let parts = usize::try_from(parts)
            .map_err(|_| RefError::new(span, ErrorKind::Shape { op: "split", detail: format!("{parts} parts") }))?;
        let ids = self.tape.split(x, parts).at(span)?;
        Ok(Val::Tuple(ids.into_iter().map(Val::Tensor).collect::<Vec<_>>().into()))
    }

    /// `top_k(v, k)` (indices and values, gradient through the values) and `argmax(v)`.
    fn select(&mut self, f: &mut Frame<'r>, b: Builtin, args: &'r [Expr], e: &'r Expr) -> R<Val<'r>> {
        let span = e.span;
        let x = self.tensor_arg(f, args, 0, e)?;
        if b == Builtin::TopK {
            let k = self.int_arg(f, args, 1, e)?;
            let (indices, values) = self.tape.top_k(x, k).at(span)?;
            let indices: Vec<Val<'r>> = indices.into_iter().map(|i| Val::Int(i as i64)).collect();
            return Ok(Val::Tuple(vec![Val::Seq(indices.into()), Val::Tensor(values)].into()));
        }
        match tape::argmax(self.tape.value(x)) {
            Some(i) => Ok(Val::Int(i as i64)),
            None => {
                let detail = "of a tensor without elements".to_string();
                Err(RefError::new(span, ErrorKind::Shape { op: "argmax", detail }))
            }
        }
    }

    /// `len(xs)`, `zip(a, b)`, `range(n)`.
    fn sequence(&mut self, f: &mut Frame<'r>, b: Builtin, args: &'r [Expr], e: &'r Expr) -> R<Val<'r>> {
        let span = e.span;
        match b {
            Builtin::Len => {
                let xs = self.arg(f, args, 0, e)?;
                Ok(Val::Int(xs.seq().at(span)?.len() as i64))
            }
            Builtin::Zip => {
                let a = self.arg(f, args, 0, e)?;
                let c = self.arg(f, args, 1, e)?;
                let (a, c) = (a.seq().at(span)?, c.seq().at(span)?);
                // Sequences of one length, as the compiled graph requires (docs/language.md):
                // its element context has one message per element of each sequence.
                if a.len() != c.len() {
                    return Err(RefError::new(
                        span,
                        ErrorKind::LengthMismatch { what: "`zip` operands", left: a.len(), right: c.len() },
                    ));
                }
                let pairs: Vec<Val<'r>> =
                    a.iter().zip(c.iter()).map(|(x, y)| Val::Tuple(vec![x.clone(), y.clone()].into())).collect();
                Ok(Val::Seq(pairs.into()))
            }
            _ => {
                let n = self.int_arg(f, args, 0, e)?;
                int_range(0, n).at(span)
            }
        }
    }

    /// `sum`/`mean` of a sequence of tensors (elementwise), of a sequence of ints (`sum`
    /// only), or of one tensor (all its elements, a scalar).
    fn reduce(&mut self, f: &mut Frame<'r>, b: Builtin, args: &'r [Expr], e: &'r Expr) -> R<Val<'r>> {
        let span = e.span;
        match self.arg(f, args, 0, e)? {
            Val::Tensor(x) => {
                let out = if b == Builtin::Sum { self.tape.sum_all(x) } else { self.tape.mean_all(x).at(span)? };
                Ok(Val::Tensor(out))
            }
            Val::Seq(items) if e.ty == Ty::Int => {
                let mut total: i64 = 0;
                for item in items.iter() {
                    total = total.checked_add(item.int().at(span)?).ok_or(RefError::new(span, ErrorKind::Overflow))?;
                }
                Ok(Val::Int(total))
            }
            Val::Seq(items) => {
                let ids = items.iter().map(|v| v.tensor().at(span)).collect::<R<Vec<NodeId>>>()?;
                let shape = self.shape_of(f.ctx, &e.ty, span)?;
                if b == Builtin::Mean && ids.is_empty() {
                    return Err(RefError::new(span, ErrorKind::EmptyMean));
                }
                let total = self.tape.add_n(&ids, shape).at(span)?;
                let out = if b == Builtin::Sum { total } else { self.tape.scale(total, 1.0 / ids.len() as f32) };
                Ok(Val::Tensor(out))
            }
            other => Err(RefError::new(
                span,
                ErrorKind::Type { expected: "a tensor or a sequence", found: other.kind_name() },
            )),
        }
    }

    /// `scatter_sum(values, index, n)`: `n` tensors, the `j`-th the sum of the values whose
    /// index is `j` (zeros where there is none).
    fn scatter_sum(&mut self, f: &mut Frame<'r>, args: &'r [Expr], e: &'r Expr) -> R<Val<'r>> {
        let span = e.span;
        let values = self.arg(f, args, 0, e)?;
        let index = self.arg(f, args, 1, e)?;
        let n = self.int_arg(f, args, 2, e)?;
        let (values, index) = (values.seq().at(span)?, index.seq().at(span)?);
        if values.len() != index.len() {
            return Err(RefError::new(
                span,
                ErrorKind::LengthMismatch {
                    what: "`scatter_sum` values and index",
                    left: values.len(),
                    right: index.len(),
                },
            ));
        }
        if n < 0 {
            let detail = format!("{n} destinations");
            return Err(RefError::new(span, ErrorKind::Shape { op: "scatter_sum", detail }));
        }
        if n > MAX_SEQ_LEN {
            let (count, limit) = (n as u128, MAX_SEQ_LEN as u128);
            return Err(RefError::new(span, ErrorKind::TooLarge { what: "`scatter_sum` destinations", count, limit }));
        }
        let elem = match &e.ty {
            Ty::Seq(elem) => &**elem,
            _ => return Err(unevaluable(span, "a `scatter_sum` whose type is not a sequence")),
        };
        let shape = self.shape_of(f.ctx, elem, span)?;
        let mut groups: Vec<Vec<NodeId>> = vec![Vec::new(); n as usize];
        for (v, i) in values.iter().zip(index.iter()) {
            let i = i.int().at(span)?;
            let Some(group) = usize::try_from(i).ok().and_then(|i| groups.get_mut(i)) else {
                return Err(RefError::new(span, ErrorKind::ScatterIndexOutOfRange { index: i, n }));
            };
            group.push(v.tensor().at(span)?);
        }
        let out = groups
            .iter()
            .map(|g| self.tape.add_n(g, shape.clone()).map(Val::Tensor).at(span))
            .collect::<R<Vec<Val<'r>>>>()?;
        Ok(Val::Seq(out.into()))
    }
}
