//! The interpreter of the typed AST: function frames, blocks, statements and patterns.
//! Expressions are in `expr.rs`, built-in functions in `builtins.rs`, calls of functions
//! and parameter instances in `calls.rs`.
//!
//! Every tensor operation goes on the [`Tape`]; ints, bools and control flow are plain
//! Rust values and have no gradient. Recursion of the program is recursion of the
//! interpreter, bounded by [`MAX_CALL_DEPTH`] (the caller runs it on a large stack).

mod builtins;
mod calls;
mod expr;

use crate::error::{ErrorKind, RefError};
use crate::params::{dim_value, Bound};
use crate::tape::Tape;
use crate::value::Val;
use amp_grammar::Span;
use amp_ir::dropout::DropoutRun;
use amp_params::ParamSet;
use amp_sema::{Block, ComponentId, Dim, FnDef, LocalId, Pattern, Program, Stmt, Symbol, Ty};

/// Calls (of the program's functions and layers) may nest this deep.
pub(crate) const MAX_CALL_DEPTH: usize = 2_000;
/// A `while` loop may run this many iterations before it is taken for non-terminating.
pub(crate) const MAX_WHILE_ITERATIONS: u64 = 1 << 20;
/// A range or a scatter destination count may have this many elements.
pub(crate) const MAX_SEQ_LEN: i64 = 1 << 24;

pub(crate) type R<T> = Result<T, RefError>;

/// Attaches the span being evaluated to an error of a lower layer (tape, values).
pub(crate) trait At<T> {
    fn at(self, span: Span) -> R<T>;
}

impl<T> At<T> for Result<T, ErrorKind> {
    fn at(self, span: Span) -> R<T> {
        self.map_err(|kind| RefError::new(span, kind))
    }
}

pub(crate) fn unevaluable(span: Span, what: &str) -> RefError {
    RefError::new(span, ErrorKind::Unevaluable { what: what.to_string() })
}

/// A structural recursion over a tree, as the lowering runs it: once per tree node, the
/// nodes numbered in pre-order (the data's `$.tree[%n]`).
pub(crate) struct Traversal {
    pub function: amp_sema::FnId,
    /// Each node's number, by the address of its fields (shared by every copy of the
    /// value, so a child bound by `match` finds its number).
    pub numbers: std::collections::HashMap<usize, i64>,
    /// The context's length outside the traversal; the node's number comes next.
    pub base: usize,
}

/// Whose function is running: the component, its bound params, and (in a layer) the
/// values of the layer's hyperparameters.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Ctx<'r> {
    pub component: ComponentId,
    pub params: &'r [Bound],
    pub hyper: &'r [(Symbol, i64)],
}

/// One activation of a function: its locals by [`LocalId`] (unset until bound).
pub(crate) struct Frame<'r> {
    def: &'r FnDef,
    ctx: Ctx<'r>,
    locals: Vec<Option<Val<'r>>>,
}

impl<'r> Frame<'r> {
    fn set(&mut self, id: LocalId, value: Val<'r>, span: Span) -> R<()> {
        match self.locals.get_mut(id.0 as usize) {
            Some(slot) => {
                *slot = Some(value);
                Ok(())
            }
            None => Err(unevaluable(span, "a variable this function does not declare")),
        }
    }

    fn get(&self, id: LocalId, span: Span) -> R<Val<'r>> {
        match self.locals.get(id.0 as usize) {
            Some(Some(v)) => Ok(v.clone()),
            _ => Err(unevaluable(span, "a variable read before it has a value")),
        }
    }
}

/// The interpreter state of one evaluation.
pub(crate) struct Evaluator<'r> {
    pub program: &'r Program,
    pub params: &'r ParamSet,
    pub tape: Tape,
    /// Whose masks `dropout` applies; `None`: dropout is the identity.
    pub dropout: Option<DropoutRun>,
    /// The values the compiled graph's context fields hold here, outermost first, the
    /// instance left out: a loop's counter per enclosing loop, the element's index per
    /// enclosing `map`, the tree node's pre-order number per enclosing traversal. What a
    /// dropout mask hashes, as the executor hashes the fields of `Op::Dropout`'s context.
    pub(crate) context: Vec<i64>,
    /// The structural recursions running, innermost last.
    pub(crate) traversals: Vec<Traversal>,
    depth: usize,
    /// The address of a local of the thread's first frame, and how many bytes below (or
    /// above) it evaluation may use: the backstop behind [`MAX_CALL_DEPTH`] for programs
    /// whose every call sits deep inside one expression.
    stack_base: usize,
    stack_budget: usize,
}

/// An address in the current stack frame.
fn stack_position() -> usize {
    let marker = 0u8;
    std::hint::black_box(&marker) as *const u8 as usize
}

