//! The formatter's properties over every `.amp` source of the repository (examples,
//! standard library, UI tests that parse) and over random re-spacings of them:
//! idempotent, the same tokens and comments in and out, broken files refused; plus the
//! layout rules, one small case each.

use amp_diagnostics::FileId;
use amp_fmt::format;
use amp_grammar::lexer::lex;
use proptest::prelude::*;
use std::path::{Path, PathBuf};

fn fmt(text: &str) -> String {
    match format(FileId(0), text) {
        Ok(formatted) => formatted,
        Err(refused) => panic!("refused: {:?}\n{text}", refused.diagnostics),
    }
}

/// The layout of `input` is `expected`, and formatting it again changes nothing.
fn check(input: &str, expected: &str) {
    let once = fmt(input);
    assert_eq!(once, expected, "formatting\n{input}");
    assert_eq!(fmt(&once), once, "formatting twice");
}

/// The text of every token, then of every comment (line comments without trailing
/// whitespace): what formatting must keep.
fn tokens_and_comments(text: &str) -> (Vec<&str>, Vec<&str>) {
    let lexed = lex(text);
    assert!(lexed.errors.is_empty());
    let tokens = lexed.tokens.iter().map(|&(s, _, e)| &text[s..e]).collect();
    let mut comments: Vec<(usize, &str)> = lexed.comments.iter().map(|&(s, e)| (s, &text[s..e])).collect();
    comments.extend(lexed.docs.iter().map(|&(s, e, _)| (s, &text[s..e])));
    comments.sort_by_key(|c| c.0);
    let comments = comments.into_iter().map(|(_, c)| if c.starts_with("//") { c.trim_end() } else { c }).collect();
    (tokens, comments)
}

/// Formatting `text` is idempotent and keeps its tokens and comments, in order.
fn assert_properties(name: &str, text: &str) {
    let once = fmt(text);
    assert_eq!(fmt(&once), once, "{name}: formatting twice changes it");
    assert_eq!(tokens_and_comments(&once), tokens_and_comments(text), "{name}: tokens or comments changed");
    assert!(once.is_empty() || once.ends_with('\n') && !once.ends_with("\n\n"), "{name}: one final newline");
    assert!(once.lines().all(|l| l == l.trim_end() || l.contains("/*") || l.contains("*/")), "{name}: trailing spaces");
}

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Every `.amp` source of the examples, the standard library and the UI tests.
fn corpus() -> Vec<(String, String)> {
    let mut files = Vec::new();
    for dir in ["examples", "examples/rollout", "stdlib/std", "tests/ui"] {
        let Ok(entries) = std::fs::read_dir(repo().join(dir)) else { continue };
        let mut paths: Vec<PathBuf> = entries.filter_map(|e| e.ok().map(|e| e.path())).collect();
        paths.sort();
        for path in paths.into_iter().filter(|p| p.extension().is_some_and(|e| e == "amp")) {
            let text = std::fs::read_to_string(&path).expect("a readable source");
            files.push((format!("{dir}/{}", path.file_name().unwrap_or_default().to_string_lossy()), text));
        }
    }
    assert!(files.len() > 100, "the corpus was not found under {}", repo().display());
    files
}

/// The sources that parse: those the formatter accepts.
fn parsing_corpus() -> Vec<(String, String)> {
    corpus().into_iter().filter(|(_, text)| format(FileId(0), text).is_ok()).collect()
}

#[test]
fn every_parsing_source_keeps_its_tokens_and_comments_and_formats_idempotently() {
    let files = parsing_corpus();
    assert!(files.len() > 100);
    for (name, text) in &files {
        assert_properties(name, text);
    }
}

#[test]
fn the_examples_and_the_standard_library_are_formatted() {
    for (name, text) in corpus() {
        if name.starts_with("examples") || name.starts_with("stdlib") {
            assert_eq!(fmt(&text), text, "{name} is not formatted: run `ampc fmt {name}`");
        }
    }
}

#[test]
fn files_with_lexing_or_syntax_errors_are_refused_with_their_diagnostics() {
    let mut refused = 0;
    for (name, text) in corpus() {
        let parsed = amp_grammar::parse(FileId(0), &text);
        match format(FileId(0), &text) {
            Ok(_) => assert!(parsed.diagnostics.is_empty(), "{name}"),
            Err(r) => {
                assert!(!r.diagnostics.is_empty(), "{name}");
                refused += 1;
            }
        }
    }
    assert!(refused >= 10, "the UI tests' lexing and syntax errors");
    for broken in ["model M {", "fn f( {}", "let x = 1;", "model M { fn f() { a $ b } }", "/* open"] {
        assert!(format(FileId(0), broken).is_err(), "{broken}");
    }
}

