//! Calls: functions of the running component (recursion included) and parameter instances
//! (`Linear`, `Embedding`, layer functions).

use super::{unevaluable, At, Ctx, Evaluator, Frame, MAX_CALL_DEPTH, R};
use crate::error::{ErrorKind, RefError};
use crate::params::Bound;
use crate::value::Val;
use amp_grammar::Span;
use amp_sema::{Expr, FnId, InstanceCall};

impl<'r> Evaluator<'r> {
    /// Calls function `id` with `args` in context `ctx` (whose component owns it).
    pub(crate) fn call_fn(&mut self, ctx: Ctx<'r>, id: FnId, args: Vec<Val<'r>>, span: Span) -> R<Val<'r>> {
        if self.depth >= MAX_CALL_DEPTH {
            return Err(RefError::new(span, ErrorKind::RecursionLimit { limit: MAX_CALL_DEPTH }));
        }
        if id.component != ctx.component {
            return Err(unevaluable(span, "a call of another component's function without its instance"));
        }
        let program = self.program;
        let Some(def) = program.components.get(id.component.0 as usize).and_then(|c| c.fns.get(id.index as usize))
        else {
            return Err(unevaluable(span, "a call of a function that does not exist"));
        };
        if def.params.len() != args.len() {
            return Err(RefError::new(
                span,
                ErrorKind::LengthMismatch {
                    what: "parameters and arguments",
                    left: def.params.len(),
                    right: args.len(),
                },
            ));
        }
        let mut frame = Frame { def, ctx, locals: vec![None; def.locals.len()] };
        for (&p, a) in def.params.iter().zip(args) {
            frame.set(p, a, span)?;
        }
        self.depth += 1;
        let out = self.block(&mut frame, &def.body);
        self.depth -= 1;
        out
    }

    /// `cell(x)`, `expert[i](x)`, `tree.leaf(x)`.
    pub(super) fn call_instance(
        &mut self,
        f: &mut Frame<'r>,
        callee: &'r Expr,
        call: &InstanceCall,
        args: &'r [Expr],
        span: Span,
    ) -> R<Val<'r>> {
        let bound = match self.expr(f, callee)? {
            Val::Instance(bound) => bound,
            other => {
                let found = other.kind_name();
                return Err(RefError::new(callee.span, ErrorKind::Type { expected: "a parameter instance", found }));
            }
        };
        let mut vals = self.exprs(f, args)?;
        match (bound, call) {
            (Bound::Linear { weight, bias }, InstanceCall::Primitive) => {
                let [x] = &vals[..] else {
                    return Err(unevaluable(span, "a `Linear` call without exactly one argument"));
                };
                let x = x.tensor().at(span)?;
                Ok(Val::Tensor(self.tape.linear(self.params, x, *weight, *bias).at(span)?))
            }
            (Bound::Embedding { weight }, InstanceCall::Primitive) => {
                let [index] = &vals[..] else {
                    return Err(unevaluable(span, "an `Embedding` call without exactly one argument"));
                };
                let index = index.int().at(span)?;
                Ok(Val::Tensor(self.tape.embedding(self.params, *weight, index).at(span)?))
            }
            (Bound::Layer { component, hyper, params }, InstanceCall::LayerFn(index)) => {
                let ctx = Ctx { component: *component, params, hyper };
                let id = FnId { component: *component, index: *index };
                self.call_fn(ctx, id, std::mem::take(&mut vals), span)
            }
            _ => Err(unevaluable(span, "this call of a parameter instance")),
        }
    }
}
