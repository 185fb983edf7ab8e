//! Assists: code actions that rewrite code that is already right, offered where the
//! cursor or selection is (`refactor.*` kinds):
//!
//! - **Extract variable** (a selection that is exactly one expression): `let value =
//!   <expression>;` before the statement that holds it, and `value` in its place. Not from
//!   inside a closure or a match arm written without braces, whose bindings the new `let`
//!   could not see.
//! - **Inline `let`** (the cursor on its name): every use of the name becomes its value
//!   (in parentheses where an operator could bind differently) and the `let` goes. Not when
//!   a name the value reads is bound again later in the block (the uses would read that
//!   one), nor when a value with `dropout` is used more than once (each copy would draw its
//!   own mask).
//! - **Add the inferred annotation** (the cursor on a `let` or `var` name without a type):
//!   `: f32[hidden]`, the type the inlay hint shows.
//!
//! They work on the syntax tree of the document's own text; a file with syntax errors gets
//! none.

use crate::convert::{offset_of, range_of};
use crate::documents::Document;
use amp_diagnostics::Span;
use amp_grammar::ast::{Block, Expr, ExprKind, ItemKind, MemberKind, Pattern, PatternKind, Stmt, StmtKind};
use lsp_types::{CodeAction, CodeActionKind, CodeActionOrCommand, Range, TextEdit, WorkspaceEdit};
use std::collections::HashMap;

/// The assists at `range` of the document's own file.
// `WorkspaceEdit::changes` is keyed by `Uri`; see `code_actions`.
#[allow(clippy::mutable_key_type)]
pub fn assists(document: &Document, range: Range) -> Vec<CodeActionOrCommand> {
    let analysis = &document.analysis;
    let Some(file) = analysis.main_file() else { return Vec::new() };
    let parsed = amp_grammar::parse(analysis.main, &file.text);
    if !parsed.diagnostics.is_empty() {
        return Vec::new();
    }
    let (a, b) = (offset_of(file, range.start), offset_of(file, range.end));
    let (start, end) = (a.min(b) as u32, a.max(b) as u32);
    let bodies = parsed.ast.items.iter().filter_map(|item| match &item.kind {
        ItemKind::Component(c) => Some(c.members.iter().filter_map(|m| match &m.kind {
            MemberKind::Fn(f) => Some(&f.body),
            _ => None,
        })),
        _ => None,
    });
    let mut out = Vec::new();
    let text = file.text.as_str();
    for body in bodies.flatten() {
        if !(body.span.start <= start && end <= body.span.end) {
            continue;
        }
        let mut edits: Vec<Assist> = Vec::new();
        if start < end {
            edits.extend(extract_variable(text, body, trimmed(text, start, end)));
        }
        if let Some(found) = binding_at(body, start) {
            edits.extend(annotate(analysis, &found));
            edits.extend(inline_let(analysis, text, &found));
        }
        for (title, kind, changes) in edits {
            let changes =
                changes.into_iter().map(|(span, new_text)| TextEdit { range: range_of(file, span), new_text });
            let changes = HashMap::from([(document.uri.clone(), changes.collect())]);
            out.push(CodeActionOrCommand::CodeAction(CodeAction {
                title,
                kind: Some(kind),
                edit: Some(WorkspaceEdit { changes: Some(changes), ..WorkspaceEdit::default() }),
                ..CodeAction::default()
            }));
        }
    }
    out
}

/// An assist: its title, its kind, and its edits of the document.
type Assist = (String, CodeActionKind, Vec<(Span, String)>);

/// `[start, end)` without the whitespace at either end.
fn trimmed(text: &str, start: u32, end: u32) -> (u32, u32) {
    let slice = text.get(start as usize..end as usize).unwrap_or("");
    let lead = slice.len() - slice.trim_start().len();
    let trail = slice.len() - slice.trim_end().len();
    (start + lead as u32, (end - trail as u32).max(start + lead as u32))
}

fn contains(span: Span, start: u32, end: u32) -> bool {
    span.start <= start && end <= span.end
}

