//! Loops: `for x in xs`, `for i in a..b` and `while c`.
//!
//! A counter field `t` numbers the iterations: `isu t := start` on entry, a loop-header
//! `phi 2` (entry, back edge) per circulating value, `cond` (true: body, false: exit),
//! `isu t := t + 1` on the back edge, `isu t := -1` on exit (inverse: the count the loop
//! ended at, when the data tells it; else the value comes back from the cache).
//! Circulating values: every tensor the body reads or assigns, and the control, unless the
//! body only triggers reads, constants and lookups with it (then the first circulating
//! tensor's messages do, `Lowerer::trigger_from_data`). An int variable the body assigns
//! becomes a state field, set on entry, updated on the back edge (all at once, through
//! temporary fields, when several change, so that updates reading each other see the old
//! values), and cleared on exit.

use super::{Lowerer, Unsupported, R};
use crate::value::{LossVal, Port, Term, TermKind, Value};
use amp_diagnostics::Span;
use amp_ir::{DataStep, FieldId, FieldRole, IntOp, Op, StateExpr};
use amp_sema::{Block, Expr, LocalId, Pattern, Ty};
use petgraph::stable_graph::NodeIndex;
use petgraph::visit::EdgeRef;
use std::collections::BTreeSet;

/// A `for` loop's elements: the data path of the sequence and the element type.
type Element = (Vec<DataStep>, Ty);

#[derive(Clone, Copy)]
pub(super) enum Loop<'a> {
    For(&'a Pattern, &'a Expr),
    While(&'a Expr),
}

/// An int variable the loop updates: its field and its value before the loop.
struct IntVar {
    local: LocalId,
    field: FieldId,
    init: StateExpr,
}

