//! The lexer: source text to tokens, with logos.
//!
//! Design: the lexer never stops. Characters it cannot read, unterminated comments and
//! strings, and out-of-range numbers become [`LexError`]s collected on the side while the
//! token stream goes on, so the parser always sees a complete stream and can report
//! syntax errors after a lexing error too. Comments are trivia for the parser: they are
//! kept on the side ([`Lexed::comments`]) for the formatter, and doc comments (`///`) too,
//! so the parser facade can attach them to items for hover.
//!
//! `int`, `bool` and `f32` are ordinary identifiers (types are resolved by name), and so
//! are the contextual words of `network` blocks (`input`, `node`, `output`, `from`).

use logos::{FilterResult, Logos};
use std::fmt;

/// Why a piece of input is not a token.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum LexErrorKind {
    #[default]
    UnexpectedCharacter,
    UnterminatedComment,
    UnterminatedString,
    InvalidNumber,
}

/// A lexing error at a byte range.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LexError {
    pub kind: LexErrorKind,
    pub start: usize,
    pub end: usize,
}

fn block_comment<'s>(lex: &mut logos::Lexer<'s, Tok<'s>>) -> FilterResult<(), LexErrorKind> {
    // Block comments nest, as in Rust: `/* a /* b */ c */` is one comment.
    let rest = lex.remainder().as_bytes();
    let mut depth = 1usize;
    let mut i = 0;
    while i < rest.len() {
        if rest[i..].starts_with(b"/*") {
            depth += 1;
            i += 2;
        } else if rest[i..].starts_with(b"*/") {
            depth -= 1;
            i += 2;
            if depth == 0 {
                lex.bump(i);
                // Emitted rather than skipped: `lex` moves it aside for the formatter.
                return FilterResult::Emit(());
            }
        } else {
            i += 1;
        }
    }
    lex.bump(rest.len());
    FilterResult::Error(LexErrorKind::UnterminatedComment)
}

fn int_literal<'s>(lex: &mut logos::Lexer<'s, Tok<'s>>) -> Result<i64, LexErrorKind> {
    lex.slice().replace('_', "").parse::<i64>().map_err(|_| LexErrorKind::InvalidNumber)
}

fn float_literal<'s>(lex: &mut logos::Lexer<'s, Tok<'s>>) -> Result<f64, LexErrorKind> {
    match lex.slice().replace('_', "").parse::<f64>() {
        Ok(v) if v.is_finite() => Ok(v),
        _ => Err(LexErrorKind::InvalidNumber),
    }
}

fn unterminated_string<'s>(_: &mut logos::Lexer<'s, Tok<'s>>) -> Result<(), LexErrorKind> {
    Err(LexErrorKind::UnterminatedString)
}

/// A token. Literal values are decoded here; identifiers borrow the source.
#[derive(Logos, Clone, Copy, Debug, PartialEq)]
#[logos(error = LexErrorKind)]
#[logos(skip r"[ \t\r\n\f]+")]
pub enum Tok<'input> {
    #[regex(r"//[^\n]*", allow_greedy = true)]
    #[token("/*", block_comment)]
    Comment,
    #[regex(r"///[^\n]*", priority = 10, allow_greedy = true)]
    DocComment(&'input str),

    #[regex(r"[A-Za-z_][A-Za-z0-9_]*", priority = 2)]
    Ident(&'input str),
    #[regex(r"[0-9][0-9_]*", int_literal)]
    Int(i64),
    #[regex(r"[0-9][0-9_]*\.[0-9][0-9_]*([eE][+-]?[0-9]+)?", float_literal)]
    #[regex(r"[0-9][0-9_]*[eE][+-]?[0-9]+", float_literal)]
    Float(f64),
    #[regex(r#""([^"\\\n]|\\.)*""#)]
    Str(&'input str),
    #[regex(r#""([^"\\\n]|\\.)*"#, unterminated_string)]
    UnterminatedStr,
    /// Stands in for a literal that failed to lex (an out-of-range number, an unterminated
    /// string), so the parser sees an operand there and reports nothing more: the lexing
    /// error already explains the problem. Never produced by logos itself.
    InvalidLiteral,

    #[token("use")]
    Use,
    #[token("pub")]
    Pub,
    #[token("const")]
    Const,
    #[token("record")]
    Record,
    #[token("enum")]
    Enum,
    #[token("layer")]
    Layer,
    #[token("model")]
    Model,
    #[token("network")]
    Network,
    #[token("param")]
    Param,
    #[token("fn")]
    Fn,
    #[token("let")]
    Let,
    #[token("var")]
    Var,
    #[token("if")]
    If,
    #[token("else")]
    Else,
    #[token("for")]
    For,
    #[token("in")]
    In,
    #[token("while")]
    While,
    #[token("match")]
    Match,
    #[token("true")]
    True,
    #[token("false")]
    False,
    #[token("_", priority = 3)]
    Underscore,

    #[token("(")]
    LParen,
    #[token(")")]
    RParen,
    #[token("[")]
    LBracket,
    #[token("]")]
    RBracket,
    #[token("{")]
    LBrace,
    #[token("}")]
    RBrace,
    #[token(",")]
    Comma,
    #[token(";")]
    Semi,
    #[token(":")]
    Colon,
    #[token("::")]
    ColonColon,
    #[token(".")]
    Dot,
    #[token("..")]
    DotDot,
    #[token("->")]
    Arrow,
    #[token("=>")]
    FatArrow,
    #[token("=")]
    Assign,
    #[token("==")]
    EqEq,
    #[token("!=")]
    NotEq,
    #[token("<")]
    Lt,
    #[token("<=")]
    Le,
    #[token(">")]
    Gt,
    #[token(">=")]
    Ge,
    #[token("+")]
    Plus,
    #[token("-")]
    Minus,
    #[token("*")]
    Star,
    #[token("/")]
    Slash,
    #[token("%")]
    Percent,
    #[token("&&")]
    AndAnd,
    #[token("||")]
    OrOr,
    #[token("!")]
    Bang,
    #[token("|")]
    Pipe,
}

impl fmt::Display for Tok<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Tok::Ident(s) => write!(f, "identifier `{s}`"),
            Tok::Int(v) => write!(f, "integer `{v}`"),
            Tok::Float(v) => write!(f, "number `{v}`"),
            Tok::Str(s) => write!(f, "string {s}"),
            Tok::DocComment(_) => f.write_str("doc comment"),
            Tok::Comment | Tok::UnterminatedStr => f.write_str("comment"),
            Tok::InvalidLiteral => f.write_str("invalid literal"),
            other => write!(f, "`{}`", punctuation(other)),
        }
    }
}