/// The statements of a block, its tail as one more: `(span, what it holds)`.
fn parts(block: &Block) -> impl Iterator<Item = (Span, Part<'_>)> {
    let stmts = block.stmts.iter().map(|s| (s.span, Part::Stmt(s)));
    stmts.chain(block.tail.iter().map(|t| (t.span, Part::Expr(t))))
}

#[derive(Clone, Copy)]
enum Part<'a> {
    Stmt(&'a Stmt),
    Expr(&'a Expr),
}

/// The expressions a statement holds directly, and its blocks.
fn stmt_children(stmt: &Stmt) -> (Vec<&Expr>, Vec<&Block>) {
    match &stmt.kind {
        StmtKind::Let(_, _, e) | StmtKind::Var(_, _, e) | StmtKind::Expr(e) => (vec![e], vec![]),
        StmtKind::Assign(a, b) => (vec![a, b], vec![]),
        StmtKind::For(_, e, body) | StmtKind::While(e, body) => (vec![e], vec![body]),
    }
}

/// An expression's operands and blocks; `binders` are those whose own bindings the
/// expression's parts see (a closure's body, a match arm written without braces).
fn expr_children(expr: &Expr) -> (Vec<&Expr>, Vec<&Block>, Vec<&Expr>) {
    match &expr.kind {
        ExprKind::Unary(_, a) | ExprKind::Field(a, _) | ExprKind::TupleField(a, _, _) | ExprKind::Paren(a) => {
            (vec![&**a], vec![], vec![])
        }
        ExprKind::Binary(_, a, b) | ExprKind::Range(a, b) | ExprKind::Index(a, b) | ExprKind::Repeat(a, b) => {
            (vec![&**a, &**b], vec![], vec![])
        }
        ExprKind::Call(f, args) => (std::iter::once(&**f).chain(args).collect(), vec![], vec![]),
        ExprKind::Tuple(xs) | ExprKind::List(xs) => (xs.iter().collect(), vec![], vec![]),
        ExprKind::Closure(_, body) => (vec![], vec![], vec![&**body]),
        ExprKind::If(c, then, other) => (std::iter::once(&**c).chain(other.as_deref()).collect(), vec![then], vec![]),
        ExprKind::Match(scrutinee, arms) => {
            let mut blocks = Vec::new();
            let mut binders = Vec::new();
            for arm in arms {
                match &arm.body.kind {
                    ExprKind::Block(b) => blocks.push(b),
                    _ => binders.push(&arm.body),
                }
            }
            (vec![&**scrutinee], blocks, binders)
        }
        ExprKind::Block(b) => (vec![], vec![b], vec![]),
        _ => (vec![], vec![], vec![]),
    }
}

/// Where an expression spanning exactly `[start, end)` lies: the start of the statement
/// of the innermost block that holds it, and the expression. `None` when there is none, or
/// when it lies under a binder inside that statement.
fn locate(block: &Block, start: u32, end: u32) -> Option<(Span, &Expr)> {
    let (span, part) = parts(block).find(|(span, _)| contains(*span, start, end))?;
    let (exprs, blocks) = match part {
        Part::Stmt(s) => stmt_children(s),
        Part::Expr(e) => (vec![e], vec![]),
    };
    let mut exprs = exprs;
    let mut blocks = blocks;
    // Walk down the statement's expressions, entering a block that holds the range.
    while !exprs.is_empty() || !blocks.is_empty() {
        if let Some(inner) = blocks.iter().find(|b| contains(b.span, start, end)) {
            return locate(inner, start, end);
        }
        let expr = exprs.into_iter().find(|e| contains(e.span, start, end))?;
        if expr.span.start == start && expr.span.end == end {
            return Some((span, expr));
        }
        let (next, inner, binders) = expr_children(expr);
        if binders.iter().any(|b| contains(b.span, start, end)) {
            return None;
        }
        (exprs, blocks) = (next, inner);
    }
    None
}

/// Extract variable: `let value = <selection>;` before its statement.
fn extract_variable(text: &str, body: &Block, (start, end): (u32, u32)) -> Option<Assist> {
    let (stmt, expr) = locate(body, start, end)?;
    if matches!(expr.kind, ExprKind::Name(_) | ExprKind::Closure(..) | ExprKind::Error) {
        return None;
    }
    let body_text = text.get(body.span.start as usize..body.span.end as usize)?;
    let name = fresh_name(body_text, "value");
    let value = text.get(expr.span.start as usize..expr.span.end as usize)?;
    let line_start = text[..stmt.start as usize].rfind('\n').map_or(0, |i| i + 1);
    let before = &text[line_start..stmt.start as usize];
    // A statement alone on its line gets the `let` on a line of its own, indented alike.
    let separator = if before.trim().is_empty() { format!("\n{before}") } else { " ".to_string() };
    let binding = format!("let {name} = {value};{separator}");
    let span = |a: u32, b: u32| Span { file: expr.span.file, start: a, end: b };
    let edits = if stmt.start == expr.span.start {
        vec![(expr.span, format!("{binding}{name}"))]
    } else {
        vec![(span(stmt.start, stmt.start), binding), (expr.span, name.clone())]
    };
    Some((format!("Extract `{}` into `let {name}`", shorten(value)), CodeActionKind::REFACTOR_EXTRACT, edits))
}

/// `base`, or `base2`, `base3`... whichever `text` does not name yet.
fn fresh_name(text: &str, base: &str) -> String {
    let named = |name: &str| {
        text.match_indices(name).any(|(i, _)| {
            let before = text[..i].chars().next_back();
            let after = text[i + name.len()..].chars().next();
            let word = |c: Option<char>| c.is_some_and(|c| c.is_alphanumeric() || c == '_');
            !word(before) && !word(after)
        })
    };
    std::iter::once(base.to_string()).chain((2..).map(|k| format!("{base}{k}"))).find(|n| !named(n)).unwrap_or_default()
}

/// A title's copy of some code: its first line, at most 30 characters.
fn shorten(code: &str) -> String {
    let line = code.lines().next().unwrap_or("");
    if line.chars().count() > 30 || line.len() < code.len() {
        format!("{}…", line.chars().take(29).collect::<String>())
    } else {
        line.to_string()
    }
}

/// A `let` or `var` whose bound name the cursor is on, with its block and statement.
struct Binding<'a> {
    block: &'a Block,
    index: usize,
    name: &'a amp_grammar::ast::Ident,
    annotated: bool,
    /// The value of a `let`; `None` for a `var`.
    value: Option<&'a Expr>,
}

