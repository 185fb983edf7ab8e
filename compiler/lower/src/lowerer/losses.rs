//! Losses anywhere: a model's loss is a weighted sum of terms, each a `cross_entropy`, an
//! `mse` or a scalar computed from tensors, and each term becomes a `loss` node where it is
//! computed (in a loop body, a `map` closure, a `match` arm, a recursive function's body),
//! so it reports once per message of that context. The executor sums what an instance's
//! loss nodes report, so the loss value the program carries is just the set of terms
//! already emitted, with their weights ([`LossVal`]); the weights and counts are written
//! into the nodes when the whole loss is known ([`Lowerer::finish_loss`]).
//!
//! That is exact only where every emitted term counts once per run of its context: a loss
//! may be added to, subtracted, scaled and divided by constants, summed or averaged over a
//! `map`, accumulated in a loop (`total = total + term`), differ between arms, and be summed
//! over a tree (each child's loss added once, unscaled). Anything else (a loss times a
//! run-time tensor, a product of losses, a carried loss scaled in a loop) is E0600.

use super::{Lowerer, R};
use crate::value::{LossVal, Port, Term, TermKind, Value};
use amp_diagnostics::Span;
use amp_grammar::ast::BinOp;
use amp_ir::{BinaryFn, ConstValue, IntOp, LossBase, LossKind, Op, PayloadTy, StateExpr, UnaryFn};
use petgraph::stable_graph::NodeIndex;
use petgraph::visit::EdgeRef;
use petgraph::Direction::Incoming;

