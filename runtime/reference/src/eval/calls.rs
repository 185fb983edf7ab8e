//! Calls: functions of the running component (recursion included) and parameter instances
//! (`Linear`, `Embedding`, layer functions).

use super::{unevaluable, At, Ctx, Evaluator, Frame, Traversal, MAX_CALL_DEPTH, R};
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
        let entered = if def.recursive { self.enter_tree(id, def, &args) } else { None };
        let mut frame = Frame { def, ctx, locals: vec![None; def.locals.len()] };
        for (&p, a) in def.params.iter().zip(args) {
            frame.set(p, a, span)?;
        }
        self.depth += 1;
        let out = self.block(&mut frame, &def.body);
        self.depth -= 1;
        if let Some((context, started)) = entered {
            self.context = context;
            if started {
                self.traversals.pop();
            }
        }
        out
    }

    /// The context of a call of recursive function `id` on a tree, as the lowering's
    /// traversal has it: a call from outside starts a traversal whose nodes are numbered
    /// in pre-order, the argument node 0, on top of the caller's context; a call on a
    /// child replaces its parent's number with its own. Returns the context to restore
    /// after the call and whether a traversal started; `None` without a tree argument.
    fn enter_tree(&mut self, id: FnId, def: &amp_sema::FnDef, args: &[Val<'r>]) -> Option<(Vec<i64>, bool)> {
        let (root, tree, enum_id) =
            def.params.iter().zip(args).find_map(|(p, a)| match (a, def.locals.get(p.0 as usize)) {
                (Val::Variant(_, fields), Some(local)) => match local.ty {
                    amp_sema::Ty::Enum(e) => Some((a, fields, e)),
                    _ => None,
                },
                _ => None,
            })?;
        let key = tree_key(tree);
        let saved = self.context.clone();
        if let Some(t) = self.traversals.last().filter(|t| t.function == id) {
            if let Some(&number) = t.numbers.get(&key) {
                let base = t.base;
                self.context.truncate(base);
                self.context.push(number);
                return Some((saved, false));
            }
        }
        let numbers = number_tree(self.program, root, enum_id);
        self.traversals.push(Traversal { function: id, numbers, base: self.context.len() });
        self.context.push(0);
        Some((saved, true))
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
            (Bound::LayerNorm { weight, bias }, InstanceCall::Primitive) => {
                let [x] = &vals[..] else {
                    return Err(unevaluable(span, "a `LayerNorm` call without exactly one argument"));
                };
                let x = x.tensor().at(span)?;
                let normed = self.tape.unary(crate::tape::UnaryFn::LayerNorm, x).at(span)?;
                Ok(Val::Tensor(self.tape.affine(self.params, normed, *weight, *bias).at(span)?))
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

/// The address that identifies a tree node's value (its fields, shared by every copy).
fn tree_key(fields: &std::rc::Rc<[Val<'_>]>) -> usize {
    std::rc::Rc::as_ptr(fields) as *const u8 as usize
}

/// The pre-order number of every node of the tree `root` (an enum value of `enum_id`), by
/// [`tree_key`]: the value is node 0, then the subtrees of its recursive fields (of the
/// enum's own type, or collections of it, element by element) in field order, depth
/// first, as `amp-data` numbers `$.tree[%n]`. Walked with an explicit stack: data trees may be deep.
fn number_tree(
    program: &amp_sema::Program,
    root: &Val<'_>,
    enum_id: amp_sema::EnumId,
) -> std::collections::HashMap<usize, i64> {
    let mut numbers = std::collections::HashMap::new();
    let Some(def) = program.enums.get(enum_id.0 as usize) else { return numbers };
    let mut stack = vec![root];
    while let Some(value) = stack.pop() {
        let Val::Variant(tag, fields) = value else { continue };
        numbers.insert(tree_key(fields), numbers.len() as i64);
        let Some(variant) = def.variants.get(*tag as usize) else { continue };
        for (field, def) in fields.iter().zip(&variant.fields).rev() {
            match (&def.ty, field) {
                (amp_sema::Ty::Enum(e), _) if *e == enum_id => stack.push(field),
                // A collection of subtrees: its elements, in order.
                (amp_sema::Ty::Seq(item), Val::Seq(items)) if **item == amp_sema::Ty::Enum(enum_id) => {
                    stack.extend(items.iter().rev());
                }
                _ => {}
            }
        }
    }
    numbers
}
