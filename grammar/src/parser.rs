//! The facade over the lalrpop-generated parser: text in, tree and diagnostics out.
//! Nothing outside this module sees lalrpop's types.

use crate::ast::*;
use crate::lexer::{self, LexError, LexErrorKind, Tok};
use crate::resync;
use amp_diagnostics::{Code, Diagnostic, FileId};
use lalrpop_util::{ErrorRecovery, ParseError};

#[allow(clippy::all, unused_parens, unused_imports, dead_code)]
mod generated {
    lalrpop_util::lalrpop_mod!(pub amp);
}

/// A parsed file: always a tree, plus the lexing and syntax errors found on the way.
#[derive(Clone, Debug)]
pub struct Parsed {
    pub ast: SourceFileAst,
    pub diagnostics: Vec<Diagnostic>,
    /// For each lexing or syntax error (including those not reported because they follow
    /// another in the same member), the source that recovery may have misread: from the
    /// start of the statement holding the error to the last token recovery skipped. A
    /// checker's findings there may be artefacts of the recovery, not mistakes.
    pub damaged: Vec<Span>,
}

/// Parses a whole file. Never fails and never panics: bad input yields `Error` nodes and
/// diagnostics.
pub fn parse(file: FileId, text: &str) -> Parsed {
    let lexed = lexer::lex(text);
    let mut diagnostics: Vec<Diagnostic> = lexed.errors.iter().map(|e| lex_diagnostic(file, e)).collect();
    if let Some(too_deep) = nesting_guard(file, &lexed.tokens) {
        diagnostics.push(too_deep);
        return Parsed { ast: SourceFileAst { items: Vec::new() }, diagnostics, damaged: Vec::new() };
    }
    let mut attempt = parse_tokens(file, text, &lexed.tokens, &[]);
    if !attempt.syntax.is_empty() {
        // A statement left unfinished at a line's end: parse again with it ended there,
        // and keep that reading unless it has more errors (see `resync`).
        let lines = resync::Lines::new(text);
        let errors: Vec<usize> = attempt.syntax.iter().map(|d| d.span.start as usize).collect();
        let cuts = resync::unfinished_lines(&lines, &lexed.tokens, &errors);
        if !cuts.is_empty() {
            let (tokens, virtual_semis) = resync::with_virtual_semicolons(&lexed.tokens, &cuts);
            let resynced = parse_tokens(file, text, &tokens, &virtual_semis);
            if resynced.syntax.len() <= attempt.syntax.len() {
                attempt = resynced;
            }
        }
    }
    let Attempt { mut ast, mut syntax, recovered_ends } = attempt;
    let mut damaged: Vec<Span> = diagnostics.iter().chain(&syntax).map(|d| d.span).collect();
    for (span, recovered_end) in damaged.iter_mut().zip(lexed.errors.iter().map(|e| e.end).chain(recovered_ends)) {
        let index = lexed.tokens.partition_point(|t| t.0 < span.start as usize);
        let start =
            lexed.tokens.get(resync::statement_start(&lexed.tokens, index)).map_or(span.start as usize, |t| t.0);
        *span = Span::new(file, start.min(span.start as usize), recovered_end.max(span.end as usize));
    }
    diagnostics.append(&mut syntax);
    attach_docs(&mut ast, text, &lexed.docs);
    // Recovery can report the same place twice; keep the first.
    diagnostics.dedup_by(|a, b| a.code == b.code && a.span == b.span);
    drop_cascading_syntax_errors(&mut diagnostics, &ast, &lexed);
    Parsed { ast, diagnostics, damaged }
}

/// One run of the generated parser over a token stream.
struct Attempt {
    ast: SourceFileAst,
    /// Syntax errors in source order.
    syntax: Vec<Diagnostic>,
    /// Parallel to `syntax`: where the source that recovery skipped ends.
    recovered_ends: Vec<usize>,
}