fn punctuation(tok: &Tok<'_>) -> &'static str {
    match tok {
        Tok::Use => "use",
        Tok::Pub => "pub",
        Tok::Const => "const",
        Tok::Record => "record",
        Tok::Enum => "enum",
        Tok::Layer => "layer",
        Tok::Model => "model",
        Tok::Network => "network",
        Tok::Param => "param",
        Tok::Fn => "fn",
        Tok::Let => "let",
        Tok::Var => "var",
        Tok::If => "if",
        Tok::Else => "else",
        Tok::For => "for",
        Tok::In => "in",
        Tok::While => "while",
        Tok::Match => "match",
        Tok::True => "true",
        Tok::False => "false",
        Tok::Underscore => "_",
        Tok::LParen => "(",
        Tok::RParen => ")",
        Tok::LBracket => "[",
        Tok::RBracket => "]",
        Tok::LBrace => "{",
        Tok::RBrace => "}",
        Tok::Comma => ",",
        Tok::Semi => ";",
        Tok::Colon => ":",
        Tok::ColonColon => "::",
        Tok::Dot => ".",
        Tok::DotDot => "..",
        Tok::Arrow => "->",
        Tok::FatArrow => "=>",
        Tok::Assign => "=",
        Tok::EqEq => "==",
        Tok::NotEq => "!=",
        Tok::Lt => "<",
        Tok::Le => "<=",
        Tok::Gt => ">",
        Tok::Ge => ">=",
        Tok::Plus => "+",
        Tok::Minus => "-",
        Tok::Star => "*",
        Tok::Slash => "/",
        Tok::Percent => "%",
        Tok::AndAnd => "&&",
        Tok::OrOr => "||",
        Tok::Bang => "!",
        Tok::Pipe => "|",
        _ => "?",
    }
}

/// The result of lexing a whole file.
pub struct Lexed<'input> {
    /// Tokens with byte ranges, in order; no trivia, no doc comments.
    pub tokens: Vec<(usize, Tok<'input>, usize)>,
    /// Doc comments with their byte ranges, text without the `///`.
    pub docs: Vec<(usize, usize, &'input str)>,
    /// The byte ranges of the other comments (`//` and `/* */`), in order; an
    /// unterminated block comment is an error instead.
    pub comments: Vec<(usize, usize)>,
    pub errors: Vec<LexError>,
}

/// Lexes all of `text`. Never fails; errors are collected in [`Lexed::errors`].
pub fn lex(text: &str) -> Lexed<'_> {
    let mut lexed = Lexed { tokens: Vec::new(), docs: Vec::new(), comments: Vec::new(), errors: Vec::new() };
    let mut lexer = Tok::lexer(text);
    // A byte-order mark that editors on Windows write at the start of a UTF-8 file is not
    // source text; spans stay offsets into the whole text.
    if text.starts_with('\u{FEFF}') {
        lexer.bump('\u{FEFF}'.len_utf8());
    }
    while let Some(result) = lexer.next() {
        let span = lexer.span();
        match result {
            Ok(Tok::Comment) => lexed.comments.push((span.start, span.end)),
            Ok(Tok::DocComment(doc)) => lexed.docs.push((span.start, span.end, doc.trim_start_matches('/'))),
            Ok(tok) => lexed.tokens.push((span.start, tok, span.end)),
            Err(kind) => {
                if matches!(kind, LexErrorKind::InvalidNumber | LexErrorKind::UnterminatedString) {
                    lexed.tokens.push((span.start, Tok::InvalidLiteral, span.end));
                }
                // Consecutive unexpected characters are one error, not one per byte.
                if let Some(last) = lexed.errors.last_mut() {
                    if kind == LexErrorKind::UnexpectedCharacter && last.kind == kind && last.end == span.start {
                        last.end = span.end;
                        continue;
                    }
                }
                lexed.errors.push(LexError { kind, start: span.start, end: span.end });
            }
        }
    }
    lexed
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kinds(text: &str) -> Vec<Tok<'_>> {
        lex(text).tokens.into_iter().map(|(_, t, _)| t).collect()
    }

    /// Issue 27 item 12: a BOM-prefixed source was E0001 on its first byte.
    #[test]
    fn a_leading_byte_order_mark_is_skipped_and_spans_stay_offsets_into_the_text() {
        let lexed = lex("\u{FEFF}let x");
        assert!(lexed.errors.is_empty());
        assert_eq!(lexed.tokens.first().map(|t| (t.0, t.2)), Some((3, 6)));
        // Anywhere else it is still an unexpected character.
        assert_eq!(lex("let \u{FEFF}x").errors.len(), 1);
    }

    #[test]
    fn keywords_identifiers_and_punctuation() {
        assert_eq!(
            kinds("let h: f32[hidden] = x.y..z; // c\n a->b => c"),
            vec![
                Tok::Let,
                Tok::Ident("h"),
                Tok::Colon,
                Tok::Ident("f32"),
                Tok::LBracket,
                Tok::Ident("hidden"),
                Tok::RBracket,
                Tok::Assign,
                Tok::Ident("x"),
                Tok::Dot,
                Tok::Ident("y"),
                Tok::DotDot,
                Tok::Ident("z"),
                Tok::Semi,
                Tok::Ident("a"),
                Tok::Arrow,
                Tok::Ident("b"),
                Tok::FatArrow,
                Tok::Ident("c"),
            ]
        );
    }

    #[test]
    fn numbers_ranges_and_underscores() {
        assert_eq!(
            kinds("0..n 1.5 2e3 1_000 _ _x"),
            vec![
                Tok::Int(0),
                Tok::DotDot,
                Tok::Ident("n"),
                Tok::Float(1.5),
                Tok::Float(2000.0),
                Tok::Int(1000),
                Tok::Underscore,
                Tok::Ident("_x"),
            ]
        );
    }

    #[test]
    fn nested_comments_and_docs() {
        let lexed = lex("/* a /* b */ c */ x /// doc\n y");
        assert_eq!(lexed.tokens.len(), 2);
        assert_eq!(lexed.docs.len(), 1);
        assert_eq!(lexed.docs[0].2, " doc");
        assert_eq!(lexed.comments, vec![(0, 17)]);
    }

    #[test]
    fn line_and_block_comments_are_listed_in_order() {
        let text = "a // one\n/**/ b /* x /* y */ z */ c //\n";
        let lexed = lex(text);
        let comments: Vec<&str> = lexed.comments.iter().map(|&(s, e)| &text[s..e]).collect();
        assert_eq!(comments, vec!["// one", "/**/", "/* x /* y */ z */", "//"]);
        assert_eq!(lexed.tokens.len(), 3);
    }

    #[test]
    fn errors_are_collected_and_lexing_goes_on() {
        let lexed = lex("a $$ b \"open\n c 99999999999999999999 /* never closed");
        let errs: Vec<_> = lexed.errors.iter().map(|e| e.kind).collect();
        assert_eq!(
            errs,
            vec![
                LexErrorKind::UnexpectedCharacter,
                LexErrorKind::UnterminatedString,
                LexErrorKind::InvalidNumber,
                LexErrorKind::UnterminatedComment,
            ]
        );
        assert_eq!(
            lexed.tokens.iter().map(|t| t.1).collect::<Vec<_>>(),
            vec![Tok::Ident("a"), Tok::Ident("b"), Tok::InvalidLiteral, Tok::Ident("c"), Tok::InvalidLiteral,]
        );
    }
}