impl Lowerer<'_> {
    /// A loss node for `base` on `inputs` in the current context, weight 1 until the loss
    /// is finished.
    pub(super) fn loss_node(&mut self, base: LossBase, inputs: &[Port], span: Span) -> Value {
        let judge = if matches!(base, LossBase::CrossEntropy { .. }) { self.judge() } else { None };
        let op = Op::Loss(LossKind::Term { base, weight: 1.0, count: None, judge });
        let n = self.node(op, inputs, Vec::new(), "loss", span);
        Value::Loss(LossVal::node(n))
    }

    /// Where a cross-entropy's verdict counts towards accuracy: once per instance, so at
    /// the instance's level, or inside traversals at their roots; never inside loops or
    /// maps (per-step terms are not the model's answer).
    fn judge(&self) -> Option<StateExpr> {
        let inner = self.context.get(1..).unwrap_or(&[]);
        if inner.len() != self.recursions.len() || inner.iter().zip(&self.recursions).any(|(f, r)| *f != r.node) {
            return None;
        }
        let roots = self.recursions.iter().map(|r| r.is_root.clone());
        Some(roots.reduce(|a, b| StateExpr::bin(IntOp::And, a, b)).unwrap_or(StateExpr::Const(1)))
    }

    /// E0600 for a loss used where only a weighted sum of terms can be lowered.
    pub(super) fn loss_error(&mut self, span: Span, what: &str) -> super::Unsupported {
        if self.diags.is_empty() {
            self.diags.push(
                amp_diagnostics::Diagnostic::new(
                    amp_diagnostics::Code::NotLowered,
                    span,
                    format!("{what} is not lowered"),
                )
                .with_primary("this loss cannot be lowered")
                .with_note(
                    "a loss must be a weighted sum of `cross_entropy`, `mse` and scalar tensor terms: \
                         add, subtract, scale or divide by constants, `sum`/`mean` over a `map`, \
                         `total = total + term` in a loop, and each child's loss added once in recursion",
                ),
            );
        }
        super::Unsupported
    }

    /// `x op y` where either side is a loss.
    pub(super) fn loss_binary(&mut self, op: BinOp, x: Value, y: Value, span: Span) -> R<Value> {
        let runtime = "a loss multiplied or divided by a tensor computed at run time (only constants can scale a loss)";
        match (op, x, y) {
            (BinOp::Add, a, b) => {
                let (a, b) = (self.as_loss(a, span)?, self.as_loss(b, span)?);
                self.sum(a, b, span)
            }
            (BinOp::Sub, a, b) => {
                let (a, b) = (self.as_loss(a, span)?, self.as_loss(b, span)?);
                self.sum(a, b.scale(-1.0), span)
            }
            (BinOp::Mul, Value::Loss(l), Value::Tensor(p)) | (BinOp::Mul, Value::Tensor(p), Value::Loss(l)) => {
                match self.const_scalar(&p, 0) {
                    Some(c) => Ok(Value::Loss(l.scale(c))),
                    None => Err(self.loss_error(span, runtime)),
                }
            }
            (BinOp::Div, Value::Loss(l), Value::Tensor(p)) => match self.const_scalar(&p, 0) {
                Some(c) if c != 0.0 => Ok(Value::Loss(l.scale(1.0 / c))),
                Some(_) => Err(self.loss_error(span, "a loss divided by zero")),
                None => Err(self.loss_error(span, runtime)),
            },
            (BinOp::Mul | BinOp::Div, Value::Loss(_), Value::Loss(_)) => {
                Err(self.loss_error(span, "a product or quotient of two losses"))
            }
            (BinOp::Div, _, Value::Loss(_)) => Err(self.loss_error(span, "a division by a loss")),
            _ => Err(self.loss_error(span, "this operation on a loss")),
        }
    }

    fn sum(&mut self, a: LossVal, b: LossVal, span: Span) -> R<Value> {
        a.add(b).map(Value::Loss).map_err(|why| self.loss_error(span, why))
    }

    /// `-loss`.
    pub(super) fn loss_neg(&mut self, l: LossVal) -> Value {
        Value::Loss(l.scale(-1.0))
    }

    /// A value added to a loss, as a loss: a loss, or a scalar tensor (a term of its own;
    /// inside recursion, a child's loss or a sum of them is that child's term).
    pub(super) fn as_loss(&mut self, v: Value, span: Span) -> R<LossVal> {
        match v {
            Value::Loss(l) => Ok(l),
            Value::Tensor(p) => self.tensor_loss(p, span),
            _ => Err(self.loss_error(span, "a loss combined with a value that is not a scalar tensor")),
        }
    }

    pub(super) fn tensor_loss(&mut self, p: Port, span: Span) -> R<LossVal> {
        if p.ty != PayloadTy::F32(Vec::new()) {
            return Err(self.loss_error(span, "a loss combined with a tensor that is not a scalar"));
        }
        if self.const_scalar(&p, 0) == Some(0.0) {
            return Ok(LossVal::default());
        }
        if self.has_child_loss(&p, 0) {
            return self.decompose(p, 1.0, span, 0);
        }
        let Value::Loss(l) = self.loss_node(LossBase::Scalar, &[p], span) else { return Ok(LossVal::default()) };
        Ok(l)
    }

    /// The input of `node` at `port`.
    fn input(&self, node: NodeIndex, port: u16) -> Option<Port> {
        let edge = self.graph.nodes.edges_directed(node, Incoming).find(|e| e.weight().to_port == port)?;
        let ty = self.graph.nodes[node].inputs.get(usize::from(port))?.clone();
        Some(Port { node: edge.source(), port: edge.weight().from_port, ty })
    }

    /// The value of a constant scalar expression (literals and arithmetic on them).
    fn const_scalar(&self, p: &Port, depth: u32) -> Option<f32> {
        if depth > 16 || p.ty != PayloadTy::F32(Vec::new()) {
            return None;
        }
        match &self.graph.nodes.node_weight(p.node)?.op {
            Op::Const { value: ConstValue::Scalar(v) } => Some(*v),
            Op::Const { value: ConstValue::Zeros } => Some(0.0),
            Op::Const { value: ConstValue::Ones } => Some(1.0),
            Op::Unary(UnaryFn::Neg) => self.const_scalar(&self.input(p.node, 0)?, depth + 1).map(|v| -v),
            Op::Binary(f) => {
                let a = self.const_scalar(&self.input(p.node, 0)?, depth + 1)?;
                let b = self.const_scalar(&self.input(p.node, 1)?, depth + 1)?;
                // Compared, not matched: the set of binary functions grows.
                [(BinaryFn::Add, a + b), (BinaryFn::Sub, a - b), (BinaryFn::Mul, a * b), (BinaryFn::Div, a / b)]
                    .into_iter()
                    .find(|(g, _)| g == f)
                    .map(|(_, v)| v)
            }
            _ => None,
        }
    }

    /// The recursive call site and result leaf whose child value `p` is, inside recursion.
    fn child_leaf(&self, p: &Port) -> Option<(u32, u32)> {
        self.recursions.last()?.scalar_leaves.get(&p.node).copied()
    }

    /// Whether `p` is a sum or difference with a child's scalar result among its terms.
    fn has_child_loss(&self, p: &Port, depth: u32) -> bool {
        if depth > 64 {
            return false;
        }
        if self.child_leaf(p).is_some() {
            return true;
        }
        match self.graph.nodes.node_weight(p.node).map(|n| &n.op) {
            Some(Op::Binary(BinaryFn::Add | BinaryFn::Sub)) => (0..2)
                .filter_map(|i| self.input(p.node, i))
                .any(|x| x.ty == PayloadTy::F32(Vec::new()) && self.has_child_loss(&x, depth + 1)),
            _ => false,
        }
    }

    /// `p` (a sum of children's results and other scalars) times `w` as loss terms: each
    /// child's result is that child's loss, anything else a scalar term.
    fn decompose(&mut self, p: Port, w: f32, span: Span, depth: u32) -> R<LossVal> {
        if let Some((site, leaf)) = self.child_leaf(&p) {
            if let Some(rec) = self.recursions.last_mut() {
                rec.loss_leaves.insert(leaf);
            }
            let term = Term { node: p.node, kind: TermKind::Child { site, leaf }, weight: w, count: None };
            return Ok(LossVal { terms: vec![term] });
        }
        let op = self.graph.nodes.node_weight(p.node).map(|n| n.op.clone());
        match op {
            Some(Op::Binary(f @ (BinaryFn::Add | BinaryFn::Sub))) if depth <= 64 && self.has_child_loss(&p, depth) => {
                let (Some(a), Some(b)) = (self.input(p.node, 0), self.input(p.node, 1)) else {
                    return Err(self.loss_error(span, "this sum of children's losses (internal)"));
                };
                let sign = if f == BinaryFn::Sub { -1.0 } else { 1.0 };
                let a = self.decompose(a, w, span, depth + 1)?;
                let b = self.decompose(b, w * sign, span, depth + 1)?;
                a.add(b).map_err(|why| self.loss_error(span, why))
            }
            _ => {
                let l = self.tensor_loss(p, span)?;
                Ok(l.scale(w))
            }
        }
    }

    /// `sum`/`mean` of a sequence of losses.
    pub(super) fn reduce_losses(&mut self, mean: bool, l: LossVal, count: StateExpr) -> Value {
        Value::Loss(if mean { l.over(&count) } else { l })
    }

    /// The loss a `map` closure gave, as a sequence of losses: every term must be computed
    /// in the closure (nodes from `first` on), or it would count once instead of per element.
    pub(super) fn loss_seq(&mut self, l: LossVal, count: StateExpr, first: usize, span: Span) -> R<Value> {
        if l.terms.iter().any(|t| t.kind != TermKind::Node || t.node.index() < first) {
            return Err(self.loss_error(span, "a `map` closure adding a loss computed outside it"));
        }
        Ok(Value::LossSeq(l, count))
    }

    /// The losses the arms of a branch gave, as one: a term emitted in an arm (nodes in
    /// `ranges[i]`) keeps its weight, as only that arm runs; a term from before the branch
    /// must weigh the same in every arm. Scalar tensors an arm gave become that arm's terms.
    pub(super) fn merge_losses(&mut self, values: Vec<Value>, span: Span) -> R<Value> {
        let mut ranges = self.arm_ranges.clone();
        ranges.resize(values.len(), (0, 0));
        let mut arms = Vec::with_capacity(values.len());
        for (i, v) in values.into_iter().enumerate() {
            let before = self.node_bound();
            let l = self.as_loss(v, span)?;
            let after = self.node_bound();
            arms.push((l, vec![ranges[i], (before, after)]));
        }
        let owner = |n: NodeIndex, arms: &[(LossVal, Vec<(usize, usize)>)]| {
            arms.iter().position(|(_, rs)| rs.iter().any(|&(lo, hi)| (lo..hi).contains(&n.index())))
        };
        let mut merged = LossVal::default();
        let mut seen: Vec<(NodeIndex, TermKind)> = Vec::new();
        for (l, _) in &arms {
            for t in &l.terms {
                if seen.iter().any(|(n, k)| *n == t.node && *k == t.kind) {
                    continue;
                }
                seen.push((t.node, t.kind.clone()));
                let find = |l: &LossVal| l.terms.iter().find(|s| s.node == t.node && s.kind == t.kind).cloned();
                let term = match owner(t.node, &arms) {
                    Some(i) if !matches!(t.kind, TermKind::Carry { .. }) => find(&arms[i].0),
                    _ => {
                        let all: Vec<Option<Term>> = arms.iter().map(|(l, _)| find(l)).collect();
                        if all.iter().any(|x| x != &all[0]) {
                            let what = "a loss from before a branch weighted differently in its arms";
                            return Err(self.loss_error(span, what));
                        }
                        all[0].clone()
                    }
                };
                if let Some(term) = term {
                    merged.terms.push(term);
                }
            }
        }
        Ok(Value::Loss(merged))
    }

    /// The finished loss of the model: writes each term's weight and count into its node,
    /// removes the loss nodes that are no part of it (computed and then dropped) and keeps
    /// the verdicts of the cross-entropies that judge the forward output, if any does.
    pub(super) fn finish_loss(&mut self, value: Value, span: Span) -> R<()> {
        let l = match value {
            Value::Loss(l) => l,
            Value::Tensor(p) => self.tensor_loss(p, span)?,
            _ => return Err(self.unsupported(span, "a `loss` that is not a scalar")),
        };
        if l.terms.iter().any(|t| t.kind != TermKind::Node) {
            return Err(self.loss_error(span, "a loss (internal: a child's or carried term left)"));
        }
        let losses: Vec<NodeIndex> =
            self.graph.nodes.node_indices().filter(|&n| matches!(self.graph.nodes[n].op, Op::Loss(_))).collect();
        let forward_judged = l.terms.iter().any(|t| self.judges_forward(t.node));
        for n in losses {
            let Some(term) = l.terms.iter().find(|t| t.node == n) else {
                self.graph.nodes.remove_node(n);
                continue;
            };
            let keep_verdict = !forward_judged || self.judges_forward(n);
            let Op::Loss(LossKind::Term { base, judge, .. }) = &self.graph.nodes[n].op else { continue };
            let judge = judge.clone().filter(|_| keep_verdict);
            let kind = plain(base.clone(), term.weight, term.count.clone(), judge);
            self.graph.nodes[n].op = Op::Loss(kind);
        }
        Ok(())
    }

    /// Whether loss node `n` is a cross-entropy of the forward function's output.
    fn judges_forward(&self, n: NodeIndex) -> bool {
        let is_ce = matches!(
            self.graph.nodes.node_weight(n).map(|x| &x.op),
            Some(Op::Loss(LossKind::Term { base: LossBase::CrossEntropy { .. }, .. }))
        );
        is_ce && self.input(n, 0).is_some_and(|p| self.forward_ports.contains(&(p.node, p.port)))
    }
}

/// The plainest kind of a finished term: the kinds of a model with one loss stay as they
/// were before losses could be combined.
fn plain(base: LossBase, weight: f32, count: Option<StateExpr>, judge: Option<StateExpr>) -> LossKind {
    let always = judge == Some(StateExpr::Const(1));
    match (base, weight == 1.0, count) {
        (LossBase::CrossEntropy { label }, true, None) if always => LossKind::CrossEntropy { label },
        (LossBase::CrossEntropy { label }, true, Some(count)) if always => LossKind::CrossEntropyMean { label, count },
        (LossBase::Mse, true, None) => LossKind::Mse,
        (base, _, count) => LossKind::Term { base, weight, count, judge },
    }
}
