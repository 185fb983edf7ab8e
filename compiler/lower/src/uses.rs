//! The walk that finds which locals a block reads and assigns (what a loop or a branch
//! must route through its control nodes).

use amp_sema::{Block, Expr, ExprKind, LocalId, Stmt};
use std::collections::BTreeSet;

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
