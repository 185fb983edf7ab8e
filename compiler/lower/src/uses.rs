//! The walk that finds which locals a block reads and assigns (what a loop or a branch
//! must route through its control nodes).

use amp_sema::{Block, Builtin, Expr, ExprKind, LocalId, Program, Stmt};
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

/// The locals a block assigns a loss to (`total = total + cross_entropy(..)`): assignments
/// whose expression computes a `cross_entropy` or `mse`, calls a function of the program
/// that does, or reads a local already found (or in `losses`). A loop lowers such a local
/// as a loss from its first iteration on, even if it started as a tensor (`0.0`).
pub(crate) fn loss_assignments(program: &Program, block: &Block, losses: &mut BTreeSet<LocalId>) {
    // A fixpoint: `a = a + ce(..); b = b + a` makes `b` a loss too.
    loop {
        let before = losses.len();
        let mut found = Vec::new();
        walk_assignments(block, &mut |id, e| {
            if computes_loss(program, e, losses, 0) {
                found.push(id);
            }
        });
        losses.extend(found);
        if losses.len() == before {
            return;
        }
    }
}

fn walk_assignments(block: &Block, f: &mut dyn FnMut(LocalId, &Expr)) {
    let inner = |e: &Expr, f: &mut dyn FnMut(LocalId, &Expr)| {
        for_blocks(e, &mut |b| walk_assignments(b, f));
    };
    for stmt in &block.stmts {
        match stmt {
            Stmt::Assign(id, e) => {
                f(*id, e);
                inner(e, f);
            }
            Stmt::Let(_, e) | Stmt::Var(_, e) | Stmt::Expr(e) => inner(e, f),
            Stmt::For(_, _, body) | Stmt::While(_, body) => walk_assignments(body, f),
        }
    }
    if let Some(tail) = &block.tail {
        inner(tail, f);
    }
}

/// Calls `f` on the blocks directly inside `e` (of `if`s and block expressions).
fn for_blocks(e: &Expr, f: &mut dyn FnMut(&Block)) {
    match &e.kind {
        ExprKind::If(_, then, els) => {
            f(then);
            if let Some(e) = els {
                for_blocks(e, f);
            }
        }
        ExprKind::Block(b) => f(b),
        ExprKind::Match(_, arms) => arms.iter().for_each(|a| for_blocks(&a.body, f)),
        _ => {}
    }
}

/// Whether `e` computes a loss (see [`loss_assignments`]); calls are followed 8 deep.
pub(crate) fn computes_loss(program: &Program, e: &Expr, losses: &BTreeSet<LocalId>, depth: u32) -> bool {
    let mut found = false;
    visit(e, &mut |x| match &x.kind {
        ExprKind::Builtin(Builtin::CrossEntropy | Builtin::Mse, _) => found = true,
        ExprKind::Local(id) if losses.contains(id) => found = true,
        ExprKind::CallFn(f, _) if depth < 8 && !found => {
            let def = &program.components[f.component.0 as usize].fns[f.index as usize];
            let mut inner = false;
            visit_block(&def.body, &mut |y| {
                if !inner {
                    inner = matches!(&y.kind, ExprKind::CallFn(..))
                        && computes_loss(program, y, &BTreeSet::new(), depth + 1)
                        || matches!(&y.kind, ExprKind::Builtin(Builtin::CrossEntropy | Builtin::Mse, _));
                }
            });
            found |= inner;
        }
        _ => {}
    });
    found
}

fn visit_block(b: &Block, f: &mut dyn FnMut(&Expr)) {
    for stmt in &b.stmts {
        match stmt {
            Stmt::Let(_, x) | Stmt::Var(_, x) | Stmt::Expr(x) | Stmt::Assign(_, x) => visit(x, f),
            Stmt::For(_, x, body) | Stmt::While(x, body) => {
                visit(x, f);
                visit_block(body, f);
            }
        }
    }
    if let Some(t) = &b.tail {
        visit(t, f);
    }
}

/// Calls `f` on every expression inside `e`, `e` included.
fn visit(e: &Expr, f: &mut dyn FnMut(&Expr)) {
    f(e);
    let block = visit_block;
    match &e.kind {
        ExprKind::Unary(_, x) | ExprKind::Field(x, _) | ExprKind::TupleField(x, _) => visit(x, f),
        ExprKind::Binary(_, a, b) | ExprKind::Range(a, b) | ExprKind::Index(a, b) => {
            visit(a, f);
            visit(b, f);
        }
        ExprKind::Builtin(_, xs) | ExprKind::CallFn(_, xs) | ExprKind::Tuple(xs) | ExprKind::List(xs) => {
            xs.iter().for_each(|x| visit(x, f))
        }
        ExprKind::CallInstance { callee, args, .. } => {
            visit(callee, f);
            args.iter().for_each(|x| visit(x, f));
        }
        ExprKind::Map { seq, body, .. } => {
            visit(seq, f);
            visit(body, f);
        }
        ExprKind::If(c, then, els) => {
            visit(c, f);
            block(then, f);
            if let Some(x) = els {
                visit(x, f);
            }
        }
        ExprKind::Match(s, arms) => {
            visit(s, f);
            arms.iter().for_each(|a| visit(&a.body, f));
        }
        ExprKind::Block(b) => block(b, f),
        _ => {}
    }
}