#[test]
fn spacing_within_a_line() {
    check(
        "use std::nn::{ GruCell,Mlp } ;\nrecord E{src:int,dst:int}\n",
        "use std::nn::{GruCell, Mlp};\nrecord E { src: int, dst: int }\n",
    );
    check(
        "model M(h:int=2){fn f(x:f32[h])->f32[h]{let y=-x+ -2.0*x;let (a,b)=(y,y);a[0]}}",
        "model M(h: int = 2) { fn f(x: f32[h]) -> f32[h] { let y = -x + -2.0 * x; let (a, b) = (y, y); a[0] } }\n",
    );
    check(
        "model M { fn f(x: [int]) -> int { for i in 0 .. n { g(x.map(| k | k*2), || 1, |(a , b)| a.0); } !a&&b||c } }",
        "model M { fn f(x: [int]) -> int { for i in 0..n { g(x.map(|k| k * 2), || 1, |(a, b)| a.0); } !a && b || c } }\n",
    );
    check(
        "model M { fn f() -> int { match e { B{x,..}=>x, C{x:y}=>y } } }",
        "model M { fn f() -> int { match e { B { x, .. } => x, C { x: y } => y } } }\n",
    );
    check(
        "model M { fn f() -> int { match e { A=>1, _=>{2} } } }",
        "model M { fn f() -> int { match e { A => 1, _ => { 2 } } } }\n",
    );
}

#[test]
fn indentation_blank_lines_and_continuations() {
    check(
        "\n\n// c\nmodel M {\n\n  param a = L(1);\n\n\n\n param b = L(2);\n\nfn f() -> int {\nlet y = g(a, |k| {\nk\n});\nlet w = a\n+ b\n.c;\n  w\n\n}\n}\n\n",
        "// c\nmodel M {\n    param a = L(1);\n\n    param b = L(2);\n\n    fn f() -> int {\n        let y = g(a, |k| {\n            k\n        });\n        let w = a\n            + b\n            .c;\n        w\n    }\n}\n",
    );
    check(
        "model M(\na: int,\nb: int) {\nparam p = [\nL(a);\nb\n];\n}",
        "model M(\n    a: int,\n    b: int) {\n    param p = [\n        L(a);\n        b\n    ];\n}\n",
    );
}

#[test]
fn comments_stay_where_they_are() {
    check(
        "/// Doc.   \nmodel M {   // trailing   \r\n  param a = L(/* n */ 1);/* after */\n    /* two\n  lines */ param b = L(2);\n}",
        "/// Doc.\nmodel M { // trailing\n    param a = L(/* n */ 1); /* after */\n    /* two\n  lines */ param b = L(2);\n}\n",
    );
    check("// only a comment", "// only a comment\n");
    check("", "");
    check("  \n\n ", "");
}

/// A source with each whitespace run between its tokens and comments replaced by a
/// random one (a run with a line break keeps at least one, so line comments still end).
fn respaced(text: &str, choices: &[u8]) -> String {
    const SPACES: [&str; 4] = [" ", "\t ", "   ", "  "];
    const BREAKS: [&str; 4] = ["\n", "\n\n\n", " \n  \n\t", "\r\n    "];
    let lexed = lex(text);
    let mut pieces: Vec<(usize, usize)> = lexed.tokens.iter().map(|&(s, _, e)| (s, e)).collect();
    pieces.extend(lexed.comments.iter().copied());
    pieces.extend(lexed.docs.iter().map(|&(s, e, _)| (s, e)));
    pieces.sort();
    let mut out = String::new();
    let mut end = 0;
    for (i, &(s, e)) in pieces.iter().enumerate() {
        let gap = &text[end..s];
        let pick = usize::from(choices.get(i % choices.len().max(1)).copied().unwrap_or(0));
        if gap.contains('\n') {
            // Sometimes joined onto one line... unless a line comment ends here.
            out.push_str(BREAKS[pick % 4]);
        } else if !gap.is_empty() {
            out.push_str(if pick % 8 == 7 { BREAKS[pick % 4] } else { SPACES[pick % 4] });
        }
        out.push_str(&text[s..e]);
        end = e;
    }
    out
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn respaced_sources_format_idempotently_and_keep_tokens_and_comments(
        index in any::<prop::sample::Index>(),
        choices in prop::collection::vec(any::<u8>(), 1..64),
    ) {
        let files = parsing_corpus();
        let (name, text) = &files[index.index(files.len())];
        let input = respaced(text, &choices);
        assert_properties(name, &input);
        // The layout does not depend on how much whitespace there was, only where lines
        // broke: respacing the formatted text within its lines gives it back.
        let once = fmt(&input);
        prop_assert_eq!(fmt(&respaced_within_lines(&once, &choices)), once);
    }
}

/// `text` with every run of spaces between two pieces on one line widened or narrowed.
fn respaced_within_lines(text: &str, choices: &[u8]) -> String {
    let lexed = lex(text);
    let mut pieces: Vec<(usize, usize)> = lexed.tokens.iter().map(|&(s, _, e)| (s, e)).collect();
    pieces.extend(lexed.comments.iter().copied());
    pieces.extend(lexed.docs.iter().map(|&(s, e, _)| (s, e)));
    pieces.sort();
    let mut out = String::new();
    let mut end = 0;
    for (i, &(s, e)) in pieces.iter().enumerate() {
        let gap = &text[end..s];
        let pick = usize::from(choices.get(i % choices.len().max(1)).copied().unwrap_or(0));
        if gap.contains('\n') {
            out.push_str(gap);
        } else if !gap.is_empty() {
            out.push_str(&" ".repeat(1 + pick % 3));
        }
        out.push_str(&text[s..e]);
        end = e;
    }
    out.push_str(&text[end..]);
    out
}