fn binding_at(block: &Block, at: u32) -> Option<Binding<'_>> {
    for (index, stmt) in block.stmts.iter().enumerate() {
        if !(stmt.span.start <= at && at <= stmt.span.end) {
            continue;
        }
        let found = match &stmt.kind {
            StmtKind::Let(Pattern { kind: PatternKind::Bind(name), .. }, ty, value) => {
                Some(Binding { block, index, name, annotated: ty.is_some(), value: Some(value) })
            }
            StmtKind::Var(name, ty, _) => Some(Binding { block, index, name, annotated: ty.is_some(), value: None }),
            _ => None,
        };
        if let Some(found) = found.filter(|f| f.name.span.start <= at && at <= f.name.span.end) {
            return Some(found);
        }
        // Deeper: the blocks inside this statement.
        let (exprs, blocks) = stmt_children(stmt);
        let mut exprs = exprs;
        let mut blocks = blocks;
        while !exprs.is_empty() || !blocks.is_empty() {
            if let Some(found) = blocks.iter().find_map(|b| binding_at(b, at)) {
                return Some(found);
            }
            let mut next_exprs = Vec::new();
            let mut next_blocks = Vec::new();
            for e in exprs {
                let (x, b, binders) = expr_children(e);
                next_exprs.extend(x);
                next_exprs.extend(binders);
                next_blocks.extend(b);
            }
            (exprs, blocks) = (next_exprs, next_blocks);
        }
    }
    block.tail.as_deref().and_then(|tail| {
        let (_, blocks, _) = expr_children(tail);
        blocks.into_iter().find_map(|b| binding_at(b, at))
    })
}