/// Runs the parser over `tokens`, in which a zero-width `;` at each offset of
/// `virtual_semis` (sorted) is a statement end the layout implied, not one the user wrote.
fn parse_tokens(file: FileId, text: &str, tokens: &[(usize, Tok<'_>, usize)], virtual_semis: &[usize]) -> Attempt {
    let mut recovered = Vec::new();
    let stream = tokens.iter().map(|&t| Ok::<_, LexError>(t));
    let result = generated::amp::FileParser::new().parse(file, &mut recovered, stream);
    let mut errors: Vec<(ParseError<usize, Tok<'_>, LexError>, usize)> = recovered
        .into_iter()
        .map(|ErrorRecovery { error, dropped_tokens }| {
            let end = dropped_tokens.last().map_or(0, |t| t.2);
            (error, end)
        })
        .collect();
    let ast = match result {
        Ok(ast) => ast,
        Err(error) => {
            errors.push((error, text.len()));
            SourceFileAst { items: Vec::new() }
        }
    };
    let mut used_semis = vec![false; virtual_semis.len()];
    let mut syntax: Vec<(Diagnostic, usize)> = Vec::with_capacity(errors.len());
    for (error, end) in errors {
        let at_virtual = match &error {
            ParseError::UnrecognizedToken { token: (l, Tok::Semi, r), .. } if l == r => {
                virtual_semis.binary_search(l).ok()
            }
            _ => None,
        };
        let diagnostic = match (at_virtual, error) {
            (Some(index), ParseError::UnrecognizedToken { expected, .. }) => {
                used_semis[index] = true;
                unfinished_line(file, tokens, virtual_semis[index], &describe_expected(&expected))
            }
            (_, error) => syntax_diagnostic(file, text, error),
        };
        syntax.push((diagnostic, end));
    }
    // A virtual `;` the parser accepted stands for one the user forgot.
    for (&offset, _) in virtual_semis.iter().zip(&used_semis).filter(|(_, used)| !**used) {
        syntax.push((unfinished_line(file, tokens, offset, "expected `;`"), offset));
    }
    syntax.sort_by_key(|(d, _)| d.span.start);
    let (syntax, recovered_ends) = syntax.into_iter().unzip();
    Attempt { ast, syntax, recovered_ends }
}

/// A statement that the layout says ends at `offset` (the end of a line) but that is not
/// finished there: reported on the line's last token, where the user is typing.
fn unfinished_line(file: FileId, tokens: &[(usize, Tok<'_>, usize)], offset: usize, expected: &str) -> Diagnostic {
    // Tokens are in order and the virtual `;` follows the token it ends: the first token
    // ending at `offset` is the line's last real one.
    let first = tokens.partition_point(|t| t.2 < offset);
    let span = match tokens.get(first) {
        Some(&(l, _, r)) if r == offset && l < r => Span::new(file, l, r),
        _ => Span::new(file, offset, offset),
    };
    let message = if expected.is_empty() {
        "unfinished statement at the end of the line".to_string()
    } else {
        format!("{expected}, found the end of the line")
    };
    Diagnostic::new(Code::UnexpectedToken, span, message)
        .with_primary("the statement stops here")
        .with_help("finish the line, or end the statement with `;`")
}

/// Removes syntax errors that are most likely consequences of an earlier error rather than
/// mistakes of their own, so that each mistake is reported once:
/// - an error at the first token after a lexing error (the dropped character or the
///   rejected literal is the cause: `@inline` reports the `@` only), or at the end of a
///   file whose last lexing error comes after the last token (an unclosed comment);
/// - any error after the first one inside the same member (or item, outside members):
///   after recovery skips tokens, the parser's view of the rest of that member is
///   unreliable. Errors in different items and members are all reported.
fn drop_cascading_syntax_errors(diagnostics: &mut Vec<Diagnostic>, ast: &SourceFileAst, lexed: &lexer::Lexed<'_>) {
    let is_syntax = |d: &Diagnostic| matches!(d.code, Code::UnexpectedToken | Code::UnexpectedEof);
    let after_lex_error = |d: &Diagnostic| -> bool {
        let at = d.span.start as usize;
        let index = lexed.tokens.partition_point(|t| t.0 < at);
        let previous = if index == 0 { 0 } else { lexed.tokens[index - 1].0 };
        let next = lexed.tokens.get(index).map_or(usize::MAX, |t| t.0);
        // Lexing errors are in source order: the first at or after `previous` decides.
        let first = lexed.errors.partition_point(|e| e.start < previous);
        lexed.errors.get(first).is_some_and(|e| e.start < next.max(at + 1))
    };
    // The innermost member or item that contains an offset. Items and members are in
    // source order, so each is found by binary search: a file of thousands of broken
    // items must not cost the square of their number.
    let container = |at: usize| -> Option<(usize, usize)> {
        let inside = |span: &Span| (span.start as usize) <= at && at < span.end as usize;
        let item = last_starting_at_or_before(&ast.items, at, |i| i.span).filter(|i| inside(&i.span))?;
        if let ItemKind::Component(c) = &item.kind {
            if let Some(m) = last_starting_at_or_before(&c.members, at, |m| m.span).filter(|m| inside(&m.span)) {
                return Some((m.span.start as usize, m.span.end as usize));
            }
        }
        Some((item.span.start as usize, item.span.end as usize))
    };
    let mut seen: std::collections::HashSet<(usize, usize)> = std::collections::HashSet::new();
    diagnostics.retain(|d| {
        if !is_syntax(d) {
            return true;
        }
        // The first error of a member counts even when it is dropped for following a
        // lexing error: what comes after it in that member is a cascade either way.
        if let Some(c) = container(d.span.start as usize) {
            if !seen.insert(c) {
                return false;
            }
        }
        !after_lex_error(d)
    });
}

/// The last of `sorted` (in source order) whose span starts at or before `at`.
pub fn last_starting_at_or_before<T>(sorted: &[T], at: usize, span: impl Fn(&T) -> Span) -> Option<&T> {
    let after = sorted.partition_point(|x| span(x).start as usize <= at);
    after.checked_sub(1).and_then(|i| sorted.get(i))
}

/// Brackets nested deeper than this are refused.
pub const MAX_BRACKET_DEPTH: usize = 64;
/// Operators (prefix, infix and postfix) in one statement beyond this are refused.
pub const MAX_OPERATORS_PER_STATEMENT: usize = 256;

/// Every later stage walks the tree recursively, so a tree's depth must be bounded for any
/// input. Depth comes from brackets and from operator chains (`a + a + ...` nests to the
/// left), so both are bounded here, on tokens, before a deep tree can exist. Real models
/// stay far below both limits.
fn nesting_guard(file: FileId, tokens: &[(usize, Tok<'_>, usize)]) -> Option<Diagnostic> {
    let mut depth = 0usize;
    let mut operators = 0usize;
    for &(l, tok, r) in tokens {
        match tok {
            Tok::LParen | Tok::LBracket | Tok::LBrace => {
                depth += 1;
                if depth > MAX_BRACKET_DEPTH {
                    return Some(
                        Diagnostic::new(
                            Code::NestingTooDeep,
                            Span::new(file, l, r),
                            format!("brackets nested more than {MAX_BRACKET_DEPTH} deep"),
                        )
                        .with_primary("too deep")
                        .with_note("the file was not analysed; split the expression with `let` bindings"),
                    );
                }
            }
            Tok::RParen | Tok::RBracket | Tok::RBrace => depth = depth.saturating_sub(1),
            _ => {}
        }
        match tok {
            Tok::Semi | Tok::LBrace | Tok::RBrace => operators = 0,
            Tok::Plus
            | Tok::Minus
            | Tok::Star
            | Tok::Slash
            | Tok::Percent
            | Tok::EqEq
            | Tok::NotEq
            | Tok::Lt
            | Tok::Le
            | Tok::Gt
            | Tok::Ge
            | Tok::AndAnd
            | Tok::OrOr
            | Tok::Bang
            | Tok::Dot
            | Tok::DotDot
            | Tok::LParen
            | Tok::LBracket
            | Tok::Pipe => {
                operators += 1;
                if operators > MAX_OPERATORS_PER_STATEMENT {
                    return Some(
                        Diagnostic::new(
                            Code::NestingTooDeep,
                            Span::new(file, l, r),
                            format!("more than {MAX_OPERATORS_PER_STATEMENT} operators in one statement"),
                        )
                        .with_primary("expression too long")
                        .with_note("the file was not analysed; split the expression with `let` bindings"),
                    );
                }
            }
            _ => {}
        }
    }
    None
}

pub(crate) fn sp(file: FileId, l: usize, r: usize) -> Span {
    Span::new(file, l, r)
}

/// A trailing block-like statement (`if`, `match`, `{}`) without `;` is the block's value.
pub(crate) fn finish_block(mut stmts: Vec<Stmt>, tail: Option<Expr>, span: Span) -> Block {
    // A trailing block-like statement without `;` (its span ends where the expression
    // ends) is the block's value, as in Rust.
    let promote = tail.is_none()
        && matches!(stmts.last(), Some(Stmt { kind: StmtKind::Expr(e), span }) if is_block_like(e) && span.end == e.span.end);
    let tail = match (tail, promote) {
        (Some(t), _) => Some(Box::new(t)),
        (None, true) => match stmts.pop() {
            Some(Stmt { kind: StmtKind::Expr(e), .. }) => Some(Box::new(e)),
            _ => None,
        },
        (None, false) => None,
    };
    Block { stmts, tail, span }
}

fn is_block_like(e: &Expr) -> bool {
    matches!(e.kind, ExprKind::If(..) | ExprKind::Match(..) | ExprKind::Block(_))
}

type UseSeg = Result<Ident, (Vec<Ident>, Span)>;

pub(crate) fn use_item(file: FileId, segs: Vec<UseSeg>) -> UseItem {
    let count = segs.len();
    let mut path = Vec::new();
    let mut names = Vec::new();
    let mut malformed = None;
    for (i, seg) in segs.into_iter().enumerate() {
        let last = i + 1 == count;
        match seg {
            Ok(ident) if last => names.push(ident),
            Ok(ident) => path.push(ident),
            Err((group, _)) if last => names.extend(group),
            Err((_, span)) => malformed = Some(span),
        }
    }
    if path.is_empty() && malformed.is_none() {
        malformed = names.first().map(|n| n.span).or(Some(Span::new(file, 0, 0)));
    }
    UseItem { path, names, malformed }
}

pub(crate) fn net_stmt(
    keyword: Ident,
    name: Ident,
    ty: Option<TypeExpr>,
    layer: Option<Expr>,
    sources: Vec<Ident>,
    span: Span,
) -> (Option<NetStmt>, Option<Ident>) {
    let (kind, bad) = match (keyword.name.as_str(), &ty) {
        ("input", Some(_)) => (NetStmtKind::Input, None),
        ("node", None) => (NetStmtKind::Node, None),
        ("output", None) => (NetStmtKind::Output, None),
        // A wrong leading word is reported by the checker; the line is kept, with the kind
        // its shape implies, so that its name stays a known source for the other lines.
        (_, Some(_)) => (NetStmtKind::Input, Some(keyword.clone())),
        (_, None) => (NetStmtKind::Node, Some(keyword.clone())),
    };
    let stmt = NetStmt { kind, keyword, name, ty, layer, sources, span };
    (Some(stmt), bad)
}

fn lex_diagnostic(file: FileId, e: &LexError) -> Diagnostic {
    let span = Span::new(file, e.start, e.end);
    match e.kind {
        LexErrorKind::UnexpectedCharacter => Diagnostic::new(Code::UnexpectedCharacter, span, "unexpected character")
            .with_primary("not part of any token")
            .with_help("remove it; Amp source uses ASCII punctuation"),
        LexErrorKind::UnterminatedComment => Diagnostic::new(
            Code::UnterminatedComment,
            Span::new(file, e.start, e.start + 2),
            "unterminated block comment",
        )
        .with_primary("this comment is never closed")
        .with_help("add `*/` (block comments nest: every `/*` needs its own `*/`)"),
        LexErrorKind::UnterminatedString => {
            Diagnostic::new(Code::UnterminatedString, span, "unterminated string literal")
                .with_primary("this string has no closing `\"` on its line")
        }
        LexErrorKind::InvalidNumber => Diagnostic::new(Code::InvalidNumber, span, "invalid number literal")
            .with_primary("out of range")
            .with_note("integers are 64-bit signed; numbers must be finite f64 values"),
    }
}

fn describe_expected(expected: &[String]) -> String {
    let names: Vec<String> = expected
        .iter()
        // The lexer's stand-in for a rejected literal is never what a user should write.
        .filter(|e| e.trim_matches('"') != "invalid literal")
        .map(|e| {
            let e = e.trim_matches('"');
            match e {
                "identifier" | "integer" | "number" | "string" => e.to_string(),
                other => format!("`{}`", other.replace("\\\"", "\"")),
            }
        })
        .collect();
    match names.len() {
        0 => String::new(),
        1 => format!("expected {}", names[0]),
        n if n <= 8 => format!("expected one of {}", names.join(", ")),
        // Cut short, the closing brackets and separators come first: after `relu(` the
        // `)` matters more than the eighth token that can start an expression.
        _ => {
            let mut names = names;
            names.sort_by_key(|n| !matches!(n.as_str(), "`)`" | "`]`" | "`}`" | "`;`" | "`,`"));
            format!("expected one of {}, …", names[..8].join(", "))
        }
    }
}

fn syntax_diagnostic(file: FileId, text: &str, error: ParseError<usize, Tok<'_>, LexError>) -> Diagnostic {
    match error {
        ParseError::UnrecognizedToken { token: (l, tok, r), expected } => {
            let expected = describe_expected(&expected);
            let message =
                if expected.is_empty() { format!("unexpected {tok}") } else { format!("{expected}, found {tok}") };
            Diagnostic::new(Code::UnexpectedToken, Span::new(file, l, r), message).with_primary("unexpected here")
        }
        ParseError::ExtraToken { token: (l, tok, r) } => {
            Diagnostic::new(Code::UnexpectedToken, Span::new(file, l, r), format!("unexpected {tok}"))
                .with_primary("unexpected here")
        }
        ParseError::UnrecognizedEof { location, expected } => {
            let end = text.len();
            let at = location.min(end);
            let expected = describe_expected(&expected);
            let message = if expected.is_empty() {
                "unexpected end of file".to_string()
            } else {
                format!("unexpected end of file: {expected}")
            };
            Diagnostic::new(Code::UnexpectedEof, Span::new(file, at, end), message)
                .with_primary("the file ends here")
                .with_help("is a closing `}` or `)` missing?")
        }
        ParseError::InvalidToken { location } => {
            Diagnostic::new(Code::UnexpectedCharacter, Span::new(file, location, location + 1), "invalid token")
        }
        ParseError::User { error } => lex_diagnostic(file, &error),
    }
}

/// Attaches `///` lines that directly precede an item or member (only whitespace between).
fn attach_docs(ast: &mut SourceFileAst, text: &str, docs: &[(usize, usize, &str)]) {
    if docs.is_empty() {
        return;
    }
    let doc_before = |start: usize| -> Option<String> {
        let mut lines = Vec::new();
        let mut cursor = start;
        for &(s, e, doc) in docs.iter().rev().filter(|d| d.1 <= start) {
            if !text.get(e..cursor).is_some_and(|gap| gap.trim().is_empty()) {
                break;
            }
            lines.push(doc.strip_prefix(' ').unwrap_or(doc));
            cursor = s;
        }
        lines.reverse();
        (!lines.is_empty()).then(|| lines.join("\n"))
    };
    for item in &mut ast.items {
        item.doc = doc_before(item.span.start as usize);
        if let ItemKind::Component(c) = &mut item.kind {
            for member in &mut c.members {
                member.doc = doc_before(member.span.start as usize);
            }
        }
    }
}