impl<'r> Evaluator<'r> {
    /// An evaluator that may use `stack_budget` bytes of stack below the caller's frame.
    pub fn new(program: &'r Program, params: &'r ParamSet, stack_budget: usize) -> Evaluator<'r> {
        Evaluator {
            program,
            params,
            tape: Tape::new(),
            dropout: None,
            context: Vec::new(),
            traversals: Vec::new(),
            depth: 0,
            stack_base: stack_position(),
            stack_budget,
        }
    }

    /// Refuses to nest further when the stack budget is spent.
    fn check_stack(&self, span: Span) -> R<()> {
        if stack_position().abs_diff(self.stack_base) > self.stack_budget {
            return Err(RefError::new(span, ErrorKind::StackLimit { bytes: self.stack_budget }));
        }
        Ok(())
    }

    /// The value of a dimension (a hyperparameter, constant or shape) in `ctx`.
    fn dim(&self, ctx: Ctx<'r>, dim: &Dim, span: Span) -> R<i64> {
        dim_value(dim, ctx.hyper).ok_or_else(|| unevaluable(span, &format!("the dimension `{dim}` (it has no value)")))
    }

    /// The concrete shape of a tensor type in `ctx`.
    fn shape_of(&self, ctx: Ctx<'r>, ty: &Ty, span: Span) -> R<Vec<usize>> {
        let Ty::Tensor(dims) = ty else {
            return Err(unevaluable(span, "the shape of an expression whose type is not a tensor"));
        };
        dims.iter()
            .map(|d| {
                let v = self.dim(ctx, d, span)?;
                usize::try_from(v).map_err(|_| unevaluable(span, &format!("a tensor with dimension {v}")))
            })
            .collect()
    }

    /// Runs `work` with `word` on top of the context (a loop's counter, an element's index).
    pub(crate) fn in_context<T>(&mut self, word: i64, work: impl FnOnce(&mut Self) -> R<T>) -> R<T> {
        self.context.push(word);
        let out = work(self);
        self.context.pop();
        out
    }

    fn block(&mut self, f: &mut Frame<'r>, block: &'r Block) -> R<Val<'r>> {
        for stmt in &block.stmts {
            self.stmt(f, stmt)?;
        }
        match &block.tail {
            Some(tail) => self.expr(f, tail),
            None => Ok(Val::unit()),
        }
    }

    fn stmt(&mut self, f: &mut Frame<'r>, stmt: &'r Stmt) -> R<()> {
        match stmt {
            Stmt::Let(pattern, value) => {
                let v = self.expr(f, value)?;
                bind(f, pattern, v, value.span)
            }
            Stmt::Var(id, value) | Stmt::Assign(id, value) => {
                let v = self.expr(f, value)?;
                f.set(*id, v, value.span)
            }
            Stmt::For(pattern, iter, body) => self.for_loop(f, pattern, iter, body),
            Stmt::While(cond, body) => {
                let mut iterations: u64 = 0;
                // The lowering's counter starts at 0; the condition is tested in the
                // loop's context too, with the counter of the iteration it would start.
                loop {
                    self.context.push(iterations as i64);
                    let go = self.expr(f, cond).and_then(|v| v.bool().at(cond.span));
                    let go = match go {
                        Ok(true) => self.block(f, body).map(|_| true),
                        other => other,
                    };
                    self.context.pop();
                    if !go? {
                        return Ok(());
                    }
                    iterations += 1;
                    if iterations > MAX_WHILE_ITERATIONS {
                        return Err(RefError::new(cond.span, ErrorKind::LoopLimit { limit: MAX_WHILE_ITERATIONS }));
                    }
                }
            }
            Stmt::Expr(e) => self.expr(f, e).map(drop),
        }
    }

    fn for_loop(
        &mut self,
        f: &mut Frame<'r>,
        pattern: &'r Pattern,
        iter: &'r amp_sema::Expr,
        body: &'r Block,
    ) -> R<()> {
        // A range is counted through without building the sequence.
        if let amp_sema::ExprKind::Range(lo, hi) = &iter.kind {
            let lo = self.expr(f, lo)?.int().at(lo.span)?;
            let hi = self.expr(f, hi)?.int().at(hi.span)?;
            check_range_len(lo, hi).at(iter.span)?;
            // The lowering's counter runs from the range's start.
            for i in lo..hi {
                bind(f, pattern, Val::Int(i), iter.span)?;
                self.in_context(i, |ev| ev.block(f, body))?;
            }
            return Ok(());
        }
        let items = self.expr(f, iter)?.seq().at(iter.span)?.clone();
        for (i, item) in items.iter().enumerate() {
            bind(f, pattern, item.clone(), iter.span)?;
            self.in_context(i as i64, |ev| ev.block(f, body))?;
        }
        Ok(())
    }
}

/// Refuses ranges longer than [`MAX_SEQ_LEN`].
pub(crate) fn check_range_len(lo: i64, hi: i64) -> Result<(), ErrorKind> {
    let len = i128::from(hi) - i128::from(lo);
    if len > i128::from(MAX_SEQ_LEN) {
        return Err(ErrorKind::TooLarge { what: "a range", count: len as u128, limit: MAX_SEQ_LEN as u128 });
    }
    Ok(())
}

/// Binds an irrefutable pattern (let, for, closure parameter, match field) to a value.
fn bind<'r>(f: &mut Frame<'r>, pattern: &Pattern, value: Val<'r>, span: Span) -> R<()> {
    match pattern {
        Pattern::Bind(id) => f.set(*id, value, span),
        Pattern::Wildcard => Ok(()),
        Pattern::Tuple(parts) => match value {
            Val::Tuple(items) if items.len() == parts.len() => {
                for (p, v) in parts.iter().zip(items.iter()) {
                    bind(f, p, v.clone(), span)?;
                }
                Ok(())
            }
            Val::Tuple(items) => Err(RefError::new(
                span,
                ErrorKind::LengthMismatch { what: "tuple pattern and value", left: parts.len(), right: items.len() },
            )),
            other => Err(RefError::new(span, ErrorKind::Type { expected: "a tuple", found: other.kind_name() })),
        },
    }
}