/// Add the inferred annotation: `: TYPE` after the name.
fn annotate(analysis: &crate::documents::Analysis, found: &Binding<'_>) -> Option<Assist> {
    if found.annotated {
        return None;
    }
    let inferred = analysis.program().inferred_bindings.iter().find(|b| b.name_span == found.name.span)?;
    // Hover's `f32[hidden] (= f32[128])`: the type as written is the part before ` (= `.
    let ty = inferred.ty.split(" (= ").next()?.trim();
    if ty.is_empty() || ty.contains('?') {
        return None;
    }
    let at = Span { start: found.name.span.end, ..found.name.span };
    let title = format!("Add the type `{ty}` to `{}`", found.name.name);
    Some((title, CodeActionKind::REFACTOR_REWRITE, vec![(at, format!(": {ty}"))]))
}

/// Inline `let`: its value at every use, the statement removed.
fn inline_let(analysis: &crate::documents::Analysis, text: &str, found: &Binding<'_>) -> Option<Assist> {
    let value = found.value?;
    let stmt = found.block.stmts.get(found.index)?;
    let uses =
        analysis.program().references.iter().filter(|r| r.def_span == found.name.span && r.use_span != r.def_span);
    let uses: Vec<Span> = uses.map(|r| r.use_span).collect();
    if uses.iter().any(|u| u.file != found.name.span.file) {
        return None;
    }
    let code = text.get(value.span.start as usize..value.span.end as usize)?;
    if uses.len() > 1 && mentions_dropout(value) {
        return None;
    }
    // The names the value reads must mean the same at every use: none is bound again in
    // the rest of the block.
    let mut read = Vec::new();
    names_in(value, &mut read);
    let rest = found.block.stmts.iter().skip(found.index + 1);
    let rebinds = rest.flat_map(bound_names).any(|n| read.contains(&n));
    if rebinds {
        return None;
    }
    let parenthesized = format!("({code})");
    let mut edits: Vec<(Span, String)> = uses
        .into_iter()
        .map(|u| {
            let alone = stands_alone(text, u);
            (u, if needs_parentheses(value) && !alone { parenthesized.clone() } else { code.to_string() })
        })
        .collect();
    // The statement, with its line when it is alone on it.
    let (mut from, mut to) = (stmt.span.start as usize, stmt.span.end as usize);
    let line_start = text[..from].rfind('\n').map_or(0, |i| i + 1);
    let line_end = text[to..].find('\n').map_or(text.len(), |i| to + i + 1);
    if text[line_start..from].trim().is_empty() && text[to..line_end].trim().is_empty() {
        (from, to) = (line_start, line_end);
    }
    edits.push((Span { start: from as u32, end: to as u32, ..stmt.span }, String::new()));
    let title = format!("Inline `{}`", found.name.name);
    Some((title, CodeActionKind::REFACTOR_INLINE, edits))
}

/// Whether the name at `span` is a whole expression of its own, not an operand: between
/// `(`, `,`, `{`, `;`, a `let`'s or assignment's `=` or a line's start, and `)`, `,`, `;`,
/// `}` or a line's end.
fn stands_alone(text: &str, span: Span) -> bool {
    let before = text[..span.start as usize].trim_end_matches([' ', '\t']);
    let after = text[span.end as usize..].trim_start_matches([' ', '\t']);
    let opens = match before.chars().next_back() {
        None | Some('(' | ',' | '{' | ';' | '\n') => true,
        Some('=') => !before[..before.len() - 1].ends_with(['=', '!', '<', '>']),
        _ => false,
    };
    opens && matches!(after.chars().next(), None | Some(')' | ',' | ';' | '}' | '\n'))
}

/// Whether an expression put where a name was could bind differently to what is around it.
fn needs_parentheses(e: &Expr) -> bool {
    matches!(
        e.kind,
        ExprKind::Unary(..)
            | ExprKind::Binary(..)
            | ExprKind::Range(..)
            | ExprKind::If(..)
            | ExprKind::Match(..)
            | ExprKind::Closure(..)
            | ExprKind::Block(..)
    )
}

fn mentions_dropout(e: &Expr) -> bool {
    let mut names = Vec::new();
    names_in(e, &mut names);
    names.iter().any(|n| n == "dropout")
}

