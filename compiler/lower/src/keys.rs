//! Key derivation, and the walk that finds which locals a block uses.
//!
//! A node's key is the list of state fields identifying its dynamic context (the
//! instance, plus the counter of every enclosing loop), recorded while lowering. It is
//! kept only for nodes that need one: nodes that cache activations for the backward pass,
//! nodes that join several inputs (their messages are matched by key), and nodes whose
//! output fans out (their backward pass joins the gradients of all consumers). Every
//! other node gets an empty key: it remembers nothing. This is the minimal set that keeps
//! the activations of different instances and iterations apart. See `docs/IR.md`.

use amp_ir::{FieldId, Graph, Op};
use amp_sema::{Block, Expr, ExprKind, LocalId, Stmt};
use petgraph::stable_graph::NodeIndex;
use std::collections::{BTreeSet, HashMap};

/// Whether the op keeps something under its key for the backward pass.
fn caches(op: &Op) -> bool {
    match op {
        Op::Linear { .. } | Op::Unary(_) | Op::Binary(_) | Op::Phi { .. } | Op::Loss(_) => true,
        Op::Isu { inverse, .. } => inverse.is_none(),
        _ => false,
    }
}

pub(crate) fn assign_keys(graph: &mut Graph, context: &HashMap<NodeIndex, Vec<FieldId>>) {
    let indices: Vec<NodeIndex> = graph.nodes.node_indices().collect();
    for idx in indices {
        let Some(node) = graph.nodes.node_weight(idx) else { continue };
        let joins = node.inputs.len() >= 2;
        let fans_out = (0..node.outputs.len()).any(|port| {
            graph
                .nodes
                .edges_directed(idx, petgraph::Direction::Outgoing)
                .filter(|e| e.weight().from_port as usize == port)
                .count()
                >= 2
        });
        let needs_key = caches(&node.op) || joins || fans_out || matches!(node.op, Op::Split { .. });
        let key = if needs_key { context.get(&idx).cloned().unwrap_or_default() } else { Vec::new() };
        if let Some(node) = graph.nodes.node_weight_mut(idx) {
            node.key = key;
        }
    }
}

pub(crate) fn walk_block(block: &Block, reads: &mut BTreeSet<LocalId>, writes: &mut BTreeSet<LocalId>) {
    for stmt in &block.stmts {
        match stmt {
            Stmt::Let(_, e) | Stmt::Var(_, e) | Stmt::Expr(e) => walk_expr(e, reads, writes),
            Stmt::Assign(id, e) => {
                writes.insert(*id);
                walk_expr(e, reads, writes);
            }
            Stmt::For(_, iter, body) => {
                walk_expr(iter, reads, writes);
                walk_block(body, reads, writes);
            }
            Stmt::While(cond, body) => {
                walk_expr(cond, reads, writes);
                walk_block(body, reads, writes);
            }
        }
    }
    if let Some(tail) = &block.tail {
        walk_expr(tail, reads, writes);
    }
}

pub(crate) fn walk_expr(e: &Expr, reads: &mut BTreeSet<LocalId>, writes: &mut BTreeSet<LocalId>) {
    match &e.kind {
        ExprKind::Local(id) => {
            reads.insert(*id);
        }
        ExprKind::Unary(_, x) | ExprKind::Field(x, _) | ExprKind::TupleField(x, _) => walk_expr(x, reads, writes),
        ExprKind::Binary(_, a, b) | ExprKind::Range(a, b) | ExprKind::Index(a, b) => {
            walk_expr(a, reads, writes);
            walk_expr(b, reads, writes);
        }
        ExprKind::Builtin(_, xs) | ExprKind::CallFn(_, xs) | ExprKind::Tuple(xs) | ExprKind::List(xs) => {
            xs.iter().for_each(|x| walk_expr(x, reads, writes))
        }
        ExprKind::CallInstance { callee, args, .. } => {
            walk_expr(callee, reads, writes);
            args.iter().for_each(|x| walk_expr(x, reads, writes));
        }
        ExprKind::Map { seq, body, .. } => {
            walk_expr(seq, reads, writes);
            walk_expr(body, reads, writes);
        }
        ExprKind::If(c, then, els) => {
            walk_expr(c, reads, writes);
            walk_block(then, reads, writes);
            if let Some(e) = els {
                walk_expr(e, reads, writes);
            }
        }
        ExprKind::Match(s, arms) => {
            walk_expr(s, reads, writes);
            arms.iter().for_each(|a| walk_expr(&a.body, reads, writes));
        }
        ExprKind::Block(b) => walk_block(b, reads, writes),
        ExprKind::Int(_)
        | ExprKind::Float(_)
        | ExprKind::Bool(_)
        | ExprKind::Hyper(_)
        | ExprKind::Param(_)
        | ExprKind::Error => {}
    }
}