impl Lowerer<'_> {
    pub(super) fn lower_loop(&mut self, kind: Loop<'_>, body: &Block) -> R<()> {
        let span = match kind {
            Loop::For(_, iter) => iter.span,
            Loop::While(cond) => cond.span,
        };
        // What the loop iterates over (`for`), and the counter's start.
        let (init, bound, elem): (StateExpr, Option<StateExpr>, Option<Element>) = match kind {
            Loop::For(_, iter) => match (self.expr(iter)?, &iter.ty) {
                (Value::Data(path), Ty::Seq(elem)) => {
                    (StateExpr::Const(0), Some(StateExpr::Len(path.clone())), Some((path, (**elem).clone())))
                }
                (Value::Range(a, b), _) => (a, Some(b), None),
                _ => return Err(self.unsupported(span, "a loop over a computed sequence")),
            },
            Loop::While(_) => (StateExpr::Const(0), None, None),
        };
        let (mut reads, writes) = Self::used_locals(body);
        if let Loop::While(cond) = kind {
            let mut cond_writes = Default::default();
            crate::uses::walk_expr(cond, &mut reads, &mut cond_writes);
        }
        let mut ints = Vec::new();
        for &id in &writes {
            if let Some(Value::Int(init) | Value::Bool(init)) = self.local(id) {
                let k = self.graph.state.len();
                let field = self.new_field(format!("v{k}"), FieldRole::Data, span)?;
                ints.push(IntVar { local: id, field, init });
            }
        }
        // Loss accumulators (`total = total + term`): a loss from the first iteration on,
        // whatever they started as; not circulated (a loss is the terms already emitted).
        let mut accumulators: BTreeSet<LocalId> =
            writes.iter().copied().filter(|&id| matches!(self.local(id), Some(Value::Loss(_)))).collect();
        crate::uses::loss_assignments(self.program, body, &mut accumulators);
        let mut losses: Vec<(LocalId, LossVal)> = Vec::new();
        for id in accumulators.into_iter().filter(|id| writes.contains(id)) {
            let init = match self.local(id) {
                Some(Value::Loss(l)) => l,
                Some(Value::Tensor(p)) => self.tensor_loss(p, span)?,
                _ => continue,
            };
            self.set_local(id, Value::Loss(init.clone()));
            losses.push((id, init));
        }
        let carried = self.tensor_locals(&reads.union(&writes).copied().collect());
        let k = self.loops;
        self.loops += 1;
        let t = self.new_field(format!("t{k}"), FieldRole::Counter, span)?;
        let counter = StateExpr::Field(t);
        // The counter's value at exit, when the data tells it: the bound, or the start
        // when the range is empty (a sequence's length is never below 0).
        let exit_value = bound.as_ref().map(|bound| exit_count(&init, bound));

        let mut ports: Vec<Port> = carried.iter().filter_map(|id| self.local(*id)).flat_map(|v| v.ports()).collect();
        ports.push(self.ctrl.clone());
        // Entry: the counter and the int variables get their first values. The nodes the
        // control's loop adds are kept aside: a control the body uses only as a trigger
        // does not loop on its own (see `Lowerer::trigger_from_data`).
        let mut control_nodes = Vec::new();
        let mut entries = Vec::with_capacity(ports.len());
        for (k, p) in ports.iter().enumerate() {
            let first = self.node_bound();
            let mut port = self.isu(p.clone(), t, init.clone(), Some(StateExpr::Const(-1)), "loop entry", span);
            for v in &ints {
                port = self.isu(port, v.field, v.init.clone(), Some(StateExpr::Const(-1)), "loop entry", span);
            }
            entries.push(port);
            if k + 1 == ports.len() {
                control_nodes.extend(first..self.node_bound());
            }
        }
        // Inside the loop, the int variables are their fields.
        let outer_ints: Vec<(LocalId, Option<Value>)> = ints.iter().map(|v| (v.local, self.local(v.local))).collect();
        for v in &ints {
            self.set_local(v.local, Value::Int(StateExpr::Field(v.field)));
        }
        let pred = match (kind, &bound) {
            (Loop::For(..), Some(bound)) => StateExpr::bin(IntOp::Lt, counter.clone(), bound.clone()),
            (Loop::While(cond), _) => match self.expr(cond)? {
                Value::Bool(p) | Value::Int(p) => p,
                _ => return Err(self.unsupported(cond.span, "a `while` condition that is not an int or bool")),
            },
            _ => return Err(Unsupported),
        };
        let outer = self.context.clone();
        let mut phis = Vec::new();
        let mut body_in = Vec::new();
        let mut exits = Vec::new();
        for entry in entries {
            let first = self.node_bound();
            let ty = entry.ty.clone();
            self.context.push(t);
            let phi = self.raw_node(Op::Phi { arms: 2 }, vec![ty.clone(); 2], vec![ty.clone()], "loop", span);
            self.connect(&entry, phi, 0);
            let test = Op::Cond { pred: pred.clone() };
            let cond = self.node(test, &[Self::out(phi, 0, ty.clone())], vec![ty.clone(); 2], "loop test", span);
            self.context = outer.clone();
            let mut exit = self.isu(
                Self::out(cond, 1, ty.clone()),
                t,
                StateExpr::Const(-1),
                exit_value.clone(),
                "loop exit",
                span,
            );
            for v in &ints {
                exit = self.isu(exit, v.field, StateExpr::Const(-1), None, "loop exit", span);
            }
            phis.push(phi);
            body_in.push(Self::out(cond, 0, ty));
            exits.push(exit);
            if phis.len() == ports.len() {
                control_nodes.extend(first..self.node_bound());
            }
        }
        // The first carried tensor's port in the body and after the loop, which can stand
        // in for the control: a batch's would cost its `forget` a cache of its rows and its
        // zero gradient a batch.
        let data_ports = ports[..ports.len() - 1]
            .iter()
            .position(|p| matches!(p.ty, amp_ir::PayloadTy::F32(_)))
            .map(|k| (body_in[k].clone(), exits[k].clone()));

        // The body, in the loop's context.
        self.context.push(t);
        let mut inside = body_in.into_iter();
        for id in &carried {
            if let Some(v) = self.local(*id) {
                let routed = v.with_ports(&mut inside);
                self.set_local(*id, routed);
            }
        }
        self.ctrl = inside.next().ok_or(Unsupported)?;
        let body_ctrl = self.ctrl.clone();
        if let Loop::For(pattern, _) = kind {
            let element = match elem {
                Some((mut path, ty)) => {
                    path.push(DataStep::Index(Box::new(counter.clone())));
                    self.data_leaf(path, &ty, span)?
                }
                None => Value::Int(counter.clone()),
            };
            self.bind(pattern, element, span)?;
        }
        for (id, _) in &losses {
            let carry =
                Term { node: NodeIndex::new(0), kind: TermKind::Carry { local: id.0 }, weight: 1.0, count: None };
            self.set_local(*id, Value::Loss(LossVal { terms: vec![carry] }));
        }
        let body_first = self.node_bound();
        self.block(body)?;
        let mut after_losses = Vec::with_capacity(losses.len());
        for (id, init) in losses {
            let Some(Value::Loss(l)) = self.local(id) else {
                return Err(self.loss_error(span, "a loss variable assigned a value that is not a loss in a loop"));
            };
            let is_carry = |t: &Term| t.kind == TermKind::Carry { local: id.0 };
            let carried_once = l.terms.iter().filter(|t| is_carry(t)).all(|t| t.weight == 1.0 && t.count.is_none())
                && l.terms.iter().any(is_carry);
            let fresh =
                l.terms.iter().all(|t| is_carry(t) || (t.kind == TermKind::Node && t.node.index() >= body_first));
            if !carried_once || !fresh {
                let what = "a loss in a loop that is not accumulated as `total = total + term` \
                            (kept unscaled from one iteration to the next, with terms computed in the loop)";
                return Err(self.loss_error(span, what));
            }
            let new = LossVal { terms: l.terms.into_iter().filter(|t| !is_carry(t)).collect() };
            let total = init.add(new).map_err(|why| self.loss_error(span, why))?;
            after_losses.push((id, total));
        }
        let mut ends: Vec<Port> = carried.iter().filter_map(|id| self.local(*id)).flat_map(|v| v.ports()).collect();
        let triggered = match &data_ports {
            Some((data, _)) if self.ctrl == body_ctrl => self.trigger_from_data(&body_ctrl, data, &control_nodes, span),
            _ => false,
        };
        if triggered {
            phis.pop();
            exits.pop();
        } else {
            ends.push(self.ctrl.clone());
        }
        if ends.len() != phis.len() {
            return Err(self.unsupported(span, "a loop whose carried values change structure (internal)"));
        }
        // The back edge: the int variables' updates, then the counter's step.
        let mut updates = Vec::new();
        for v in &ints {
            match self.local(v.local) {
                Some(Value::Int(e) | Value::Bool(e)) if e == StateExpr::Field(v.field) => {}
                Some(Value::Int(e) | Value::Bool(e)) => updates.push((v.field, e)),
                _ => return Err(self.unsupported(span, "an int variable assigned a value that is not an int")),
            }
        }
        let temps: Vec<FieldId> = if updates.len() > 1 {
            let mut temps = Vec::with_capacity(updates.len());
            for _ in &updates {
                let k = self.graph.state.len();
                temps.push(self.new_field(format!("v{k}"), FieldRole::Data, span)?);
            }
            temps
        } else {
            Vec::new()
        };
        for (end, &phi) in ends.iter().zip(&phis) {
            let mut port = end.clone();
            if temps.is_empty() {
                for (field, value) in &updates {
                    port = self.isu(port, *field, value.clone(), None, "loop update", span);
                }
            } else {
                for ((_, value), &temp) in updates.iter().zip(&temps) {
                    port = self.isu(port, temp, value.clone(), Some(StateExpr::Const(-1)), "loop update", span);
                }
                for ((field, _), &temp) in updates.iter().zip(&temps) {
                    port = self.isu(port, *field, StateExpr::Field(temp), None, "loop update", span);
                }
                for ((field, _), &temp) in updates.iter().zip(&temps) {
                    let restore = Some(StateExpr::Field(*field));
                    port = self.isu(port, temp, StateExpr::Const(-1), restore, "loop update", span);
                }
            }
            let step = StateExpr::bin(IntOp::Add, counter.clone(), StateExpr::Const(1));
            let back = StateExpr::bin(IntOp::Sub, counter.clone(), StateExpr::Const(1));
            port = self.isu(port, t, step, Some(back), "loop step", span);
            self.connect(&port, phi, 1);
        }
        self.context = outer;
        // After the loop: the carried values as they leave it; the int variables' fields
        // are cleared, so they cannot be read any more.
        let mut after = exits.into_iter();
        for id in &carried {
            if let Some(v) = self.local(*id) {
                let out = v.with_ports(&mut after);
                self.set_local(*id, out);
            }
        }
        self.ctrl = match (triggered, data_ports) {
            (true, Some((_, exit))) => {
                let ty = vec![amp_ir::PayloadTy::Unit];
                Self::out(self.node(Op::Forget, &[exit], ty, "loop trigger", span), 0, amp_ir::PayloadTy::Unit)
            }
            _ => after.next().ok_or(Unsupported)?,
        };
        for (id, total) in after_losses {
            self.set_local(id, Value::Loss(total));
        }
        for (id, before) in outer_ints {
            if before.is_some() {
                self.set_local(id, Value::LoopInt);
            }
        }
        Ok(())
    }

    /// Where the body used the loop's control `ctrl` (its `cond`'s body port, unchanged at
    /// the body's end) only to trigger nodes that read nothing of it (reads, constants,
    /// Embedding lookups), those nodes take `data`'s messages with their payload dropped
    /// (a `forget`) instead, and the control's own loop (`control_nodes`: its entry,
    /// `phi`, `cond` and exit) is retired: each iteration's messages of the control went
    /// through a `phi`, a `cond` and an `isu` of their own only to start those nodes.
    /// Whether it did so.
    fn trigger_from_data(&mut self, ctrl: &Port, data: &Port, control_nodes: &[usize], span: Span) -> bool {
        let uses: Vec<(petgraph::stable_graph::EdgeIndex, NodeIndex, u16)> = self
            .graph
            .nodes
            .edges_directed(ctrl.node, petgraph::Direction::Outgoing)
            .filter(|e| e.weight().from_port == ctrl.port)
            .map(|e| (e.id(), e.target(), e.weight().to_port))
            .collect();
        let trigger = |op: &Op| matches!(op, Op::Read { .. } | Op::Const { .. } | Op::Embedding { .. });
        if !uses.iter().all(|&(_, node, _)| trigger(&self.graph.nodes[node].op)) {
            return false;
        }
        if !uses.is_empty() {
            let unit = amp_ir::PayloadTy::Unit;
            let forget = self.node(Op::Forget, std::slice::from_ref(data), vec![unit.clone()], "loop trigger", span);
            for &(edge, node, port) in &uses {
                self.graph.nodes.remove_edge(edge);
                self.connect(&Self::out(forget, 0, unit.clone()), node, port);
            }
        }
        self.retired.extend(control_nodes.iter().map(|&n| NodeIndex::new(n)));
        true
    }

    /// `isu field := value` on `port`.
    pub(super) fn isu(
        &mut self,
        port: Port,
        field: FieldId,
        value: StateExpr,
        inverse: Option<StateExpr>,
        label: &str,
        span: Span,
    ) -> Port {
        let ty = port.ty.clone();
        let n = self.node(Op::Isu { field, value, inverse }, &[port], vec![ty.clone()], label, span);
        Self::out(n, 0, ty)
    }
}

/// The counter's value when `for t in init..bound` ends: `bound`, or `init` when the range
/// is empty.
pub(super) fn exit_count(init: &StateExpr, bound: &StateExpr) -> StateExpr {
    match (init, bound) {
        (StateExpr::Const(0), StateExpr::Len(_)) => bound.clone(),
        (StateExpr::Const(a), StateExpr::Const(b)) => StateExpr::Const(*a.max(b)),
        _ => StateExpr::bin(
            IntOp::Add,
            bound.clone(),
            StateExpr::bin(
                IntOp::Mul,
                StateExpr::bin(IntOp::Sub, init.clone(), bound.clone()),
                StateExpr::bin(IntOp::Gt, init.clone(), bound.clone()),
            ),
        ),
    }
}