/// A node the walks below meet.
#[derive(Clone, Copy)]
enum Visit<'a> {
    Expr(&'a Expr),
    Stmt(&'a Stmt),
}

/// Calls `f` on `e` and on every expression and statement inside it, closures and blocks
/// included.
fn walk_expr<'a>(e: &'a Expr, f: &mut impl FnMut(Visit<'a>)) {
    f(Visit::Expr(e));
    let (exprs, blocks, binders) = expr_children(e);
    for x in exprs.into_iter().chain(binders) {
        walk_expr(x, f);
    }
    for b in blocks {
        walk_block(b, f);
    }
}

fn walk_block<'a>(b: &'a Block, f: &mut impl FnMut(Visit<'a>)) {
    for s in &b.stmts {
        walk_stmt(s, f);
    }
    if let Some(t) = &b.tail {
        walk_expr(t, f);
    }
}

fn walk_stmt<'a>(s: &'a Stmt, f: &mut impl FnMut(Visit<'a>)) {
    f(Visit::Stmt(s));
    let (exprs, blocks) = stmt_children(s);
    for x in exprs {
        walk_expr(x, f);
    }
    for b in blocks {
        walk_block(b, f);
    }
}

/// Every name an expression reads (also inside its closures and blocks).
fn names_in(e: &Expr, out: &mut Vec<String>) {
    walk_expr(e, &mut |v| {
        if let Visit::Expr(Expr { kind: ExprKind::Name(n), .. }) = v {
            out.push(n.name.clone());
        }
    });
}

/// The names a statement binds, at any depth (patterns, `var`s, loop and closure
/// parameters, match arms).
fn bound_names(stmt: &Stmt) -> Vec<String> {
    let mut out = Vec::new();
    walk_stmt(stmt, &mut |v| match v {
        Visit::Stmt(s) => match &s.kind {
            StmtKind::Let(p, _, _) | StmtKind::For(p, _, _) => pattern_names(p, &mut out),
            StmtKind::Var(name, _, _) => out.push(name.name.clone()),
            _ => {}
        },
        Visit::Expr(e) => match &e.kind {
            ExprKind::Closure(params, _) => params.iter().for_each(|p| pattern_names(p, &mut out)),
            ExprKind::Match(_, arms) => arms.iter().for_each(|a| pattern_names(&a.pattern, &mut out)),
            _ => {}
        },
    });
    out
}

fn pattern_names(p: &Pattern, out: &mut Vec<String>) {
    match &p.kind {
        PatternKind::Bind(n) => out.push(n.name.clone()),
        PatternKind::Tuple(ps) | PatternKind::Array(ps) => ps.iter().for_each(|p| pattern_names(p, out)),
        PatternKind::Variant { fields, .. } => {
            for f in fields {
                match &f.pattern {
                    Some(p) => pattern_names(p, out),
                    None => out.push(f.field.name.clone()),
                }
            }
        }
        PatternKind::Wildcard => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use lsp_types::{Position, Uri};

    /// The document after the assist titled `title` at `range`, or `None` when not offered.
    fn apply(text: &str, range: Range, title: &str) -> Option<String> {
        let uri: Uri = "file:///assists.amp".parse().expect("valid");
        let document = Document::open(uri.clone(), 1, text.to_string(), &amp_sema::NoFiles);
        let file = document.analysis.main_file().expect("the file");
        let action = assists(&document, range).into_iter().find_map(|a| match a {
            CodeActionOrCommand::CodeAction(a) if a.title.starts_with(title) => Some(a),
            _ => None,
        })?;
        let mut edits = action.edit?.changes?.remove(&uri)?;
        edits.sort_by_key(|e| std::cmp::Reverse((offset_of(file, e.range.start), offset_of(file, e.range.end))));
        let mut out = text.to_string();
        for e in edits {
            out.replace_range(offset_of(file, e.range.start)..offset_of(file, e.range.end), &e.new_text);
        }
        Some(out)
    }

    /// The range of the `nth` occurrence of `needle`.
    fn at(text: &str, needle: &str, nth: usize) -> Range {
        let start = text.match_indices(needle).nth(nth).expect("the needle").0;
        let pos = |offset: usize| {
            let line = text[..offset].matches('\n').count() as u32;
            let column = (offset - text[..offset].rfind('\n').map_or(0, |i| i + 1)) as u32;
            Position::new(line, column)
        };
        Range::new(pos(start), pos(start + needle.len()))
    }

    fn model(body: &str) -> String {
        format!(
            "model M(n: int = 4) {{\n    param l = Linear(n, n);\n    fn forward(x: f32[n]) -> f32[n] {{\n{body}    }}\n    \
             fn loss(x: f32[n]) -> f32 {{ sum(forward(x)) }}\n}}\n"
        )
    }

    #[test]
    fn extract_variable_binds_the_selection_before_its_statement() {
        let text = model("        let y = tanh(l(x)) * 2.0;\n        y + x\n");
        let out = apply(&text, at(&text, "tanh(l(x))", 0), "Extract").expect("offered");
        assert_eq!(out, model("        let value = tanh(l(x));\n        let y = value * 2.0;\n        y + x\n"));
        // The tail expression itself, and a name already taken.
        let text = model("        let value = x;\n        relu(value) + x\n");
        let out = apply(&text, at(&text, "relu(value) + x", 0), "Extract").expect("offered");
        assert_eq!(out, model("        let value = x;\n        let value2 = relu(value) + x;\n        value2\n"));
        // Inside a closure the parameter would be out of scope; a bare name is no expression
        // to extract; half an expression is none.
        let text = model("        let s = sum([x, x].map(|v| relu(v)));\n        x * s\n");
        assert_eq!(apply(&text, at(&text, "relu(v)", 0), "Extract"), None);
        assert!(apply(&text, at(&text, "x * s", 0), "Extract").is_some());
        assert_eq!(apply(&text, at(&text, "* s", 0), "Extract"), None);
        assert_eq!(apply(&text, at(&text, "s", 3), "Extract"), None);
        let out = apply(&text, at(&text, "x * s", 0), "Extract").expect("offered");
        assert!(out.contains("        let value = x * s;\n        value\n"), "{out}");
    }

    #[test]
    fn inline_let_puts_the_value_at_every_use() {
        let text = model("        let y = l(x) + x;\n        let z = relu(y) * y;\n        z\n");
        let cursor = at(&text, "y", 0);
        let out = apply(&text, Range::new(cursor.start, cursor.start), "Inline").expect("offered");
        assert_eq!(out, model("        let z = relu(l(x) + x) * (l(x) + x);\n        z\n"));
        // A whole expression of its own needs no parentheses.
        let out = apply(&text, at(&text, "z", 0), "Inline").expect("offered");
        assert_eq!(out, model("        let y = l(x) + x;\n        relu(y) * y\n"));
        // `x` is bound again after the `let`: the uses would read the other one.
        let text = model("        let y = relu(x);\n        let x = y * 2.0;\n        x + y\n");
        assert_eq!(apply(&text, at(&text, "y", 0), "Inline"), None);
        // Two uses of one dropout would draw two masks.
        let text = model("        let y = dropout(x, 0.5);\n        y + y\n");
        assert_eq!(apply(&text, at(&text, "y", 0), "Inline"), None);
    }

    #[test]
    fn the_inferred_type_is_added_where_none_is_written() {
        let text = model("        let y = l(x);\n        let z: f32[n] = y;\n        var h = z;\n        h\n");
        let out = apply(&text, at(&text, "y", 0), "Add the type").expect("offered");
        assert!(out.contains("        let y: f32[n] = l(x);\n"), "{out}");
        assert!(apply(&text, at(&text, "z", 0), "Add the type").is_none(), "written already");
        let out = apply(&text, at(&text, "h", 0), "Add the type").expect("offered for a var");
        assert!(out.contains("        var h: f32[n] = z;\n"), "{out}");
    }

    #[test]
    fn a_file_with_syntax_errors_gets_no_assists() {
        let text = model("        let y = l(x\n        y\n");
        assert_eq!(apply(&text, at(&text, "l(x", 0), "Extract"), None);
    }
}
